"""`reducelab reproduce dsa-figN` (DSA §VII figures: scenarios/dsa/figN.toml + claims, training
jobs on a shared switch memory run through the sweep store) and a training scenario through the
one door (`reducelab.run`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from helpers import REPO

import reducelab
from reducelab import dsa, figures
from reducelab.claims import NA

#: Every claim id each figure must report.
CLAIM_IDS = {
    "dsa-fig8": ["fig8-dsa-vs-switchml-up-to", "fig8-dsa-vs-atp-up-to", "fig8-dsa-best-vs-switchml", "fig8-dsa-best-vs-atp",
                 "fig8-gain-grows-with-jobs-atp", "fig8-gain-grows-with-jobs-switchml"],
    "dsa-fig9": ["fig9-dsa-best-vs-switchml", "fig9-dsa-best-vs-atp", "fig9-gain-over-atp-grows-with-workers"],
    "dsa-fig10": ["fig10-A-vs-switchml", "fig10-A-vs-atp", "fig10-B-vs-switchml", "fig10-B-vs-atp"],
    "dsa-fig11": [*(f"fig11-{m}-{s}-vs-atp" for m in ("A", "AB") for s in ("dsa", "dsa-always", "dsa-coin")),
                  "fig11-dsa-beats-dsa-always", "fig11-dsa-beats-dsa-coin"],
}


#: Fig. 12 (loss), run at small scale (it has no tiny scale): every claim id, in order.
FIG12_CLAIM_IDS = ["fig12a-dsa-close-to-atp", "fig12b-dsa-close-to-atp", "fig12a-dsa-resilient", "fig12b-dsa-resilient",
                   "fig12a-loss-types-8-1-1", "fig12b-loss-types-5-1-1", "fig12a-loss-types-independent-of-rate",
                   "fig12b-loss-types-independent-of-rate", "fig12-type-ii-equals-type-iii",
                   "fig12-ps-loss-hits-preemption-tasks"]


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
