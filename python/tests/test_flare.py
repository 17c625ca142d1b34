"""Flare on a PsPIN switch from Python: one-switch scenarios through the one door
(`reducelab run`, `Scenario.run`), `reducelab model flare` (seed 004 §4–6) and the Flare figures
(`reducelab reproduce flare-figN`)."""

from __future__ import annotations

import json

import pytest

from helpers import cli

from reducelab import ScenarioError, flare


def test_a_pspin_scenario_runs_through_the_one_door(tmp_path) -> None:
    sc = flare.pspin_scenario(bytes=64 << 10, hosts=8, clusters=4, dtype="f32", data=True, reproducible=True, jitter_ns=30)
    a = sc.run()
    b = sc.with_seed(5).run()
    assert a.status == b.status == "completed"
    assert (a.summary["design"], a.summary["verified"]) == ("tree", True)
    # Another seed is another arrival order, with the same (reproducible) result bits.
    assert a.summary["sim_time_ps"] != b.summary["sim_time_ps"]
    assert a.summary["result_fingerprint"] == b.summary["result_fingerprint"]
    path = tmp_path / "flare.toml"
    path.write_text(sc.to_toml())
    proc = cli("run", path, "--out", tmp_path / "out", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["kind"] == "pspin"


def test_a_bad_pspin_field_is_named() -> None:
    with pytest.raises(ScenarioError) as e:
        flare.pspin_scenario(design="ring").run()
    assert e.value.field == "pspin.allreduce.design"


def test_model_flare_prints_each_design() -> None:
    proc = cli("model", "flare", "--size", "64KiB")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.startswith("  ") and line.split()[0] in
            ("single", "multi-2", "multi-4", "tree", "flare→tree")}
    assert set(rows) == {"single", "multi-2", "multi-4", "tree", "flare→tree"}
    # Tree: τ = (P − 1)L/P = 63·1024/64 = 1008 cycles; M = 63/log2 64 = 10.5.
    assert rows["tree"][1] == "1008" and rows["tree"][-3] == "10.50"
    # 64 KiB staggered over 64 blocks: δc = 64δ < L, so one buffer is contended (eq. 2: L(C − 1)/2).
    assert rows["single"][1] == str(1024 * 7 // 2)
    proc = cli("model", "flare", "--size", "2MiB")
    assert "flare→single" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("model", "flare", "--subset-cores", "3"), "--subset-cores: 3 must divide"),
        (("model", "flare", "--dtype", "f64"), "--dtype: unknown type"),
        (("model", "flare", "--algorithm", "ring"), "not --algorithm"),
        (("model", "--hosts", "4", "--algorithm", "ring", "--topology", "torus:4x4"), "belongs to `reducelab model flare`"),
    ],
)
def test_bad_model_arguments_are_clear_errors(args: tuple[str, ...], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and "Traceback" not in proc.stderr
