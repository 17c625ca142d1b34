"""Sweeps: points, the results store (cache, resume), local pool vs Dask, bad specs, export."""

from __future__ import annotations

import csv
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reducelab
from helpers import cli
from reducelab.scenario import FieldError, Scenario
from reducelab.store import ResultStore
from reducelab.sweep import Sweep, SweepSpecError, check_scheduler

DATA = Path(__file__).parent / "data"
TINY = DATA / "tiny_star.toml"
TINY_SWEEP = DATA / "tiny_sweep.toml"  # 2 bandwidths x 3 sizes x 2 seeds = 12 points


def write_spec(d: Path, body: str, name: str = "spec.toml") -> Path:
    spec = d / name
    spec.write_text(f'[sweep]\nscenario = "{TINY}"\n{body}\n')
    return spec


def stored_results(db: Path) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    with ResultStore(db) as store:
        return list(store.dump())


def test_points_grid_order_and_seeds() -> None:
    sweep = Sweep.load(TINY_SWEEP)
    points = sweep.points()
    assert len(points) == 12
    assert [p.index for p in points] == list(range(12))
    assert points[0].params == {"topology.bandwidth_gbps": 100, "traffic[0].bytes": 4096, "seed": 5}
    assert points[1].params == {"topology.bandwidth_gbps": 100, "traffic[0].bytes": 4096, "seed": 6}
    assert points[2].params["traffic[0].bytes"] == 16384
    assert points[-1].params == {"topology.bandwidth_gbps": 400, "traffic[0].bytes": 65536, "seed": 6}
    assert len({p.key for p in points}) == 12
    p = points[-1].scenario
    assert (p.get("topology.bandwidth_gbps"), p.get("traffic[0].bytes"), p.get("seed")) == (400, 65536, 6)
    assert points[-1].key == p.key()
    assert sweep.axis_names == ["topology.bandwidth_gbps", "traffic[0].bytes", "seed"]


def test_stored_files_are_the_runs_bytes(tmp_path: Path) -> None:
    sweep = Sweep.load(TINY_SWEEP)
    report = sweep.run(tmp_path / "r.sqlite", jobs=1)
    assert (report.total, report.executed, report.cached) == (12, 12, 0)
    point = sweep.points()[7]
    direct = reducelab.run(point.scenario.to_toml())
    with ResultStore(tmp_path / "r.sqlite") as store:
        stored = store.get(point.key)
    assert stored.summary_json == direct.summary_json
    assert stored.files == direct.files
    assert stored.seed == 6 and stored.result().summary["seed"] == 6
    assert stored.metrics["messages.fct_ps.p99"] == direct.summary["messages"]["fct_ps"]["p99"]


def test_second_run_executes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    sweep = Sweep.load(TINY_SWEEP)
    first = sweep.run(db, jobs=2)
    assert first.executed == 12
    before = stored_results(db)
    ran: list[int] = []
    second = Sweep.load(TINY_SWEEP).run(db, jobs=2, on_point=lambda p: ran.append(p.index))
    assert (second.executed, second.cached, ran) == (0, 12, [])
    assert stored_results(db) == before
    # A spec that shares points with the stored ones runs only the new ones.
    grown = Sweep(Scenario.from_file(TINY), {"topology.bandwidth_gbps": [100, 200], "traffic[0].bytes": [4096]},
                  seeds=[5, 6], name="grown")
    report = grown.run(db, jobs=1)
    assert (report.executed, report.cached) == (2, 2)


def test_resume_after_an_exception_mid_sweep(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    sweep = Sweep.load(TINY_SWEEP)

    class Stop(Exception):
        pass

    def stop_after_five(point: object) -> None:
        nonlocal count
        count += 1
        if count == 5:
            raise Stop

    count = 0
    with pytest.raises(Stop):
        sweep.run(db, jobs=2, on_point=stop_after_five)
    with ResultStore(db) as store:
        assert store.count() == 5
    report = Sweep.load(TINY_SWEEP).run(db, jobs=2)
    assert (report.executed, report.cached) == (7, 5)
    uninterrupted = tmp_path / "u.sqlite"
    Sweep.load(TINY_SWEEP).run(uninterrupted, jobs=1)
    assert stored_results(db) == stored_results(uninterrupted)


def _slow_spec(d: Path) -> Path:
    # ~0.1-0.2 s per point: background traffic for a long simulated time.
    base = d / "slow.toml"
    base.write_text(
        'name = "slow"\n[topology]\nkind = "star"\nhosts = 8\nbandwidth_gbps = 100\nlatency_ns = 500\n'
        '[[traffic]]\nkind = "random_uniform"\nbytes = 65536\n[run]\ntime_limit_us = 30000\n'
    )
    spec = d / "slow_sweep.toml"
    spec.write_text('[sweep]\nscenario = "slow.toml"\n[grid]\nseed = [1, 2, 3, 4, 5, 6, 7, 8]\n')
    return spec


def _wait_for_stored(db: Path, proc: subprocess.Popen[str], at_least: int = 1) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    n = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            except sqlite3.OperationalError:  # schema not created yet
                n = 0
            if n >= at_least:
                return int(n)
        time.sleep(0.01)
    raise AssertionError(f"the sweep stored nothing before ending: {proc.communicate()}")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_resume_after_the_process_is_stopped(tmp_path: Path, how: str) -> None:
    spec = _slow_spec(tmp_path)
    db = tmp_path / "slow.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reducelab", "sweep", str(spec), "--out", str(db), "--jobs", "1", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A shell without job control starts background jobs with SIGINT ignored, and children
        # inherit that; Ctrl-C in a terminal is not ignored (as test_run_status does).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_stored(db, proc)
    proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=60)
    if how == "SIGINT":
        assert proc.returncode == 130, err
        assert "run the same command again to resume" in err
    else:
        assert proc.returncode == -signal.SIGKILL, err
    with ResultStore(db) as store:
        stored = store.count()
    assert 1 <= stored < 8, "the sweep should have been stopped midway"
    again = cli("sweep", spec, "--out", db, "--jobs", "2")
    assert again.returncode == 0, again.stderr
    assert f"8 points, {8 - stored} run, {stored} cached" in again.stdout
    again = cli("sweep", spec, "--out", db)
    assert "8 points, 0 run, 8 cached" in again.stdout


def test_dask_cluster_stores_the_same_bytes_as_the_local_pool(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    local = tmp_path / "local.sqlite"
    proc = cli("sweep", TINY_SWEEP, "--out", local, "--jobs", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    remote = tmp_path / "dask.sqlite"
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        proc = cli("sweep", TINY_SWEEP, "--out", remote, "--scheduler", cluster.scheduler_address)
        assert proc.returncode == 0, proc.stderr
        assert "12 points, 12 run, 0 cached" in proc.stdout
    a, b = stored_results(local), stored_results(remote)
    assert len(a) == 12
    assert a == b


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ("[grid]\nnetwork.bogus = [1, 2]", "grid.network.bogus", "unknown field `bogus`"),
        ('[grid]\n"traffic[3].bytes" = [1]', "grid.traffic[3].bytes", "traffic[3]: index out of range"),
        ('[grid]\ntopology.bandwidth_gbps = [100, "fast"]', "grid.topology.bandwidth_gbps[1]",
         'expected a number like the scenario\'s 100, got string "fast"'),
        ('[grid]\n"traffic[0].bytes" = [4096, "4096"]', "grid.traffic[0].bytes[1]", "expected a number"),
        ("[grid]\ntopology.hosts = [8, 0]", "grid.topology.hosts[1]", "value 0: must be at least 1"),
        ('[grid]\ntopology.hosts = [8, 2]\n"traffic[0].hosts" = [[0, 1, 5]]', "grid.topology.hosts[1]",
         "value 2 makes traffic[0].hosts"),
        ("[grid]", "grid", "is empty"),
        ("", "grid", "is empty"),
        ("[grid]\ntopology.hosts = []", "grid.topology.hosts", "empty array"),
        ("[grid]\ntopology.hosts = 8", "grid.topology.hosts", "expected an array of values"),
        ("[grid]\ntopology.hosts = [8, 8]", "grid.topology.hosts[1]", "already given"),
        ('[grid]\ntopology = [{kind = "star", hosts = 8}]\n"topology.hosts" = [4]', "grid.topology.hosts",
         "overlaps grid.topology"),
        ("repetitions = 0\n[grid]\ntopology.hosts = [8]", "sweep.repetitions", "expected an integer >= 1"),
        ("repetitions = 2\n[grid]\nseed = [1]", "sweep.repetitions", "already sweeps `seed`"),
        ("seeds = [1, -1]\n[grid]\ntopology.hosts = [8]", "sweep.seeds[1]", "seed must be in"),
        ('metrics = ["messages.fct_ps.p98"]\n[grid]\nseed = [1]', "sweep.metrics[0]",
         "is not a field of summary.json"),
        ("bogus = 1\n[grid]\nseed = [1]", "sweep.bogus", "unknown field"),
    ],
)
def test_bad_specs_name_the_field(tmp_path: Path, body: str, field: str, reason: str) -> None:
    spec = write_spec(tmp_path, body)
    proc = cli("sweep", spec, "--out", tmp_path / "r.sqlite", "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {spec}: {field}: "), proc.stderr
    assert reason in proc.stderr
    assert "Traceback" not in proc.stderr
    if (tmp_path / "r.sqlite").exists():
        with ResultStore(tmp_path / "r.sqlite") as store:
            assert store.count() == 0


def test_spec_errors_in_the_api() -> None:
    with pytest.raises(FieldError) as info:
        Sweep(Scenario.from_file(TINY), {"topology.bandwidth_gbps": ["x"]})
    assert info.value.field == "grid.topology.bandwidth_gbps"
    assert not isinstance(info.value, SweepSpecError)
    with pytest.raises(SweepSpecError) as spec_info:
        Sweep.from_spec({"sweep": {"scenario": str(TINY)}, "grid": {"seed": []}}, spec_path="x.toml")
    assert str(spec_info.value) == "x.toml: grid.seed: empty array: give at least one value"


def test_missing_and_broken_spec_files(tmp_path: Path) -> None:
    proc = cli("sweep", tmp_path / "nope.toml")
    assert (proc.returncode, proc.stderr) == (2, f"error: {tmp_path / 'nope.toml'}: no such file\n")
    spec = tmp_path / "broken.toml"
    spec.write_text("[sweep\n")
    proc = cli("sweep", spec)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {spec}: not valid TOML")
    spec = write_spec(tmp_path, "[grid]\nseed = [1]").with_name("s2.toml")
    spec.write_text('[sweep]\nscenario = "missing.toml"\n[grid]\nseed = [1]\n')
    proc = cli("sweep", spec)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {spec}: sweep.scenario: {tmp_path / 'missing.toml'}: no such file\n"


@pytest.mark.parametrize("url", ["foo:80", "http://h:80", "tcp://host", "tcp://host:0", "tcp://:80", "tcp://h:99999"])
def test_bad_scheduler_url(tmp_path: Path, url: str) -> None:
    with pytest.raises(FieldError):
        check_scheduler(url)
    proc = cli("sweep", TINY_SWEEP, "--out", tmp_path / "r.sqlite", "--scheduler", url)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --scheduler: ")
    assert not (tmp_path / "r.sqlite").exists()


def test_good_scheduler_urls() -> None:
    for url in ("tcp://127.0.0.1:8786", "tcp://scheduler.cluster:8786", "tls://[::1]:8786"):
        assert check_scheduler(url) == url


def test_export_csv_and_dataframe_agree(tmp_path: Path) -> None:
    db, out = tmp_path / "r.sqlite", tmp_path / "points.csv"
    proc = cli("sweep", TINY_SWEEP, "--out", db, "--export", out)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out} (12 rows)" in proc.stdout
    with out.open(newline="") as f:
        rows = list(csv.reader(f))
    df = Sweep.load(TINY_SWEEP).dataframe(db)
    with ResultStore(db) as store:
        df_from_store = store.dataframe()
    assert rows[0] == list(df.columns) == list(df_from_store.columns)
    assert rows[0][:5] == ["point", "key", "topology.bandwidth_gbps", "traffic[0].bytes", "seed"]
    assert "summary.seed" in rows[0] and "messages.fct_ps.p99" in rows[0]
    assert len(rows) - 1 == len(df) == len(df_from_store) == 12
    col = rows[0].index("messages.fct_ps.p99")
    assert [int(r[col]) for r in rows[1:]] == df["messages.fct_ps.p99"].tolist()
    assert df["summary.seed"].tolist() == df["seed"].tolist()
    assert df.equals(df_from_store)
    # More bandwidth never makes the tail slower here: the values are the right ones per point.
    by = df.groupby(["traffic[0].bytes", "seed"])
    for _, g in by:
        fct = dict(zip(g["topology.bandwidth_gbps"], g["messages.fct_ps.p99"]))
        assert fct[400] < fct[100]


def test_selected_metrics_are_the_columns(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, 'metrics = ["sim_time_ps", "traffic[0].fct_ps.p50"]\n[grid]\nseed = [1, 2]')
    sweep = Sweep.load(spec)
    sweep.run(tmp_path / "r.sqlite", jobs=1)
    df = sweep.dataframe(tmp_path / "r.sqlite")
    assert list(df.columns) == ["point", "key", "seed", "status", "sim_time_ps", "traffic[0].fct_ps.p50"]
    assert df["seed"].tolist() == [1, 2]


def test_dry_run_lists_points(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    proc = cli("sweep", TINY_SWEEP, "--out", db, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"sweep tiny: 12 points, 0 stored in {db}, 12 to run"
    assert sum("  to run  " in line for line in proc.stdout.splitlines()) == 12
    Sweep.load(TINY_SWEEP).run(db, jobs=1)
    proc = cli("sweep", TINY_SWEEP, "--out", db, "--dry-run")
    assert sum("  stored  " in line for line in proc.stdout.splitlines()) == 12


def test_point_rejected_at_run_time_is_reported(tmp_path: Path) -> None:
    # Each value is fine on its own (the check probes them one at a time); together they are not.
    spec = write_spec(tmp_path, '[grid]\ntopology.hosts = [8, 2]\n"traffic[0].hosts" = ["all", [0, 1, 2, 3]]')
    proc = cli("sweep", spec, "--out", tmp_path / "r.sqlite", "--jobs", "1")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {spec}: grid: point 3 (topology.hosts = 2, ")
    assert "traffic[0].hosts" in proc.stderr


def test_sweep_help_has_examples() -> None:
    for args in (("sweep",), ("plot", "sweep")):
        proc = cli(*args, "--help")
        assert proc.returncode == 0
        assert "examples:" in proc.stdout
        assert f"reducelab {' '.join(args)} " in proc.stdout.split("examples:")[1]
    main = cli("--help").stdout
    assert "sweep" in main and "reducelab sweep scenarios/sweeps/torus_bandwidth.toml" in main


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bar_only_on_a_terminal(tmp_path: Path, quiet: bool) -> None:
    import os
    import pty

    master, slave = pty.openpty()
    args = [sys.executable, "-m", "reducelab", "sweep", str(TINY_SWEEP), "--out", str(tmp_path / "r.sqlite"), "--jobs", "1"]
    proc = subprocess.run(args + ["--quiet"] * quiet, stdout=subprocess.PIPE, stderr=slave, text=True, timeout=60)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    bar = b"".join(chunks).decode()
    assert proc.returncode == 0
    if quiet:
        assert bar == "" and proc.stdout == ""
    else:
        assert "12/12 points" in bar and "elapsed" in bar and ("ETA" in bar or "done" in bar)
        assert "12 points, 12 run, 0 cached" in proc.stdout
    # Not a terminal: no bar even without --quiet.
    piped = cli("sweep", TINY_SWEEP, "--out", tmp_path / "other.sqlite")
    assert piped.returncode == 0 and piped.stderr == ""


def test_unguarded_script_with_jobs_runs_once(tmp_path: Path) -> None:
    """A script calling Sweep.run(jobs=2) at top level, with no `if __name__ == "__main__":`
    guard, runs its sweep once: the workers do not re-import it (they did with multiprocessing,
    respawning forever)."""
    script = tmp_path / "unguarded.py"
    db = tmp_path / "u.sqlite"
    script.write_text(
        "import reducelab\n"
        "print('top level', flush=True)\n"
        f"report = reducelab.Sweep.load({str(TINY_SWEEP)!r}).run({str(db)!r}, jobs=2)\n"
        "print('executed', report.executed, flush=True)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["top level", "executed 12"]
    assert proc.stderr == ""


def test_a_dead_local_worker_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reducelab import sweep as sweep_module
    from reducelab.sweep import SweepRunError

    monkeypatch.setattr(sweep_module, "_WORKER_COMMAND", "import sys; sys.exit(3)")
    with pytest.raises(SweepRunError, match=r"local worker process ended with status 3 while running point \d+"):
        Sweep.load(TINY_SWEEP).run(tmp_path / "r.sqlite", jobs=2, check=False)
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.count() == 0


def test_huge_repetitions_are_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(SweepSpecError) as err:
        Sweep.load(write_spec(tmp_path, "repetitions = 100000000\n[grid]\ntopology.bandwidth_gbps = [100]"))
    # (refused by the repetitions check, before any seed is made)
    assert err.value.field == "sweep.repetitions"
    assert "100000000 repetitions is more than the 1000000 points a sweep may have" in err.value.reason
    with pytest.raises(FieldError) as err2:  # fine alone, too many with the grid
        Sweep(Scenario.from_file(TINY), {"topology.bandwidth_gbps": list(range(1, 1002))}, repetitions=1000)
    assert err2.value.field == "sweep.repetitions"
    assert "1001000 points (1001 x 1000 seeds) is more than the 1000000" in err2.value.reason


def test_huge_grid_is_refused_before_its_values_are_checked() -> None:
    # A value given twice ([0] and [1]) would be refused by the value checks: they must not come first.
    with pytest.raises(FieldError) as err:
        Sweep(Scenario.from_file(TINY), {"topology.bandwidth_gbps": [1, *range(1, 2000)],
                                         "traffic[0].bytes": list(range(1, 2001))})
    assert (err.value.field, err.value.reason.split(" is ")[0]) == ("grid", "4000000 points (2000 x 2000)")


def test_large_sweep_needs_confirmation(tmp_path: Path) -> None:
    sweep = Sweep(Scenario.from_file(TINY), {"topology.bandwidth_gbps": [100, 200]}, repetitions=5001)
    assert sweep.point_count == 10002
    db = tmp_path / "big.sqlite"
    with pytest.raises(reducelab.sweep.SweepSizeError) as err:
        sweep.run(db)
    assert err.value.field == "grid"
    assert "10002 points (2 x 5001 seeds) is more than 10000" in err.value.reason
    assert "confirm=True" in err.value.reason and "--yes" in err.value.reason
    assert not db.exists() and sweep._points is None, "nothing may be built or opened before the check"
    small = Sweep.load(TINY_SWEEP)
    with pytest.raises(reducelab.sweep.SweepSizeError):
        small.run(db, confirm_above=11)
    assert small.run(db, jobs=1, confirm_above=11, confirm=True).executed == 12


def test_cli_states_the_count_and_wants_yes_above_the_threshold(tmp_path: Path) -> None:
    big = write_spec(tmp_path, "repetitions = 5001\n[grid]\ntopology.bandwidth_gbps = [100, 200]", "big.toml")
    db = tmp_path / "big.sqlite"
    proc = cli("sweep", big, "--out", db)
    assert proc.returncode == 2
    assert "the sweep has 10002 points (2 x 5001 seeds), more than 10000; run it with --yes" in proc.stderr
    assert not db.exists()
    proc = cli("sweep", TINY_SWEEP, "--out", tmp_path / "tiny.sqlite", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first == f"sweep tiny: 12 points, 0 already stored, 12 to run, into {tmp_path / 'tiny.sqlite'}"
