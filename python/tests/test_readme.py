"""The README's code works as written: every ```python block runs as a script, every
`reducelab` line of a ```bash block runs (or, where it takes minutes or needs MPI, its flags
are checked against the command's parser)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from reducelab.cli import build_parser

README = REPO / "README.md"

# Lines only checked against the parser, and why.
NOT_RUN = {
    "reducelab bench mpi": "needs the MPI runtime built in mpi/ (python/tests/test_mpi_runtime.py runs it)",
    "reducelab reproduce all": "runs every figure (minutes)",
}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def reducelab_lines() -> list[str]:
    return [line.strip() for b in blocks("bash") for line in b.splitlines() if line.strip().startswith("reducelab ")]


def workdir(tmp_path: Path) -> Path:
    """A scratch copy of the repository root: its inputs linked, its outputs (results/) fresh."""
    for name in ("scenarios", "docs", "mpi"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def env() -> dict[str, str]:
    import reducelab

    out = dict(os.environ)
    package_parent = str(Path(reducelab.__file__).resolve().parent.parent)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, out.get("PYTHONPATH")) if p)
    return out


def subparser(words: list[str]) -> argparse.ArgumentParser:
    """The parser of `reducelab WORDS...` (the longest chain of subcommands)."""
    parser = build_parser()
    for w in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or w not in subs[0].choices:
            break
        parser = subs[0].choices[w]
    return parser


def test_readme_has_code() -> None:
    assert len(blocks("python")) >= 1
    assert len(reducelab_lines()) >= 10


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs_as_a_script(tmp_path: Path, index: int) -> None:
    cwd = workdir(tmp_path)
    script = cwd / "readme_block.py"
    script.write_text(blocks("python")[index], encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bootstrapping phase" not in proc.stderr


def test_python_block_reaches_its_end(tmp_path: Path) -> None:
    """The first block's outputs exist and its error example really raises."""
    cwd = workdir(tmp_path)
    script = cwd / "readme_block.py"
    script.write_text(blocks("python")[0], encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("network.bogus unknown field"), proc.stdout
    assert (cwd / "results" / "example7" / "summary.json").is_file()
    assert (cwd / "results" / "torus_bandwidth.sqlite").is_file()


@pytest.mark.parametrize("line", reducelab_lines())
def test_bash_line_flags_exist(line: str) -> None:
    """Every --flag on the line, in its comment too, is an option of that command."""
    words = shlex.split(line.split(" #", 1)[0])[1:]
    parser = subparser(words)
    options = {s for a in parser._actions for s in a.option_strings}
    flags = re.findall(r"(?<![\w-])--[a-z][a-z-]*", line)
    unknown = [f for f in flags if f not in options]
    assert not unknown, f"{line!r}: {unknown} not in `{parser.prog} --help`"


def test_bash_lines_run(tmp_path: Path) -> None:
    """Each runnable line, in README order in one directory (so `plot links results/example`
    finds what `run` wrote), exits 0."""
    cwd = workdir(tmp_path)
    ran = 0
    for line in reducelab_lines():
        if any(line.startswith(prefix) for prefix in NOT_RUN):
            continue
        args = shlex.split(line.split(" #", 1)[0])[1:]
        proc = subprocess.run(
            [sys.executable, "-m", "reducelab", *args], cwd=cwd, env=env(), capture_output=True, text=True,
            timeout=120, stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-3000:]}"
        ran += 1
    assert ran >= 10
    assert (cwd / "results" / "example" / "link_utilization.png").is_file()
