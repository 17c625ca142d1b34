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


def test_registered() -> None:
    assert [n for n in figures.names() if n.startswith("dsa-")] == list(CLAIM_IDS)


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
