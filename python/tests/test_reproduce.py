"""`reducelab reproduce` (paper-figure reproductions) and `_core.run_collective`."""

from __future__ import annotations

import csv
import json
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from helpers import REPO, cli
from reducelab import ScenarioError, _core, claims, figures, sizesweep
from reducelab.figures import FigureError

SPEC = REPO / "scenarios" / "swing" / "fig9.toml"


def load_spec(path: Path, scale: str = "full") -> sizesweep.Spec:
    """A size-sweep figure file at one scale (`Figure.scale` of its kind)."""
    return figures.load(path).scale(scale)


def load_claims(path: Path) -> list[claims.Claim]:
    return figures.load(path).claims()


def spec_path(name: str) -> Path:
    return figures.registry()[name]


def swing_names() -> list[str]:
    return [n for n in figures.names() if n.startswith("swing-")]

CLAIMS = REPO / "scenarios" / "swing" / "fig9.claims.toml"
SERIES = ("swing", "recursive-doubling", "ring", "bucket", "hamiltonian-rings")
FIG9_HEADER = "topology,bandwidth_gbps,algorithm,variant,size_bytes,runtime_ps,goodput_gbps,backend,verified"


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


#: Fig. 9 variants whose plans on the 8x8 torus never put two flows on a link at once.
CONTENTION_FREE = {"ring", "bucket", "hamiltonian-rings"}


def _auto_probe(alg: str) -> dict:
    text = (figures.scenarios_dir() / "swing" / "network.toml").read_text(encoding="utf-8")
    text = text.replace('algorithm = "swing-bandwidth"', f'algorithm = "{alg}"').replace("bytes = 1048576", "bytes = 32")
    assert 'shape = "torus:8x8"' in text
    return json.loads(_core.run(text, probe=True)["summary_json"])


def test_auto_names_contention_free_plans() -> None:
    """The simulator's `auto` runs contention-free plans at flow level at every size and says
    why in summary.json; others stay at packet level below flow_min_bytes."""
    for alg in CONTENTION_FREE:
        s = _auto_probe(alg)
        assert s["backend"] == "flow" and "contention-free" in s["backend_reason"], s
    for alg in ("swing-bandwidth", "recursive-doubling-latency"):
        s = _auto_probe(alg)
        assert s["backend"] == "packet" and "below flow_min_bytes" in s["backend_reason"], s
    with pytest.raises(ScenarioError, match="unknown algorithm"):
        _auto_probe("nope")


def test_csv_has_every_series_at_every_point(tiny_run: tuple[Path, str]) -> None:
    out, _ = tiny_run
    spec = load_spec(SPEC, "tiny")
    assert (out / "fig9.csv").read_text().splitlines()[0] == FIG9_HEADER
    rows = read_csv(out / "fig9.csv")
    assert {r["topology"] for r in rows} == {"torus:8x8"}
    keys = {(float(r["bandwidth_gbps"]), r["algorithm"], int(r["size_bytes"])) for r in rows}
    assert keys == {(bw, s, n) for bw in spec.bandwidths for s in SERIES for n in spec.sizes}
    assert len(rows) == len(keys)
    for r in rows:
        size, runtime, goodput = int(r["size_bytes"]), int(r["runtime_ps"]), float(r["goodput_gbps"])
        assert runtime > 0
        assert goodput == pytest.approx(size * 8 / (runtime * 1e-12) / 1e9, rel=1e-8)
        # auto backend: packet (verified) below 8 MiB, flow (not verifiable) from 8 MiB,
        # except contention-free plans (ring family, bucket), at flow level at every size.
        if r["variant"] in CONTENTION_FREE:
            assert (r["backend"], r["verified"]) == ("flow", "n/a"), r
        elif size < 8 << 20:
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
    assert "| id | claim | paper | rule | measured | result |" in md
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
    from reducelab.store import ResultStore

    report = figures.reproduce("swing-fig9", tmp_path, scale="tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in out.iterdir())
    for p in out.iterdir():
        if p.name == figures.STORE_FILE:  # the run store also records when each run finished
            with ResultStore(p) as a, ResultStore(tmp_path / p.name) as b:
                assert list(a.dump()) == list(b.dump())  # its results are the same bytes
            continue
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name
    assert not report.unverified


def test_unknown_figure_exits_2() -> None:
    proc = cli("reproduce", "swing-fig99")
    assert proc.returncode == 2
    assert "unknown figure 'swing-fig99'" in proc.stderr and "swing-fig9" in proc.stderr and "all" in proc.stderr
    assert proc.stdout == ""


def test_unknown_scale_and_list() -> None:
    proc = cli("reproduce", "swing-fig9", "--scale", "huge")
    assert proc.returncode == 2 and "unknown scale 'huge'" in proc.stderr
    for s in ("small", "full"):
        assert s in proc.stderr
    listed = cli("reproduce", "--list")
    assert listed.returncode == 0 and "swing-fig9" in listed.stdout.split()


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    text = SPEC.read_text(encoding="utf-8").replace('scenario = "network.toml"', f'scenario = "{SPEC.parent / "network.toml"}"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('variants = ["ring"]', 'variants = ["rring"]'), encoding="utf-8")
    with pytest.raises(FigureError, match=r"series\[2\]\.variants: unknown algorithm 'rring'"):
        load_spec(bad)
    bad.write_text(text.replace("switch_latency_ns = 300", "switch_latency_ns = 300\nbogus = 1"), encoding="utf-8")
    with pytest.raises(FigureError, match=r"network\.bogus: unknown key"):
        load_spec(bad)


def test_run_collective_backends() -> None:
    r = _core.run_collective("torus:8x8", "swing-bandwidth", 1 << 16, bandwidth_gbps=800)
    assert (r["backend"], r["verified"], r["ranks"]) == ("packet", True, 64)
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


# ---------------------------------------------------------------------------------------------
# Every figure: specs and claims at every scale, `reproduce all`, metrics on synthetic data.

FIGURES = swing_names()


@pytest.mark.parametrize("name", FIGURES)
def test_every_spec_and_claims_file_loads_at_every_scale(name: str) -> None:
    path = spec_path(name)
    full = load_spec(path, "full")
    assert set(full.scales) >= {"full", "small", "tiny"}
    for scale in full.scales:
        spec = load_spec(path, scale)
        cs = load_claims(path)
        assert cs and all(c.quote and c.source and c.paper_value for c in cs)
        assert spec.sizes[0] == 32 and spec.sizes[-1] in (512 << 20, 2 << 30)
        # Every scale network is the paper's or stands in for one of them.
        assert {c.paper for c in spec.configs} <= set(full.paper_topologies)
        if scale == "full":
            assert not any(c.stand_in for c in spec.configs)
            assert spec.size_factor == 2 and spec.bandwidths[-1] >= 400
    assert full.latency_ns == 100 and full.switch_latency_ns == 300
    if name != "swing-fig9":
        assert full.bandwidths == (400.0,)


def test_paper_networks_of_the_full_scale() -> None:
    nets = {n: load_spec(spec_path(n), "full").topologies for n in FIGURES}
    assert nets["swing-fig7"] == ("torus:64x64",)
    assert nets["swing-fig8"] == ("torus:8x8", "torus:16x16", "torus:32x32", "torus:64x64", "torus:128x128")
    assert nets["swing-fig11"] == ("torus:32x32", "torus:64x16", "torus:128x8", "torus:256x4")
    assert nets["swing-fig12"] == ("torus:8x8", "torus:8x8x8", "torus:8x8x8x8")
    assert nets["swing-fig13"][0] == "hammingmesh:2x2,32x32"
    assert nets["swing-fig14"][0] == "hammingmesh:4x4,16x16"
    assert nets["swing-fig15"][0] == "hyperx:64x64"
    fig7 = load_spec(spec_path("swing-fig7"), "full")
    mirrored = fig7.series_named("mirrored-recursive-doubling")
    assert mirrored is not None and not mirrored.baseline
    ring = fig7.series_named("ring")
    assert ring is not None and ring.variants == ("hamiltonian-rings",)


def _write_spec(tmp_path: Path, spec_extra: str = "", claims: str = "", series_extra: str = "") -> Path:
    (tmp_path / "s.toml").write_text(f"""
[figure]
name = "t"
kind = "goodput_vs_size"
paper = "p"
title = "t"
output = "t"
scenario = "{REPO / 'scenarios' / 'swing' / 'network.toml'}"
claims = "s.claims.toml"
[network]
latency_ns = 100
switch_latency_ns = 300
[grid]
topologies = ["torus:4x4", "torus:8x8"]
bandwidths_gbps = [400]
size_min_bytes = 32
size_max_bytes = 512
size_factor = 2
{spec_extra}
[[series]]
name = "swing"
variants = ["swing-latency", "swing-bandwidth"]
subject = true
[[series]]
name = "bucket"
variants = ["bucket"]
{series_extra}
[[series]]
name = "mirrored"
variants = ["recursive-doubling-mirrored"]
baseline = false
""", encoding="utf-8")
    (tmp_path / "s.claims.toml").write_text(claims, encoding="utf-8")
    return tmp_path / "s.toml"


CLAIM = """
[[claim]]
id = "x"
claim = "c"
paper_value = "p"
"""


@pytest.mark.parametrize("spec_extra, series_extra, match", [
    ('[scales.small]\ntopologies = ["torus:2x2"]\nstand_ins = { "torus:4x4" = "torus:8x8" }',
     "", r"scales\.small\.stand_ins: 'torus:4x4' is not a topology of this scale"),
    ('[scales.small]\nstand_ins = { "torus:4x4" = "torus:9x9" }', "", r"scales\.small\.stand_ins: 'torus:4x4' must stand in for a topology of \[grid\]"),
    ("", 'skip = { "torus:8x8" = 3 }', r"series\[1\]\.skip: entries must be TOPOLOGY"),
    ("", 'backend = "fluid"', r"series\[1\]\.backend: unknown backend 'fluid'"),
    ('reference_topologies = ["torus:8x8"]', "", r"grid\.reference_topologies: must not repeat"),
])
def test_new_spec_fields_errors_name_the_field(tmp_path: Path, spec_extra: str, series_extra: str, match: str) -> None:
    path = _write_spec(tmp_path, spec_extra=spec_extra, series_extra=series_extra)
    with pytest.raises(FigureError, match=match):
        load_spec(path, "small" if "scales.small" in spec_extra else "full")


def test_grid_topology_errors(tmp_path: Path) -> None:
    path = _write_spec(tmp_path)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('topologies = ["torus:4x4", "torus:8x8"]', 'topologies = ["tor:4x4"]'), encoding="utf-8")
    with pytest.raises(FigureError, match=r"grid\.topologies: 'tor:4x4' is not a topology spec"):
        load_spec(path)


@pytest.mark.parametrize("body, match", [
    ('metric = "max_goodput"\nagainst = "bucket"\npass_if = "all > 0"', r"claim\[0\]\.against: metric 'max_goodput' measures the subject alone"),
    ('metric = "min_gain"\nagainst = "swing"\npass_if = "all > 0"', r"claim\[0\]\.against: must be 'best', another series"),
    ('metric = "min_gain"\nsubject = "nope"\npass_if = "all > 0"', r"claim\[0\]\.subject: must be a series"),
    ('metric = "min_gain"\ntopologies = ["torus:16x16"]\npass_if = "all > 0"', r"claim\[0\]\.topologies: 'torus:16x16' is not a topology of the figure"),
    ('metric = "share_of_peak_at_size"\npass_if = "all > 0"', r"claim\[0\]\.size_bytes: required by metric"),
    ('metric = "max_gain"\nsize_bytes = 64\npass_if = "all > 0"', r"claim\[0\]\.size_bytes: only for the \*_at_size metrics"),
    ('metric = "max_gain"\npass_if = "mostly > 0"', r"claim\[0\]\.pass_if: expected"),
    ('metric = "max_gain"\npass_if = "all > 0"\nnetwork_dependent = 1', r"claim\[0\]\.network_dependent: expected true or false"),
    ('metric = "max_gain"\npass_if = "all > 0"\nmark = { size_bytes = 64 }', r"claim\[0\]\.mark\.size_bytes: give exactly one of share_of_peak, goodput_gbps, gain"),
    ('metric = "max_gain"\npass_if = "all > 0"\nmark = { size_bytes = 64, gain = 1, bogus = 2 }', r"claim\[0\]\.mark\.bogus: unknown key"),
])
def test_claims_errors_name_the_field(tmp_path: Path, body: str, match: str) -> None:
    path = _write_spec(tmp_path, claims=CLAIM + body + "\n")
    with pytest.raises(FigureError, match=match):
        load_claims(path)


def _synthetic(spec: sizesweep.Spec, goodput: dict[tuple[str, str, int], float]) -> sizesweep.Results:
    """Results from invented goodputs (topology, variant, size) -> Gb/s; 0 = not given (slow)."""
    runs = []
    for cfg in spec.configs:
        for v in spec.variants:
            for size in spec.sizes:
                g = goodput.get((cfg.topology, v, size), 0.001)
                runs.append(sizesweep.Run(cfg.bandwidth, v, size, round(size * 8 / g * 1000), g, "flow", None, None, cfg.topology))
    return sizesweep.Results(spec, runs)


def _eval(tmp_path: Path, body: str, goodput: dict[tuple[str, str, int], float], scale: str = "full",
          spec_extra: str = "") -> claims.Verdict:
    path = _write_spec(tmp_path, spec_extra=spec_extra, claims=CLAIM + body + "\n")
    spec = load_spec(path, scale)
    (claim,) = load_claims(path)
    return claims.evaluate(claim, _synthetic(spec, goodput))


SIZES = (32, 64, 128, 256, 512)


def _table(swing: dict[str, Sequence[float]], bucket: dict[str, Sequence[float]]) -> dict[tuple[str, str, int], float]:
    out = {}
    for topo, vals in swing.items():
        out.update({(topo, "swing-bandwidth", s): v for s, v in zip(SIZES, vals)})
    for topo, vals in bucket.items():
        out.update({(topo, "bucket", s): v for s, v in zip(SIZES, vals)})
    return out


# swing / bucket goodput: on 4x4 the gain is +100%, +100%, +50%, -10%, -20% (crossover 256 B, max
# at 32 B); on 8x8 +300% at 128 B (max), negative from 512 B.
DATA = _table(
    {"torus:4x4": [2, 4, 6, 9, 16], "torus:8x8": [1, 2, 8, 11, 9]},
    {"torus:4x4": [1, 2, 4, 10, 20], "torus:8x8": [1, 1, 2, 10, 10]},
)


@pytest.mark.parametrize("body, verdict, measured", [
    ('metric = "max_gain_size"\npass_if = "all in [32B, 128B]"', "pass", "torus:4x4: 32 B (gain +100.0% vs bucket); torus:8x8: 128 B (gain +300.0% vs bucket)"),
    ('metric = "max_gain_size"\npass_if = "all == 128B"', "fail", None),
    ('metric = "crossover_size"\nagainst = "bucket"\npass_if = "all in [256B, 512B]"', "pass", "torus:4x4: 256 B (gain -10.0%); torus:8x8: 512 B (gain -10.0%)"),
    ('metric = "crossover_size"\nagainst = "bucket"\nmax_size_bytes = 256\npass_if = "all <= 256B"', "fail", "torus:8x8: none"),
    ('metric = "goodput_at_size"\nsize_bytes = 512\nsubject = "bucket"\npass_if = "increasing"', "fail", "not strictly increasing"),
    ('metric = "goodput_at_size"\nsize_bytes = 512\nsubject = "bucket"\npass_if = "decreasing"', "pass", "torus:4x4: 20.0 Gb/s"),
    ('metric = "share_of_peak_at_size"\nsize_bytes = 512\npass_if = "all in [1%, 2.5%]"', "pass", "torus:4x4: 2.0% of peak (16.0 of 800 Gb/s)"),
    ('metric = "share_of_peak_at_size"\nsize_bytes = 512\ntopologies = ["torus:8x8"]\npass_if = "all >= 2%"', "fail", "torus:8x8: 1.1% of peak"),
    ('metric = "max_goodput"\ntopologies = ["torus:8x8", "torus:4x4"]\npass_if = "first < last"', "pass", "torus:8x8: 11.0 Gb/s @256 B"),
    ('metric = "max_share_of_peak"\npass_if = "spread <= 40%"', "fail", "spread 45.5%"),
    ('metric = "max_share_of_peak"\npass_if = "spread <= 50%"', "pass", "spread 45.5%"),
    ('metric = "runtime_at_size"\nsize_bytes = 32\npass_if = "increasing"', "pass", "torus:4x4: 0.13 µs"),
    ('metric = "min_gain"\nsubject = "bucket"\nagainst = "best"\nmin_size_bytes = 512\npass_if = "all > 0"', "pass", "torus:4x4: +25.0% @512 B vs swing"),
    ('metric = "min_gain"\nagainst = "recursive-doubling-mirrored"\npass_if = "all > 100"', "pass", None),
    ('metric = "median_gain"\npass_if = "first > last"', "pass", "torus:4x4: +50.0%; torus:8x8: +10.0% (torus:4x4 > torus:8x8)"),
    ('metric = "median_gain"\npass_if = "first < last"', "fail", None),
])
def test_metrics_on_synthetic_data(tmp_path: Path, body: str, verdict: str, measured: str | None) -> None:
    r = _eval(tmp_path, body, DATA)
    assert r.verdict == verdict, r.measured
    if measured is not None:
        assert measured in r.measured, r.measured


def test_mirrored_series_is_not_a_baseline(tmp_path: Path) -> None:
    data = dict(DATA)
    data.update({("torus:4x4", "recursive-doubling-mirrored", s): 1000.0 for s in SIZES})
    r = _eval(tmp_path, 'metric = "min_gain"\npass_if = "all < 0"', data)
    assert "vs bucket" in r.measured and "mirrored" not in r.measured.split(";")[0]


def test_network_dependent_claims_are_na_on_stand_ins(tmp_path: Path) -> None:
    extra = '[scales.small]\ntopologies = ["torus:2x2", "torus:8x8"]\nstand_ins = { "torus:2x2" = "torus:4x4" }'
    data = {(t.replace("4x4", "2x2"), v, s): g for (t, v, s), g in DATA.items()}
    dep = _eval(tmp_path, 'metric = "max_gain"\nnetwork_dependent = true\ntopologies = ["torus:4x4"]\npass_if = "all > 0"',
                data, "small", extra)
    assert dep.verdict == "n/a" and "torus:2x2 stands in for torus:4x4" in dep.measured
    ok = _eval(tmp_path, 'metric = "max_gain"\ntopologies = ["torus:4x4"]\npass_if = "all > 0"', data, "small", extra)
    assert ok.verdict == "pass" and "torus:2x2 (for torus:4x4): +100.0%" in ok.measured
    missing = _eval(tmp_path, 'metric = "max_gain"\ntopologies = ["torus:4x4"]\npass_if = "all > 0"', DATA, "small",
                    '[scales.small]\ntopologies = ["torus:8x8"]')
    assert missing.verdict == "n/a" and "not in this scale: torus:4x4" in missing.measured


def test_skipped_and_unavailable_series(tmp_path: Path) -> None:
    extra = 'skip = { "torus:8x8" = "too big" }\n[[series]]\nname = "rd"\nvariants = ["recursive-doubling-latency"]'
    path = _write_spec(tmp_path, series_extra=extra, claims=CLAIM + 'metric = "min_gain"\nagainst = "bucket"\npass_if = "all > 0"\n')
    spec = load_spec(path)
    res = _synthetic(spec, DATA)
    assert res.absent == {(spec.configs[1], "bucket"): "not run: too big"}
    (claim,) = load_claims(path)
    r = claims.evaluate(claim, res)
    assert "not run: bucket on torus:8x8" in r.measured and r.measured.startswith("torus:4x4: -20.0%")
    assert {g.best_other for g in res.gains if g.config.topology == "torus:8x8"} == {"rd"}
    # Without any other baseline series on a network the figure has no gain there: an error.
    path = _write_spec(tmp_path, series_extra='skip = { "torus:8x8" = "too big" }', claims="")
    with pytest.raises(FigureError, match="no baseline series besides 'swing' runs on torus:8x8"):
        _synthetic(load_spec(path), DATA)


@pytest.fixture(scope="module")
def all_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`reproduce all --scale tiny` through the CLI (every figure at 64 nodes or less; ~15 s)."""
    out = tmp_path_factory.mktemp("all")
    proc = cli("reproduce", "all", "--scale", "tiny", "--out", out, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for name in FIGURES:
        assert any(line.startswith(name + " ") for line in proc.stdout.splitlines()), proc.stdout
    return out


def test_all_writes_an_html_report_with_every_claim(all_tiny: Path) -> None:
    page = (all_tiny / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    for name in FIGURES:
        spec = load_spec(spec_path(name), "tiny")
        stem = spec.output
        assert f'<img src="{name}/{stem}.png"' in page
        assert (all_tiny / name / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert f"reducelab reproduce {name} --scale tiny --out {all_tiny / name}" in page
        rows = read_csv(all_tiny / name / f"{stem}_claims.csv")
        for c in load_claims(spec_path(name)):
            assert f'id="{name}-{c.id}"' in page
            assert [r for r in rows if r["id"] == c.id][0]["paper_value"] == c.paper_value
    assert "reducelab reproduce all --scale tiny" in page
    assert 'class="pass"' in page and 'class="fail"' in page and 'class="na"' in page
    # The 3D/4D tori have no Hamiltonian rings; the reason is reported.
    assert "ring on torus:4x4x4 (for torus:8x8x8): not available: hamiltonian-rings" in page


def test_all_is_deterministic(all_tiny: Path, tmp_path: Path) -> None:
    figs = ["swing-fig7", "swing-fig12", "swing-fig14"]
    figures.reproduce_all(tmp_path, "tiny", names_=figs)
    for name in figs:
        for p in (all_tiny / name).iterdir():
            assert (tmp_path / name / p.name).read_bytes() == p.read_bytes(), (name, p.name)


def test_all_covers_the_canary_figures(all_tiny: Path) -> None:
    """`reproduce all` runs the Canary figures too, into DIR/NAME/, and reports them in
    index.html with their claims."""
    page = (all_tiny / "index.html").read_text(encoding="utf-8")
    assert page.rstrip().endswith("</body></html>") and page.count("</body>") == 1
    for name in figures.names():
        stem = figures.figure(name).stem
        assert (all_tiny / name / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert f'<img src="{name}/{stem}.png"' in page
        # Every figure also charts its claims against the paper's values, on the page too.
        assert (all_tiny / name / f"{stem}_claims.png").read_bytes().startswith(b"\x89PNG")
        assert f'<img src="{name}/{stem}_claims.png"' in page
        assert f"reducelab reproduce {name} --scale tiny --out {all_tiny / name}" in page
        rows = read_csv(all_tiny / name / f"{stem}_claims.csv")
        assert rows
        for r in rows:
            assert f'id="{name}-{r["id"]}"' in page
    # A failing claim shows its recorded cause; a claim read two ways says why.
    shown = 0
    for name in figures.names():
        causes = {c.id: c.cause for c in figures.figure(name).claims() if c.cause}
        for r in read_csv(all_tiny / name / f"{figures.figure(name).stem}_claims.csv"):
            if r["pass"] == "fail" and r["id"] in causes:
                assert f"<b>why it fails</b> ({causes[r['id']]}): " in page, (name, r["id"])
                shown += 1
    assert shown > 0
    assert page.count("read two ways: ") >= 4  # Swing 7f, 11h, 11l, 13f, 14e; Canary 2, 7b, 10b (per reading)


def test_all_has_one_claims_table(all_tiny: Path) -> None:
    """`reproduce all` writes one table of every claim of every paper: DIR/claims.csv and the
    "Every claim" section of index.html, each row as in its figure's claims file; and one run
    store, DIR/points.sqlite, holding the points of every figure."""
    import sqlite3

    every = read_csv(all_tiny / "claims.csv")
    want = []
    for name in figures.names():
        stem = figures.figure(name).stem
        want += [(name, r["id"], r["measured_value"], r["pass"]) for r in read_csv(all_tiny / name / f"{stem}_claims.csv")]
    assert [(r["figure"], r["id"], r["measured_value"], r["pass"]) for r in every] == want
    page = (all_tiny / "index.html").read_text(encoding="utf-8")
    assert '<section id="all-claims">' in page and f"{len(want)} claims of every paper" in page
    with sqlite3.connect(all_tiny / "points.sqlite") as db:
        sweeps = {r[0] for r in db.execute("SELECT name FROM sweeps")}
    assert sweeps == {f"{n}@tiny" for n in figures.names()}


def test_list_and_unknown_figure_name_every_figure() -> None:
    listed = cli("reproduce", "--list").stdout.split()
    assert listed == [*figures.names(), "canary-all", "all"]
    proc = cli("reproduce", "fig99")
    assert proc.returncode == 2
    assert all(name in proc.stderr for name in listed)


def test_claims_judge_only_runs_whose_data_verified(tmp_path, monkeypatch) -> None:
    """A run whose data did not verify is reported but never counts towards a claim: the claims
    are those of the same figure where that run's variant could not run on its network."""
    real_row = sizesweep.SizeSweepKind.row
    real_rows = figures._rows
    first: list = []

    def key(r):
        return (r["topology"], r["bandwidth_gbps"], r["algorithm"])

    def spoiling(self, params, stored, links=False, link_kind="network"):
        r = real_row(self, params, stored, links, link_kind)
        if not first and r["verified"] is True and not r["check"]:
            first.append((*key(r), r["size_bytes"]))
        if first and (*key(r), r["size_bytes"]) == first[0] and not r["check"]:
            r.update(runtime_ps=1, goodput_gbps=1e9, verified=False, mismatch="spoiled by the test")
        return r

    monkeypatch.setattr(sizesweep.SizeSweepKind, "row", spoiling)
    spoiled = figures.reproduce("swing-fig9", tmp_path / "b", scale="tiny", jobs=1)
    assert len(spoiled.unverified) == 1
    monkeypatch.setattr(sizesweep.SizeSweepKind, "row", real_row)

    def without_variant(*args, **kw):  # every run of that variant on that network left out
        return [r for r in real_rows(*args, **kw) if r["check"] or key(r) != first[0][:3]]

    monkeypatch.setattr(figures, "_rows", without_variant)
    without = figures.reproduce("swing-fig9", tmp_path / "a", scale="tiny", jobs=1)
    assert [(c.id, c.measured, c.verdict) for c in spoiled.verdicts] == [(c.id, c.measured, c.verdict) for c in without.verdicts]


def test_runs_come_back_in_point_order_whichever_finishes_first(tmp_path) -> None:
    """`FigureReport.rows` are in the order of the figure's points, not of completion (two workers)."""
    orders = []
    for i in range(3):
        report = figures.reproduce("swing-fig9", tmp_path / str(i), scale="tiny", jobs=2)
        orders.append([(r["topology"], r["bandwidth_gbps"], r["algorithm"], r["size_bytes"], r["run_backend"])
                       for r in report.rows if not r["check"]])  # the backend check's points come last
    assert orders[0] == orders[1] == orders[2]
    sizes = [k[3] for k in orders[0] if k[:3] == orders[0][0][:3]]
    assert sizes == sorted(sizes), "within one (network, variant) the sizes come in the spec's order"


def test_points_run_through_the_store_once(tmp_path, monkeypatch) -> None:
    """Every point is a scenario in the run store (OUT/points.sqlite): a second reproduction
    into the same store runs nothing (the simulator is not called) and writes the same files."""
    import sqlite3

    import reducelab.sweep as sw

    a = figures.reproduce("swing-fig9", tmp_path / "a", scale="tiny", jobs=2)
    with sqlite3.connect(tmp_path / "a" / "points.sqlite") as con:
        n = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        kinds = {json.loads(r[0])["traffic"][0]["kind"] for r in con.execute("SELECT scenario_json FROM results")}
    assert n == len(a.rows) and kinds == {"collective"}
    before = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir() if p.suffix in (".csv", ".md")}

    def no_run(toml_text: str) -> dict:
        raise AssertionError("a stored point ran again")

    monkeypatch.setattr(sw, "run_point", no_run)
    b = figures.reproduce("swing-fig9", tmp_path / "a", scale="tiny", jobs=1)
    assert [r["runtime_ps"] for r in b.rows] == [r["runtime_ps"] for r in a.rows]
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir() if p.suffix in (".csv", ".md")} == before
    with pytest.raises(AssertionError, match="ran again"):  # the patch is live: a new point would call it
        figures.reproduce("swing-fig9", tmp_path / "c", scale="tiny", jobs=1)


def test_a_swing_figure_is_two_data_files(tmp_path: Path) -> None:
    """A new size-sweep figure is figN.toml + figN.claims.toml under scenarios/<paper>/: found by
    scanning (no registry to edit), listed and run by the CLI, its CSV the same runs as the
    figure it was copied from."""
    import os

    d = tmp_path / "scenarios" / "mypaper"
    d.mkdir(parents=True)
    text = SPEC.read_text(encoding="utf-8")
    text = text.replace('name = "swing-fig9"', 'name = "my-fig3"').replace('output = "fig9"', 'output = "fig3"')
    text = text.replace('claims = "fig9.claims.toml"', 'claims = "fig3.claims.toml"')
    text = text.replace('scenario = "network.toml"', f'scenario = "{SPEC.parent / "network.toml"}"')
    (d / "fig3.toml").write_text(text, encoding="utf-8")
    (d / "fig3.claims.toml").write_text((SPEC.parent / "fig9.claims.toml").read_text(encoding="utf-8"), encoding="utf-8")
    env = {**os.environ, "REDUCELAB_SCENARIOS": str(tmp_path / "scenarios")}
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reducelab", *args], capture_output=True, text=True, env=env,
                              timeout=600, stdin=subprocess.DEVNULL)

    assert run("reproduce", "--list").stdout.split() == ["my-fig3", "canary-all", "all"]
    proc = run("reproduce", "my-fig3", "--scale", "tiny", "--jobs", "1", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    ref = figures.reproduce("swing-fig9", tmp_path / "ref", scale="tiny", jobs=1)
    assert (tmp_path / "out" / "fig3.csv").read_bytes() == (tmp_path / "ref" / "fig9.csv").read_bytes()
    assert len(read_csv(tmp_path / "out" / "fig3_claims.csv")) == len(ref.verdicts)
    # The same two files from any folder, by path.
    proc = cli("reproduce", d / "fig3.toml", "--scale", "tiny", "--jobs", "1", "--out", tmp_path / "bypath")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "bypath" / "fig3.csv").read_bytes() == (tmp_path / "ref" / "fig9.csv").read_bytes()
