"""A reused output directory keeps no file of another run (`reducelab.resultdir`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reducelab
from helpers import EXAMPLE, cli


def result(files: dict[str, str]) -> reducelab.Result:
    return reducelab.Result(summary_json=json.dumps({"status": "completed"}), files=files)


def test_rewriting_a_run_directory_drops_the_old_runs_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result({"messages.csv": "old", "collectives.csv": "old", "links.csv": "old"}).write(out)
    (out / "link_utilization.png").write_bytes(b"\x89PNG old plot")
    (out / "notes.txt").write_text("mine")
    (out / "sub").mkdir()
    result({"messages.csv": "new", "links.csv": "new"}).write(out)
    assert sorted(p.name for p in out.iterdir()) == ["links.csv", "messages.csv", "notes.txt", "sub", "summary.json"]
    assert (out / "messages.csv").read_text() == "new"
    assert (out / "notes.txt").read_text() == "mine"


def test_a_non_empty_directory_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError, match="is not empty and holds no summary.json"):
        result({"messages.csv": "x"}).write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.tex"]
    with pytest.raises(FileExistsError, match="exists and is not a directory"):
        result({"messages.csv": "x"}).write(tmp_path / "thesis.tex")


def test_cli_run_into_a_reused_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = cli("run", EXAMPLE, "--out", out, "--quiet")
    assert first.returncode == 0, first.stderr
    (out / "stale.csv").write_text("from another run")
    again = cli("run", EXAMPLE, "--out", out, "--quiet")
    assert again.returncode == 0, again.stderr
    assert not (out / "stale.csv").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.bin").write_bytes(b"x")
    proc = cli("run", EXAMPLE, "--out", other, "--quiet")
    assert proc.returncode != 0
    assert proc.stderr.startswith(f"error: {other}: cannot write results: is not empty and holds no summary.json")
    assert sorted(p.name for p in other.iterdir()) == ["data.bin"]
