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


FIGURE_CLAIMS = {
    "flare-fig7": ["fig7-small-drop-at-s-c", "fig7-small-drop-at-s-c-simulated", "fig7-s1-more-memory",
                   "fig7-s1-more-memory-simulated", "fig7-large-good-at-s-c", "fig7-large-good-at-s-c-simulated",
                   "fig7-working-memory-512k", "fig7-total-memory-2mib"],
    "flare-fig10": ["fig10-tree-best-below-128k", "fig10-tree-best-below-128k-simulated", "fig10-more-buffers-better-small",
                    "fig10-two-buffers-beat-one-small", "fig10-single-catches-up-above-512k",
                    "fig10-single-catches-up-above-512k-simulated", "fig10-more-buffers-less-memory"],
    "flare-fig11": ["fig11-small-only-tree-above-switchml", "fig11-small-others-below-switchml", "fig11-large-single-best",
                    "fig11-flare-above-sharp", "fig11-flare-above-switchml-everywhere", "fig11-int16-twice-the-elements",
                    "fig11-smaller-types-more-elements"],
}


@pytest.mark.parametrize("name", ["flare-fig10", "flare-fig11"])
def test_flare_figures_run_through_the_harness_at_tiny_scale(name: str, tmp_path) -> None:
    import csv

    from reducelab import figures

    rep = figures.reproduce(name, tmp_path, scale="tiny", jobs=1, plot=False)
    stem = name.split("-")[1]
    claims = list(csv.DictReader((tmp_path / f"{stem}_claims.csv").open()))
    assert [c["id"] for c in claims] == FIGURE_CLAIMS[name]
    # Every claim was judged on verified runs (none is n/a): every run completed and verified.
    assert all(c["pass"] in ("pass", "fail") for c in claims), [c for c in claims if c["pass"] not in ("pass", "fail")]
    rows = flare.rows_from_csv((tmp_path / f"{stem}.csv").read_text())
    assert rows and all(r["verified"] and r["end"] == "completed" for r in rows)
    # The table holds the model beside the simulation, and the policy resolves by size.
    assert all(r["model_bandwidth_tbps"] > 0 and r["bandwidth_tbps"] > 0 for r in rows)
    if name == "flare-fig11":
        policy = {r["bytes"]: r["design"] for r in rows if r["series"] == "flare" and r["dtype"] == "int32"}
        assert policy[65536] == "tree" and policy[262144] == "multi-2" and policy[4194304] == "single"
        by_type = {r["dtype"]: r["giga_elements_per_s"] for r in rows if r["series"] == "flare" and r["bytes"] == 1 << 20}
        assert by_type["int8"] > by_type["int16"] > by_type["int32"]
    assert rep.counts()[2] == 0


def test_claims_are_judged_again_from_the_csv_alone(tmp_path) -> None:
    from reducelab import figures

    figures.reproduce("flare-fig10", tmp_path, scale="tiny", jobs=1, plot=False)
    before = (tmp_path / "fig10_claims.csv").read_text()
    (tmp_path / "points.sqlite").unlink()
    (tmp_path / "fig10_claims.csv").unlink()
    figures.reevaluate("flare-fig10", tmp_path, "tiny")
    assert (tmp_path / "fig10_claims.csv").read_text() == before
