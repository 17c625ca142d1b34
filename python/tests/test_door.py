"""One door: collective runs are scenarios (`scenarios/swing/network.toml`, `[run] backend`), and
topology specs have one parser (`_core.topology_spec`)."""

from __future__ import annotations

import pytest

import reducelab
from helpers import REPO
from reducelab import _core
from reducelab.scenario import Scenario

NETWORK = REPO / "scenarios" / "swing" / "network.toml"


def test_topology_spec_is_the_one_parser() -> None:
    assert _core.topology_spec(" Torus:8x8") == {
        "canonical": "torus:8x8", "kind": "torus", "hosts": 64, "dims": [8, 8], "board": None, "grid": None,
    }
    hm = _core.topology_spec("hammingmesh:2x2,32x32")
    assert (hm["canonical"], hm["kind"], hm["hosts"], hm["dims"], hm["board"], hm["grid"]) == (
        "hammingmesh:2x2,32x32", "hammingmesh", 4096, [64, 64], [2, 2], [32, 32],
    )
    assert _core.topology_spec("hyperx:4x4x2")["hosts"] == 32
    for bad, why in [("ring:8", "unknown kind 'ring'"), ("torus:4x0", "positive integer"), ("torus", "KIND:SHAPE"),
                     ("hammingmesh:2x2", "board, grid")]:
        with pytest.raises(ValueError, match=why):
            _core.topology_spec(bad)


def test_network_file_runs_on_either_backend() -> None:
    base = Scenario.from_file(NETWORK).with_values({"topology.shape": "torus:4x4", "traffic[0].algorithm": "swing-latency"})
    packet = base.with_values({"run.backend": "packet"}).run()
    flow = base.with_values({"run.backend": "flow"}).run()
    assert (packet.summary["backend"], packet.summary["backend_reason"]) == ("packet", "set by run.backend")
    assert (flow.summary["backend"], flow.summary["status"], flow.summary["status_reason"]) == ("flow", "completed", None)
    p, f = packet.summary["traffic"][0], flow.summary["traffic"][0]
    assert p["verified"] is True and f["verified"] is None
    assert p["messages"] == f["messages"] and p["buffer_bytes"] == f["buffer_bytes"] == 256 * 1024
    assert abs(f["runtime_ps"] / p["runtime_ps"] - 1) < 0.05
    assert set(flow.files) == set() and {"messages.csv", "links.csv"} <= set(packet.files)
    # The legacy function is the same scenario.
    legacy = _core.run_collective("torus:4x4", "swing-latency", 1 << 20, backend="packet")
    assert (legacy["runtime_ps"], legacy["messages"], legacy["verified"]) == (p["runtime_ps"], p["messages"], True)


def test_check_probes_the_backend_the_scenario_resolves_to() -> None:
    flow = Scenario.from_file(NETWORK).with_values({"topology.shape": "torus:64x64", "run.backend": "flow"}).check()
    assert (flow.summary["backend"], flow.summary["status"], flow.summary["traffic"][0]["runtime_ps"]) == ("flow", "time_limit", None)
    auto = Scenario.from_file(NETWORK).check()
    assert auto.summary["backend_reason"] == "auto: below flow_min_bytes (1048576 B < 8388608 B)"
    with pytest.raises(reducelab.ScenarioError) as err:
        Scenario.from_file(NETWORK).with_values({"run.backend": "flow", "run.time_limit_us": 5}).check()
    assert err.value.field == "run.backend" and "run.time_limit_us is set" in err.value.reason
