"""`reducelab reproduce flare-fig15` (Flare §7.1 Fig. 15: scenarios/flare/fig15.toml + claims,
kind `flare_sparse` in `reducelab.flare_sparse`); docs/flare-sparse.md."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from helpers import cli
from reducelab import figures

CLAIM_IDS = [
    "fig15-dense-innet-speedup", "fig15-dense-innet-traffic", "fig15-sparcml-vs-dense-flare", "fig15-sparcml-more-traffic",
    "fig15-sparse-vs-sparcml-speed", "fig15-sparse-vs-sparcml-traffic", "fig15-sparse-vs-dense-flare-speed",
    "fig15-sparse-vs-dense-flare-traffic",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fig15")
    proc = cli("reproduce", "flare-fig15", "--scale", "tiny", "--jobs", "1", "--out", out, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr  # 1: some claims fail (reported, not an error)
    return out


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "fig15.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_listed_and_every_claim_reported(tiny: Path) -> None:
    assert "flare-fig15" in figures.names()
    assert "flare-fig15" in cli("reproduce", "--list").stdout
    with (tiny / "fig15_claims.csv").open(newline="", encoding="utf-8") as f:
        got = [r["id"] for r in csv.DictReader(f)]
    assert got == CLAIM_IDS
    for c in figures.figure("flare-fig15").claims():
        assert c.quote and c.source
    assert (tiny / "fig15.png").stat().st_size > 0


def test_every_run_completed_verified_and_traffic_is_physical(tiny: Path) -> None:
    r = rows(tiny)
    assert [(x["series"], float(x["overlap"])) for x in r] == [
        ("ring", 0.0), ("flare", 0.0), ("flare_sparse", 0.0), ("sparcml", 0.0), ("sparcml_split", 0.0),
        ("flare_sparse", 0.5), ("flare_sparse", 0.9), ("sparcml", 0.5), ("sparcml", 0.9),
        ("sparcml_split", 0.5), ("sparcml_split", 0.9),
    ]
    assert all(x["verified"] == "true" and x["end"] == "completed" for x in r)
    by = {(x["series"], float(x["overlap"])): x for x in r}
    # Dense Flare: 512 KiB = 512 packets of 1024 B + 57 B, up and down the 16 host links and
    # the 4 leaf-spine links of its tree.
    assert int(by[("flare", 0.0)]["traffic_bytes"]) == (16 + 4) * 2 * 512 * 1081
    # Overlapping indices make the sparse sums, and so their traffic, smaller.
    for s in ("flare_sparse", "sparcml", "sparcml_split"):
        t = [int(by[(s, q)]["traffic_bytes"]) for q in (0.0, 0.5, 0.9)]
        assert t[0] > t[1] > t[2], (s, t)
