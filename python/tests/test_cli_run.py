"""`reducelab run` end to end on scenarios/example.toml."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from helpers import EXAMPLE, LINKS_HEADER, MESSAGES_HEADER, cli, with_key_in_table

RESULT_FILES = ("summary.json", "messages.csv", "links.csv")


def run_example(out: Path, *extra: str) -> None:
    proc = cli("run", EXAMPLE, "--out", out, "--quiet", *extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def dir_bytes(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_run_writes_consistent_result_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_example(out)
    for name in RESULT_FILES:
        assert (out / name).is_file(), name

    summary = json.loads((out / "summary.json").read_text())
    for key in ("scenario", "seed", "sim_time_ps", "messages", "links"):
        assert key in summary, key
    assert summary["sim_time_ps"] > 0
    msgs = summary["messages"]
    assert msgs["count"] > 0
    # Every foreground message completes and every delivered message checks out; the
    # background generator is cut off when the foreground ends, so some of its last
    # messages are legitimately still in flight.
    assert summary["status"] == "completed", summary["status_reason"]
    assert msgs["foreground_incomplete"] == 0
    assert msgs["corrupted"] == 0
    assert msgs["verified"] == msgs["completed"] > 0
    fg = [t for t in summary["traffic"] if not t["background"]]
    assert fg and all(t["completed"] == t["messages"] == t["verified"] for t in fg)

    messages = (out / "messages.csv").read_text().splitlines()
    assert messages[0] == MESSAGES_HEADER
    rows = list(csv.DictReader(messages))
    assert len(rows) == msgs["count"]
    done = [r for r in rows if r["end_ps"]]
    assert len(done) == msgs["completed"]
    for row in done:
        assert int(row["end_ps"]) - int(row["start_ps"]) == int(row["fct_ps"]) > 0
        assert int(row["end_ps"]) <= summary["sim_time_ps"]
        assert row["verified"] == "true"
    assert all(r["verified"] == "false" and r["fct_ps"] == "" for r in rows if not r["end_ps"])

    links = (out / "links.csv").read_text().splitlines()
    assert links[0] == LINKS_HEADER
    link_rows = list(csv.DictReader(links))
    assert link_rows
    assert all(0.0 <= float(r["utilization"]) <= 1.0 for r in link_rows)
    assert sum(int(r["bytes"]) for r in link_rows) > 0


def test_default_out_dir_table_and_path(tmp_path: Path) -> None:
    scenario = tmp_path / "myscenario.toml"
    shutil.copy(EXAMPLE, scenario)
    proc = cli("run", scenario.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "results" / "myscenario"
    for name in RESULT_FILES:
        assert (out / name).is_file(), name
    assert str(Path("results") / "myscenario") in proc.stdout
    # The table comes before the path line.
    assert len(proc.stdout.strip().splitlines()) > 1


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    run_example(tmp_path / "a", "--seed", "7")
    run_example(tmp_path / "b", "--seed", "7")
    a, b = dir_bytes(tmp_path / "a"), dir_bytes(tmp_path / "b")
    assert set(RESULT_FILES) <= set(a)
    assert a == b


def test_seed_override_is_recorded(tmp_path: Path) -> None:
    run_example(tmp_path / "s1", "--seed", "1")
    run_example(tmp_path / "s2", "--seed", "2")
    assert json.loads((tmp_path / "s1" / "summary.json").read_text())["seed"] == 1
    assert json.loads((tmp_path / "s2" / "summary.json").read_text())["seed"] == 2


def test_unknown_key_names_the_field(tmp_path: Path, example_text: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(with_key_in_table(example_text, "network", "bogus = 1"))
    proc = cli("run", bad, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: network.bogus: ")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_invalid_toml_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text("[network\nrate = \n")
    proc = cli("run", bad, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: ")
    assert "Traceback" not in proc.stderr


def test_missing_scenario_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    proc = cli("run", missing)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {missing}: no such file"


def test_scenario_is_a_directory(tmp_path: Path) -> None:
    proc = cli("run", tmp_path)
    assert proc.returncode == 2
    assert "is a directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_seed_is_a_usage_error(tmp_path: Path) -> None:
    for seed in ("notanumber", "-1", str(2**64)):
        proc = cli("run", EXAMPLE, "--seed", seed, "--out", tmp_path / "out")
        assert proc.returncode == 2, seed
        assert "argument --seed" in proc.stderr
        assert "usage: reducelab run" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_flag_is_a_usage_error() -> None:
    proc = cli("run", EXAMPLE, "--bogus-flag")
    assert proc.returncode == 2
    assert "unrecognized arguments: --bogus-flag" in proc.stderr
