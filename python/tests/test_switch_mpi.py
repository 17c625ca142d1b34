"""The MPI runtime's switch algorithms (REDUCELAB_ALLREDUCE=canary, switchml (a training job's or an
in-network allreduce's), atp, dsa, reliable_tree:
mpi/src/innet.c over the C ABI of crates/innet): MPI_Allreduce of 4 ranks through a software switch process on loopback
(docs/switch.md). Needs mpirun and mpi/build (skipped without them unless
REDUCELAB_REQUIRE_MPI=1, as test_mpi_runtime.py), the switch binary and libreducelab_innet.so
(built by scripts/setup.sh)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import REPO

BUILD = REPO / "mpi" / "build"
PRELOAD = BUILD / "libreducelab_pmpi.so"
MPIRUN = shutil.which("mpirun")
SCENARIO = REPO / "scenarios/switch/star4_canary.toml"

_missing = None
if MPIRUN is None:
    _missing = "mpirun not found (scripts/setup.sh installs Open MPI)"
elif not (BUILD / "test_innet").exists() or not PRELOAD.exists():
    _missing = f"{BUILD}/test_innet not built (run scripts/setup.sh)"
if _missing and os.environ.get("REDUCELAB_REQUIRE_MPI") == "1":
    raise RuntimeError(f"REDUCELAB_REQUIRE_MPI=1 but {_missing}")
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")


def _binary() -> Path:
    from reducelab import swswitch

    return swswitch.find_binary()


def _mpirun(np_: int, env: dict[str, str], timeout: float = 120, algorithm: str = "canary") -> subprocess.CompletedProcess[str]:
    lib = _binary().parent / "libreducelab_innet.so"
    assert lib.exists(), f"{lib}: build it with `cargo build --release -p reducelab-innet`"
    env = {"LD_PRELOAD": str(PRELOAD), "REDUCELAB_ALLREDUCE": algorithm, "REDUCELAB_INNET_LIB": str(lib), **env}
    cmd = [MPIRUN or "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("REDUCELAB_")}
    return subprocess.run(cmd + [str(BUILD / "test_innet")], capture_output=True, text=True, timeout=timeout, env=base)


def _through_a_switch(scenario: Path, ip: str, extra: list[str], algorithm: str = "canary", node: int = 4) -> dict:
    """Starts a switch (node `node` of `scenario`, `extra` arguments), runs test_innet on 4 ranks
    through it with REDUCELAB_ALLREDUCE=`algorithm`, checks every rank's checks passed, stops the
    switch and returns its report."""
    sw = subprocess.Popen(
        [str(_binary()), "switch", "--scenario", str(scenario), "--node", str(node), "--ip-base", ip, *extra],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert sw.stdout is not None and sw.stdout.readline().strip() == f"ready {node}"
        proc = _mpirun(4, {"REDUCELAB_INNET_SCENARIO": str(scenario), "REDUCELAB_INNET_ADDR": f"{ip}:47000"},
                       algorithm=algorithm)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert re.search(r"test_innet p=4: 346560 checks, 0 failures", proc.stdout), proc.stdout
    finally:
        sw.terminate()
        report, _ = sw.communicate(timeout=10)
    return json.loads(report)


def test_mpi_allreduce_of_4_ranks_through_a_switch_is_exact() -> None:
    """int32 and unsigned bitwise, float within the fixed-point bound, in place and not, counts
    1..65536 (mpi/tests/test_innet.c); the switch's counters show the traffic went through it:
    at least 4 packets per block (3 contributions and the leader's broadcast) of the 1,124 blocks
    the program's 42 switch allreduces have."""
    d = _through_a_switch(SCENARIO, "127.66.3.1", [])["data_plane"]
    assert d["rx_packets"] >= 4 * 1124 and d["malformed"] == 0 and d["foreign"] == 0, d


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDUCELAB_INNET_SCENARIO": str(SCENARIO), "REDUCELAB_INNET_ADDR": "127.66.4.1:47000"},
         "no switch: nothing listens at 127.66.4.5:4700"),
        ({}, "REDUCELAB_INNET_SCENARIO is not set"),
    ],
)
def test_canary_without_a_switch_fails_with_the_reason(env: dict[str, str], message: str) -> None:
    proc = _mpirun(2, env, timeout=60)
    assert proc.returncode != 0
    assert "REDUCELAB_ALLREDUCE=canary (rank " in proc.stderr and message in proc.stderr, proc.stderr[-3000:]


def test_mpi_allreduce_through_a_lossy_switch_is_exact(tmp_path: Path) -> None:
    """The same program through a switch that loses 2%, duplicates 2% and reorders 5% of the
    packets on every port (fast Canary timers: 20 ms retransmission): every check passes, and
    the switch's counters show the faults happened. A rank whose release is lost concludes it
    after 8 timeouts (docs/switch.md); before, it gave up and the run failed."""
    text = SCENARIO.read_text().replace("retransmit_timeout_us = 200000", "retransmit_timeout_us = 20000").replace(
        "timeout_ns = 50000000", "timeout_ns = 5000000")
    assert "retransmit_timeout_us = 20000" in text and "timeout_ns = 5000000" in text
    path = tmp_path / "lossy.toml"
    path.write_text(text)
    d = _through_a_switch(path, "127.66.5.1", ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "3"])["data_plane"]
    assert d["fault_dropped"] > 0 and d["fault_duplicated"] > 0 and d["fault_held"] > 0, d


@pytest.mark.parametrize(("algorithm", "node", "ip", "extra"), [
    ("switchml", 4, "127.66.12.1", []),
    ("atp", 5, "127.66.13.1", []),
    ("switchml", 4, "127.66.14.1", ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "4"]),
    ("atp", 5, "127.66.16.1", ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "5"]),
    ("dsa", 5, "127.66.22.1", ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "8"]),
])
def test_mpi_allreduce_through_a_pool_switch_is_exact(algorithm: str, node: int, ip: str, extra: list[str]) -> None:
    """REDUCELAB_ALLREDUCE=switchml / atp / dsa: the same program (42 switch allreduces of 1 to 65,536
    elements, int32 bitwise, float within the fixed-point bound) through a SwitchML / ATP switch
    (scenarios/switch/star4_{switchml,atp}.toml: the 4 ranks are the job's workers; rank 0 runs
    ATP's parameter server), also under loss, duplication and reordering. The switch program's
    counters show it aggregated: SwitchML completes every PSN of every call on the switch."""
    report = _through_a_switch(REPO / f"scenarios/switch/star4_{algorithm}.toml", ip, extra, algorithm, node)
    st = report["program"]["stats"]
    assert st["completed"] > 0 and report["data_plane"]["malformed"] == 0, report
    if extra:
        assert report["data_plane"]["fault_dropped"] > 0, report


@pytest.mark.parametrize(("ip", "extra"), [
    ("127.66.18.1", []),
    ("127.66.19.1", ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", "7"]),
])
def test_mpi_allreduce_through_a_reliable_tree_switch_is_exact(ip: str, extra: list[str]) -> None:
    """REDUCELAB_ALLREDUCE=reliable_tree, a protocol the C ABI and innet.c know only from the
    registry (scenarios/switch/star4_reliable_tree.toml): the same program through its switch,
    also under loss, duplication and reordering; every call continues the last one's block
    sequence, so a late copy of one call is never added into the next."""
    report = _through_a_switch(REPO / "scenarios/switch/star4_reliable_tree.toml", ip, extra, "reliable_tree", 4)
    assert report["program"]["aggregated"] > 0 and report["data_plane"]["malformed"] == 0, report
    if extra:
        assert report["data_plane"]["fault_dropped"] > 0 and report["data_plane"]["fault_duplicated"] > 0, report


@pytest.mark.parametrize(("algorithm", "ip", "seed"), [
    ("switchml", "127.66.27.1", "8"),
    ("atp", "127.66.30.1", "9"),
    ("dsa", "127.66.31.1", "10"),
])
def test_mpi_allreduce_through_a_shared_pool_allreduce_switch_is_exact(algorithm: str, ip: str, seed: str) -> None:
    """REDUCELAB_ALLREDUCE=switchml, atp or dsa on the protocol as an in-network allreduce
    (scenarios/switch/star4_<algorithm>_allreduce.toml), not a training job: every call is the
    scenario's allreduce with its PSNs numbered on from the last call's, through a switch that
    drops, duplicates and reorders; a late copy of one call is never added into the next. ATP's
    and DSA's parameter server is in rank 0's agent, which answers its peers between calls."""
    extra = ["--fault", "loss=0.02,dup=0.02,reorder=0.05,reorder_us=300", "--fault-seed", seed]
    scenario = REPO / f"scenarios/switch/star4_{algorithm}_allreduce.toml"
    report = _through_a_switch(scenario, ip, extra, algorithm, 4)
    assert report["program"]["aggregated"] > 0 and report["data_plane"]["malformed"] == 0, report
    assert report["data_plane"]["fault_dropped"] > 0 and report["data_plane"]["fault_duplicated"] > 0, report


def test_mpi_allreduce_through_a_static_tree_switch_is_exact() -> None:
    """REDUCELAB_ALLREDUCE=static_trees (scenarios/switch/star4_static_trees.toml): one static
    tree serves the runtime's calls one after another, each continuing the last one's block
    sequence in the tree's slots (no loss recovery, so no faults)."""
    report = _through_a_switch(REPO / "scenarios/switch/star4_static_trees.toml", "127.66.24.1", [], "static_trees", 4)
    assert report["program"]["aggregated"] > 0 and report["program"]["collisions"] == 0, report


def test_mpi_allreduce_through_a_dense_flare_switch_is_exact() -> None:
    """REDUCELAB_ALLREDUCE=flare (scenarios/switch/star4_flare.toml): dense Flare's one tree
    serves the runtime's calls as static trees do (no loss recovery, so no faults)."""
    report = _through_a_switch(REPO / "scenarios/switch/star4_flare.toml", "127.66.32.1", [], "flare", 4)
    assert report["program"]["aggregated"] > 0 and report["program"]["collisions"] == 0, report


def test_a_switch_algorithm_that_is_not_the_scenarios_protocol_fails_with_the_reason() -> None:
    """REDUCELAB_ALLREDUCE=switchml with a canary scenario: every rank stops with the reason."""
    sw = subprocess.Popen(
        [str(_binary()), "switch", "--scenario", str(SCENARIO), "--node", "4", "--ip-base", "127.66.15.1"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert sw.stdout is not None and sw.stdout.readline().strip() == "ready 4"
        proc = _mpirun(2, {"REDUCELAB_INNET_SCENARIO": str(SCENARIO), "REDUCELAB_INNET_ADDR": "127.66.15.1:47000"},
                       timeout=60, algorithm="switchml")
    finally:
        sw.terminate()
        sw.communicate(timeout=10)
    assert proc.returncode != 0
    assert "REDUCELAB_ALLREDUCE=switchml (rank " in proc.stderr and "runs canary, not switchml" in proc.stderr, proc.stderr[-3000:]
