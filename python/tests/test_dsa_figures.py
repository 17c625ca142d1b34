"""`reducelab reproduce dsa-figN` (DSA §VII figures: scenarios/dsa/figN.toml + claims, training
jobs on a shared switch memory run through the sweep store) and a training scenario through the
one door (`reducelab.run`)."""

from __future__ import annotations

import csv
import json
import math
import tomllib
from pathlib import Path

import pytest

import reducelab
from helpers import REPO
from reducelab import dsa, figures
from reducelab.claims import NA

#: Every claim id each figure must report.
CLAIM_IDS = {
    "dsa-fig8": ["fig8-dsa-vs-switchml-up-to", "fig8-dsa-vs-atp-up-to", "fig8-gain-grows-with-jobs-atp",
                 "fig8-gain-grows-with-jobs-switchml"],
    "dsa-fig9": ["fig9-dsa-best-vs-switchml", "fig9-dsa-best-vs-atp", "fig9-gain-over-atp-grows-with-workers"],
    "dsa-fig10": ["fig10-A-vs-switchml", "fig10-A-vs-atp", "fig10-B-vs-switchml", "fig10-B-vs-atp"],
    "dsa-fig11": [*(f"fig11-{m}-{s}-vs-atp" for m in ("A", "AB") for s in ("dsa", "dsa-always", "dsa-coin")),
                  "fig11-dsa-beats-dsa-always", "fig11-dsa-beats-dsa-coin"],
}


#: Fig. 12 (loss), run at small scale: every claim id, in order. The paper's Fig. 12 is a testbed
#: figure (VGG16); only the claim that follows from DSA's mechanism in any setting is judged.
FIG12_CLAIM_IDS = ["fig12-ps-loss-hits-preemption-tasks"]


def test_registered() -> None:
    assert [n for n in figures.names() if n.startswith("dsa-")] == [*CLAIM_IDS, "dsa-fig12"]


def test_fig12_small_scale_runs_lossy_points_verified_and_judges_every_claim(tmp_path: Path) -> None:
    rep = figures.reproduce("dsa-fig12", tmp_path, "small", jobs=1, plot=False)
    rows = list(csv.DictReader((tmp_path / "fig12.csv").open(encoding="utf-8")))
    # Panels: (a) 3 series x 2 rates at a worker, (b) ATP and DSA x 2 rates at the PS, the lossless 3.
    assert sorted((r["loss_at"], r["series"]) for r in rows) == sorted(
        [("worker", s) for s in ("switchml", "atp", "dsa") for _ in range(2)] + [("ps", s) for s in ("atp", "dsa") for _ in range(2)]
        + [("none", s) for s in ("switchml", "atp", "dsa")])
    assert all(r["verified"] == "true" and r["end"] == "completed" for r in rows), rows
    for r in rows:
        lossy = r["loss_at"] != "none"
        assert (int(r["lost_packets"]) > 0) == lossy, r
        assert abs(float(r["speed_epochs_per_s"]) * float(r["mean_jct_us"]) - 1e6) < 1e-3 * 1e6
        if r["series"] == "dsa":  # every lost packet has one §IV-C type; the shares add up to 1
            typed = sum(int(r[f"lost_type_{k}"]) for k in ("i", "ii", "iii"))
            assert typed == int(r["lost_packets"]), r
            if lossy:
                assert abs(sum(float(r[f"loss_share_{k}"]) for k in ("i", "ii", "iii")) - 1) < 1e-4, r
        else:
            assert r["lost_type_i"] == "" and r["loss_share_i"] == "", r
    assert [v.id for v in rep.verdicts] == FIG12_CLAIM_IDS
    assert all(v.verdict != NA for v in rep.verdicts), [(v.id, v.measured) for v in rep.verdicts]
    again = dsa.rows_from_csv((tmp_path / "fig12.csv").read_text(encoding="utf-8"))
    assert [(r["loss_at"], r["loss"]) for r in again] == [(r["loss_at"], float(r["loss"]) if r["loss"] else None) for r in rows]


@pytest.mark.parametrize(("point", "field"), [
    ({"loss_at": "switch", "loss": 0.01}, "grid.loss_at"),
    ({"loss_at": "worker", "loss": 0}, "grid.loss"),
    ({"loss_at": "none", "loss": 0.01}, "grid.loss"),
    ({"loss_at": "worker", "loss": 1.5}, "grid.loss"),
    ({"loss_at": "ps", "loss": 0.01, "series": "switchml"}, "grid.loss_at"),
])
def test_fig12_grid_errors_name_the_axis(point: dict, field: str) -> None:
    from reducelab.figures import ScaleSpec
    from reducelab.scenario import Scenario
    base = Scenario.from_dict(__import__("tomllib").loads((REPO / "scenarios" / "dsa" / "network.toml").read_text(encoding="utf-8")))
    grid = [{k: [v] for k, v in {"series": "dsa", "jobs": 2, "workers": 4, **point}.items()}]
    with pytest.raises(ValueError, match=field):
        dsa.DsaKind().points(None, ScaleSpec("t", {}, {}, grid), base)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_tiny_scale_runs_verified_and_judges_every_claim(tmp_path: Path, name: str) -> None:
    rep = figures.reproduce(name, tmp_path, "tiny", jobs=1, plot=False)
    rows = list(csv.DictReader((tmp_path / f"{rep.figure.stem}.csv").open(encoding="utf-8")))
    assert rows and all(r["verified"] == "true" and r["end"] == "completed" for r in rows), rows
    assert all(float(r["mean_jct_us"]) > 0 and 0 < float(r["memory_utilization"]) <= 1 for r in rows)
    ids = [v.id for v in rep.verdicts]
    assert ids == CLAIM_IDS[name]
    assert all(v.verdict != NA for v in rep.verdicts), [(v.id, v.measured) for v in rep.verdicts]
    # The table reads back (judging again without running).
    again = dsa.rows_from_csv((tmp_path / f"{rep.figure.stem}.csv").read_text(encoding="utf-8"))
    assert [r["mean_jct_us"] for r in again] == [float(r["mean_jct_us"]) for r in rows]


def test_training_through_the_one_door() -> None:
    text = (REPO / "scenarios" / "dsa" / "network.toml").read_text(encoding="utf-8")
    text = text.replace("jobs = 8\nworkers = 8", "jobs = 2\nworkers = 3\nmodel_scale = 0.01\nmin_rto_us = 50\nvalues = true")
    r = reducelab.run(text)
    s = json.loads(r.summary_json)
    assert s["status"] == "completed"
    t = s["training"]
    assert t["protocol"] == "dsa" and t["jobs"] == 2 and t["aggregators_per_switch"] == 16339
    assert t["values_checked"] and t["aggregators_left"] == 0
    jobs = s["traffic"][0]["jobs"]
    assert [j["verified"] for j in jobs] == [True, True] and all(j["jct_ps"] > 0 for j in jobs)
    assert set(r.files) >= {"training_jobs.csv", "training_memory.csv"}


# ---- the claims files' bookkeeping (read with tomllib: independent of the claims engine) ----

NEW_CAUSES = ("unstated-setting", "model-limitation", "paper-inconsistency")
DSA_DIR = REPO / "scenarios" / "dsa"


def _claims(n: int) -> list[dict]:
    return tomllib.loads((DSA_DIR / f"fig{n}.claims.toml").read_text(encoding="utf-8"))["claim"]


def _sensitivity_keys(n: int) -> list[str]:
    return [s["key"] for s in tomllib.loads((DSA_DIR / f"fig{n}.toml").read_text(encoding="utf-8")).get("sensitivity", [])]


@pytest.mark.parametrize("n", [8, 9, 10, 11, 12])
def test_causes_use_the_new_schema_and_settings_name_a_band_of_the_figure(n: int) -> None:
    for c in _claims(n):
        for r in [c, *c.get("reading", [])]:
            if "cause" in r:
                assert r["cause"] in NEW_CAUSES, (c["id"], r["cause"])
                assert r.get("evidence", "").strip(), c["id"]
            if r.get("cause", c.get("cause")) == "unstated-setting":
                assert r.get("setting", c.get("setting")) in _sensitivity_keys(n), c["id"]
            else:
                assert "setting" not in r, (c["id"], "setting only with unstated-setting")


def test_up_to_claims_are_judged_as_maxima() -> None:
    """"Up to" states a maximum: no claim quoting it may require every point."""
    up_to = [c for n in (8, 9, 10, 11) for c in _claims(n) if "up to" in c["quote"]]
    assert len(up_to) == 2
    assert all(c["pass_if"].startswith("max in") for c in up_to), [c["id"] for c in up_to]


def test_fig12_judges_no_testbed_number() -> None:
    """Fig. 12 is a testbed figure: no claim judges its training speed or its 8:1:1 / 5:1:1 ratios."""
    for c in _claims(12):
        assert c["of"] not in ("speed_epochs_per_s",), c["id"]
        assert not any(x in c["quote"] + c["paper_value"] for x in ("8:1:1", "5:1:1", "close to ATP")), c["id"]


def test_memory_arithmetic_in_the_evidence_is_right() -> None:
    """The numbers the paper-inconsistency evidence quotes follow from §VII-B's settings and the base
    scenario (5 MB, 306 B packets of 58 B header, 100 Gb/s, 2.5 us links = 10 us RTT, 8 jobs)."""
    net = tomllib.loads((DSA_DIR / "network.toml").read_text(encoding="utf-8"))
    aggregators = net["ina"]["switch_memory_bytes"] // net["network"]["mtu_bytes"]
    per_set = aggregators // 8 // 2
    window = per_set * (net["network"]["mtu_bytes"] - net["network"]["header_bytes"])
    bdp = net["topology"]["bandwidth_gbps"] * 1e9 / 8 * 4 * net["topology"]["latency_ns"] * 1e-9
    assert (aggregators, per_set, round(window / 1e3), round(bdp / 1e3)) == (16339, 1021, 253, 125)
    assert window > 2 * bdp
    # §II-B's "~1 MB per job under 100 Gbps" is the BDP of an 80 us RTT, not 10 us.
    assert math.isclose(1e6 / (100e9 / 8) * 1e6, 80)
    ev = next(c for c in _claims(8) if c["id"] == "fig8-dsa-vs-switchml-up-to")["evidence"]
    for s in ("16,339", "1,021", "253 KB", "125 KB", "80 µs", "The switch spares 5 MB memory for INA",
              "each job needs ~ 1 MB switch memory under 100 Gbps bandwidth"):
        assert s in ev, s


def test_bands_set_the_floor_and_the_memory_of_every_point() -> None:
    """The two [[sensitivity]] tables reach every point: the timeout floor of the training entry
    (base 1 ms, §VI's, stated in [params]) and the switch memory of [ina] (base 5 MB in
    network.toml)."""
    from reducelab.figures import sensitivity_scale

    for name in ("dsa-fig8", "dsa-fig9", "dsa-fig10", "dsa-fig11"):
        fig = figures.figure(name)
        sc = fig.scale("full")
        sens = {s.key: s for s in fig.sensitivity}
        assert sens["params.min_rto_us"].values == (1000, 250, 50)
        assert sens["ina.switch_memory_bytes"].values == (5000000, 1000000, 625000)
        assert sc.params["min_rto_us"] == 1000
        base = [s.to_dict() for _, s in dsa.DsaKind().points(fig, sc, fig.base(sc))]
        assert {(p["traffic"][0]["min_rto_us"], p["ina"]["switch_memory_bytes"]) for p in base} == {(1000, 5000000)}
        for key, value, (table, field) in (("params.min_rto_us", 50, ("traffic", "min_rto_us")),
                                           ("ina.switch_memory_bytes", 625000, ("ina", "switch_memory_bytes"))):
            ssc = sensitivity_scale(fig, sc, sens[key], value)
            pts = [s.to_dict() for _, s in dsa.DsaKind().points(fig, ssc, fig.base(ssc))]
            got = {(p[table][0] if table == "traffic" else p[table])[field] for p in pts}
            assert len(pts) == len(base) and got == {value}, (name, key)
        # the base values give the base scenarios byte for byte (the store runs them once)
        for key, value in (("params.min_rto_us", 1000), ("ina.switch_memory_bytes", 5000000)):
            ssc = sensitivity_scale(fig, sc, sens[key], value)
            assert [s.to_dict() for _, s in dsa.DsaKind().points(fig, ssc, fig.base(ssc))] == base


def test_claims_only_rejudges_a_sensitivity_sweep_of_the_dsa_kind(tmp_path: Path) -> None:
    """`--claims-only` on a dsa figure with its STEM_sensitivity.csv reads the sweep's tables with the
    dsa reader (they were read as Canary tables) and writes the same claims files as the run."""
    rep = figures.reproduce("dsa-fig10", tmp_path, "tiny", jobs=1, plot=False, sensitivity=True)
    assert (tmp_path / "fig10_sensitivity.csv").is_file()
    assert all(len(v.bands) == 2 for v in rep.verdicts)
    before = {f: (tmp_path / f).read_bytes() for f in ("fig10_claims.csv", "fig10_claims.md")}
    (tmp_path / "points.sqlite").unlink(missing_ok=True)  # judge from the CSVs alone, as for committed results
    for f in before:
        (tmp_path / f).unlink()
    again = figures.reevaluate("dsa-fig10", tmp_path, "tiny")
    assert [(v.id, v.verdict, v.measured) for v in again] == [(v.id, v.verdict, v.measured) for v in rep.verdicts]
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
