"""`reducelab reproduce canary-figN` (Canary §5 figures: scenarios/canary/figN.toml + claims, run
through the sweep store by `reducelab.figures`) and `reducelab model canary-memory`."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers import REPO, cli
from reducelab import canary, figures
from reducelab.claims import NA

#: Every claim id each figure must report (the claims table may not silently lose one).
CLAIM_IDS = {
    "canary-fig2": ["fig2-2x-ring/about-2x", "fig2-2x-ring/at-least-2x", "fig2-canary-best", "fig2-static-below-ring"],
    "canary-fig6": ["fig6-line-rate"],
    "canary-fig7": [
        "fig7a-nocong-comparable", "fig7a-vs-1tree", "fig7a-vs-ntrees", "fig7a-canary-unaffected",
        "fig7a-4trees-enough", *(f"fig7b-util-{s}/{r}" for s in ("canary", "static-4", "static-1", "order")
                                 for r in ("all-links", "switch-links")),
    ],
    "canary-fig8": [
        "fig8-low-canary-drop", "fig8-low-static-1-drop", "fig8-low-static-4-drop", "fig8-high-vs-1tree",
        "fig8-high-vs-4trees", "fig8-canary-best", "fig8-1tree-no-better-than-ring",
    ],
    "canary-fig9": ["fig9-small-canary-slower", "fig9-large-canary-faster", "fig9-ring-1k-256k"],
    "canary-fig10": [
        "fig10a-canary-many", "fig10a-canary-flat", "fig10a-static-drop",
        *(f"fig10b-util-{s}/{r}" for s in ("canary", "static-4", "static-1", "order") for r in ("all-links", "switch-links")),
    ],
    "canary-fig11": ["fig11-timeout-spread", "fig11-canary-beats-static", "fig11-short-timeout-noise"],
}
#: The verdicts at tiny scale, as main's canary_repro.py gave them before the figures became
#: data (baseline of 2026-11-23): the TOML encoding of every claim must judge the same. Later
#: work split some claims into readings: the switch-links readings of the utilisation claims and the
#: first reading of fig2-2x-ring are the old claims (same verdicts); the all-links readings (host
#: links counted) and fig2's at-least-2x are new. The line-rate background (bg_inflight =
#: "line_rate", 16 messages of 16 KiB in flight at this scale instead of 1) changed fig2's
#: fig2-static-below-ring (pass); fig7's vs-ntrees (pass), canary-unaffected (fail), 7b
#: canary switch-links (pass), static-4 all-links and static-1 switch-links (fail); fig8's two
#: static-tree drops and high-vs-1tree (pass).
TINY_VERDICTS = {
    "canary-fig2": ["fail", "fail", "fail", "pass"],
    "canary-fig6": ["fail"],
    "canary-fig7": ["fail", "fail", "pass", "fail", "pass",
                    "fail", "pass", "fail", "fail", "fail", "fail", "fail", "fail"],
    "canary-fig8": ["fail", "pass", "pass", "pass", "fail", "fail", "fail"],
    "canary-fig9": ["pass", "fail", "fail"],
    "canary-fig10": ["fail", "pass", "fail", "fail", "fail", "fail", "fail", "fail", "fail", "fail", "fail"],
    "canary-fig11": ["fail", "fail", "pass"],
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
    assert [n for n in figures.names() if n.startswith("canary-")] == list(CLAIM_IDS)
    listed = cli("reproduce", "--list")
    assert listed.returncode == 0
    names = listed.stdout.split()
    assert "swing-fig9" in names and "canary-all" in names
    assert all(n in names for n in CLAIM_IDS)


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_every_figure_writes_files_and_every_claim(tiny_all: tuple[Path, str], name: str) -> None:
    out, stdout = tiny_all
    stem = figures.figure(name).stem
    d = out / name
    assert (d / f"{stem}.png").stat().st_size > 1000
    claims = read_csv(d / f"{stem}_claims.csv")
    assert list(claims[0]) == ["id", "claim", "paper_value", "rule", "measured_value", "pass"]
    assert [c["id"] for c in claims] == CLAIM_IDS[name]
    assert [c["pass"] for c in claims] == TINY_VERDICTS[name]
    for c in claims:
        assert c["paper_value"] and c["measured_value"] and c["rule"]
        assert f"{c['id']} " in stdout  # printed table
    md = (d / f"{stem}_claims.md").read_text(encoding="utf-8")
    assert "Scale `tiny`" in md and all(f"| {i} |" in md for i in CLAIM_IDS[name])


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_every_run_completed_and_verified(tiny_all: tuple[Path, str], name: str) -> None:
    out, _ = tiny_all
    fig = figures.figure(name)
    rows = read_csv(out / name / f"{fig.stem}.csv")
    assert rows, name
    allocations = {int(r["allocation"]) for r in rows}
    assert allocations == set(range(fig.scale("tiny").params.get("allocations", 1)))
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
    assert set(groups) == {(s, c) for s in ("static_trees:1", "static_trees:4", "canary") for c in ("False", "True")}
    assert all(v == pytest.approx(1.0, abs=1e-4) for v in groups.values())
    # Fig. 7 counts every link ([links] kind = "all": "the average of all the links utilization",
    # §5.2.1): the histograms' mean is the CSV's all-link utilisation (one allocation at tiny
    # scale), which differs from the switch-switch mean.
    runs = read_csv(out / "canary-fig7" / "fig7.csv")
    for r in rows:
        run = [x for x in runs if x["series"] == r["series"] and x["congestion"] == r["congestion"]]
        assert float(r["mean_utilization"]) == pytest.approx(float(run[0]["all_utilization"]), abs=1e-5)
    assert any(abs(float(x["all_utilization"]) - float(x["network_utilization"])) > 1e-3 for x in runs)


def test_one_store_for_every_figure(tiny_all: tuple[Path, str]) -> None:
    """canary-all runs every point through one sweep store, OUT/points.sqlite, one sweep per
    figure; running it again runs nothing."""
    out, _ = tiny_all
    with sqlite3.connect(out / "points.sqlite") as db:
        sweeps = [r[0] for r in db.execute("SELECT name FROM sweeps ORDER BY name")]
        n_points = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        files = {r[0] for r in db.execute("SELECT DISTINCT name FROM result_files")}
    assert files == {"links.csv"}  # what the figures read; not messages.csv
    assert sorted(sweeps) == sorted(f"{n}@tiny" for n in CLAIM_IDS)
    n_rows = sum(len(read_csv(out / n / f"{figures.figure(n).stem}.csv")) for n in CLAIM_IDS)
    assert n_points == n_rows  # every row is one stored point (no two Canary points coincide)
    again = figures.reproduce("canary-fig8", out / "canary-fig8", "tiny", store=out / "points.sqlite", jobs=1)
    assert again.sweep is not None and again.sweep.executed == 0 and again.sweep.cached == len(again.rows)


def test_same_scale_gives_identical_files(tmp_path: Path) -> None:
    a = figures.reproduce("canary-fig6", tmp_path / "a", scale="tiny", jobs=1)
    b = figures.reproduce("canary-fig6", tmp_path / "b", scale="tiny", jobs=2)
    for name in a.files:
        if name.endswith((".csv", ".md")):
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert not a.unverified and not b.unverified


def test_interrupted_figure_resumes_from_the_store(tmp_path: Path) -> None:
    """A figure stopped after 3 of its points resumes: the stored points are not run again and
    the files are those of an uninterrupted run."""
    full = figures.reproduce("canary-fig9", tmp_path / "full", scale="tiny", jobs=1)
    n = len(full.rows)

    class Stop(Exception):
        pass

    stored = []

    def stop_after_three(point: object) -> None:
        stored.append(point)
        if len(stored) == 3:
            raise Stop

    with pytest.raises(Stop):
        figures.reproduce("canary-fig9", tmp_path / "part", scale="tiny", jobs=1, on_point=stop_after_three)
    with sqlite3.connect(tmp_path / "part" / "points.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 3
        first_three = {r[0] for r in db.execute("SELECT key FROM results")}
    resumed = figures.reproduce("canary-fig9", tmp_path / "part", scale="tiny", jobs=1, on_point=stored.append)
    assert resumed.sweep is not None and (resumed.sweep.cached, resumed.sweep.executed) == (3, n - 3)
    assert not first_three & {p.key for p in stored[3:]}  # none of the 3 ran again
    for name in ("fig9.csv", "fig9_claims.csv", "fig9_claims.md"):
        assert (tmp_path / "part" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name


FIG_TOML = """
[figure]
name = "my-canary-fig"
paper = "Canary (seed 000)"
kind = "canary"
title = "Canary vs 4 trees at two fractions, congested"
scenario = "{network}"
claims = "myfig.claims.toml"
output = "myfig"

[params]
allocations = 1
bytes = 65536
bg_bytes = 16384
background = "random_permutation"   # as canary-fig8, whose point it must equal

[[grid]]
fraction = [0.25, 0.5]
congestion = [true]
series = ["static_trees:4", "canary"]
allocation = "$allocations"

[[panel]]
kind = "bars"
x = "fraction"
y = "goodput_gbps"
title = "congestion"

[scales.tiny]
set = {{ "topology.leaves" = 4, "topology.hosts_per_leaf" = 4, "topology.spines" = 4, "topology.radix" = 8 }}
"""
CLAIMS_TOML = """
[[claim]]
id = "faster"
source = "made up for the test"
quote = "Canary is faster than four trees."
claim = "Canary's goodput over 4 trees, per fraction"
paper_value = "> 1x"
rule = "ratio > 0 (always true: the ratio of two positive goodputs)"
metric = "ratio"
each = {{ fraction = "all" }}
subject = {{ series = "canary" }}
against = {{ series = "static_trees:4" }}
unit = "x"
pass_if = "all > 0"
mark = {{ panel = 0, x = 0.5, y = 60 }}
"""


def test_a_figure_is_two_data_files(tmp_path: Path) -> None:
    """A new figure of an existing kind: figN.toml + figN.claims.toml in any folder, run by
    file path from the CLI; its runs are the same scenarios as canary-fig8's at those points."""
    d = tmp_path / "mypaper"
    d.mkdir()
    (d / "myfig.toml").write_text(FIG_TOML.format(network=REPO / "scenarios" / "canary" / "network.toml"))
    (d / "myfig.claims.toml").write_text(CLAIMS_TOML.format())
    proc = cli("reproduce", d / "myfig.toml", "--scale", "tiny", "--jobs", "1", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tmp_path / "out" / "myfig.csv")
    assert [(r["series"], r["fraction"]) for r in rows] == [
        ("static_trees:4", "0.25"), ("canary", "0.25"), ("static_trees:4", "0.5"), ("canary", "0.5")]
    claims = read_csv(tmp_path / "out" / "myfig_claims.csv")
    assert [(c["id"], c["pass"]) for c in claims] == [("faster", "pass")]
    assert "fraction 0.25" in claims[0]["measured_value"] and "fraction 0.5" in claims[0]["measured_value"]
    assert (tmp_path / "out" / "myfig.png").stat().st_size > 1000
    assert "Canary is faster than four trees." in (tmp_path / "out" / "myfig_claims.md").read_text()
    # The same point (0.25 of the hosts, congested, allocation 0) in canary-fig8 is the same run.
    fig8 = figures.reproduce("canary-fig8", tmp_path / "fig8", "tiny", jobs=1)
    ref = [r for r in fig8.rows if (r["series"], r["fraction"], r["congestion"]) == ("canary", 0.25, True)]
    assert f"{ref[0]['goodput_gbps']:.4f}" == rows[1]["goodput_gbps"]


def test_claims_count_only_verified_runs(tmp_path: Path) -> None:
    """A stored run whose status is not "completed" is listed (and fails `reproduce`) but never
    counts towards a claim: Fig. 6 has one Canary run, so its claim becomes n/a."""
    honest = figures.reproduce("canary-fig6", tmp_path, scale="tiny", jobs=1)
    assert honest.verdicts[0].verdict in ("pass", "fail")
    with sqlite3.connect(tmp_path / "points.sqlite") as db:
        for key, text in db.execute("SELECT key, summary_json FROM results").fetchall():
            s = json.loads(text)
            if s["traffic"][0].get("protocol", s["traffic"][0].get("algorithm")) == "canary" or "canary" in s.get("name", ""):
                s["status"] = "unverified"
                db.execute("UPDATE results SET summary_json = ?, status = 'unverified' WHERE key = ?",
                           (json.dumps(s), key))
    report = figures.reproduce("canary-fig6", tmp_path, scale="tiny", jobs=1)
    assert [r["series"] for r in report.unverified] == ["canary"]
    assert report.verdicts[0].verdict == NA and "no verified runs" in report.verdicts[0].measured
    proc = cli("reproduce", "canary-fig6", "--scale", "tiny", "--out", tmp_path, "--jobs", "1")
    assert proc.returncode == 1 and "did not complete with verified results" in proc.stderr


@pytest.mark.parametrize("name", list(CLAIM_IDS))
def test_claims_reevaluate_from_the_store(tiny_all: tuple[Path, str], name: str, tmp_path: Path) -> None:
    """The claims depend only on the stored runs: re-evaluating them rewrites identical files."""
    out, _ = tiny_all
    stem = figures.figure(name).stem
    shutil.copy(out / "points.sqlite", tmp_path / "points.sqlite")
    figures.reevaluate(name, tmp_path, "tiny")
    for suffix in ("_claims.csv", "_claims.md"):
        assert (tmp_path / f"{stem}{suffix}").read_bytes() == (out / name / f"{stem}{suffix}").read_bytes()


def test_allocations_are_seeded_and_disjoint() -> None:
    fg, bg = canary.allocation(1024, 512, 3)
    assert (fg, bg) == canary.allocation(1024, 512, 3)
    assert fg != canary.allocation(1024, 512, 4)[0]
    assert len(fg) == 512 and sorted(fg + bg) == list(range(1024))
    parts = canary.partition(1024, 20, 0)
    assert len(parts) == 20 and all(len(p) == 51 for p in parts)
    assert len({h for p in parts for h in p}) == 20 * 51


def _network(**changes: object) -> dict:
    from reducelab.scenario import Scenario

    doc = Scenario.from_file(REPO / "scenarios" / "canary" / "network.toml").to_dict()
    for path, v in changes.items():
        section, key = path.split("__")
        doc[section][key] = v
    return doc


def test_line_rate_window_from_the_network() -> None:
    """``bg_inflight = "line_rate"`` (§5.2 "hosts can inject packets into the network at line
    rate"): the bandwidth-delay product of the longest background path, every switch's buffer
    full, in messages, plus one; it follows the network's parameters, not the figure."""
    doc = _network()
    # host-leaf-spine-leaf-host: 4 links of 500 ns, 3 switches of 300 ns + a 4 KiB packet and a
    # 64 KiB buffer at 100 Gb/s (5570.56 ns).
    assert canary.line_rate_delay_ns(doc) == pytest.approx(4 * 500 + 3 * (300 + (4096 + 65536) * 8 / 100))
    bdp = 12.5 * canary.line_rate_delay_ns(doc)  # 245 146 B
    assert [canary.line_rate_inflight(doc, b) for b in (16384, 65536, 262144, 1048576)] == [16, 5, 2, 2]
    assert canary.line_rate_inflight(doc, 65536) == -(-bdp // 65536) + 1
    # Faster links carry more bytes in the same delay; bigger buffers add delay; a star is one switch.
    assert canary.line_rate_inflight(_network(topology__bandwidth_gbps=400), 65536) == 7
    assert canary.line_rate_inflight(_network(network__buffer_bytes=262144), 65536) > 5
    star = _network()
    star["topology"] = {"kind": "star", "hosts": 2, "bandwidth_gbps": 100, "latency_ns": 500}
    assert canary.line_rate_delay_ns(star) == pytest.approx(2 * 500 + 300 + (4096 + 65536) * 8 / 100)
    assert canary.line_rate_inflight(doc, 64) == canary.MAX_INFLIGHT  # capped at the simulator's limit
    # Integers pass through; the default of a figure that does not set it is "line_rate".
    assert canary.resolve_bg_inflight(3, doc, 65536) == 3
    assert canary.resolve_bg_inflight("line_rate", doc, 65536) == 5


def test_line_rate_window_reaches_the_scenarios(tmp_path: Path) -> None:
    """Every congested point of canary-fig8 carries the resolved window (tiny scale: 16 KiB
    messages, 16 in flight), and STEM.csv records it; runs without background leave it empty."""
    fig = figures.figure("canary-fig8")
    sc = fig.scale("tiny")
    assert sc.params["bg_inflight"] == "line_rate"
    pts = canary.CanaryKind().points(fig, sc, fig.base(sc))
    congested = [(p, s) for p, s in pts if p["congestion"]]
    assert congested and len(congested) < len(pts)
    for p, s in congested:
        bg = [t for t in s.to_dict()["traffic"] if t["kind"] == "random_permutation"]
        assert [(t["bytes"], t["inflight"]) for t in bg] == [(16384, 16)]
        assert (p["bg_bytes"], p["bg_inflight"]) == (16384, 16)
    assert all("bg_inflight" not in p for p, _ in pts if not p["congestion"])
    report = figures.reproduce("canary-fig8", tmp_path, "tiny", jobs=1, plot=False)
    rows = read_csv(tmp_path / "fig8.csv")
    assert {(r["congestion"], r["bg_bytes"], r["bg_inflight"]) for r in rows} == {("True", "16384", "16"), ("False", "", "")}
    # The CSV reads back (claims judged again from the committed files).
    back = canary.rows_from_csv((tmp_path / "fig8.csv").read_text())
    assert {r.get("bg_inflight") for r in back} == {16, None} and len(back) == len(report.rows)


@pytest.mark.parametrize("value", ["fast", "line-rate", 0, -1, 1025, 2.5, True])
def test_bad_bg_inflight_names_the_parameter(value: object) -> None:
    with pytest.raises(ValueError, match=r"params\.bg_inflight: expected 'line_rate' or an integer 1\.\.1024"):
        canary.resolve_bg_inflight(value, _network(), 65536)


def test_line_rate_needs_a_numeric_buffer() -> None:
    with pytest.raises(ValueError, match=r"params\.bg_inflight = 'line_rate' needs a number of bytes in network\.buffer_bytes"):
        canary.line_rate_inflight(_network(network__buffer_bytes="line_rate"), 65536)
    with pytest.raises(ValueError, match=r"params\.bg_bytes"):
        canary.line_rate_inflight(_network(), 0)


def test_memory_model_paper_example() -> None:
    proc = cli("model", "canary-memory")
    assert proc.returncode == 0, proc.stderr
    # 12.5 GB/s x (2*5*(300+1000) + 1000) ns = 175000 B: the paper's "175KiB" is 175 kB.
    assert "175000 B" in proc.stdout and "175.0 kB" in proc.stdout and "170.9 KiB" in proc.stdout
    assert canary.canary_memory_bytes() == pytest.approx(175_000)
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
        (("reproduce", "nope/fig1.toml", "--scale", "tiny"), "nope/fig1.toml: no such file"),
        (("reproduce", "canary-fig6", "--scheduler", "localhost"), "--scheduler: expected a Dask scheduler address"),
    ],
)
def test_bad_arguments_are_clear_errors(args: tuple[str, ...], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("figure_edit", "claims_edit", "message"),
    [
        (("output = \"myfig\"", "output = \"myfig\"\nbogus = 1"), None, "myfig.toml: figure.bogus: unknown key"),
        (("kind = \"canary\"", "kind = \"nope\""), None, "figure.kind: unknown figure kind 'nope'"),
        (("fraction = [0.25, 0.5]", "fraction = 0.25"), None, "grid[0].fraction: expected a non-empty array"),
        (("bg_bytes = 16384", "bg_bytes = 16384\nbogus_param = 3"), None, "params.bogus_param: not a parameter of kind 'canary'"),
        (("bg_bytes = 16384", "bg_bytes = 16384\nbg_inflight = \"fast\""), None,
         "params.bg_inflight: expected 'line_rate' or an integer 1..1024 (messages per host), got 'fast'"),
        (None, ("metric = \"ratio\"", "metric = \"median\""), "claim[0].metric: unknown metric 'median'"),
        (None, ("pass_if = \"all > 0\"", "pass_if = \"mostly > 0\""), "claim[0].pass_if: expected"),
        (None, ("subject = { series = \"canary\" }", "subject = { colour = \"canary\" }"), "claim[0].subject.colour: not a column"),
        (None, ("against = { series = \"static_trees:4\" }\n", ""), "claim[0].against: metric 'ratio' needs"),
    ],
)
def test_bad_figure_files_name_the_field(tmp_path: Path, figure_edit, claims_edit, message: str) -> None:
    fig = FIG_TOML.format(network=REPO / "scenarios" / "canary" / "network.toml")
    claims = CLAIMS_TOML.format()
    if figure_edit:
        assert figure_edit[0] in fig
        fig = fig.replace(figure_edit[0], figure_edit[1])
    if claims_edit:
        assert claims_edit[0] in claims
        claims = claims.replace(claims_edit[0], claims_edit[1])
    (tmp_path / "myfig.toml").write_text(fig)
    (tmp_path / "myfig.claims.toml").write_text(claims)
    proc = cli("reproduce", tmp_path / "myfig.toml", "--scale", "tiny", "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_api_arguments() -> None:
    with pytest.raises(figures.FigureError, match="unknown scale"):
        figures.figure("canary-fig6").scale("medium")
    with pytest.raises(figures.FigureError, match="unknown figure"):
        figures.reproduce("canary-fig1", "/nonexistent", scale="tiny")
    with pytest.raises(canary.CanaryError, match="diameter"):
        canary.canary_memory_bytes(diameter=0)
    with pytest.raises(canary.CanaryError, match="timeout_ns"):
        canary.canary_memory_bytes(timeout_ns=float("nan"))


def test_figure_on_a_dask_cluster(tmp_path: Path) -> None:
    """`reproduce --scheduler` runs a figure's points on a Dask cluster: the same files as the
    local workers' (the cluster's workers run the same `run_point`)."""
    distributed = pytest.importorskip("distributed")
    local = figures.reproduce("canary-fig7", tmp_path / "local", scale="tiny", jobs=2)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        proc = cli("reproduce", "canary-fig7", "--scale", "tiny", "--out", tmp_path / "dask",
                   "--scheduler", cluster.scheduler_address)
        assert proc.returncode == 0, proc.stderr
    for name in local.files:
        if name.endswith((".csv", ".md")):
            assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
