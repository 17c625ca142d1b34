"""Sweeps store each point's summary.json `status` and leave out points that did not complete
(unverified, stalled, time_limit, interrupted) from tables and plots unless asked."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

import reducelab.store as store_module
from helpers import cli
from reducelab.scenario import Scenario
from reducelab.store import STATUSES, ResultStore, StoreError, point_status, sweep_table
from reducelab.sweep import Sweep, SweepRunError

DATA = Path(__file__).parent / "data"
TINY = DATA / "tiny_star.toml"


def summary(status: str | None, **more: object) -> str:
    doc: dict[str, object] = {"sim_time_ps": 7, "messages": {"count": 8}, **more}
    if status is not None:
        doc["status"] = status
        doc["status_reason"] = None if status == "completed" else f"why {status}"
    return json.dumps(doc)


@pytest.mark.parametrize("status", STATUSES)
def test_point_status_reads_status(status: str) -> None:
    assert point_status(json.loads(summary(status))) == status


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"sim_time_ps": 1, "messages": {"count": 1}}, "summary.json has no `status`"),
        ({"status": "finished"}, "status 'finished' is not one of completed, unverified"),
        ({"status": None, "end": None}, "has no `status`"),
    ],
)
def test_summary_without_a_valid_status_is_an_error(doc: dict[str, object], reason: str) -> None:
    with pytest.raises(StoreError, match=reason):
        point_status(doc)


# Summaries written before `status` existed (schema-1 stores, upgraded when opened).
@pytest.mark.parametrize(
    ("end", "verified", "status"),
    [("completed", True, "completed"), ("completed", False, "unverified"),
     ("stalled", False, "stalled"), ("time_limit", False, "time_limit")],
)
def test_old_summaries_map_to_a_status_only_when_upgrading(end: str, verified: bool, status: str) -> None:
    old = {"end": end, "messages": {"all_verified": verified}}
    assert store_module._status_of_old_summary(old) == status
    with pytest.raises(StoreError, match="no `status`"):
        point_status(old)


def test_store_keeps_status_in_its_column_and_tables_filter_on_it(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    with ResultStore(db) as store:
        for i, status in enumerate(STATUSES):
            store.put(f"k{i}", "{}", i, summary(status), [], "test", 0.0)
        with pytest.raises(StoreError, match="no `status`"):
            store.put("k9", "{}", 9, summary(None), [], "test", 0.0)
        assert store.statuses([f"k{i}" for i in range(10)]) == {f"k{i}": s for i, s in enumerate(STATUSES)}
        store.record_sweep("s", "", {}, "", ["seed"], None,
                           [(i, f"k{i}", {"seed": i}) for i in [*range(len(STATUSES)), 9]])
        _, columns, rows = store.sweep_rows()
        assert columns == ["point", "key", "seed", "status", "sim_time_ps", "messages.count", "status_reason"]
        assert rows == [[0, "k0", 0, "completed", 7, 8, None]]
        _, columns, rows = store.sweep_rows(include_unverified=True)
        assert [r[3] for r in rows] == list(STATUSES)
        assert rows[2][-1] == "why stalled"
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT status FROM results WHERE key = 'k1'").fetchone() == ("unverified",)


def test_selected_status_metric_does_not_clash_with_the_column() -> None:
    columns, rows = sweep_table(["seed"], ["status", "sim_time_ps"], [(0, "a", {"seed": 1})],
                                {"a": {"status": "completed", "sim_time_ps": 3}}, {"a": "completed"})
    assert columns == ["point", "key", "seed", "status", "summary.status", "sim_time_ps"]
    assert rows == [[0, "a", 1, "completed", "completed", 3]]


def test_version_1_store_is_upgraded(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript(
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('schema_version', '1');"
            "CREATE TABLE results (key TEXT PRIMARY KEY, scenario_json TEXT NOT NULL, seed INTEGER NOT NULL,"
            " summary_json TEXT NOT NULL, metrics_json TEXT NOT NULL, simulator_version TEXT NOT NULL,"
            " wall_seconds REAL NOT NULL, finished_at TEXT NOT NULL);"
        )
        con.execute("INSERT INTO results VALUES ('a', '{}', 1, ?, '{}', 'v', 0, 't')", (summary("stalled"),))
    with ResultStore(db) as store:
        assert store.statuses(["a"]) == {"a": "stalled"}
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta").fetchone() == ("2",)
        con.execute("UPDATE meta SET value = '1'")
        con.execute("ALTER TABLE results DROP COLUMN status")
        con.execute("INSERT INTO results VALUES ('b', '{}', 1, ?, '{}', 'v', 0, 't')", (summary(None),))
    with pytest.raises(StoreError, match="cannot upgrade the store: point b: summary.json has no `status`"):
        ResultStore(db)


def _time_limit_sweep() -> Sweep:
    # 1 us is too short for the 16 KiB messages: those points end `time_limit`.
    return Sweep(Scenario.from_file(TINY), {"run.time_limit_us": [1, 1000]}, seeds=[1, 2], name="tl")


def test_sweep_leaves_out_points_that_did_not_complete(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    sweep = _time_limit_sweep()
    sweep.run(db, jobs=1)
    df = sweep.dataframe(db)
    assert df["run.time_limit_us"].tolist() == [1000, 1000]
    assert set(df["status"]) == {"completed"}
    everything = sweep.dataframe(db, include_unverified=True)
    assert everything["status"].tolist() == ["time_limit", "time_limit", "completed", "completed"]
    with ResultStore(db) as store:
        assert store.dataframe().equals(df)


def test_cli_export_and_plot_leave_out_unverified_points(tmp_path: Path) -> None:
    spec = tmp_path / "tl.toml"
    spec.write_text(f'[sweep]\nscenario = "{TINY}"\nseeds = [1, 2]\n[grid]\n"run.time_limit_us" = [1, 1000]\n')
    db, out = tmp_path / "tl.sqlite", tmp_path / "tl.csv"
    proc = cli("sweep", spec, "--out", db, "--jobs", "1", "--export", out)
    assert proc.returncode == 0, proc.stderr
    assert ("2 points did not complete (2 time_limit; first: point 0); tables and plots leave them out "
            "unless --include-unverified") in proc.stdout
    assert f"wrote {out} (2 rows)" in proc.stdout
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["completed", "completed"]
    proc = cli("sweep", spec, "--out", db, "--export", out, "--include-unverified")
    assert f"wrote {out} (4 rows)" in proc.stdout
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    proc = cli("plot", "sweep", db, "--x", "seed", "--y", "sim_time_ps", "--out", png)
    assert proc.returncode == 0, proc.stderr
    assert "left out 2 points whose status is not completed" in proc.stderr
    only_bad = tmp_path / "bad.toml"
    only_bad.write_text(f'[sweep]\nscenario = "{TINY}"\n[grid]\n"run.time_limit_us" = [1, 2]\n')
    bad_db = tmp_path / "bad.sqlite"
    assert cli("sweep", only_bad, "--out", bad_db, "--jobs", "1").returncode == 0
    proc = cli("plot", "sweep", bad_db, "--x", "run.time_limit_us", "--y", "sim_time_ps", "--out", png)
    assert proc.returncode == 2
    assert "none of the sweep's 2 finished points completed (their status is time_limit)" in proc.stderr
    proc = cli("plot", "sweep", bad_db, "--x", "run.time_limit_us", "--y", "sim_time_ps", "--out", png,
               "--include-unverified")
    assert proc.returncode == 0, proc.stderr


def test_sweep_refuses_a_summary_without_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reducelab import sweep as sweep_module

    real = sweep_module.run_point

    def without_status(toml_text: str) -> dict[str, object]:
        out = real(toml_text)
        doc = json.loads(out["summary_json"])
        for k in ("status", "status_reason", "end"):
            doc.pop(k, None)
        return {**out, "summary_json": json.dumps(doc)}

    monkeypatch.setattr(sweep_module, "run_point", without_status)
    with pytest.raises(SweepRunError, match=r"point 0 \(run.time_limit_us = 1, seed = 1\): summary.json has no `status`"):
        _time_limit_sweep().run(tmp_path / "r.sqlite", jobs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.count() == 0


def test_dataframe_of_a_missing_store_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "r.sqlite"
    with pytest.raises(StoreError, match=r"no such file \(write it with `reducelab sweep`\)"):
        _time_limit_sweep().dataframe(missing)
    assert not missing.exists() and not missing.parent.exists()
