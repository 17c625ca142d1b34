"""The software switch (crates/switch, docs/switch.md) from Python: finds the `reducelab-switch`
binary and runs it.

The switch is a separate Rust process rather than a call into the extension: it is a long-running
event loop with its own sockets and signal handling, several of them form a fabric, and a test or
a user kills and restarts them; a process is the unit that has those properties (and keeps the
interpreter's GIL out of the packet path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def find_binary() -> Path:
    """`$REDUCELAB_SWITCH_BIN`, else the workspace's release then debug build (in
    `$CARGO_TARGET_DIR`, as scripts/setup.sh builds it, default `target/`), else `PATH`.

    Raises FileNotFoundError saying how to build it.
    """
    env = os.environ.get("REDUCELAB_SWITCH_BIN")
    if env:
        p = Path(env)
        if not p.is_file():
            raise FileNotFoundError(f"REDUCELAB_SWITCH_BIN: {p} is not a file")
        return p
    for profile in ("release", "debug"):
        p = Path(os.environ.get("CARGO_TARGET_DIR") or _REPO / "target") / profile / "reducelab-switch"
        if p.is_file():
            return p
    found = shutil.which("reducelab-switch")
    if found:
        return Path(found)
    raise FileNotFoundError(
        "reducelab-switch: not built; run `cargo build --release -p reducelab-switch` "
        "(or set REDUCELAB_SWITCH_BIN)"
    )


def run(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs `reducelab-switch ARGS` and returns the completed process (text output captured)."""
    return subprocess.run([str(find_binary()), *args], capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def exec_binary(args: Sequence[str]) -> int:
    """Replaces this process with `reducelab-switch ARGS` (signals then reach the switch itself)."""
    exe = str(find_binary())
    os.execv(exe, [exe, *args])
    return 0  # not reached
