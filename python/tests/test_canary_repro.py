"""`reducelab reproduce canary-figN` (Canary §5 reproductions) and `reducelab model canary-memory`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from helpers import cli

from reducelab import canary_repro

#: Every claim id each figure must report (the claims table may not silently lose one).
CLAIM_IDS = {
    "canary-fig2": ["fig2-2x-ring", "fig2-canary-best", "fig2-static-below-ring"],
    "canary-fig6": ["fig6-line-rate"],
    "canary-fig7": [
        "fig7a-nocong-comparable", "fig7a-vs-1tree", "fig7a-vs-ntrees", "fig7a-canary-unaffected",
        "fig7a-4trees-enough", "fig7b-util-canary", "fig7b-util-static-4", "fig7b-util-static-1", "fig7b-util-order",
    ],
    "canary-fig8": [
        "fig8-low-canary-drop", "fig8-low-static-1-drop", "fig8-low-static-4-drop", "fig8-high-vs-1tree",
        "fig8-high-vs-4trees", "fig8-canary-best", "fig8-1tree-no-better-than-ring",
    ],
    "canary-fig9": ["fig9-small-canary-slower", "fig9-large-canary-faster", "fig9-ring-1k-256k"],
    "canary-fig10": [
        "fig10a-canary-many", "fig10a-canary-flat", "fig10a-static-drop", "fig10b-util-canary",
        "fig10b-util-static-4", "fig10b-util-static-1", "fig10b-util-order",
    ],
    "canary-fig11": ["fig11-timeout-spread", "fig11-canary-beats-static", "fig11-short-timeout-noise"],
}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def tiny_all(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Every Canary figure at the test scale (16 hosts; a few seconds in all)."""
    out = tmp_path_factory.mktemp("canary")
    proc = cli("reproduce", "canary-all", "--scale", "tiny", "--jobs", "1", "--out", out, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_registered_and_listed() -> None:
    assert canary_repro.names() == list(CLAIM_IDS)
    listed = cli("reproduce", "--list")
    assert listed.returncode == 0
    names = listed.stdout.split()
    assert "swing-fig9" in names and "canary-all" in names
    assert all(n in names for n in CLAIM_IDS)


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_every_figure_writes_files_and_every_claim(tiny_all: tuple[Path, str], name: str) -> None:
    out, stdout = tiny_all
    stem = canary_repro.FIGURES[name].stem
    d = out / name
    assert (d / f"{stem}.png").stat().st_size > 1000
    claims = read_csv(d / f"{stem}_claims.csv")
    assert list(claims[0]) == ["id", "claim", "paper_value", "rule", "measured_value", "pass"]
    assert [c["id"] for c in claims] == CLAIM_IDS[name]
    for c in claims:
        assert c["pass"] in ("pass", "fail") and c["paper_value"] and c["measured_value"] and c["rule"]
        assert f"{c['id']} " in stdout  # printed table
    md = (d / f"{stem}_claims.md").read_text(encoding="utf-8")
    assert "Scale `tiny`" in md and all(f"| {i} |" in md for i in CLAIM_IDS[name])


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_every_run_completed_and_verified(tiny_all: tuple[Path, str], name: str) -> None:
    out, _ = tiny_all
    stem = canary_repro.FIGURES[name].stem
    rows = read_csv(out / name / f"{stem}.csv")
    assert rows, name
    sc = canary_repro.get_scale("tiny")
    allocations = {int(r["allocation"]) for r in rows}
    assert allocations == set(range(1 if name == "canary-fig6" else sc.allocations))
    for r in rows:
        assert (r["verified"], r["end"]) == ("true", "completed"), r
        runtime, goodput = int(r["runtime_ps"]), float(r["goodput_gbps"])
        assert runtime > 0 and goodput > 0
        assert 0 <= float(r["network_utilization"]) <= 1.0
        if r["tenants"] in ("", "1"):  # one allreduce: goodput = bytes / runtime
            assert goodput == pytest.approx(int(r["bytes"]) * 8 / (runtime * 1e-12) / 1e9, rel=1e-3)


def test_utilisation_histograms(tiny_all: tuple[Path, str]) -> None:
    out, _ = tiny_all
    rows = read_csv(out / "canary-fig7" / "fig7_links.csv")
    groups: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["series"], r["congestion"])
        groups[key] = groups.get(key, 0.0) + float(r["fraction"])
    assert set(groups) == {(s, c) for s in canary_repro.UTIL_SERIES for c in ("False", "True")}
    assert all(v == pytest.approx(1.0, abs=1e-4) for v in groups.values())
    # The histograms' mean is the CSV's mean network-link utilisation (one allocation at tiny scale).
    runs = read_csv(out / "canary-fig7" / "fig7.csv")
    for r in rows:
        run = [x for x in runs if x["series"] == r["series"] and x["congestion"] == r["congestion"]]
        assert float(r["mean_utilization"]) == pytest.approx(float(run[0]["network_utilization"]), abs=1e-5)


def test_same_scale_gives_identical_files(tmp_path: Path) -> None:
    a = canary_repro.reproduce("canary-fig6", tmp_path / "a", scale="tiny")
    b = canary_repro.reproduce("canary-fig6", tmp_path / "b", scale="tiny")
    for name in a.files:
        if name.endswith((".csv", ".md")):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert not a.unverified and not b.unverified


def test_allocations_are_seeded_and_disjoint() -> None:
    fg, bg = canary_repro.allocation(1024, 512, 3)
    assert (fg, bg) == canary_repro.allocation(1024, 512, 3)
    assert fg != canary_repro.allocation(1024, 512, 4)[0]
    assert len(fg) == 512 and sorted(fg + bg) == list(range(1024))
    parts = canary_repro.partition(1024, 20, 0)
    assert len(parts) == 20 and all(len(p) == 51 for p in parts)
    assert len({h for p in parts for h in p}) == 20 * 51


def test_memory_model_paper_example() -> None:
    proc = cli("model", "canary-memory")
    assert proc.returncode == 0, proc.stderr
    # 12.5 GB/s x (2*5*(300+1000) + 1000) ns = 175000 B: the paper's "175KiB" is 175 kB.
    assert "175000 B" in proc.stdout and "175.0 kB" in proc.stdout and "170.9 KiB" in proc.stdout
    assert canary_repro.canary_memory_bytes() == pytest.approx(175_000)
    proc = cli("model", "canary-memory", "--bandwidth-gbps", "400", "--diameter", "3", "--timeout-ns", "0")
    assert proc.returncode == 0, proc.stderr
    assert f"{50e9 * (2 * 3 * 300 + 1000) * 1e-9:.0f} B" in proc.stdout  # 140000 B
    # The schedule model keeps working without the positional MODEL.
    assert cli("model", "--algorithm", "ring", "--topology", "torus:4x4").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("model", "nope"), "unknown model 'nope'"),
        (("model", "canary-memory", "--diameter", "0"), "--diameter"),
        (("model", "canary-memory", "--bandwidth-gbps", "-1"), "--bandwidth-gbps"),
        (("model", "canary-memory", "--algorithm", "ring"), "not --algorithm"),
        (("model", "--timeout-ns", "5", "--algorithm", "ring", "--topology", "torus:4x4"), "belongs to `reducelab model canary-memory`"),
        (("reproduce", "canary-fig99", "--scale", "tiny"), "unknown figure 'canary-fig99'"),
        (("reproduce", "canary-fig6", "--scale", "huge"), "unknown scale 'huge'"),
        (("reproduce", "canary-fig6", "--scale", "tiny", "--backend", "flow"), "--backend does not apply"),
    ],
)
def test_bad_arguments_are_clear_errors(args: tuple[str, ...], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_api_arguments() -> None:
    with pytest.raises(canary_repro.CanaryReproError, match="unknown scale"):
        canary_repro.get_scale("medium")
    with pytest.raises(canary_repro.CanaryReproError, match="unknown Canary figure"):
        canary_repro.reproduce("canary-fig1", "/nonexistent", scale="tiny")
    with pytest.raises(canary_repro.CanaryReproError, match="diameter"):
        canary_repro.canary_memory_bytes(diameter=0)
    with pytest.raises(canary_repro.CanaryReproError, match="timeout_ns"):
        canary_repro.canary_memory_bytes(timeout_ns=float("nan"))


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_claims_reevaluate_from_csv(tiny_all: tuple[Path, str], name: str, tmp_path: Path) -> None:
    """The claims depend only on the CSV: re-evaluating it rewrites identical claims files."""
    out, _ = tiny_all
    stem = canary_repro.FIGURES[name].stem
    (tmp_path / f"{stem}.csv").write_bytes((out / name / f"{stem}.csv").read_bytes())
    canary_repro.reevaluate(name, tmp_path, "tiny")
    for suffix in ("_claims.csv", "_claims.md"):
        assert (tmp_path / f"{stem}{suffix}").read_bytes() == (out / name / f"{stem}{suffix}").read_bytes()


def test_claims_ignore_runs_whose_data_did_not_verify(tmp_path, monkeypatch) -> None:
    """An unverified run is reported (and fails `reproduce`) but never counts towards a claim:
    the same figure with one run turned into an unverified outlier gives the same claims."""
    import dataclasses

    import reducelab.canary_repro as cr

    real = cr.run_points
    honest = cr.reproduce("canary-fig6", tmp_path / "a", scale="tiny")
    assert not honest.unverified

    def with_an_outlier(points, jobs=1, progress=False):
        rs = real(points, jobs, progress)
        rs[0] = dataclasses.replace(rs[0], goodput_gbps=rs[0].goodput_gbps * 50, verified=False)
        return rs

    monkeypatch.setattr(cr, "run_points", with_an_outlier)
    report = cr.reproduce("canary-fig6", tmp_path / "b", scale="tiny")
    assert len(report.unverified) == 1
    # Fig. 6 has one run per series: without its Canary run the claim cannot be judged.
    assert [(c.verdict, "unverified runs left out" in c.measured) for c in report.claims] == [("n/a", True)]
    assert honest.claims[0].verdict in ("pass", "fail")
