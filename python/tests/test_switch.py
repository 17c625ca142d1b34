"""`reducelab switch` and `reducelab bench switch`: the CLI runs the software switch binary
(crates/switch, docs/switch.md). The binary is built by `cargo test --workspace --release`,
which scripts/test.sh runs before this suite; without it these tests fail, naming the build
command, rather than skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import REPO, cli


def test_switch_run_reduces_exactly_on_loopback() -> None:
    proc = cli(
        "switch", "run", "--scenario", REPO / "scenarios/switch/star4_canary.toml",
        "--ip-base", "127.66.0.1", "--fault", "dup=0.05", "--timeout-s", "20", timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [h["host"] for h in out["hosts"]] == [0, 1, 2, 3]
    assert all(c["verified"] and c["stats"]["bad_blocks"] == 0 for h in out["hosts"] for c in h["collectives"])
    (sw,) = out["switches"]
    assert sw["program"]["aggregated"] > 0 and sw["program"]["descriptors_left"] == 0
    assert sw["data_plane"]["fault_duplicated"] > 0


def test_switch_run_recovers_reliable_tree_losses_exactly() -> None:
    # reliable_tree (docs/extending.md): the switch drops, duplicates and reorders; hosts re-send
    # until their results arrive, the switch adds each child once and answers re-sends with its
    # kept result. It keeps the last results (the software switch is never told the run ended).
    proc = cli(
        "switch", "run", "--scenario", REPO / "scenarios/switch/star4_reliable_tree.toml",
        "--ip-base", "127.66.20.1", "--fault", "loss=0.05,dup=0.05,reorder=0.1", "--fault-seed", "2",
        "--timeout-s", "30", timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    colls = [c for h in out["hosts"] for c in h["collectives"]]
    assert len(colls) == 4 and all(c["verified"] and c["stats"]["bad_blocks"] == 0 for c in colls)
    assert sum(c["stats"]["retransmits_sent"] for c in colls) > 0
    (sw,) = out["switches"]
    # 256 blocks, each added from its 4 hosts once; the kept results are the 256 blocks' own.
    assert sw["program"]["aggregated"] == 4 * 256
    assert sw["program"]["descriptors_left"] == sw["program"]["kept_results"] == 256
    assert sw["data_plane"]["fault_dropped"] > 0 and sw["data_plane"]["fault_duplicated"] > 0


def test_switch_run_aggregates_training_jobs_exactly_under_faults() -> None:
    # SwitchML, ATP and DSA (docs/switch.md, "Pool protocols"): every worker checks every
    # result against the exact sum; the switch drops, duplicates and reorders on every port.
    for i, protocol in enumerate(["switchml", "atp", "dsa"]):
        proc = cli(
            "switch", "run", "--scenario", REPO / f"scenarios/switch/star4_{protocol}.toml",
            "--ip-base", f"127.66.{10 + i}.1", "--fault", "loss=0.05,dup=0.05,reorder=0.1",
            "--timeout-s", "20", timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["protocol"] == protocol
        workers = [h for h in out["hosts"] if h["role"] == "worker"]
        assert len(workers) == 4 and all(w["verified"] and w["bad_results"] == 0 and w["psns"] == 648 for w in workers)
        assert len(out["hosts"]) == (4 if protocol == "switchml" else 5)
        (sw,) = out["switches"]
        assert sw["program"]["stats"]["aggregated"] > 0 and sw["data_plane"]["fault_dropped"] > 0


def test_switch_errors_name_the_argument() -> None:
    proc = cli("switch", "run", "--scenario", REPO / "scenarios/switch/star4_canary.toml", "--fault", "loss=2")
    assert proc.returncode == 2
    assert "--fault loss: probability 2 is not within 0..=1" in proc.stderr
    proc = cli("switch", "switch", "--scenario", REPO / "scenarios/switch/star4_canary.toml", "--node", "0")
    assert proc.returncode == 2
    assert "node: 0 is a host, not a switch" in proc.stderr


def test_missing_binary_says_how_to_build_it() -> None:
    env = dict(os.environ, REDUCELAB_SWITCH_BIN="/nonexistent/reducelab-switch")
    proc = subprocess.run(
        [sys.executable, "-m", "reducelab", "switch", "--help-binary"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 1
    assert "REDUCELAB_SWITCH_BIN: /nonexistent/reducelab-switch is not a file" in proc.stderr


def test_switch_help_has_examples() -> None:
    proc = cli("switch", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "reducelab switch run --scenario scenarios/switch/star4_canary.toml" in proc.stdout
    proc = cli("bench", "switch", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "reducelab bench switch" in proc.stdout


def _switch_proc(
    scenario: str, node: int, ip_base: str, endpoints: Path | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    from reducelab import swswitch

    where = ["--endpoints", str(endpoints)] if endpoints is not None else ["--ip-base", ip_base]
    p = subprocess.Popen(
        [str(swswitch.find_binary()), "switch", "--scenario", scenario, "--node", str(node), *where, *extra],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == f"ready {node}"
    return p


def test_innet_allreduce_of_numpy_arrays_is_the_exact_sum(tmp_path: Path) -> None:
    import threading
    import time

    import numpy as np

    from reducelab import innet

    text = (REPO / "scenarios/switch/star4_canary.toml").read_text().replace("bytes = 262144", "bytes = 40000")
    path = tmp_path / "s.toml"
    path.write_text(text)
    ip = "127.66.1.1"
    sw = _switch_proc(str(path), 4, ip)
    try:
        rng = np.random.default_rng(5)
        data = [rng.integers(-(2**31), 2**31, size=10000, dtype=np.int64).astype(np.int32) for _ in range(4)]
        expected = np.zeros(10000, dtype=np.int32)
        for d in data:
            expected = (expected.astype(np.int64) + d).astype(np.int32)  # wrapping int32 sums
        out: dict[int, object] = {}
        start = time.time() + 0.3

        def rank(h: int) -> None:
            try:
                out[h] = innet.allreduce(data[h], scenario=path, host=h, ip_base=ip, start_at=start, timeout_s=20)
            except Exception as exc:  # reported below
                out[h] = exc

        ts = [threading.Thread(target=rank, args=(h,)) for h in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for h in range(4):
            assert isinstance(out[h], np.ndarray), out[h]
            assert np.array_equal(out[h], expected), h
    finally:
        sw.terminate()
        sw.wait(timeout=10)


def test_innet_allreduce_refuses_bad_input_and_times_out_with_the_reason() -> None:
    import numpy as np
    import pytest

    from reducelab import innet

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    with pytest.raises(ValueError, match="data: 3 elements"):
        innet.allreduce(np.zeros(3, dtype=np.int32), scenario=scenario, host=0, ip_base="127.66.2.1")
    with pytest.raises(ValueError, match="dtype float64"):
        innet.allreduce(np.zeros(65536), scenario=scenario, host=0, ip_base="127.66.2.1")
    with pytest.raises(ValueError, match="host: 9"):
        innet.allreduce(np.zeros(65536, dtype=np.int32), scenario=scenario, host=9, ip_base="127.66.2.1")
    with pytest.raises(RuntimeError, match="timed out after 0.3 s"):
        innet.allreduce(np.zeros(65536, dtype=np.int32), scenario=scenario, host=0, ip_base="127.66.2.1", timeout_s=0.3)


def _fixed_point_reference(inputs: list[object]) -> object:
    """What the switch path returns for float32 inputs (crates/switch session::FixedPoint): one
    shared exponent e (|x| < 2^e), q = round-half-away(x·2^s) with s = 30 - ceil(log2 n) - e,
    integer sums, converted back once."""
    import math

    import numpy as np

    n = len(inputs)
    m = max(float(np.max(np.abs(x))) for x in inputs)  # type: ignore[arg-type]
    if m == 0.0:
        return np.zeros_like(inputs[0])
    e = math.frexp(m)[1]
    s = 30 - math.ceil(math.log2(n)) - e
    q = [np.sign(x) * np.floor(np.abs(np.asarray(x, dtype=np.float64)) * 2.0**s + 0.5) for x in inputs]
    return (np.sum(q, axis=0) * 2.0**-s).astype(np.float32)


def _session_ranks(scenario: Path, ip: str, join_s: float, work: Callable[[Any, int], list[Any]]) -> dict[int, object]:
    """Four rank threads, each opening `innet.Session(scenario, 4, r)`, meeting at a barrier
    (every socket bound before any call) and returning `work(session, r)`; each rank's result
    or the exception it raised."""
    import threading

    from reducelab import innet

    out: dict[int, object] = {}
    barrier = threading.Barrier(4)

    def rank(r: int) -> None:
        try:
            with innet.Session(scenario, 4, r, ip_base=ip, timeout_s=20) as s:
                barrier.wait()
                out[r] = work(s, r)
        except Exception as exc:  # reported by the caller's checks
            barrier.abort()
            out[r] = exc

    ts = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=join_s)
    return out


def test_innet_sessions_reduce_float32_and_int32_through_the_c_abi(tmp_path: Path) -> None:
    """`innet.Session` (ctypes over libreducelab_innet.so): 4 rank threads, successive calls of
    several sizes and dtypes through one switch process; int32 exact (wrapping), float32 bitwise
    the fixed-point reference and within its stated bound of the exact sum."""
    import math

    import numpy as np

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    ip = "127.66.5.1"
    sw = _switch_proc(str(scenario), 4, ip)
    rng = np.random.default_rng(7)
    sizes = [1, 300, 10_000]
    floats = [[(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32) for _ in range(4)] for n in sizes]
    ints = [[rng.integers(-(2**31), 2**31, size=n, dtype=np.int64).astype(np.int32) for _ in range(4)] for n in sizes]
    try:
        out = _session_ranks(scenario, ip, 60, lambda s, r: [(s.allreduce(ints[k][r]), s.allreduce(floats[k][r])) for k in range(len(sizes))])
    finally:
        sw.terminate()
        sw.wait(timeout=10)
    for r in range(4):
        assert isinstance(out[r], list), out[r]
        for k, (i, f) in enumerate(out[r]):  # type: ignore[union-attr]
            want = np.sum(np.array(ints[k], dtype=np.int64), axis=0).astype(np.uint32).astype(np.int32)
            assert np.array_equal(i, want), (r, k)
            ref = _fixed_point_reference(floats[k])
            assert np.array_equal(f.view(np.uint32), ref.view(np.uint32)), (r, k)  # type: ignore[union-attr]
            exact = np.sum(np.array(floats[k], dtype=np.float64), axis=0)
            e = math.frexp(max(float(np.max(np.abs(x))) for x in floats[k]))[1]
            tol = 4 * 2.0 ** (e + 2 - 31) + np.abs(exact) * 2.0**-24
            assert np.all(np.abs(f.astype(np.float64) - exact) <= tol), (r, k)


FAULTS = ("--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "6")


@pytest.mark.parametrize(
    ("protocol", "node", "block", "faults"),
    [("switchml", 4, 9, ()), ("atp", 5, 10, ()), ("dsa", 5, 21, FAULTS), ("reliable_tree", 4, 17, FAULTS),
     ("static_trees", 4, 23, ()), ("flare", 4, 25, ()), ("switchml_allreduce", 4, 26, FAULTS), ("atp_allreduce", 4, 28, FAULTS),
     ("dsa_allreduce", 4, 29, FAULTS)],
)
def test_innet_sessions_sum_random_calls_exactly(protocol: str, node: int, block: int, faults: tuple[str, ...]) -> None:
    """`innet.Session` on a pool scenario (scenarios/switch/star4_switchml.toml, star4_atp.toml,
    star4_dsa.toml under faults; ATP's and DSA's parameter server is a thread of rank 0), on a
    static tree (star4_static_trees.toml) or dense Flare's tree (star4_flare.toml; neither
    recovers from loss: no faults), on a reliable tree
    (star4_reliable_tree.toml) or on SwitchML as an in-network allreduce
    (star4_switchml_allreduce.toml) or ATP and DSA as in-network allreduces (their server in rank
    0's agent, which answers between calls), the last four
    through a switch that drops, duplicates and reorders (each call continues the last one's
    block sequence, so late copies of one call must not be added into the next): 4 rank threads,
    a seeded random sequence of calls of random sizes and dtypes through one switch process (a
    fresh one: a pool switch serves one session per start); int32 exact (wrapping), float32
    bitwise the fixed-point reference."""
    import numpy as np

    scenario = REPO / f"scenarios/switch/star4_{protocol}.toml"
    ip = f"127.66.{block}.1"
    rng = np.random.default_rng(block)
    calls = []
    for _ in range(8):
        n = int(rng.choice([1, 61, 62, 63, int(rng.integers(1, 20_000))]))
        if rng.integers(0, 3) == 0:
            calls.append([(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32) for _ in range(4)])
        else:
            calls.append([rng.integers(-(2**31), 2**31, size=n, dtype=np.int64).astype(np.int32) for _ in range(4)])
    sw = _switch_proc(str(scenario), node, ip, extra=faults)
    def calls_of(s: Any, r: int) -> list[Any]:
        assert s.protocol == protocol.removesuffix("_allreduce")
        return [s.allreduce(c[r]) for c in calls]

    try:
        out = _session_ranks(scenario, ip, 90, calls_of)
    finally:
        sw.terminate()
        report = json.loads(sw.communicate(timeout=10)[0])
    program = report["program"]
    assert (program["stats"]["completed"] if "stats" in program else program["aggregated"]) > 0, report
    if faults:
        assert report["data_plane"]["fault_dropped"] > 0 and report["data_plane"]["fault_duplicated"] > 0, report
    for r in range(4):
        assert isinstance(out[r], list), out[r]
        for k, got in enumerate(out[r]):  # type: ignore[union-attr]
            c = calls[k]
            if c[0].dtype == np.int32:
                want = np.sum(np.array(c, dtype=np.int64), axis=0).astype(np.uint32).astype(np.int32)
                assert np.array_equal(got, want), (r, k)
            else:
                ref = _fixed_point_reference(c)
                assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (r, k)


def test_innet_sessions_refuse_a_wrong_rank_count_and_flare() -> None:
    import pytest

    from reducelab import innet

    with pytest.raises(ValueError, match="ranks: 2, but the scenario's job has 4 workers"):
        innet.Session(REPO / "scenarios/switch/star4_switchml.toml", 2, 0, ip_base="127.66.11.1")
    with pytest.raises(ValueError, match="protocol: flare_sparse's switch programs are built for the scenario's collectives"):
        innet.Session(REPO / "scenarios/switch/star4_flare_sparse.toml", 4, 0, ip_base="127.66.11.1")


def test_innet_session_names_the_missing_switch_and_bad_dtypes() -> None:
    import numpy as np
    import pytest

    from reducelab import innet

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    with pytest.raises(ValueError, match="no switch: nothing listens at 127.66.6.5:47002"):
        innet.Session(scenario, 4, 2, ip_base="127.66.6.1")
    sw = _switch_proc(str(scenario), 4, "127.66.6.1")
    try:
        with innet.Session(scenario, 1, 0, ip_base="127.66.6.1") as s:
            with pytest.raises(ValueError, match="dtype float64"):
                s.allreduce(np.zeros(3))
            with pytest.raises(ValueError, match="data: element 0 is inf"):
                s.allreduce(np.array([np.inf], dtype=np.float32))
            assert s.allreduce(np.array([1.5, -2.25], dtype=np.float32)).tolist() == [1.5, -2.25]
    finally:
        sw.terminate()
        sw.wait(timeout=10)


def test_innet_session_through_an_endpoints_file(tmp_path: Path) -> None:
    """`endpoints=` gives a session the switches' --endpoints file (nodes at addresses of their
    own, here scattered over loopback): the missing switch is named with that option, and a
    call through the running switch is exact."""
    import numpy as np
    import pytest

    from reducelab import innet

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    ep = tmp_path / "ep.txt"
    ep.write_text("4 127.66.8.9:46000\n0 127.66.8.1:41000\n1 127.66.8.2:41000\n2 127.66.8.3:41000\n3 127.66.8.1:41001\n")
    with pytest.raises(ValueError, match=r"nothing listens at 127\.66\.8\.9:46000 .*--endpoints .*ep\.txt"):
        innet.Session(scenario, 4, 0, endpoints=ep)
    sw = _switch_proc(str(scenario), 4, "", endpoints=ep)
    try:
        with innet.Session(scenario, 1, 0, endpoints=ep) as s:
            assert s.allreduce(np.array([7, -3], dtype=np.int32)).tolist() == [7, -3]
    finally:
        sw.terminate()
        sw.wait(timeout=10)
    bad = tmp_path / "bad.txt"
    bad.write_text("4 127.66.8.9:46000\n")
    with pytest.raises(ValueError, match="node 0 is missing"):
        innet.Session(scenario, 4, 0, endpoints=bad)
