"""The size-sweep figure kind (``kind = "goodput_vs_size"`` or ``"gain_vs_size"``): the Swing
paper's figures (NSDI'24 §5, ``scenarios/swing/figN.toml``), registered in
`reducelab.figures` like every other kind and run, judged, drawn and reported by its one
harness (docs/reproductions.md).

A size-sweep figure file has, besides its ``[figure]`` table, the networks (``[network]``,
``[grid]``: topologies x bandwidths), the vector sizes, the series (``[[series]]``: algorithms,
each with its variants) and ``[scales.NAME]`` tables that shrink the grid (fewer sizes, smaller
networks standing in for the paper's). This module reads them (`read_spec`: a `Spec` per scale),
turns them into points (`SizeSweepKind.points`: the base scenario, scenarios/swing/network.toml,
with the point's topology, bandwidth, algorithm, size and backend, `point_scenario`), reads a
stored run back (`SizeSweepKind.row`), and derives what the Swing paper plots: per series and
size the fastest variant (the best of the latency- and bandwidth-optimal versions), the subject
series' goodput gain over the best other baseline series (`Results`), and the packet/flow
backend check at the switch-over size (`BackendCheck`).

Its claims metrics (`METRICS`: ``fraction_positive``, ``gain_at_size``, ``crossover_size``,
``share_of_peak_at_size``, ...) are registered with the one claims engine
(`reducelab.claims.register_metrics`, family ``size_sweep``); their terms (subject, against,
networks, size window) are a claim's `SizeTerms`.

Files (``STEM`` = the figure's ``output``): ``STEM.csv`` (one row per network, series and
size: the chosen variant), ``STEM_runs.csv`` (every run), ``STEM_gain.csv`` (the gains),
``STEM_backend_check.csv`` (``auto`` backend), and the plot (`reducelab.plots.swing_gain_png`,
`swing_goodput_png`).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _core
from ._core import ScenarioError
from .claims import UNITS, Metrics, Sensitivity, Verdict, chart_terms, judge, register_metrics
from .figures import FigureError, FigureKind, TomlTable, command
from .scenario import FieldError, Scenario

if TYPE_CHECKING:
    from .claims import Claim
    from .figures import Figure
    from .store import StoredRun

KINDS = ("gain_vs_size", "goodput_vs_size")
"""The figure kinds of this module (the plot differs; the analysis is the same)."""

BACKENDS = ("auto", "packet", "flow")

#: Metrics computed from the gain of a claim's `subject` over `against` at each size.
GAIN_METRICS = (
    "fraction_positive", "min_gain", "max_gain", "median_gain", "gain_at_size",
    "max_gain_size", "crossover_size",
)
#: Metrics computed from the claim's `subject` series alone.
GOODPUT_METRICS = (
    "goodput_at_size", "share_of_peak_at_size", "max_goodput", "max_share_of_peak", "runtime_at_size",
)
METRICS = GAIN_METRICS + GOODPUT_METRICS
_AT_SIZE = ("gain_at_size", "goodput_at_size", "share_of_peak_at_size", "runtime_at_size")

_TOPOLOGY_RE = re.compile(r"^(?:(?:torus|hyperx):[1-9][0-9]*(?:x[1-9][0-9]*)*|(?:hammingmesh|hxmesh):[1-9][0-9]*x[1-9][0-9]*,[1-9][0-9]*x[1-9][0-9]*)$")
_TOPOLOGY_FORMS = "torus:AxB[xC...], hyperx:AxB, hammingmesh:BXxBY,GXxGY"


def topology_dims(topology: str) -> int:
    """D of the paper's peak goodput D * bandwidth: torus/HyperX dimensions, 2 for HammingMesh."""
    kind, _, shape = topology.partition(":")
    if kind in ("hammingmesh", "hxmesh"):
        return 2
    return len(shape.split("x"))


def topology_nodes(topology: str) -> int:
    kind, _, shape = topology.partition(":")
    n = 1
    for part in shape.split(","):
        for d in part.split("x"):
            n *= int(d)
    return n


@dataclass(frozen=True)
class Series:
    name: str
    label: str
    variants: tuple[str, ...]
    subject: bool = False
    baseline: bool = True
    """Eligible as "best other" (the paper excludes mirrored recursive doubling)."""
    optional: bool = False
    """Absent (not an error) on networks where its schedules cannot be built."""
    letter: str = ""
    skip: tuple[tuple[str, str], ...] = ()
    """(topology, reason): networks the series is deliberately not run on."""
    backend: str | None = None
    """Overrides the figure's backend for this series' runs."""

    def skip_reason(self, cfg: Config) -> str | None:
        for topo, why in self.skip:
            if topo in (cfg.topology, cfg.paper):
                return why
        return None


@dataclass(frozen=True)
class Config:
    """One network of the figure: a topology (standing in for `paper`) at one bandwidth."""

    topology: str
    paper: str
    bandwidth: float
    reference: bool = False

    @property
    def stand_in(self) -> bool:
        return self.topology != self.paper

    @property
    def peak_gbps(self) -> float:
        return topology_dims(self.topology) * self.bandwidth


@dataclass(frozen=True)
class Spec:
    """A size-sweep figure at one scale (`read_spec`)."""

    path: Path
    name: str
    kind: str
    paper: str
    figure: str
    title: str
    output: str
    claims_path: Path
    latency_ns: float
    switch_latency_ns: float
    backend: str
    flow_min_bytes: int
    seed: int
    scale: str
    scales: tuple[str, ...]
    topologies: tuple[str, ...]
    """The scale's topologies, then its reference topologies."""
    references: tuple[str, ...]
    stand_ins: dict[str, str]
    """Scale topology -> the paper topology it stands in for."""
    paper_topologies: tuple[str, ...]
    """Every topology of the paper's grid (`[grid]`), reference ones included."""
    bandwidths: tuple[float, ...]
    sizes: tuple[int, ...]
    size_factor: int
    series: tuple[Series, ...]
    notes: tuple[str, ...] = ()
    sensitivity: tuple[Sensitivity, ...] = ()
    """Settings the paper does not state, swept with ``--sensitivity`` (`claims.read_sensitivity`)."""
    scenario_path: Path = Path()
    """The base scenario (``[figure] scenario``): every point is it with the point's
    topology, bandwidth, algorithm, size and backend set (docs/reproductions.md)."""
    override: str | None = None
    """A backend for every point (``reproduce --backend``), over the figure's and its series'."""
    setting: tuple[Sensitivity, Any] | None = None
    """One value of a sensitivity sweep, set in the points of the sweep's topologies."""

    @property
    def subject(self) -> Series:
        return next(s for s in self.series if s.subject)

    @property
    def others(self) -> tuple[Series, ...]:
        return tuple(s for s in self.series if not s.subject)

    @property
    def variants(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for s in self.series:
            for v in s.variants:
                seen.setdefault(v, None)
        return tuple(seen)

    @property
    def configs(self) -> tuple[Config, ...]:
        return tuple(
            Config(t, self.stand_ins.get(t, t), bw, t in self.references)
            for t in self.topologies for bw in self.bandwidths
        )

    def series_named(self, name: str) -> Series | None:
        return next((s for s in self.series if s.name == name), None)

    def label(self, cfg: Config, paper_name: bool = True) -> str:
        """How `cfg` is named in tables: the topology if the figure varies it (or does not vary
        the bandwidth), the bandwidth if it varies it."""
        parts = []
        if len(self.topologies) > 1 or len(self.bandwidths) == 1:
            parts.append(cfg.topology + (f" (for {cfg.paper})" if cfg.stand_in and paper_name else ""))
        if len(self.bandwidths) > 1:
            parts.append(_fmt_bw(cfg.bandwidth))
        return " @ ".join(parts)


# ---------------------------------------------------------------------------------------------
# Reading a size-sweep figure file.


def _number(t: TomlTable, key: str, default: Any = ..., minimum: float = 0.0, positive: bool = False) -> float:
    v = t.get(key, (int, float), default, "a number")
    if not math.isfinite(v) or v < minimum or (positive and v <= 0):
        raise t.err(key, f"must be a finite number {'>' if positive else '>='} {minimum:g}, got {v!r}")
    return float(v)


def _topologies(t: TomlTable, key: str, default: Any = ...) -> Any:
    if key not in t.data and default is not ...:
        t.seen.add(key)
        return default
    v = t.get(key, list, what="a list of topology specs")
    if not all(isinstance(x, str) and _TOPOLOGY_RE.match(x) for x in v):
        bad = next((x for x in v if not (isinstance(x, str) and _TOPOLOGY_RE.match(x))), None)
        raise t.err(key, f"{bad!r} is not a topology spec ({_TOPOLOGY_FORMS})")
    if len(set(v)) != len(v):
        raise t.err(key, f"has duplicates: {v!r}")
    return tuple(v)


_GRID_KEYS = (
    "topologies", "reference_topologies", "bandwidths_gbps", "size_min_bytes", "size_max_bytes",
    "size_factor", "flow_min_bytes", "stand_ins", "note",
)


def read_spec(fig: Figure, raw: Mapping[str, Any], scale: str) -> Spec:
    """A size-sweep figure at `scale`: `raw` holds the file's ``network``, ``grid``, ``series``
    and ``scales`` tables. FigureError naming the file and the field for anything wrong."""
    path = fig.path
    net = TomlTable(path, "network", raw["network"])
    grid = TomlTable(path, "grid", raw["grid"])
    for i, sens in enumerate(fig.sensitivity):
        if sens.key.startswith("params."):
            raise FigureError(f"{path}: sensitivity[{i}].key: size-sweep figures take scenario paths, got {sens.key!r}")
    net_topology = None
    if "topology" in net.data:
        t = net.get("topology", str, what="a topology spec")
        if not _TOPOLOGY_RE.match(t):
            raise net.err("topology", f"{t!r} is not a topology spec ({_TOPOLOGY_FORMS})")
        net_topology = (t,)
    latency_ns = _number(net, "latency_ns")
    switch_latency_ns = _number(net, "switch_latency_ns")
    backend = net.get("backend", str, "auto")
    if backend not in BACKENDS:
        raise net.err("backend", f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    net_flow_min = net.get("flow_min_bytes", int, _core.AUTO_FLOW_MIN_BYTES, "an integer")
    if net_flow_min < 1:
        raise net.err("flow_min_bytes", f"must be >= 1, got {net_flow_min}")
    seed = net.get("seed", int, 1, "an integer")
    if not 0 <= seed < 2**64:
        raise net.err("seed", f"must be in [0, 2^64), got {seed}")
    net.done()

    def read_grid(t: TomlTable, base: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in _GRID_KEYS:
            if k == "topologies":
                dflt: Any = net_topology if base is None else base[k]
                v = _topologies(t, k, dflt if dflt is not None else ...)
                if not v:
                    raise t.err(k, "must not be empty")
                out[k] = tuple(v)
            elif k == "reference_topologies":
                out[k] = tuple(_topologies(t, k, () if base is None else base[k]))
            elif k == "bandwidths_gbps":
                bws = t.get(k, list, ... if base is None else base[k], "a list of numbers")
                if not bws or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0 for b in bws):
                    raise t.err(k, f"must be a non-empty list of positive numbers, got {bws!r}")
                if len(set(bws)) != len(bws):
                    raise t.err(k, f"has duplicates: {bws!r}")
                out[k] = tuple(sorted(float(b) for b in bws))
            elif k == "flow_min_bytes":
                out[k] = t.get(k, int, net_flow_min if base is None else base[k], "an integer")
                if out[k] < 1:
                    raise t.err(k, f"must be >= 1, got {out[k]}")
            elif k == "stand_ins":
                stand = t.get(k, dict, {}, "a table of SCALE_TOPOLOGY = PAPER_TOPOLOGY")
                if base is None and stand:
                    raise t.err(k, "only [scales.NAME] tables may have stand-ins")
                out[k] = dict(stand)
            elif k == "note":
                out[k] = t.get(k, str, "", "a string")
            else:
                out[k] = t.get(k, int, ... if base is None else base[k], "an integer")
        if set(out["topologies"]) & set(out["reference_topologies"]):
            raise t.err("reference_topologies", "must not repeat a topology of `topologies`")
        t.done()
        return out

    if net_topology is not None and "topologies" in grid.data:
        raise net.err("topology", "give the topology either here or as grid.topologies, not both")
    base = read_grid(grid, None)
    paper_topologies = base["topologies"] + base["reference_topologies"]
    scales = {"full": base}
    for sname, sdata in raw["scales"].items():
        t = TomlTable(path, f"scales.{sname}", sdata)
        g = read_grid(t, base)
        here = g["topologies"] + g["reference_topologies"]
        for actual, stands_for in g["stand_ins"].items():
            if actual not in here:
                raise t.err("stand_ins", f"{actual!r} is not a topology of this scale ({', '.join(here)})")
            if not isinstance(stands_for, str) or stands_for not in paper_topologies:
                raise t.err("stand_ins", f"{actual!r} must stand in for a topology of [grid] ({', '.join(paper_topologies)}), got {stands_for!r}")
        scales[sname] = g
    if scale not in scales:
        raise FigureError(f"{path}: unknown scale {scale!r} for {fig.name}; known: {', '.join(sorted(scales))}")
    g = scales[scale]
    sizes = _size_grid(path, f"scales.{scale}" if scale != "full" else "grid", g["size_min_bytes"], g["size_max_bytes"], g["size_factor"])

    known = set(_core.algorithms())
    series: list[Series] = []
    for i, sraw in enumerate(raw["series"]):
        t = TomlTable(path, f"series[{i}]", sraw)
        sname = t.get("name", str)
        variants = t.get("variants", list, what="a list of algorithm names")
        if not variants or not all(isinstance(v, str) for v in variants):
            raise t.err("variants", f"must be a non-empty list of algorithm names, got {variants!r}")
        bad = [v for v in variants if v not in known]
        if bad:
            raise t.err("variants", f"unknown algorithm {bad[0]!r} (known: {', '.join(sorted(known))})")
        skip = t.get("skip", dict, {}, "a table of TOPOLOGY = REASON")
        for topo, why in skip.items():
            if not _TOPOLOGY_RE.match(topo) or not isinstance(why, str) or not why:
                raise t.err("skip", f"entries must be TOPOLOGY = \"reason\", got {topo!r} = {why!r}")
        sbackend = t.get("backend", str, None, "a backend name")
        if sbackend is not None and sbackend not in BACKENDS:
            raise t.err("backend", f"unknown backend {sbackend!r} (known: {', '.join(BACKENDS)})")
        label = t.get("label", str, sname)
        letter = t.get("letter", str, label[:1].upper())
        s = Series(
            sname, label, tuple(variants),
            subject=t.get("subject", bool, False, "true or false"),
            baseline=t.get("baseline", bool, True, "true or false"),
            optional=t.get("optional", bool, False, "true or false"),
            letter=letter, skip=tuple(sorted(skip.items())), backend=sbackend,
        )
        t.done()
        if s.subject and (s.skip or s.optional):
            raise t.err("skip" if s.skip else "optional", "the subject series must run on every network")
        series.append(s)
    if len({s.name for s in series}) != len(series):
        raise FigureError(f"{path}: series: names must be unique")
    if sum(s.subject for s in series) != 1 or len(series) < 2:
        raise FigureError(f"{path}: series: need exactly one `subject = true` series and at least one other")
    if not any(s.baseline for s in series if not s.subject):
        raise FigureError(f"{path}: series: need at least one non-subject series with `baseline = true`")

    return Spec(
        scenario_path=fig.scenario_path, path=path, name=fig.name, kind=fig.kind, paper=fig.paper, figure=fig.figure,
        title=fig.title, output=fig.stem, claims_path=fig.claims_path, latency_ns=latency_ns,
        switch_latency_ns=switch_latency_ns, backend=backend, flow_min_bytes=g["flow_min_bytes"], seed=seed, scale=scale,
        scales=tuple(sorted(scales)), topologies=g["topologies"] + g["reference_topologies"],
        references=g["reference_topologies"], stand_ins=g["stand_ins"], paper_topologies=paper_topologies,
        bandwidths=g["bandwidths_gbps"], sizes=sizes, size_factor=g["size_factor"], series=tuple(series),
        notes=(g["note"],) if g["note"] else (), sensitivity=tuple(fig.sensitivity),
    )


def _size_grid(path: Path, where: str, lo: int, hi: int, factor: int) -> tuple[int, ...]:
    if lo < 1 or hi < lo:
        raise FigureError(f"{path}: {where}: need 1 <= size_min_bytes <= size_max_bytes, got {lo}, {hi}")
    if factor < 2:
        raise FigureError(f"{path}: {where}.size_factor: must be an integer >= 2, got {factor}")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return tuple(sizes)


# ---------------------------------------------------------------------------------------------
# Claims: the size-sweep metrics of the claims engine.


@dataclass(frozen=True)
class SizeTerms:
    """The terms of a size-sweep claim (`Claim.terms`): what is measured, against what, on which
    networks and sizes."""

    against: str
    """Gain metrics: ``best`` (the best other baseline series per size), a series or a variant."""
    bandwidths: tuple[float, ...] | None  # None = all
    size_bytes: int | None = None
    min_size_bytes: int | None = None
    max_size_bytes: int | None = None
    subject: str = ""
    """The series measured (default: the figure's subject)."""
    topologies: tuple[str, ...] | None = None
    """Paper topologies evaluated, in this order (None = every one the scale runs)."""
    network_dependent: bool = False
    """Only evaluated on the paper's own networks (n/a where a smaller one stands in)."""
    mark: dict[str, float] | None = None
    """The paper's value drawn on the figure: ``size_bytes`` and one of ``share_of_peak``,
    ``goodput_gbps`` (goodput panels) or ``gain`` (the gain plot or inset), on the claim's
    networks (`reducelab.plots.swing_goodput_png`)."""


_MARK_VALUES = ("share_of_peak", "goodput_gbps", "gain")


def _mark(t: Any) -> dict[str, float] | None:
    raw = t.get("mark", dict, None, "a table { size_bytes = N, share_of_peak | goodput_gbps | gain = X }")
    if raw is None:
        return None
    m = type(t)(t.file, f"{t.where}.mark", raw)
    out = {"size_bytes": float(m.get("size_bytes", int, what="an integer"))}
    given = [k for k in _MARK_VALUES if k in raw]
    if len(given) != 1:
        raise m.err("size_bytes", f"give exactly one of {', '.join(_MARK_VALUES)} besides size_bytes")
    out[given[0]] = float(m.get(given[0], (int, float), what="a number"))
    m.done()
    return out


def _all_or_list(t: Any, key: str, what: str, ok: Any) -> tuple[Any, ...] | None:
    """A claim's ``"all"`` (None) or non-empty list of `what` (each passing `ok`)."""
    v = t.get(key, (str, list), "all", f"'all' or a list of {what}")
    if isinstance(v, str):
        if v != "all":
            raise t.err(key, f"must be 'all' or a list of {what}, got {v!r}")
        return None
    if not v or not all(ok(x) for x in v):
        raise t.err(key, f"must be 'all' or a non-empty list of {what}, got {v!r}")
    return tuple(v)


def _read_terms(t: Any, metric: str, spec: Spec) -> dict[str, Any]:
    """A size-sweep claim's terms (`SizeTerms`), checked against the figure's `spec` (series,
    variant and topology names)."""
    series = {s.name for s in spec.series}
    variants = set(spec.variants)
    subject = t.get("subject", str, spec.subject.name)
    if subject not in series:
        raise t.err("subject", f"must be a series ({', '.join(sorted(series))}), got {subject!r}")
    if metric in GAIN_METRICS:
        against = t.get("against", str, "best")
        if against != "best" and (against == subject or against not in series | variants):
            raise t.err(
                "against",
                f"must be 'best', another series ({', '.join(sorted(series - {subject}))}) or a variant "
                f"({', '.join(sorted(variants))}), got {against!r}",
            )
    else:
        if "against" in t.data:
            raise t.err("against", f"metric {metric!r} measures the subject alone; remove `against`")
        against = ""
    bws = _all_or_list(t, "bandwidths", "numbers", lambda b: isinstance(b, (int, float)) and not isinstance(b, bool))
    bandwidths = None if bws is None else tuple(sorted(float(b) for b in bws))
    topologies = _all_or_list(t, "topologies", "topology specs", lambda x: isinstance(x, str))
    bad = [x for x in topologies or () if x not in spec.paper_topologies]
    if bad:
        raise t.err("topologies", f"{bad[0]!r} is not a topology of the figure's [grid] ({', '.join(spec.paper_topologies)})")
    size = t.get("size_bytes", int, None, "an integer")
    if metric in _AT_SIZE and size is None:
        raise t.err("size_bytes", f"required by metric {metric!r}")
    if metric not in _AT_SIZE and size is not None:
        raise t.err("size_bytes", f"only for the *_at_size metrics; use min_size_bytes / max_size_bytes with {metric!r}")
    terms = SizeTerms(
        against=against, bandwidths=bandwidths, size_bytes=size,
        min_size_bytes=t.get("min_size_bytes", int, None, "an integer"),
        max_size_bytes=t.get("max_size_bytes", int, None, "an integer"),
        subject=subject, topologies=topologies,
        network_dependent=t.get("network_dependent", bool, False, "true or false"), mark=_mark(t),
    )
    return {"rule": "", "unit": _METRIC_UNITS[metric], "terms": terms}


_METRIC_UNITS = {
    **{m: "gain" for m in GAIN_METRICS}, "max_gain_size": "size", "crossover_size": "size",
    "goodput_at_size": "gbps", "max_goodput": "gbps", "share_of_peak_at_size": "share_of_peak",
    "max_share_of_peak": "share_of_peak", "runtime_at_size": "runtime_us",
}
"""How each metric's values are shown (`reducelab.claims.UNITS`, with the units below)."""


def _claim_configs(spec: Spec, claim: SizeTerms) -> tuple[list[Config], list[str], list[str]]:
    """Networks a claim is evaluated on (in the claim's order), paper networks missing at this
    scale, and stand-ins skipped because the claim depends on the network's size."""
    configs = [c for c in spec.configs if claim.bandwidths is None or c.bandwidth in claim.bandwidths]
    if claim.topologies is not None:
        order = {t: i for i, t in enumerate(claim.topologies)}
        configs = sorted((c for c in configs if c.paper in order), key=lambda c: (order[c.paper], c.bandwidth))
    missing = [_fmt_bw(b) for b in (claim.bandwidths or ()) if b not in spec.bandwidths]
    have = {c.paper for c in spec.configs}
    missing += [t for t in (claim.topologies or ()) if t not in have]
    skipped = []
    if claim.network_dependent:
        skipped = sorted({f"{c.topology} stands in for {c.paper}" for c in configs if c.stand_in})
        configs = [c for c in configs if not c.stand_in]
    return configs, missing, skipped


def judge_claim(c: Claim, results: Results) -> Verdict:
    """Judge a size-sweep claim on a figure's results (its verified runs: `SizeSweepKind.table`):
    the claim's metric per network, in the claim's order of networks."""
    spec = results.spec
    claim: SizeTerms = c.terms
    configs, missing, skipped = _claim_configs(spec, claim)
    subject = claim.subject or spec.subject.name
    values: dict[Config, float] = {}
    shown: dict[Config, str] = {}
    absent: list[str] = []
    for cfg in configs:
        if not results.available(cfg, subject):
            absent.append(f"{subject} on {cfg.topology}")
            continue
        if claim.against not in ("", "best") and results.spec.series_named(claim.against) is not None \
                and not results.available(cfg, claim.against):
            absent.append(f"{claim.against} on {cfg.topology}")
            continue
        sizes = [s for s in spec.sizes
                 if (claim.min_size_bytes is None or s >= claim.min_size_bytes)
                 and (claim.max_size_bytes is None or s <= claim.max_size_bytes)]
        if c.metric in _AT_SIZE:
            sizes = [s for s in sizes if s == claim.size_bytes]
        if not sizes:
            continue
        runs = [results.run_of(cfg, subject, s) for s in sizes]
        assert all(r is not None for r in runs)
        at = ""
        if c.metric in GAIN_METRICS:
            bests: list[str] = []
            vals: list[float] = []
            for s, me in zip(sizes, runs):
                assert me is not None
                if claim.against == "best":
                    name, other = results.best_other(cfg, s, subject)
                else:
                    name, other = claim.against, results.run_of(cfg, claim.against, s)  # type: ignore[assignment]
                    if other is None:
                        raise FigureError(f"claim {c.id}: no run of {claim.against!r} on {cfg.topology}")
                bests.append(name)
                vals.append(me.goodput_gbps / other.goodput_gbps - 1.0)
            if c.metric == "fraction_positive":
                k = sum(v > 0 for v in vals)
                values[cfg], shown[cfg] = k / len(vals), f"{k}/{len(vals)}"
                continue
            if c.metric in ("min_gain", "max_gain", "max_gain_size"):
                pick = min if c.metric == "min_gain" else max
                i = pick(range(len(vals)), key=vals.__getitem__)
                v = vals[i] if c.metric != "max_gain_size" else float(sizes[i])
                vs = f" vs {bests[i]}" if claim.against == "best" else ""
                at = f" @{_fmt_size(sizes[i])}{vs}" if c.metric != "max_gain_size" else f" (gain {_pct(vals[i])}{vs})"
            elif c.metric == "median_gain":
                v = statistics.median(vals)
            elif c.metric == "crossover_size":
                v = math.inf
                for i in range(len(vals) - 1, -1, -1):
                    if vals[i] >= 0:
                        break
                    v = float(sizes[i])
                if not math.isinf(v):
                    at = f" (gain {_pct(vals[sizes.index(int(v))])}" + (f" vs {bests[sizes.index(int(v))]})" if claim.against == "best" else ")")
                else:
                    at = f" (gain at {_fmt_size(sizes[-1])}: {_pct(vals[-1])})"
            else:  # gain_at_size
                v = vals[0]
                if claim.against == "best":
                    at = f" (best other: {bests[0]})"
        else:
            gps = [r.goodput_gbps for r in runs if r is not None]
            if c.metric in ("goodput_at_size", "max_goodput"):
                i = max(range(len(gps)), key=gps.__getitem__)
                v = gps[i]
                at = f" @{_fmt_size(sizes[i])}" if c.metric == "max_goodput" else ""
            elif c.metric in ("share_of_peak_at_size", "max_share_of_peak"):
                i = max(range(len(gps)), key=gps.__getitem__)
                v = gps[i] / cfg.peak_gbps
                at = (f" @{_fmt_size(sizes[i])}" if c.metric == "max_share_of_peak" else "") + f" ({gps[i]:.1f} of {cfg.peak_gbps:g} Gb/s)"
            else:  # runtime_at_size
                r = runs[0]
                assert r is not None
                v = r.runtime_ps / 1e6
            if runs[0] is not None and c.metric in ("goodput_at_size", "share_of_peak_at_size", "runtime_at_size"):
                at += f" ({runs[0].variant})" if runs[0].variant != subject else ""
        values[cfg] = v
        shown[cfg] = UNITS[_METRIC_UNITS[c.metric]](v) + at

    measured = "; ".join(f"{spec.label(c)}: {shown[c]}" for c in values)
    extra = []
    if missing:
        extra.append(f"not in this scale: {', '.join(missing)}")
    if skipped:
        extra.append(f"n/a at this scale ({'; '.join(skipped)})")
    if absent:
        extra.append(f"not run: {', '.join(absent)}")
    measured = "; ".join([measured, *extra] if measured else extra)
    verdict, detail = judge(c.pass_if, list(values.values()))
    if detail:
        keys = list(values)
        if detail in (">", "<=", "<", ">="):
            measured += f" ({spec.label(keys[0], False)} {detail} {spec.label(keys[-1], False)})"
        else:
            measured += f" ({detail})"
    return Verdict(c.id, c.source, c.quote, c.claim, c.paper_value, _check_text(spec, c), measured, verdict,
                   tuple(values.values()), c.note, c.reading, c.contradiction, c.cause, c.evidence, c.setting, unit=c.unit,
                   **chart_terms(c))


def _check_text(spec: Spec, claim: Claim) -> str:
    """A size-sweep claim's rule in words: the metric, its terms and the pass rule (its
    interpretation of the paper's words is its ``note``, shown with the quote)."""
    c: SizeTerms = claim.terms
    subj = c.subject if c.subject and c.subject != spec.subject.name else ""
    what = f"`{claim.metric}`" + (f" of `{subj}`" if subj else "") + (f" against `{c.against}`" if c.against else "")
    where = []
    if c.topologies:
        where.append("on " + ", ".join(c.topologies))
    if c.size_bytes is not None:
        where.append(f"at {_fmt_size(c.size_bytes)}")
    if c.min_size_bytes is not None or c.max_size_bytes is not None:
        lo = _fmt_size(c.min_size_bytes) if c.min_size_bytes is not None else "smallest"
        hi = _fmt_size(c.max_size_bytes) if c.max_size_bytes is not None else "largest"
        where.append(f"sizes {lo} to {hi}")
    dep = " Network-dependent (n/a on stand-in networks)." if c.network_dependent else ""
    return f"{what}{' ' + ', '.join(where) if where else ''}, pass if `{claim.pass_if}`.{dep}"


# ---------------------------------------------------------------------------------------------
# Points and runs.


@dataclass(frozen=True)
class Run:
    bandwidth: float
    variant: str
    size: int
    runtime_ps: int
    goodput_gbps: float
    backend: str
    verified: bool | None
    mismatch: str | None = None
    topology: str = ""
    error: str | None = None
    """Set (and the rest meaningless) when an optional series' schedule could not run here."""


def _resolve(backend: str, size: int, flow_min: int | None = None) -> str:
    if backend == "auto":
        return "flow" if size >= (_core.AUTO_FLOW_MIN_BYTES if flow_min is None else flow_min) else "packet"
    return backend


#: (topology, bandwidth, variant, size, backend) of one simulation.
PointKey = tuple[str, float, str, int, str]


def point_scenario(spec: Spec, base: Scenario, p: PointKey) -> Scenario:
    """The scenario of one point: the base scenario (scenarios/swing/network.toml) with the
    point's topology, bandwidth, algorithm, size and (resolved) backend, and the spec's link
    latency, per-hop latency and seed. Two figures reaching the same point give the same
    scenario, so the store runs it once."""
    topo, bw, variant, size, backend = p
    return base.with_values({
        "seed": spec.seed,
        "topology.shape": topo,
        "topology.bandwidth_gbps": bw,
        "topology.latency_ns": spec.latency_ns,
        "network.switch_latency_ns": spec.switch_latency_ns,
        "traffic[0].algorithm": variant,
        "traffic[0].bytes": size,
        "run.backend": backend,
    })


@functools.cache
def _auto_all_sizes_flow(scenario_toml: str) -> str | None:
    """Why the simulator's `auto` backend runs this point at flow level whatever its size (a
    contention-free plan, or a packet-level data check too large to hold), from a probe run;
    None if it switches at `run.flow_min_bytes`, or if the scenario is rejected (the run itself
    then reports the problem, or marks an optional series absent)."""
    try:
        summary = json.loads(_core.run(scenario_toml, probe=True)["summary_json"])
    except (ValueError, ScenarioError):
        return None
    reason = summary.get("backend_reason") or ""
    if summary.get("backend") != "flow" or "flow_min_bytes" in reason:
        return None
    return reason.removeprefix("auto: ")


# ---------------------------------------------------------------------------------------------
# Analysis.


@dataclass(frozen=True)
class Point:
    """The plotted value of one series at one (network, size): its fastest variant."""

    config: Config
    series: str
    run: Run

    @property
    def bandwidth(self) -> float:
        return self.config.bandwidth


@dataclass(frozen=True)
class Gain:
    config: Config
    size: int
    subject: Run
    best_other: str
    best_other_run: Run
    gain: float
    """goodput(subject) / goodput(best other baseline series) - 1."""
    over: dict[str, float] = field(default_factory=dict)
    """Gain over each other series available on this network, by name."""

    @property
    def bandwidth(self) -> float:
        return self.config.bandwidth


class Results:
    """Every run of a figure and what is derived from them (availability, best variants, gains)."""

    def __init__(self, spec: Spec, runs: Iterable[Run]) -> None:
        self.spec = spec
        self.runs = [r for r in runs if r.error is None]
        self.errors = [r for r in runs if r.error is not None]
        self.by: dict[tuple[str, float, str, int], Run] = {(r.topology, r.bandwidth, r.variant, r.size): r for r in self.runs}
        failed = {(r.topology, r.bandwidth, r.variant): r.error for r in self.errors}
        #: (config, series) -> why the series is absent on that network.
        self.absent: dict[tuple[Config, str], str] = {}
        #: (config, series) -> variants that ran.
        self.variants: dict[tuple[Config, str], tuple[str, ...]] = {}
        for cfg in spec.configs:
            for s in spec.series:
                why = s.skip_reason(cfg)
                if why is not None:
                    self.absent[(cfg, s.name)] = f"not run: {why}"
                    continue
                ok = tuple(v for v in s.variants if (cfg.topology, cfg.bandwidth, v) not in failed)
                if not ok:
                    err = failed[(cfg.topology, cfg.bandwidth, s.variants[0])]
                    self.absent[(cfg, s.name)] = f"not available: {err}"
                    continue
                self.variants[(cfg, s.name)] = ok
        self.points: dict[tuple[Config, str, int], Point] = {}
        for (cfg, name), vs in self.variants.items():
            for size in spec.sizes:
                cands = [self.by[(cfg.topology, cfg.bandwidth, v, size)] for v in vs]
                best = min(cands, key=lambda r: r.runtime_ps)  # min keeps the first on a tie
                self.points[(cfg, name, size)] = Point(cfg, name, best)
        self.gains: list[Gain] = []
        subj = spec.subject.name
        for cfg in spec.configs:
            for size in spec.sizes:
                me = self.points[(cfg, subj, size)].run
                best_name, best_run = self.best_other(cfg, size, subj)
                over = {
                    s.name: me.goodput_gbps / self.points[(cfg, s.name, size)].run.goodput_gbps - 1.0
                    for s in spec.others if (cfg, s.name, size) in self.points
                }
                gain = me.goodput_gbps / best_run.goodput_gbps - 1.0
                self.gains.append(Gain(cfg, size, me, best_name, best_run, gain, over))

    def available(self, cfg: Config, name: str) -> bool:
        return (cfg, name) in self.variants

    def best_other(self, cfg: Config, size: int, subject: str) -> tuple[str, Run]:
        """The baseline series other than `subject` with the highest goodput (first on a tie)."""
        others = [
            (s.name, self.points[(cfg, s.name, size)].run)
            for s in self.spec.series
            if s.name != subject and s.baseline and (cfg, s.name, size) in self.points
        ]
        if not others:
            raise FigureError(f"{self.spec.path}: no baseline series besides {subject!r} runs on {cfg.topology}")
        return max(others, key=lambda o: o[1].goodput_gbps)  # max keeps the first on a tie

    def run_of(self, cfg: Config, name: str, size: int) -> Run | None:
        """The plotted run of series `name`, or the run of variant `name`."""
        p = self.points.get((cfg, name, size))
        if p is not None:
            return p.run
        if self.spec.series_named(name) is None:
            return self.by.get((cfg.topology, cfg.bandwidth, name, size))
        return None


def _fmt_bw(bw: float) -> str:
    if bw >= 1000:
        return f"{bw / 1000:g} Tb/s"
    return f"{bw:g} Gb/s"


def _fmt_size(n: float) -> str:
    if math.isinf(n):
        return "none"
    n = int(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


# ---------------------------------------------------------------------------------------------
# Output files.


def _num(x: float) -> str:
    return f"{x:g}" if float(x).is_integer() else repr(float(x))


def _verified(v: bool | None) -> str:
    return "n/a" if v is None else ("true" if v else "false")


def _csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def series_csv(spec: Spec, results: Results) -> str:
    rows = []
    for cfg in spec.configs:
        for s in spec.series:
            for size in spec.sizes:
                p = results.points.get((cfg, s.name, size))
                if p is None:
                    continue
                r = p.run
                rows.append([cfg.topology, _num(cfg.bandwidth), s.name, r.variant, size, r.runtime_ps,
                             f"{r.goodput_gbps:.9g}", r.backend, _verified(r.verified)])
    header = ["topology", "bandwidth_gbps", "algorithm", "variant", "size_bytes", "runtime_ps", "goodput_gbps", "backend", "verified"]
    return _csv(header, rows)


def runs_csv(spec: Spec, runs: Iterable[Run]) -> str:
    order = {v: i for i, v in enumerate(spec.variants)}
    topo = {t: i for i, t in enumerate(spec.topologies)}
    rows = [
        [r.topology, _num(r.bandwidth), r.variant, r.size, r.runtime_ps, f"{r.goodput_gbps:.9g}", r.backend, _verified(r.verified)]
        for r in sorted(runs, key=lambda r: (topo[r.topology], r.bandwidth, order[r.variant], r.size))
        if r.error is None
    ]
    return _csv(["topology", "bandwidth_gbps", "variant", "size_bytes", "runtime_ps", "goodput_gbps", "backend", "verified"], rows)


def gain_csv(spec: Spec, table: Sequence[Gain]) -> str:
    others = [s.name for s in spec.others]
    header = ["topology", "bandwidth_gbps", "size_bytes", f"{spec.subject.name}_variant", "best_other", "best_other_variant", "gain"]
    header += [f"gain_over_{n}" for n in others]
    rows = [
        [x.config.topology, _num(x.bandwidth), x.size, x.subject.variant, x.best_other, x.best_other_run.variant, f"{x.gain:.6f}"]
        + [f"{x.over[n]:.6f}" if n in x.over else "" for n in others]
        for x in table
    ]
    return _csv(header, rows)


@dataclass
class BackendCheck:
    size: int
    rows: list[tuple[str, float, str, int, int]]
    """(topology, bandwidth, variant, packet runtime ps, flow runtime ps)."""

    def csv(self) -> str:
        return _csv(
            ["topology", "bandwidth_gbps", "variant", "size_bytes", "packet_runtime_ps", "flow_runtime_ps", "flow_vs_packet"],
            [[t, _num(bw), v, self.size, p, f, f"{f / p - 1:+.6f}"] for t, bw, v, p, f in self.rows],
        )

    def worst(self) -> tuple[str, float, str, float]:
        t, bw, v, p, f = max(self.rows, key=lambda r: abs(r[4] / r[3] - 1))
        return t, bw, v, f / p - 1


def setup_lines(spec: Spec, backend: str, results: Results) -> list[str]:
    """The figure's setup as bullet texts (Markdown and HTML)."""
    sizes = f"{_fmt_size(spec.sizes[0])} to {_fmt_size(spec.sizes[-1])}, every {spec.size_factor}x ({len(spec.sizes)} sizes)"
    backend_text = {
        "auto": f"auto (packet level below {_fmt_size(spec.flow_min_bytes)}, flow level from there on)",
        "packet": "packet level at every size",
        "flow": "flow level at every size",
    }[backend]
    per_series = [f"{s.name}: {s.backend}" for s in spec.series if s.backend and s.backend != backend]
    if per_series:
        backend_text += "; per series: " + ", ".join(per_series)
    nets = []
    for t in spec.topologies:
        p = spec.stand_ins.get(t, t)
        text = f"{t} ({topology_nodes(t)} nodes)"
        if p != t:
            text += f" standing in for the paper's {p} ({topology_nodes(p)} nodes)"
        if t in spec.references:
            text += " [reference]"
        nets.append(text)
    packet = [r for r in results.runs if r.backend == "packet"]
    ok = sum(r.verified is True for r in packet)
    lines = [
        f"networks: {'; '.join(nets)}",
        f"links {', '.join(_fmt_bw(b) for b in spec.bandwidths)}, {spec.latency_ns:g} ns link latency, "
        f"{spec.switch_latency_ns:g} ns per hop, seed {spec.seed}; peak goodput = D x link bandwidth",
        f"sizes: {sizes}",
        "series: " + "; ".join(
            f"{s.name} ({' / '.join(s.variants)})" + ("" if s.baseline else " [not a baseline]") for s in spec.series
        ),
        f"backend: {backend_text}",
        f"runs: {len(results.runs)}; packet level {len(packet)}, data verified on every rank in {ok}",
        f"gain = goodput({spec.subject.name}) / goodput(best other baseline series) - 1, per network and size",
    ]
    if backend == "auto":
        small_flow = sorted({(r.topology, r.variant) for r in results.runs
                             if r.backend == "flow" and r.size < spec.flow_min_bytes and r.error is None})
        if small_flow:
            lines.append(
                "auto ran these at flow level at every size (contention-free plans, where flow level equals packet "
                "level, or a packet-level data check too large to hold; docs/flow-vs-packet.md): "
                + ", ".join(f"{v} on {t}" for t, v in small_flow)
            )
    for (cfg, name), why in sorted(results.absent.items(), key=lambda kv: (spec.configs.index(kv[0][0]), kv[0][1])):
        lines.append(f"{name} on {spec.label(cfg)}: {why}")
    if any(c.stand_in for c in spec.configs):
        lines.append(
            f"scale {spec.scale} runs smaller networks in place of the paper's: claims marked network-dependent "
            "are n/a on them"
        )
    lines += list(spec.notes)
    return lines


# ---------------------------------------------------------------------------------------------
# The figure kind.


def _variant_backend(spec: Spec, v: str) -> str:
    if spec.override:
        return spec.override
    s = next(s for s in spec.series if v in s.variants)
    return s.backend or spec.backend


def _todo(spec: Spec) -> list[tuple[Config, str]]:
    """(network, variant) pairs the figure runs: every variant of a series not skipped there."""
    return [(cfg, v) for cfg in spec.configs for v in spec.variants
            if any(v in s.variants and s.skip_reason(cfg) is None for s in spec.series)]


@functools.cache
def _unavailable(topo: str, variant: str) -> str | None:
    """Why `variant`'s schedule cannot be built on `topo` (None if it can)."""
    try:
        _core.schedule_export(variant, topo, "json", 1024)
    except ValueError as exc:
        return str(exc)
    return None


def _with_setting(spec: Spec, topo: str, sc: Scenario) -> Scenario:
    """`sc` with the spec's sensitivity setting, if it has one and it applies to `topo`."""
    if spec.setting is None:
        return sc
    sens, value = spec.setting
    if sens.topologies and topo not in sens.topologies and spec.stand_ins.get(topo) not in sens.topologies:
        return sc
    try:
        return sc.with_values(sens.fields_on(sc, value))
    except FieldError as exc:
        raise FigureError(f"{spec.path}: sensitivity {sens.key} = {value!r}: {exc}") from None


_ROW_KEYS = ("topology", "bandwidth_gbps", "algorithm", "size_bytes", "backend")


def _run(row: Mapping[str, Any]) -> Run:
    return Run(row["bandwidth_gbps"], row["algorithm"], row["size_bytes"], row["runtime_ps"], row["goodput_gbps"],
               row["run_backend"], row["verified"], row.get("mismatch"), row["topology"])


def _runs(spec: Spec, rows: Sequence[Mapping[str, Any]]) -> list[Run]:
    """The figure's grid runs (not the backend check's) and, for every (network, variant) with no
    run at all (an optional series whose schedule cannot be built there), one run with `error`."""
    runs = [_run(r) for r in rows if not r.get("check")]
    have = {(r.topology, r.bandwidth, r.variant) for r in runs}
    for cfg, v in _todo(spec):
        if (cfg.topology, cfg.bandwidth, v) not in have:
            why = _unavailable(cfg.topology, v) or f"no runs of {v} on {cfg.topology}"
            runs.append(Run(cfg.bandwidth, v, spec.sizes[0], 0, 0.0, "", None, None, cfg.topology, why))
    return runs


def backend_check(spec: Spec, rows: Sequence[Mapping[str, Any]]) -> BackendCheck | None:
    """With the ``auto`` backend, every variant that ran on both backends at the switch-over size
    (`Spec.flow_min_bytes`), in figure order; None if no variant runs with ``auto``."""
    todo = _todo(spec)
    if not any(_variant_backend(spec, v) == "auto" for _, v in todo):
        return None
    size = spec.flow_min_bytes
    at = {(r["topology"], r["bandwidth_gbps"], r["algorithm"], r["run_backend"]): r for r in rows
          if r["size_bytes"] == size}
    out = []
    for cfg, v in todo:
        pk = at.get((cfg.topology, cfg.bandwidth, v, "packet"))
        fl = at.get((cfg.topology, cfg.bandwidth, v, "flow"))
        if _variant_backend(spec, v) == "auto" and pk is not None and fl is not None:
            out.append((cfg.topology, cfg.bandwidth, v, pk["runtime_ps"], fl["runtime_ps"]))
    return BackendCheck(size, out)


class SizeSweepKind(FigureKind):
    """The Swing figures: networks x series x vector sizes (module docstring)."""

    metrics = "size_sweep"
    claims_columns = ("id", "source", "claim", "paper_value", "measured_value", "pass")
    results_file = "_runs.csv"

    def __init__(self, plot: str) -> None:
        self.plot_kind = plot

    def read(self, fig: Figure, top: TomlTable) -> None:
        raw = {
            "network": top.get("network", dict, what="a [network] table"),
            "grid": top.get("grid", dict, what="a [grid] table"),
            "series": top.get("series", list, what="an array of [[series]] tables"),
            "scales": top.get("scales", dict, {}, "a table of [scales.NAME] tables"),
        }
        fig.data = raw
        for name in read_spec(fig, raw, "full").scales:  # every scale is checked when the file is read
            read_spec(fig, raw, name)

    def scale_names(self, fig: Figure) -> list[str]:
        return list(read_spec(fig, fig.data, "full").scales)

    def scale(self, fig: Figure, name: str) -> Spec:
        return read_spec(fig, fig.data, name)

    def claims_context(self, fig: Figure) -> Spec:
        return read_spec(fig, fig.data, "full")

    def with_backend(self, fig: Figure, sc: Spec, backend: str | None) -> Spec:
        if backend is None:
            return sc
        if backend not in BACKENDS:
            raise FigureError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
        return dataclasses.replace(sc, override=backend)

    def sensitivity_scale(self, fig: Figure, sc: Spec, sens: Sensitivity, value: Any) -> Spec:
        return dataclasses.replace(sc, setting=(sens, value))

    def scenarios(self, fig: Figure, sc: Spec) -> list[tuple[dict[str, Any], Scenario]]:
        """Every (network, variant, size) of the grid with its backend, then (``auto`` backend,
        not in a sensitivity sweep) the backend check's points: each auto-backend variant at
        `Spec.flow_min_bytes` on the backend the grid does not run there. A variant of an
        optional series whose schedule cannot be built on a network is left out."""
        spec = sc
        base = Scenario.from_file(spec.scenario_path)
        optional = {v for v in spec.variants if all(s.optional for s in spec.series if v in s.variants)}
        todo = [(cfg, v) for cfg, v in _todo(spec)
                if v not in optional or _unavailable(cfg.topology, v) is None]
        # `auto` runs a variant at flow level at every size where the simulator says flow level
        # is exact (contention-free plans) or packet level is infeasible; elsewhere it switches at
        # the figure's flow_min_bytes. The simulator's own `auto` decides: a probe run (validated,
        # stopped at 1 ps) of the point at 1 B says why it picked its backend.
        all_flow = set()
        for cfg, v in todo:
            if _variant_backend(spec, v) == "auto":
                probe = point_scenario(spec, base, (cfg.topology, cfg.bandwidth, v, 1, "auto"))
                if _auto_all_sizes_flow(probe.to_toml()) is not None:
                    all_flow.add((cfg.topology, cfg.bandwidth, v))

        def backend(cfg: Config, v: str, size: int) -> str:
            if (cfg.topology, cfg.bandwidth, v) in all_flow:
                return "flow"
            return _resolve(_variant_backend(spec, v), size, spec.flow_min_bytes)

        keys: list[PointKey] = [(cfg.topology, cfg.bandwidth, v, size, backend(cfg, v, size))
                                for cfg, v in todo for size in spec.sizes]
        checks: list[PointKey] = []
        if spec.setting is None:
            have = set(keys)
            for cfg, v in todo:
                if _variant_backend(spec, v) == "auto" and (cfg.topology, cfg.bandwidth, v) not in all_flow:
                    for b in ("packet", "flow"):
                        p = (cfg.topology, cfg.bandwidth, v, spec.flow_min_bytes, b)
                        if p not in have:
                            checks.append(p)
        return [({**dict(zip(_ROW_KEYS, p)), "_check": i >= len(keys)},
                 _with_setting(spec, p[0], point_scenario(spec, base, p)))
                for i, p in enumerate([*keys, *checks])]

    def cost(self, params: Mapping[str, Any]) -> float:
        # Packet-level runs cost about their size times the network size; flow runs much less.
        # Big packet runs first keep every worker busy to the end.
        return (params["backend"] == "packet") * params["size_bytes"] * topology_nodes(params["topology"])

    def row(self, params: Mapping[str, Any], stored: StoredRun, links: bool = False,
            link_kind: str = "network") -> dict[str, Any]:
        m = stored.metrics
        status = json.loads(stored.summary_json).get("status")
        verified = m.get("traffic[0].verified")
        return {
            "topology": params["topology"], "bandwidth_gbps": float(params["bandwidth_gbps"]),
            "algorithm": params["algorithm"], "size_bytes": int(params["size_bytes"]),
            "runtime_ps": int(m["traffic[0].runtime_ps"]), "goodput_gbps": float(m["traffic[0].goodput_gbps"]),
            "run_backend": str(m["backend"]), "verified": None if verified is None else bool(verified),
            "mismatch": None if status == "completed" else str(m.get("status_reason") or status),
            "check": bool(params.get("_check")),
        }

    def table(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]]) -> Results:
        """The claims' view of the runs: a run whose data did not verify is reported (and makes
        `reproduce` exit 1) but never counts towards a claim; for the claims its series is
        unavailable on that network, as if its schedule could not run there."""
        return Results(sc, [dataclasses.replace(r, error=f"data not verified ({r.mismatch})") if r.verified is False else r
                            for r in _runs(sc, rows)])

    def outputs(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        runs = _runs(sc, rows)
        results = Results(sc, runs)
        out = {
            f"{fig.stem}.csv": series_csv(sc, results),
            f"{fig.stem}_runs.csv": runs_csv(sc, runs),
            f"{fig.stem}_gain.csv": gain_csv(sc, results.gains),
        }
        check = backend_check(sc, rows)
        if check is not None:
            out[f"{fig.stem}_backend_check.csv"] = check.csv()
        return out

    def results_table(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]]) -> str:
        return runs_csv(sc, _runs(sc, rows))

    def rows_from_table(self, fig: Figure, sc: Spec, text: str) -> list[dict[str, Any]]:
        return rows_from_csv(sc, text)

    def saved_rows(self, fig: Figure, sc: Spec, out: Path) -> list[dict[str, Any]] | None:
        """The runs in ``OUT/STEM_runs.csv`` and, from ``OUT/STEM_backend_check.csv`` (a result
        of the run: shown again, not recomputed), the backend check's runs; None without the
        first."""
        runs_file = out / f"{fig.stem}_runs.csv"
        if not runs_file.is_file():
            return None
        rows = rows_from_csv(sc, runs_file.read_text(encoding="utf-8"))
        check_file = out / f"{fig.stem}_backend_check.csv"
        if check_file.is_file():
            size = {(r["topology"], r["bandwidth_gbps"], r["algorithm"], r["size_bytes"], r["run_backend"]) for r in rows}
            for r in csv.DictReader(io.StringIO(check_file.read_text(encoding="utf-8"))):
                for b in ("packet", "flow"):
                    key = (r["topology"], float(r["bandwidth_gbps"]), r["variant"], int(r["size_bytes"]), b)
                    if key not in size:
                        rows.append({"topology": key[0], "bandwidth_gbps": key[1], "algorithm": key[2],
                                     "size_bytes": key[3], "runtime_ps": int(r[f"{b}_runtime_ps"]), "goodput_gbps": 0.0,
                                     "run_backend": b, "verified": None, "mismatch": None, "check": True})
        return rows

    def summary(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]]) -> str:
        return f"{fig.paper}, {fig.figure}. Scale `{sc.scale}`; `{command(fig, sc)}`. Pass rules fixed before the runs."

    def setup(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        lines = setup_lines(sc, sc.override or sc.backend, Results(sc, _runs(sc, rows)))
        check = backend_check(sc, rows)
        if check is not None and check.rows:
            t, bw, v, d = check.worst()
            lines.append(f"backend check at {_fmt_size(check.size)} (where `auto` switches to flow level; "
                         f"{fig.stem}_backend_check.csv): largest flow/packet difference {_pct(d)} ({v} on {t} at {_fmt_bw(bw)})")
        return lines

    def command_options(self, sc: Spec) -> str:
        return f" --backend {sc.override}" if sc.override else ""

    def plot(self, fig: Figure, sc: Spec, rows: Sequence[Mapping[str, Any]], claims: Sequence[Claim], out: Path,
             swept: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = ()) -> None:
        from .plots import swing_gain_png, swing_goodput_png

        results = Results(sc, _runs(sc, rows))
        marks = [c for c in claims if c.terms.mark is not None]
        others = [Results(sc, _runs(sc, rs)) for _, rs in swept]
        key = " / ".join(dict.fromkeys(k for k, _ in swept))
        if self.plot_kind == "gain_vs_size":
            swing_gain_png(sc, results.gains, marks, out, (key, [r.gains for r in others]) if others else None)
        else:
            swing_goodput_png(sc, results, marks, out, (key, others) if others else None)


def rows_from_csv(spec: Spec, text: str) -> list[dict[str, Any]]:
    """The figure's grid runs read back from its ``STEM_runs.csv`` (`runs_csv`), as rows (`SizeSweepKind.row`).
    A variant with runs on a network must have them at every size."""
    rows: list[dict[str, Any]] = []
    try:
        for r in csv.DictReader(io.StringIO(text)):
            v = r["verified"]
            rows.append({"topology": r["topology"], "bandwidth_gbps": float(r["bandwidth_gbps"]), "algorithm": r["variant"],
                         "size_bytes": int(r["size_bytes"]), "runtime_ps": int(r["runtime_ps"]),
                         "goodput_gbps": float(r["goodput_gbps"]), "run_backend": r["backend"],
                         "verified": None if v == "n/a" else v == "true", "mismatch": None, "check": False})
    except (KeyError, ValueError) as exc:
        raise FigureError(f"{spec.output}_runs.csv: not a runs table of {spec.name}: {exc}") from None
    have = {(r["topology"], r["bandwidth_gbps"], r["algorithm"], r["size_bytes"]) for r in rows}
    for cfg, v in _todo(spec):
        got = [s for s in spec.sizes if (cfg.topology, cfg.bandwidth, v, s) in have]
        if got and len(got) != len(spec.sizes):
            size = next(s for s in spec.sizes if s not in got)
            raise FigureError(f"{spec.output}_runs.csv: no run of {v} on {cfg.topology} at {_fmt_bw(cfg.bandwidth)}, {size} B")
    return [r for r in rows if (r["topology"], r["bandwidth_gbps"], r["algorithm"]) in
            {(c.topology, c.bandwidth, v) for c, v in _todo(spec)} and r["size_bytes"] in spec.sizes]


register_metrics("size_sweep", Metrics(METRICS, _read_terms, judge_claim), {
    "size": _fmt_size, "share_of_peak": lambda v: f"{100 * v:.1f}% of peak", "runtime_us": lambda v: f"{v:.2f} µs",
})
