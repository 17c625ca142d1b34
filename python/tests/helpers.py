"""Shared test helpers (imported by the test modules; python/tests is on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "scenarios" / "example.toml"

MESSAGES_HEADER = "id,src,dst,bytes,start_ps,end_ps,fct_ps,verified"
LINKS_HEADER = (
    "link,from_node,from_port,to_node,to_port,bytes,packets,utilization,"
    "max_queue_bytes,mean_queue_bytes,drops,ecn_marks,kind"
)


def cli(
    *args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run `python -m reducelab ARGS` (the installed package) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "reducelab", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def with_key_in_table(text: str, table: str, line: str) -> str:
    """`text` with `line` added as the first entry of TOML table `[table]` (added if absent)."""
    lines = text.splitlines()
    header = f"[{table}]"
    for i, current in enumerate(lines):
        if current.strip() == header:
            lines.insert(i + 1, line)
            return "\n".join(lines) + "\n"
    return text + f"\n{header}\n{line}\n"
