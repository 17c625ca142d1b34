"""Leases: concurrent sweeps into one store run each point once; a point leased by a live other
sweep is skipped and taken up when its lease expires or its owner is dead; a Dask cluster that
loses its workers does not make the sweep wait forever."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reducelab.store import BUSY, DONE, LEASED, ResultStore
from reducelab.sweep import Sweep, SweepRunError

DATA = Path(__file__).parent / "data"
TINY_SWEEP = DATA / "tiny_sweep.toml"  # 12 points


def slow_spec(d: Path, points: int = 8) -> Path:
    # ~0.1-0.2 s per point: background traffic for a long simulated time.
    (d / "slow.toml").write_text(
        'name = "slow"\n[topology]\nkind = "star"\nhosts = 8\nbandwidth_gbps = 100\nlatency_ns = 500\n'
        '[[traffic]]\nkind = "random_uniform"\nbytes = 65536\n[run]\ntime_limit_us = 30000\n'
    )
    spec = d / "slow_sweep.toml"
    spec.write_text(f'[sweep]\nscenario = "slow.toml"\n[grid]\nseed = {list(range(1, points + 1))}\n')
    return spec


def _open_at_barrier(paths: list[str], barrier: object, errors: object) -> None:
    for path in paths:
        barrier.wait()  # type: ignore[attr-defined]
        try:
            ResultStore(path).close()
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.put(f"{path}: {exc}")  # type: ignore[attr-defined]


def test_processes_creating_one_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """Four processes open the same not-yet-existing store at the same instant, 40 times over: each
    open succeeds. (Before the schema went into one BEGIN IMMEDIATE transaction, about 1 round in 5
    failed with "database is locked", which failed two sweeps started together.)"""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"s{i}.sqlite") for i in range(40)]
    barrier, errors = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_at_barrier, args=(paths, barrier, errors)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    with ResultStore(paths[-1]) as store:  # and the schema is whole
        assert store.lease("k", "a", 60) == LEASED


def test_lease_states(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.lease("k", "a", 60) == LEASED
        assert store.lease("k", "a", 60) == LEASED  # the owner may renew it
        assert store.lease("k", "b", 60) == BUSY
        assert store.renew_leases("a", 60) == 1
        store.put("k", "{}", 1, json.dumps({"status": "completed"}), [], "t", 0.0)
        assert store.leases() == {}, "storing a result ends its lease"
        assert store.lease("k", "b", 60) == DONE
        assert store.lease("x", "a", -1) == LEASED  # already expired
        assert store.lease("x", "b", 60) == LEASED
        store.release_leases("b")
        assert store.leases() == {}


def test_two_sweep_processes_share_the_work(tmp_path: Path) -> None:
    """Two processes start one 8-point sweep into one store at the same moment: every point is
    computed by exactly one of them."""
    spec, db, go = slow_spec(tmp_path), tmp_path / "r.sqlite", tmp_path / "go"
    script = (
        "import json, os, sys, time\n"
        "from reducelab.sweep import Sweep\n"
        f"sweep = Sweep.load({str(spec)!r})\n"
        "sweep.points()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.005)\n"
        "ran = []\n"
        f"report = sweep.run({str(db)!r}, jobs=1, on_point=lambda p: ran.append(p.index))\n"
        "print(json.dumps({'ran': ran, 'executed': report.executed, 'by_others': report.by_others}))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    time.sleep(1.0)  # both imported and waiting
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    a, b = (set(o["ran"]) for o in outs)
    assert not a & b, f"points computed twice: {sorted(a & b)}"
    assert a | b == set(range(8))
    assert outs[0]["executed"] + outs[1]["executed"] == 8
    assert a and b, f"one sweep did everything: {outs}"
    with ResultStore(db) as store:
        assert store.count() == 8 and store.leases() == {}


def test_point_leased_by_a_live_other_sweep_is_taken_up_when_the_lease_expires(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    sweep = Sweep.load(TINY_SWEEP)
    leased = sweep.points()[3]
    with ResultStore(db) as store:  # a sweep on another host, which then vanished
        assert store.lease(leased.key, "elsewhere:1:x", 1.5) == LEASED
    order: list[int] = []
    t0 = time.monotonic()
    report = sweep.run(db, jobs=1, on_point=lambda p: order.append(p.index))
    assert time.monotonic() - t0 >= 1.0, "ran a point another live sweep held"
    assert report.executed == 12 and order[-1] == 3 and sorted(order) == list(range(12))
    with ResultStore(db) as store:
        assert store.leases() == {}


def test_lease_of_a_dead_process_on_this_host_is_taken_at_once(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    sweep = Sweep.load(TINY_SWEEP)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with ResultStore(db) as store:
        assert store.lease(sweep.points()[0].key, f"{socket.gethostname()}:{dead.pid}:x", 600) == LEASED
    order: list[int] = []
    assert sweep.run(db, jobs=1, on_point=lambda p: order.append(p.index)).executed == 12
    assert order == list(range(12)), "point 0 waited instead of running in its turn"


def test_leases_are_released_when_the_sweep_stops(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"

    def stop(point: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Sweep.load(TINY_SWEEP).run(db, jobs=2, on_point=stop)
    with ResultStore(db) as store:
        assert store.count() == 1 and store.leases() == {}
    assert Sweep.load(TINY_SWEEP).run(db, jobs=2).executed == 11


def test_leases_are_renewed_while_the_sweep_lives(tmp_path: Path) -> None:
    """A point that runs longer than a lease keeps it: the sweep renews its leases every
    quarter lease from a thread of its own, and stops when the sweep ends."""
    from reducelab.sweep import _LeaseKeeper

    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        assert store.lease("k", "me", 0.4) == LEASED
        keeper = _LeaseKeeper(db, "me", 0.4)
        time.sleep(1.2)  # three lease lengths
        assert store.lease("k", "other", 60) == BUSY
        assert store.leases()["k"][1] > time.time()
        keeper.stop()
        time.sleep(0.6)
        assert store.lease("k", "other", 60) == LEASED


def test_dask_cluster_losing_its_only_worker_ends_with_an_error(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    spec, db = slow_spec(tmp_path), tmp_path / "r.sqlite"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        def lose_the_worker(point: object) -> None:
            if cluster.workers:
                cluster.scale(0)

        with pytest.raises(SweepRunError, match=r"has had no worker for 2 s with 1 points in flight; start workers"):
            Sweep.load(spec).run(db, scheduler=client, worker_timeout=2, on_point=lose_the_worker)
    with ResultStore(db) as store:
        assert 1 <= store.count() < 8 and store.leases() == {}


def test_dask_worker_lost_mid_sweep_its_points_run_elsewhere(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    spec, db = slow_spec(tmp_path), tmp_path / "r.sqlite"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        def lose_a_worker(point: object) -> None:
            if len(cluster.workers) == 2:
                cluster.scale(1)

        report = Sweep.load(spec).run(db, scheduler=client, worker_timeout=5, on_point=lose_a_worker)
        assert len(cluster.workers) == 1
    assert report.executed == 8
    with ResultStore(db) as store:
        assert store.count() == 8


def _worker_env() -> dict[str, str]:
    import os

    import reducelab

    env = dict(os.environ)
    package_parent = str(Path(reducelab.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("workers", [1, 2])
def test_dask_worker_process_killed_with_no_nanny(tmp_path: Path, workers: int) -> None:
    """The issue's case: a worker dies with no nanny to restart it (SIGKILL of a `dask worker
    --no-nanny` process). With another worker left, its points are resubmitted there and the
    sweep completes; with none, the sweep ends with an error after `worker_timeout` instead of
    waiting forever, and the points stored before stay."""
    distributed = pytest.importorskip("distributed")
    import signal

    spec, db = slow_spec(tmp_path), tmp_path / "r.sqlite"
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--no-nanny",
                 "--nthreads", "1", "--no-dashboard"],
                env=_worker_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for _ in range(workers)
        ]
        try:
            client.wait_for_workers(workers, timeout=60)

            def kill_a_worker(point: object) -> None:
                if procs[0].poll() is None:
                    procs[0].send_signal(signal.SIGKILL)
                    procs[0].wait()

            sweep = Sweep.load(spec)
            if workers == 1:
                with pytest.raises(SweepRunError, match=r"has had no worker for 2 s with \d+ points in flight"):
                    sweep.run(db, scheduler=client, worker_timeout=2, on_point=kill_a_worker)
            else:
                assert sweep.run(db, scheduler=client, worker_timeout=2, on_point=kill_a_worker).executed == 8
                assert procs[0].returncode == -signal.SIGKILL and procs[1].poll() is None
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
    with ResultStore(db) as store:
        assert (1 <= store.count() < 8) if workers == 1 else store.count() == 8
        assert store.leases() == {}
