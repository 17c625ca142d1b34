"""The claims engine's fields: readings of a claim the paper words two ways, causes of
failures, sensitivity bands, judging claims again without running (`--claims-only`), and the
Canary kind's all-link utilisation, background switch and window parameter."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from helpers import cli
from reducelab import claims, figures
from reducelab.canary import CanaryKind, link_utilisations, rows_from_csv
from reducelab.claims import ClaimError, RunTable, Verdict

REPO = Path(__file__).resolve().parents[2]
COLUMNS = ("series", "x", "g", "u")


def table_claims(text: str) -> list[claims.Claim]:
    return claims.read_claims("t.toml", tomllib.loads(text), "table", COLUMNS)


TWO_READINGS = """
[[claim]]
id = "c"
source = "§1"
quote = "the paper's whole sentence"
claim = "a beats b"
paper_value = "a > b"
rule = "r"
metric = "mean"
of = "g"
pass_if = "all > 10"
contradiction = "the paper says 10 here and 20 there"

  [[claim.reading]]
  name = "ten"
  quote = "more than 10"
  pass_if = "all > 10"
  paper_value = "> 10"

  [[claim.reading]]
  name = "twenty"
  source = "§2"
  quote = "more than 20"
  pass_if = "all > 20"
  cause = "paper-inconsistency"
  evidence = "measured 15"
"""


def test_a_claim_with_two_readings_is_checked_once_per_reading() -> None:
    cs = table_claims(TWO_READINGS)
    assert [c.id for c in cs] == ["c/ten", "c/twenty"]
    assert [c.pass_if for c in cs] == ["all > 10", "all > 20"]
    assert [c.quote for c in cs] == ["more than 10", "more than 20"]
    assert [c.source for c in cs] == ["§1", "§2"]  # a reading's source replaces the claim's
    assert [c.reading for c in cs] == ["ten", "twenty"]
    assert all(c.contradiction == "the paper says 10 here and 20 there" for c in cs)
    assert (cs[0].cause, cs[1].cause, cs[1].evidence) == ("", "paper-inconsistency", "measured 15")
    table = RunTable([{"series": "a", "g": 15.0}], {})
    verdicts = [claims.evaluate(c, table) for c in cs]
    assert [v.verdict for v in verdicts] == ["pass", "fail"]
    md = "\n".join(claims.extra_md(verdicts))
    assert "c/ten PASS, c/twenty FAIL: the paper says 10 here and 20 there" in md
    assert "**c/twenty** (paper-inconsistency): measured 15" in md
    assert "c/ten** (" not in md  # a passing reading's cause is not listed (it has none here anyway)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('contradiction = "the paper says 10 here and 20 there"\n', ""), "claim[0].contradiction: required"),
    (lambda t: t[: t.index("  [[claim.reading]]\n  name = \"twenty\"")], "claim[0].reading: expected two or more"),
    (lambda t: t.replace('  quote = "more than 20"\n', ""), "claim[0].reading[1].quote: required"),
    (lambda t: t.replace('name = "twenty"', 'name = "ten"'), "claim[0].reading: names must be unique"),
    (lambda t: t.replace('name = "twenty"', 'name = "a b"'), "claim[0].reading[1].name: letters, digits"),
    (lambda t: t.replace('  pass_if = "all > 10"\n  paper_value = "> 10"\n', ""), "claim[0].reading[0]: a reading must change how"),
    (lambda t: t.replace('  pass_if = "all > 10"\n', '  note = "same rule"\n'), "claim[0].reading[0]: a reading must change how"),
    (lambda t: t.replace('cause = "paper-inconsistency"', 'cause = "bad luck"'), "claim[1].cause: expected one of"),
    (lambda t: t.replace('  cause = "paper-inconsistency"\n', ""), "claim[1].evidence: evidence without a `cause`"),
    (lambda t: t.replace('  evidence = "measured 15"\n', ""), "claim[1].evidence: required with cause 'paper-inconsistency'"),
    (lambda t: t.replace('cause = "paper-inconsistency"', 'cause = "unstated-setting"'), "claim[1].setting: required with cause 'unstated-setting'"),
    (lambda t: t.replace('cause = "paper-inconsistency"', 'cause = "model-limitation"\n  setting = "params.window"'), "claim[1].setting: only with cause 'unstated-setting'"),
    (lambda t: t.replace('  name = "ten"\n', '  name = "ten"\n  id = "x"\n'), "claim[0].reading[0].id: set on the claim"),
])
def test_bad_readings_and_causes_are_named(edit, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ClaimError, match=re.escape(message)):
        table_claims(edit(TWO_READINGS))


def verdict(cid: str, verdict_: str, values: tuple[float, ...]) -> Verdict:
    return Verdict(cid, "", "", "", "", "", f"{values}", verdict_, values)


def test_a_failing_reading_needs_a_cause_and_an_unstated_setting_needs_a_passing_band() -> None:
    base = table_claims(TWO_READINGS.replace('cause = "paper-inconsistency"', 'cause = "unstated-setting"\n  setting = "params.window"'))
    ten, twenty = (claims.evaluate(c, RunTable([{"series": "a", "x": 1, "g": 15.0, "u": 0.0}], {})) for c in base)
    assert (ten.verdict, twenty.verdict) == ("pass", "fail") and twenty.setting == "params.window"
    # No band over the named setting: the cause is not shown to hold.
    assert claims.cause_problems([ten, twenty]) == [
        "c/twenty: cause unstated-setting 'params.window' but no band over it (run --sensitivity)"]
    passing = claims.with_bands([twenty], "params.window", (1, 2), [[verdict("c/twenty", "fail", (15.0,))],
                                                                     [verdict("c/twenty", "pass", (25.0,))]])
    assert claims.cause_problems(passing) == []
    never = claims.with_bands([twenty], "params.window", (1, 2), [[verdict("c/twenty", "fail", (15.0,))],
                                                                   [verdict("c/twenty", "fail", (16.0,))]])
    assert claims.cause_problems(never)[0].startswith("c/twenty: cause unstated-setting 'params.window' but it passes at no value")
    # A band over another setting does not count.
    other = claims.with_bands([twenty], "params.other", (1,), [[verdict("c/twenty", "pass", (25.0,))]])
    assert "no band over it" in claims.cause_problems(other)[0]
    # A failing reading without a cause is named; passing ones and other causes need no band.
    bare = table_claims(TWO_READINGS.replace('  cause = "paper-inconsistency"\n  evidence = "measured 15"\n', ""))
    judged = [claims.evaluate(c, RunTable([{"series": "a", "x": 1, "g": 15.0, "u": 0.0}], {})) for c in bare]
    assert claims.cause_problems(judged) == ["c/twenty: fails and has no cause"]
    inconsistent = table_claims(TWO_READINGS)
    assert claims.cause_problems([claims.evaluate(c, RunTable([{"series": "a", "x": 1, "g": 15.0, "u": 0.0}], {}))
                                  for c in inconsistent]) == []


def test_named_sensitivity_settings_set_several_fields() -> None:
    raw = [{"key": "endpoint", "values": ["none", "per-step"], "source": "unstated",
            "settings": {"none": {}, "per-step": {"endpoint.send_latency_ns": 371, "endpoint.recv_latency_ns": 560}}}]
    (sens,) = claims.read_sensitivity("f.toml", raw)
    assert sens.assignments("none") == {}
    assert sens.assignments("per-step") == {"endpoint.recv_latency_ns": 560, "endpoint.send_latency_ns": 371}
    plain = claims.read_sensitivity("f.toml", [{"key": "params.window", "values": [1, 2], "source": "x"}])[0]
    assert plain.assignments(2) == {"params.window": 2}
    for settings, message in [
        ({"none": {}}, "sensitivity[0].settings: must name exactly the values"),
        ({"none": {}, "per-step": {"network.x": 1}}, "'network.x': expected a scenario path under 'endpoint'"),
        ({"none": {}, "per-step": {"endpoint.x": [1]}}, "settings.per-step.endpoint.x: expected a number or string"),
        ({"none": 3, "per-step": {}}, "settings.none: expected a table of scenario paths"),
    ]:
        with pytest.raises(ClaimError, match=re.escape(message)):
            claims.read_sensitivity("f.toml", [{**raw[0], "settings": settings}])


def test_bands_span_every_value_and_say_where_the_claim_passes() -> None:
    default = [verdict("a", "fail", (1.0,)), verdict("b", "pass", (5.0,)), verdict("c", "n/a", ())]
    swept = [
        [verdict("a", "fail", (1.0, 0.5)), verdict("b", "pass", (5.0,)), verdict("c", "n/a", ())],
        [verdict("a", "pass", (3.0,)), verdict("b", "pass", (7.0,)), verdict("c", "n/a", ())],
    ]
    out = claims.with_bands(default, "params.window", (256, 4096), swept)
    a, b, c = (v.bands[0] for v in out)
    assert (a.lo, a.hi, a.passes, a.verdicts) == (0.5, 3.0, "some", ("fail", "pass"))
    assert (b.lo, b.hi, b.passes) == (5.0, 7.0, "all")
    assert (c.lo, c.hi, c.passes) == (None, None, "n/a")
    assert [v.verdict for v in out] == ["fail", "pass", "n/a"]  # the figure's own verdicts are kept
    assert a.text() == "params.window in {256, 4096}: 0.5..3; passes at some (256: fail, 4096: pass)"
    csv_text = claims.claims_csv(out)
    assert csv_text.splitlines()[0].endswith(",band,band_passes")
    assert "params.window: none" not in csv_text and "params.window: some" in csv_text
    # No sweep run: the claims CSV keeps its columns.
    assert claims.claims_csv(default).splitlines()[0] == "id,claim,paper_value,rule,measured_value,pass"


@pytest.mark.parametrize(("raw", "message"), [
    ([{"key": "params.window", "values": [], "source": "unstated"}], "sensitivity[0].values: expected a non-empty"),
    ([{"key": "params.window", "values": [1, 1], "source": "unstated"}], "sensitivity[0].values: has duplicates"),
    ([{"key": "params.window", "values": [1]}], "sensitivity[0].source: required"),
    ([{"key": "not a path!", "values": [1], "source": "x"}], "sensitivity[0].key: expected a scenario path"),
    ([{"key": "a.b", "values": [1], "source": "x", "typo": 1}], "sensitivity[0].typo: unknown key"),
    ([{"key": "a.b", "values": [1], "source": "x"}, {"key": "a.b", "values": [2], "source": "y"}], "one table per key"),
])
def test_bad_sensitivity_tables_are_named(raw, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ClaimError, match=re.escape(message)):
        claims.read_sensitivity("f.toml", raw)


def test_every_shipped_claim_quotes_the_paper_and_every_failure_cause_is_known() -> None:
    for name in figures.names():
        for c in figures.figure(name).claims():
            assert c.quote and c.source, (name, c.id)
            assert not c.cause or c.cause in claims.CAUSES


def test_the_named_misencodings_are_read_both_ways() -> None:
    f = {c.id: c for c in figures.figure("swing-fig7").claims()}
    assert (f["f/81%-as-stated"].pass_if, f["f/1-over-Xi"].pass_if) == ("all <= 81%", "all <= 84%")
    c11 = {c.id: c for c in figures.figure("swing-fig11").claims()}
    shapes = ("torus:64x16", "torus:128x8", "torus:256x4")
    assert c11["b"].terms.topologies == shapes and c11["f"].terms.topologies == shapes  # not the 32x32 reference
    assert c11["l/ring-1.6x"].pass_if == "all in [-47.5%, -27.5%]"
    assert c11["h/from-128MiB"].contradiction == c11["h/above-512MiB"].contradiction != ""


# ---------------------------------------------------------------------------------------------
# Judging again without running.


@pytest.mark.parametrize("name", ["swing-fig9", "canary-fig2"])
def test_claims_only_judges_the_written_results_like_the_run(tmp_path: Path, name: str) -> None:
    out = tmp_path / "r"
    assert cli("reproduce", name, "--scale", "tiny", "--jobs", "1", "--out", out, "-q", timeout=300).returncode == 0
    stem = "fig9" if name == "swing-fig9" else "fig2"
    first = (out / f"{stem}_claims.csv").read_bytes()
    md = (out / f"{stem}_claims.md").read_bytes()
    (out / "points.sqlite").unlink()  # judged from the CSVs alone
    (out / f"{stem}_claims.csv").write_text("stale")
    proc = cli("reproduce", name, "--scale", "tiny", "--claims-only", "--out", out, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (out / f"{stem}_claims.csv").read_bytes() == first
    assert (out / f"{stem}_claims.md").read_bytes() == md
    assert "rewrote the claims files" in proc.stdout


def test_claims_only_without_results_fails_naming_the_file(tmp_path: Path) -> None:
    proc = cli("reproduce", "swing-fig9", "--scale", "tiny", "--claims-only", "--out", tmp_path)
    assert proc.returncode == 2 and "neither points.sqlite nor fig9_runs.csv" in proc.stderr
    proc = cli("reproduce", "canary-fig2", "--scale", "tiny", "--claims-only", "--out", tmp_path)
    assert proc.returncode == 2 and "neither points.sqlite nor fig2.csv" in proc.stderr
    proc = cli("reproduce", "canary-fig2", "--claims-only", "--sensitivity", "--out", tmp_path)
    assert proc.returncode == 2 and "cannot run the --sensitivity sweeps" in proc.stderr
    proc = cli("reproduce", "all", "--claims-only", "--out", tmp_path)
    assert proc.returncode == 2 and "no results of canary-fig2, " in proc.stderr and "swing-fig7" in proc.stderr


def test_claims_only_all_judges_the_figures_it_finds(tmp_path: Path) -> None:
    """`all --claims-only` on a directory holding some figures (docs/results/swing-full holds no
    Canary one) judges those and names the others."""
    shutil.copytree(REPO / "docs" / "results" / "swing-full" / "swing-fig15", tmp_path / "swing-fig15")
    proc = cli("reproduce", "all", "--scale", "full", "--claims-only", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The verdicts are the committed ones (same results, same claims files), whatever they are.
    rows = claims_rows(REPO / "docs" / "results" / "swing-full" / "swing-fig15")
    n = {v: sum(r["pass"] == v for r in rows) for v in ("pass", "fail", "n/a")}
    assert f"swing-fig15   {n['pass']} pass  {n['fail']} fail  {n['n/a']} n/a" in proc.stdout and "skipped" in proc.stdout
    assert (tmp_path / "claims.csv").read_text(encoding="utf-8").count("\nswing-fig15,") == len(rows) == 5


def test_committed_full_scale_results_are_judged_again(tmp_path: Path) -> None:
    """The committed Canary Fig. 7 table, rewritten as the results were before the
    readings and the all-link utilisation (older series names, no all-link column), is read back: the switch-links readings judge as the
    committed claims do, the all-links ones are n/a."""
    src = REPO / "docs" / "results" / "canary-full" / "canary-fig7"
    shutil.copytree(src, tmp_path / "f7")
    table = list(csv.DictReader(io.StringIO((src / "fig7.csv").read_text(encoding="utf-8"))))
    assert "all_utilization" in table[0]
    cols = [c for c in table[0] if c != "all_utilization"]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in table:
        w.writerow({**r, "series": r["series"].replace("static_trees:", "static-")})
    (tmp_path / "f7" / "fig7.csv").write_text(out.getvalue(), encoding="utf-8")
    rows = rows_from_csv(out.getvalue())
    assert {r["series"] for r in rows} >= {"static_trees:1", "static_trees:4", "canary"}
    assert all(r["all_util"] is None for r in rows)
    vs = {v.id: v for v in figures.reevaluate("canary-fig7", tmp_path / "f7", "full")}
    committed = {r["id"]: r["pass"] for r in claims_rows(src)}
    switch = [k for k in committed if k.endswith("/switch-links")]
    assert len(switch) == 4
    for k in switch:
        assert vs[k].verdict == committed[k], k
    for k in (k.replace("/switch-links", "/all-links") for k in switch):
        assert vs[k].verdict == "n/a" and "have no all_util" in vs[k].measured, k


# ---------------------------------------------------------------------------------------------
# The Canary kind.

LINKS_CSV = "from_node,from_port,to_node,to_port,utilization\n" + "\n".join([
    "0,0,10,0,0.5",    # host 0 -> switch 10
    "10,0,0,0,0.1",    # switch 10 -> host 0
    "1,0,10,1,0.3",    # host 1 -> switch 10
    "10,1,1,0,0.1",
    "10,2,11,0,0.8",   # switch 10 -> switch 11
    "11,0,10,2,0.4",
    "11,1,12,0,0.0",   # switch 11 -> host 12
    "12,0,11,1,0.0",
]) + "\n"


def summary(**links: float) -> dict:  # type: ignore[type-arg]
    return {"topology": {"hosts": 3}, "links": links}


def test_network_and_all_link_utilisation() -> None:
    net, every = link_utilisations(summary(network_mean_utilization=0.6), LINKS_CSV)
    assert net == [0.8, 0.4] and len(every) == 8
    # The simulator's all-link mean (traffic branch) is checked when present.
    link_utilisations(summary(network_mean_utilization=0.6, all_mean_utilization=2.2 / 8), LINKS_CSV)
    with pytest.raises(AssertionError, match="all_mean_utilization"):
        link_utilisations(summary(network_mean_utilization=0.6, all_mean_utilization=0.5), LINKS_CSV)
    with pytest.raises(AssertionError, match="network_mean_utilization"):
        link_utilisations(summary(network_mean_utilization=0.5), LINKS_CSV)
    # links.csv's `kind` column (traffic branch) decides which links are network links.
    kinded = "from_node,from_port,to_node,to_port,utilization,kind\n0,0,1,0,0.9,host\n1,0,2,0,0.2,network\n"
    net, every = link_utilisations(summary(network_mean_utilization=0.2), kinded)
    assert (net, every) == ([0.2], [0.9, 0.2])
    with pytest.raises(AssertionError, match="unknown link kind 'pcb'"):
        link_utilisations(summary(network_mean_utilization=0.2), kinded.replace("host", "pcb"))
    assert link_utilisations(summary(network_mean_utilization=0.0), None) == ([], [])


class FakeStored:
    def __init__(self, s: dict, files: dict) -> None:  # type: ignore[type-arg]
        self.summary_json, self.files = json.dumps(s), files


def test_row_reports_both_utilisations_over_the_allreduce_span() -> None:
    s = {**summary(network_mean_utilization=0.6), "status": "completed", "sim_time_ps": 2000,
         "traffic": [{"kind": "ina_allreduce", "goodput_gbps": 50.0, "runtime_ps": 1000, "verified": 2, "hosts": 2}]}
    params = {"series": "canary", "congestion": False, "_tenants": 1}
    row = CanaryKind().row(params, FakeStored(s, {"links.csv": LINKS_CSV}), True, "all")  # type: ignore[arg-type]
    assert row["net_util"] == pytest.approx(1.2)  # 0.6 over half the simulated time
    assert row["all_util"] == pytest.approx(2.2 / 8 * 2)
    assert sorted(row["link_utils"]) == sorted(u * 2 for u in (0.5, 0.1, 0.3, 0.1, 0.8, 0.4, 0.0, 0.0))
    row = CanaryKind().row(params, FakeStored(s, {"links.csv": LINKS_CSV}), True, "network")  # type: ignore[arg-type]
    assert row["link_utils"] == [1.6, 0.8]


def canary_points(**params: object) -> list:  # type: ignore[type-arg]
    fig = figures.figure("canary-fig8")
    sc = fig.scale("tiny")
    sc.params.update(params)
    return figures.points(fig, sc)


def test_window_and_background_parameters() -> None:
    base = canary_points()
    assert all("window" not in t for _, s in base for t in s.to_dict()["traffic"])  # today's scenarios
    windowed = canary_points(window=256)
    for (_, s), (_, s0) in zip(windowed, base):
        for t, t0 in zip(s.to_dict()["traffic"], s0.to_dict()["traffic"]):
            if t.get("protocol") == "static_trees":
                assert t["window"] == 256
            else:
                assert t == t0
    perm = canary_points(background="random_permutation")
    kinds = {t["kind"] for _, s in perm for t in s.to_dict()["traffic"]}
    assert "random_permutation" in kinds and "random_uniform" not in kinds
    with pytest.raises(figures.FigureError, match="params.background: expected one of random_uniform, random_permutation"):
        canary_points(background="uniform")
    with pytest.raises(figures.FigureError, match="params.window: expected a positive integer"):
        canary_points(window=0)


def test_sensitivity_scale_sets_a_parameter_or_a_scenario_field() -> None:
    fig = figures.figure("canary-fig8")
    sc = fig.scale("tiny")
    (sens,) = [s for s in fig.sensitivity if s.key == "params.window"]
    assert 1024 in sens.values and {s.key for s in fig.sensitivity} == {"params.window", "params.bg_inflight", "params.bg_bytes"}
    s2 = figures.sensitivity_scale(fig, sc, sens, 256)
    assert s2.params["window"] == 256 and "window" not in sc.params
    other = claims.Sensitivity("endpoint.send_overhead_ns", (0.0, 400.0), "unstated")
    s3 = figures.sensitivity_scale(fig, sc, other, 400.0)
    assert s3.set["endpoint.send_overhead_ns"] == 400.0 and s3.params == sc.params
    bad = claims.Sensitivity("params.windw", (1,), "typo")
    with pytest.raises(figures.FigureError, match="'params.windw': not a parameter of kind 'canary'"):
        figures.sensitivity_scale(fig, sc, bad, 1)


# ---------------------------------------------------------------------------------------------
# The generated part of the reports.


def test_report_is_generated_from_the_claims_csvs_and_files(tmp_path: Path) -> None:
    from reducelab import report

    results = tmp_path / "swing-full"
    shutil.copytree(REPO / "docs" / "results" / "swing-full", results)
    md = tmp_path / "swing.md"
    md.write_text("# hand-written head\n\nkept\n", encoding="utf-8")
    text = report.write("swing", results, md)
    assert text.startswith("# hand-written head\n\nkept\n\n" + report.BEGIN)
    assert report.write("swing", results, md) == text  # idempotent: the generated part is replaced
    rows = [r for d in sorted(results.glob("swing-fig*")) for r in claims_rows(d)]
    p = sum(r["pass"] == "pass" for r in rows)
    assert f"| **all** | {len(rows)} | **{p}** |" in text
    fails = [r["id"] for r in rows if r["pass"] == "fail"]
    why = text.split("## Why each failing reading fails", 1)[1].split("\n## ", 1)[0]
    assert sum(line.startswith("| swing-fig") for line in why.splitlines()) == len(fails)
    heads = re.findall(r"^### (\S+) \((\d+)\)$", why, flags=re.M)  # one section per cause, with its count
    assert {h for h, _ in heads} <= set(claims.CAUSES) and sum(int(n) for _, n in heads) == len(fails)
    assert "| `topology.bandwidth_gbps` | 400 | paper (§5) |" in text  # read from network.toml
    assert "| `topology.board_latency_ns` |" in text and "swing-fig13, swing-fig14 |" in text  # its sweeps
    # A failure without a recorded cause is flagged, not hidden.
    f15 = results / "swing-fig15" / "fig15_claims.csv"
    with f15.open(newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    next(r for r in table if r["pass"] == "pass")["pass"] = "fail"
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(table[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(table)
    f15.write_text(out.getvalue(), encoding="utf-8")
    text = report.write("swing", results, md)
    assert "### no cause recorded (1)" in text and "1 failing reading(s) have no cause recorded" in text


def claims_rows(d: Path) -> list[dict[str, str]]:
    (f,) = d.glob("*_claims.csv")
    with f.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_parameters_need_a_known_source(tmp_path: Path) -> None:
    from reducelab import report

    root = tmp_path / "scenarios"
    shutil.copytree(REPO / "scenarios" / "canary", root / "canary")
    params = tmp_path / "canary-parameters.toml"
    params.write_text('[[parameter]]\nkey = "topology.latency_ns"\nsource = "folklore"\nquote = "x"\n', encoding="utf-8")
    with pytest.raises(report.ReportError, match=r"parameter\[0\]\.source: expected one of 'paper'"):
        report.parameters_md("canary", root, params)
    params.write_text('[[parameter]]\nkey = "topology.nope"\nsource = "paper"\nquote = "x"\n', encoding="utf-8")
    with pytest.raises(report.ReportError, match="'topology.nope' is not in"):
        report.parameters_md("canary", root, params)
    params.write_text('[[parameter]]\nkey = "topology.latency_ns"\nsource = "paper"\nquote = "x"\n', encoding="utf-8")
    assert report.parameters_md("canary", root, params)[2].startswith("| `topology.latency_ns` | 500 | paper |")


def test_every_shipped_parameter_file_reads() -> None:
    from reducelab import report

    for paper in ("swing", "canary"):
        lines = report.parameters_md(paper)
        assert len(lines) > 10 and all(line.count(" | ") >= 4 for line in lines[2:])


@pytest.mark.parametrize("name", figures.names())
def test_committed_claims_match_and_every_failure_has_a_supported_cause(tmp_path: Path, name: str) -> None:
    """The committed full-scale claims tables are what the claims files say of the committed runs
    (re-judge them with --claims-only after editing a claims file), and every reading that fails
    there has a cause the results support: an ``unstated-setting`` cause has a committed band over
    its setting that passes somewhere."""
    top = "swing-full" if name.startswith("swing-") else "flare-full" if name.startswith("flare-") else "dsa-full" if name.startswith("dsa-") else "canary-full"
    src = REPO / "docs" / "results" / top / name
    shutil.copytree(src, tmp_path / name)
    judged = figures.reevaluate(name, tmp_path / name, "full")
    for f in sorted(src.glob("*_claims.*")):
        assert (tmp_path / name / f.name).read_bytes() == f.read_bytes(), f.name
    assert claims.cause_problems(judged) == []


def test_sensitivity_run_adds_bands_and_keeps_the_default_verdicts(tmp_path: Path) -> None:
    """swing-fig13 at tiny scale: --sensitivity sweeps the board links' latency on the HammingMesh
    points only; the claims keep their default verdicts and gain a band each."""
    plain = cli("reproduce", "swing-fig13", "--scale", "tiny", "--jobs", "1", "--out", tmp_path / "a", "-q", timeout=300)
    assert plain.returncode == 0, plain.stderr
    proc = cli("reproduce", "swing-fig13", "--scale", "tiny", "--jobs", "1", "--sensitivity", "--out", tmp_path / "b",
               timeout=300)
    assert proc.returncode == 0, proc.stderr
    import csv

    with (tmp_path / "a" / "fig13_claims.csv").open(encoding="utf-8") as f:
        a = list(csv.DictReader(f))
    with (tmp_path / "b" / "fig13_claims.csv").open(encoding="utf-8") as f:
        b = list(csv.DictReader(f))
    assert [(r["id"], r["pass"], r["measured_value"]) for r in a] == [(r["id"], r["pass"], r["measured_value"]) for r in b]
    assert "band" not in a[0] and all(r["band"].startswith("topology.board_latency_ns in {10, 50, 100}: ") for r in b)
    e = next(r for r in b if r["id"] == "e")  # 32 B Swing runtime, Hx2Mesh vs torus: board latency moves it
    lo, hi = e["band"].split(": ", 1)[1].split(";")[0].split("..")
    assert lo != hi
    assert "[topology.board_latency_ns: " in proc.stdout
    # The data files of the figure's own run are the same with and without the sweep; the plot
    # gains the band.
    for f in ("fig13.csv", "fig13_runs.csv", "fig13_gain.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a" / "fig13.png").read_bytes() != (tmp_path / "b" / "fig13.png").read_bytes()
    # The sweep's runs are written beside them: --claims-only on the files alone (no store, as
    # committed) gives the claims their bands again, byte for byte.
    assert not (tmp_path / "a" / "fig13_sensitivity.csv").exists()
    c = tmp_path / "c"
    shutil.copytree(tmp_path / "b", c, ignore=shutil.ignore_patterns("points.sqlite*"))
    for f in ("fig13_claims.csv", "fig13_claims.md"):
        (c / f).unlink()
    proc = cli("reproduce", "swing-fig13", "--scale", "tiny", "--claims-only", "--out", c, "-q")
    assert proc.returncode == 0, proc.stderr
    for f in ("fig13_claims.csv", "fig13_claims.md"):
        assert (c / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    # Without the sweep's file the claims have no band; a value missing from it leaves the band
    # over the values it holds, which the band names.
    sens = (c / "fig13_sensitivity.csv").read_text(encoding="utf-8")
    (c / "fig13_sensitivity.csv").unlink()
    assert cli("reproduce", "swing-fig13", "--scale", "tiny", "--claims-only", "--out", c, "-q").returncode == 0
    assert (c / "fig13_claims.csv").read_bytes() == (tmp_path / "a" / "fig13_claims.csv").read_bytes()
    kept = [ln for ln in sens.splitlines(keepends=True) if not ln.startswith("topology.board_latency_ns,50,")]
    assert len(kept) < len(sens.splitlines())
    (c / "fig13_sensitivity.csv").write_text("".join(kept), encoding="utf-8")
    proc = cli("reproduce", "swing-fig13", "--scale", "tiny", "--claims-only", "--out", c, "-q")
    assert proc.returncode == 0, proc.stderr
    with (c / "fig13_claims.csv").open(encoding="utf-8") as f:
        partial = list(csv.DictReader(f))
    assert all(r["band"].startswith("topology.board_latency_ns in {10, 100}: ") for r in partial)
    (c / "fig13_sensitivity.csv").write_text("size,runtime\n1,2\n", encoding="utf-8")
    proc = cli("reproduce", "swing-fig13", "--scale", "tiny", "--claims-only", "--out", c, "-q")
    assert proc.returncode == 2 and "not a sensitivity table" in proc.stderr


def test_a_scenario_key_sensitivity_runs_and_an_unknown_key_is_named(tmp_path: Path) -> None:
    """A [[sensitivity]] on a base-scenario path (as the endpoint.* and board keys of other
    branches will be) runs through the same door; a key this simulator does not know fails naming it."""
    shutil.copytree(REPO / "scenarios" / "canary", tmp_path / "canary")
    fig = tmp_path / "canary" / "fig6.toml"
    head = fig.read_text(encoding="utf-8")
    fig.write_text(head + '\n[[sensitivity]]\nkey = "network.switch_latency_ns"\nvalues = [300, 1000]\nsource = "t"\n',
                   encoding="utf-8")
    proc = cli("reproduce", fig, "--scale", "tiny", "--jobs", "1", "--sensitivity", "--out", tmp_path / "o", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "[network.switch_latency_ns: " in proc.stdout and "passes at" in proc.stdout
    # Judged again from the files alone (no store), the bands come back from fig6_sensitivity.csv.
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "o", again, ignore=shutil.ignore_patterns("points.sqlite*", "*_claims.*"))
    assert (again / "fig6_sensitivity.csv").read_text(encoding="utf-8").startswith("sensitivity_key,sensitivity_value,series,")
    proc = cli("reproduce", fig, "--scale", "tiny", "--claims-only", "--out", again, "-q")
    assert proc.returncode == 0, proc.stderr
    for f in ("fig6_claims.csv", "fig6_claims.md"):
        assert (again / f).read_bytes() == (tmp_path / "o" / f).read_bytes(), f
    fig.write_text(head + '\n[[sensitivity]]\nkey = "endpoint.bogus_ns"\nvalues = [1.0]\nsource = "t"\n', encoding="utf-8")
    proc = cli("reproduce", fig, "--scale", "tiny", "--jobs", "1", "--sensitivity", "--out", tmp_path / "o2", timeout=300)
    assert proc.returncode == 2 and "endpoint" in proc.stderr and "unknown field" in proc.stderr
    # Without --sensitivity the sweep is not run (nor checked).
    proc = cli("reproduce", fig, "--scale", "tiny", "--jobs", "1", "--out", tmp_path / "o3", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_a_sensitivity_value_equal_to_the_default_gives_the_default_scenario() -> None:
    """`201.0` for a default of `201` must not give a scenario of its own (the store would run the
    default's points again under another key); other values are kept as written."""
    from reducelab.claims import Sensitivity, like_default

    assert like_default(201, 201.0) == 201 and type(like_default(201, 201.0)) is int
    assert type(like_default(100.0, 100)) is float
    assert like_default(201, 202.0) == 202.0 and like_default("x", "y") == "y"
    assert like_default(True, 1) == 1 and type(like_default(True, 1)) is int
    fig = figures.figure("canary-fig6")
    sc = fig.scale("tiny")
    key = "network.switch_latency_ns"
    default = fig.base(sc).get(key)
    same = figures.sensitivity_scale(fig, sc, Sensitivity(key, (float(default),), "t"), float(default))
    assert fig.base(same).to_toml() == fig.base(sc).to_toml()
    other = figures.sensitivity_scale(fig, sc, Sensitivity(key, (default + 1.5,), "t"), default + 1.5)
    assert fig.base(other).to_toml() != fig.base(sc).to_toml()


@pytest.mark.parametrize(("text", "numbers"), [
    ("+40%", [(0.4, "%")]),
    ("−40%", [(-0.4, "%")]),
    ("2×", [(2.0, "x")]),
    ("max gain ~+150% (2.5x)", [(1.5, "%"), (2.5, "x")]),
    ("≈ 512 KiB", [(524288.0, "B")]),
    ("tree > 1.6 Tb/s", [(1.6, "Tb/s")]),
    # Shapes and names are not values.
    ("max gain 64x16 < 256x4", []),
    ("max gain Hx2Mesh < HyperX", []),
    ("gain > 0 at every size on 3D and 4D", [(0.0, "")]),
])
def test_paper_numbers_read_the_values_and_skip_the_names(text: str, numbers: list[tuple[float, str]]) -> None:
    assert claims.paper_numbers(text) == numbers


def _claim(paper_value: str, pass_if: str, **kw) -> claims.Claim:  # type: ignore[no-untyped-def]
    return claims.Claim(id="c", claim="c", paper_value=paper_value, rule="r", metric="mean", pass_if=pass_if, **kw)


@pytest.mark.parametrize(("paper_value", "pass_if", "kw", "expected"), [
    ("2×", "all in [1.6, 2.4]", {}, 2.0),
    ("+23%", "all in [1.13, 1.33]", {}, 1.23),          # a ratio: +23% is 1.23
    ("+100%", "all in [50, 150]", {}, 100.0),           # in percent
    ("2 MiB", "all in [1536, 2560]", {}, 2048.0),       # in KiB
    ("max gain at 2 MiB", "all in [1MiB, 4MiB]", {}, 2097152.0),
    ("≥ 2× at 1% and 75%", "all >= 1.6", {}, 2.0),      # on the passing side of a looser threshold
    ("Flare > 3.2 Tb/s", "all > 3.2", {}, 3.2),          # the threshold itself
    ("-47.0%", "all in [-0.10, 0.10]", {"subtract": -0.47}, 0.0),
    ("69.2 Gb/s", "all in [0.95, 1.05]", {"against_value": 69.2}, 1.0),
    # A number the rule is not built on is not the paper's value.
    ("gain > 0 at every size <= 512 MiB", "all > 0", {}, 0.0),
    ("ring goodput decreasing from 8x8 to 64x64", "decreasing", {}, None),
    ("32 B runtime Hx2Mesh < 64x64 torus", "first < last", {}, None),
    ("Canary > 4 trees", "all > 0", {}, None),
    ("≈ 2×", "all in [10, 20]", {}, None),
])
def test_paper_number_is_the_value_the_rule_is_built_on(paper_value, pass_if, kw, expected) -> None:  # type: ignore[no-untyped-def]
    got = claims.paper_number(_claim(paper_value, pass_if, **kw))
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_every_numeric_paper_value_is_drawn() -> None:
    """Every shipped claim whose paper value is one number (``2×``, ``+23%``, ``80 Gb/s``, ``≈ 512
    KiB``) has it in its rule's space, so its claims chart draws the paper's cross: a rule that
    drifted from the paper's number (another unit, an interval that misses it) fails here."""
    single = re.compile(r"\s*[≈~≥≤<>=]*\s*[-+−]?[0-9.]+\s*(%|×|x|KiB|MiB|Gb/s|Tb/s)?\s*")
    checked = 0
    for name in figures.names():
        for c in figures.figure(name).claims():
            if single.fullmatch(c.paper_value):
                assert claims.paper_number(c) is not None, (name, c.id, c.paper_value, c.pass_if)
                checked += 1
    assert checked >= 40


def test_the_claims_chart_draws_every_reading_and_is_byte_stable(tmp_path: Path) -> None:
    """``STEM_claims.png`` of a committed full-scale figure: one row per reading, the same bytes
    when drawn twice; a figure without claims draws none."""
    from reducelab.plots import claims_png

    src = REPO / "docs" / "results" / "canary-full" / "canary-fig8"
    shutil.copytree(src, tmp_path / "a")
    verdicts = figures.reevaluate("canary-fig8", tmp_path / "a", "full")
    first = (tmp_path / "a" / "fig8_claims.png").read_bytes()
    assert first == (src / "fig8_claims.png").read_bytes()
    assert claims_png("t", verdicts, tmp_path / "b.png") == tmp_path / "b.png"
    assert (tmp_path / "b.png").read_bytes() == claims_png("t", verdicts, tmp_path / "c.png").read_bytes()  # type: ignore[union-attr]
    from matplotlib.image import imread

    height = imread(tmp_path / "b.png").shape[0]
    fewer = imread(claims_png("t", verdicts[:2], tmp_path / "d.png")).shape[0]  # type: ignore[arg-type]
    assert height > fewer  # a row per reading
    assert claims_png("t", [], tmp_path / "e.png") is None and not (tmp_path / "e.png").exists()
    # The paper's value of a drop claim is where the paper's words put it (-47% as measured).
    v = next(x for x in verdicts if x.id == "fig8-low-static-4-drop")
    assert v.paper is not None and v.paper + v.shift == pytest.approx(-0.47)
