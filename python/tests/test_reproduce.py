"""`reducelab reproduce` (paper-figure reproductions) and `_core.run_collective`."""

from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import pytest

from helpers import REPO, cli

from reducelab import _core, reproduce

SPEC = REPO / "scenarios" / "swing" / "fig9.toml"
CLAIMS = REPO / "scenarios" / "swing" / "fig9.claims.toml"
SERIES = ("swing", "recursive-doubling", "ring", "bucket", "hamiltonian-rings")
FIG9_HEADER = "bandwidth_gbps,algorithm,variant,size_bytes,runtime_ps,goodput_gbps,backend,verified"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One end-to-end CLI run at the test scale (2 bandwidths x 7 sizes; a few seconds)."""
    out = tmp_path_factory.mktemp("fig9")
    proc = cli("reproduce", "swing-fig9", "--scale", "tiny", "--out", out, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_csv_has_every_series_at_every_point(tiny_run: tuple[Path, str]) -> None:
    out, _ = tiny_run
    spec = reproduce.load_spec(SPEC, "tiny")
    assert (out / "fig9.csv").read_text().splitlines()[0] == FIG9_HEADER
    rows = read_csv(out / "fig9.csv")
    keys = {(float(r["bandwidth_gbps"]), r["algorithm"], int(r["size_bytes"])) for r in rows}
    assert keys == {(bw, s, n) for bw in spec.bandwidths for s in SERIES for n in spec.sizes}
    assert len(rows) == len(keys)
    for r in rows:
        size, runtime, goodput = int(r["size_bytes"]), int(r["runtime_ps"]), float(r["goodput_gbps"])
        assert runtime > 0
        assert goodput == pytest.approx(size * 8 / (runtime * 1e-12) / 1e9, rel=1e-8)
        # auto backend: packet (verified) below 8 MiB, flow (not verifiable) from 8 MiB.
        if size < 8 << 20:
            assert (r["backend"], r["verified"]) == ("packet", "true"), r
        else:
            assert (r["backend"], r["verified"]) == ("flow", "n/a"), r
    swing = {r["variant"] for r in rows if r["algorithm"] == "swing"}
    assert swing == {"swing-latency", "swing-bandwidth"}  # best of both, per size
    # Each row's variant is the fastest of its series at that point.
    runs = read_csv(out / "fig9_runs.csv")
    for r in rows:
        variants = [s.variants for s in spec.series if s.name == r["algorithm"]][0]
        cands = [
            int(x["runtime_ps"]) for x in runs
            if x["variant"] in variants and x["bandwidth_gbps"] == r["bandwidth_gbps"]
            and x["size_bytes"] == r["size_bytes"]
        ]
        assert len(cands) == len(variants) and int(r["runtime_ps"]) == min(cands)


def test_claims_files_list_every_claim(tiny_run: tuple[Path, str]) -> None:
    out, stdout = tiny_run
    claims = tomllib.loads(CLAIMS.read_text(encoding="utf-8"))["claim"]
    ids = [c["id"] for c in claims]
    assert {"a", "b", "c", "d", "e"} <= set(ids)
    rows = read_csv(out / "fig9_claims.csv")
    assert list(rows[0]) == ["id", "source", "claim", "paper_value", "measured_value", "pass"]
    assert [r["id"] for r in rows] == ids
    for r, c in zip(rows, claims):
        assert r["paper_value"] == c["paper_value"]
        assert r["measured_value"]
        assert r["pass"] in ("pass", "fail", "n/a")
    md = (out / "fig9_claims.md").read_text()
    assert "| id | source | claim | paper | measured | result |" in md
    for c in claims:
        assert f"| {c['id']} | " in md and c["quote"] in md
    # The CLI prints the claims table.
    assert stdout.splitlines()[0].split() == ["id", "result", "paper", "measured"]
    assert all(any(line.startswith(f"{i} ") for line in stdout.splitlines()) for i in ids)


def test_plot_and_gain_data(tiny_run: tuple[Path, str]) -> None:
    out, _ = tiny_run
    png = (out / "fig9.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    gains = read_csv(out / "fig9_gain.csv")
    for g in gains:
        others = {s: float(g[f"gain_over_{s}"]) for s in SERIES[1:]}
        assert g["best_other"] in others
        assert float(g["gain"]) == pytest.approx(min(others.values()), abs=2e-6)
    check = read_csv(out / "fig9_backend_check.csv")
    assert {r["size_bytes"] for r in check} == {str(8 << 20)}
    assert all(abs(float(r["flow_vs_packet"])) < 0.10 for r in check)


def test_same_scale_gives_identical_bytes(tiny_run: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = tiny_run
    report = reproduce.reproduce("swing-fig9", tmp_path, scale="tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in out.iterdir())
    for p in out.iterdir():
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name
    assert not report.unverified


def test_unknown_figure_exits_2() -> None:
    proc = cli("reproduce", "swing-fig99")
    assert proc.returncode == 2
    assert "unknown figure 'swing-fig99'" in proc.stderr and "swing-fig9" in proc.stderr
    assert proc.stdout == ""


def test_unknown_scale_and_list() -> None:
    proc = cli("reproduce", "swing-fig9", "--scale", "huge")
    assert proc.returncode == 2 and "unknown scale 'huge'" in proc.stderr
    for s in ("small", "full"):
        assert s in proc.stderr
    listed = cli("reproduce", "--list")
    assert listed.returncode == 0 and "swing-fig9" in listed.stdout.split()


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    text = SPEC.read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('variants = ["ring"]', 'variants = ["rring"]'), encoding="utf-8")
    with pytest.raises(reproduce.ReproductionError, match=r"series\[2\]\.variants: unknown algorithm 'rring'"):
        reproduce.load_spec(bad)
    bad.write_text(text.replace("hop_ns = 300", "hop_ns = 300\nbogus = 1"), encoding="utf-8")
    with pytest.raises(reproduce.ReproductionError, match=r"network\.bogus: unknown key"):
        reproduce.load_spec(bad)


def test_run_collective_backends() -> None:
    r = _core.run_collective("torus:4x4", "swing-bandwidth", 1 << 16, bandwidth_gbps=800)
    assert (r["backend"], r["verified"], r["ranks"]) == ("packet", True, 16)
    assert r["goodput_gbps"] == pytest.approx((1 << 16) * 8 / (r["runtime_ps"] * 1e-3))
    assert r["buffer_bytes"] == 256 << 10
    assert _core.AUTO_FLOW_MIN_BYTES == 8 << 20
    f = _core.run_collective("torus:4x4", "bucket", 8 << 20)
    assert (f["backend"], f["verified"]) == ("flow", None)
    p = _core.run_collective("torus:4x4", "bucket", 8 << 20, backend="packet")
    assert p["verified"] is True
    assert f["runtime_ps"] == pytest.approx(p["runtime_ps"], rel=0.05)
    sweep = _core.run_collective_sizes("torus:4x4", "ring", [32, 1024], backend="packet")
    assert [s["size_bytes"] for s in sweep] == [32, 1024]
    with pytest.raises(ValueError, match="unknown backend 'fluid'"):
        _core.run_collective("torus:4x4", "ring", 64, backend="fluid")
    with pytest.raises(ValueError, match="unknown algorithm"):
        _core.run_collective("torus:4x4", "nope", 64)


def test_help_has_examples() -> None:
    proc = cli("reproduce", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: reducelab reproduce")
    assert "examples:" in proc.stdout and "reducelab reproduce swing-fig9 --scale full" in proc.stdout
