"""Paper-figure reproductions (`reducelab reproduce FIGURE`, `reducelab reproduce all`).

A reproduction is two TOML files under ``scenarios/`` (format: docs/reproductions.md):

- a **spec** (e.g. ``scenarios/swing/fig7.toml``): the networks (topologies x bandwidths), the
  vector sizes and the series (algorithms) of the figure; ``[scales.NAME]`` tables shrink the
  grid (fewer sizes, fewer or smaller networks standing in for the paper's);
- a **claims file** (e.g. ``scenarios/swing/fig7.claims.toml``): what the paper says about the
  figure, with the paper's value, how to compute the measured one and the pass rule.

`reproduce` runs every (network, schedule, size) point as a scenario (`point_scenario`: the
spec's base scenario, scenarios/swing/network.toml, with the point's topology, bandwidth,
algorithm, size and backend: one allreduce on the whole topology, packet or flow level) through
the sweep store (`reducelab.sweep.ScenarioSet`: stored points are not run again), keeps per
series and size the fastest variant (as the Swing paper plots the best of the latency- and
bandwidth-optimal versions), computes the subject series' goodput gain over the best other
baseline series, evaluates the claims and writes, into the output directory (``STEM`` = the
spec's ``output``):

- ``STEM.csv``          one row per (network, series, size): the chosen variant and its run
- ``STEM_runs.csv``     every run of every variant
- ``STEM_gain.csv``     gain of the subject over the best other baseline series, and over each
- ``STEM_backend_check.csv``  (``auto`` backend only) every variant at the packet/flow switch-over
  size on both backends
- ``STEM_claims.csv`` and ``STEM_claims.md``  claim, paper value, measured value, pass/fail
- ``STEM.png``          the figure (``gain_vs_size``: gain vs size, one line per network;
  ``goodput_vs_size``: one panel per network, goodput per series, gain and runtime insets)

`reproduce_all` runs every registered figure into ``OUT/NAME/`` and writes ``OUT/index.html``.

The same spec, scale and backend give byte-identical files (no wall-clock values in them; runs are
seeded and their results are read back in the order of the figure's points). Pass rules are
judged by the one claims engine (`reducelab.claims.judge`); the Swing metrics (gains of the best
variant per size, share of peak, backend check) are this module's derivations.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import math
import os
import re
import statistics
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from ._core import ScenarioError
from .claims import (
    BAND_COLUMNS, Band, ClaimError, Sensitivity, band_cells, band_suffix, check_cause_fields, check_pass_rule, claims_table_text,
    expand_readings, extra_html, extra_md, make_band, read_sensitivity, sensitivity_table_csv, sensitivity_table_for,
    sensitivity_tables,
)
from .claims import judge as _judge
from .figures import SIZE_SWEEP_KINDS as KINDS
from .scenario import Scenario
from .store import ResultStore


BACKENDS = ("auto", "packet", "flow")
STORE_FILE = "points.sqlite"
"""The run store a reproduction writes into its output directory unless given one."""

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


class ReproductionError(ValueError):
    """A reproduction name, spec or claims file was rejected (the message says why)."""


# ---------------------------------------------------------------------------------------------
# Locating and loading specs.


def scenarios_dir() -> Path:
    """``$REDUCELAB_SCENARIOS`` if set, else the repository's ``scenarios/`` directory."""
    env = os.environ.get("REDUCELAB_SCENARIOS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "scenarios"


def registry() -> dict[str, Path]:
    """Size-sweep figures by name: every ``scenarios/<paper>/figN.toml`` with a
    ``[figure]`` table of a size-sweep kind (by paper, then figure number). A new figure is its
    two files."""
    out: dict[str, Path] = {}
    files = [p for p in scenarios_dir().glob("*/fig*.toml") if not p.name.endswith(".claims.toml")]
    for p in sorted(files, key=lambda p: (p.parent.name, int("".join(c for c in p.stem if c.isdigit()) or 0))):
        try:
            rep = tomllib.loads(p.read_text(encoding="utf-8")).get("figure")
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ReproductionError(f"{p}: cannot read: {exc}") from None
        if isinstance(rep, dict) and rep.get("kind") in KINDS and isinstance(rep.get("name"), str):
            out[rep["name"]] = p
    return out


def names() -> list[str]:
    """Names `reproduce` accepts (besides ``all``), in figure order."""
    return list(registry())


def spec_path(name: str) -> Path:
    """The spec file of reproduction `name`; raises `ReproductionError` for an unknown name."""
    path = registry().get(name)
    if path is None:
        raise ReproductionError(
            f"unknown figure {name!r}; known: all, {', '.join(names())} (see `reducelab reproduce --list`)"
        )
    return path


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
    """The base scenario (`[reproduction] scenario`): every point is it with the point's
    topology, bandwidth, algorithm, size and backend set (docs/reproductions.md)."""

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


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReproductionError(f"{path}: no such {what} file") from None
    except OSError as exc:
        raise ReproductionError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ReproductionError(f"{path}: invalid TOML: {exc}") from None


class _Table:
    """Typed, strict access to one TOML table: unknown keys and wrong types are errors."""

    def __init__(self, path: Path, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ReproductionError(f"{path}: {where}: expected a table")
        self.path, self.where, self.data = path, where, data
        self.used: set[str] = set()

    def _err(self, key: str, why: str) -> ReproductionError:
        return ReproductionError(f"{self.path}: {self.where}.{key}: {why}")

    def get(self, key: str, types: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise self._err(key, "missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise self._err(key, f"expected {what or types}, got {value!r}")
        if not isinstance(value, types):
            raise self._err(key, f"expected {what or types}, got {value!r}")
        return value

    def number(self, key: str, default: Any = ..., minimum: float = 0.0, positive: bool = False) -> float:
        v = self.get(key, (int, float), default, "a number")
        if not math.isfinite(v) or v < minimum or (positive and v <= 0):
            raise self._err(key, f"must be a finite number {'>' if positive else '>='} {minimum:g}, got {v!r}")
        return float(v)

    def topologies(self, key: str, default: Any = ...) -> Any:
        if key not in self.data and default is not ...:
            self.used.add(key)
            return default
        v = self.get(key, list, what="a list of topology specs")
        if not all(isinstance(t, str) and _TOPOLOGY_RE.match(t) for t in v):
            bad = next((t for t in v if not (isinstance(t, str) and _TOPOLOGY_RE.match(t))), None)
            raise self._err(key, f"{bad!r} is not a topology spec (torus:AxB[xC...], hyperx:AxB, hammingmesh:BXxBY,GXxGY)")
        if len(set(v)) != len(v):
            raise self._err(key, f"has duplicates: {v!r}")
        return tuple(v)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self._err(unknown[0], f"unknown key (known: {', '.join(sorted(self.used))})")


def _size_grid(path: Path, where: str, lo: int, hi: int, factor: int) -> tuple[int, ...]:
    if lo < 1 or hi < lo:
        raise ReproductionError(f"{path}: {where}: need 1 <= size_min_bytes <= size_max_bytes, got {lo}, {hi}")
    if factor < 2:
        raise ReproductionError(f"{path}: {where}.size_factor: must be an integer >= 2, got {factor}")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return tuple(sizes)


_GRID_KEYS = (
    "topologies", "reference_topologies", "bandwidths_gbps", "size_min_bytes", "size_max_bytes",
    "size_factor", "flow_min_bytes", "stand_ins", "note",
)


def load_spec(path: str | os.PathLike[str], scale: str = "full") -> Spec:
    """Parse and validate a reproduction spec, with the grid of `scale` applied."""
    path = Path(path)
    doc = _read_toml(path, "reproduction spec")
    top = _Table(path, "(top level)", doc)
    rep = _Table(path, "figure", top.get("figure", dict))
    net = _Table(path, "network", top.get("network", dict))
    grid = _Table(path, "grid", top.get("grid", dict))
    series_raw = top.get("series", list, what="an array of [[series]] tables")
    scales_raw = top.get("scales", dict, default={}, what="a table of [scales.NAME] tables")
    try:
        sensitivity = tuple(read_sensitivity(str(path), top.get("sensitivity", list, None)))
    except ClaimError as exc:
        raise ReproductionError(str(exc)) from None
    for i, sens in enumerate(sensitivity):
        if sens.key.startswith("params."):
            raise ReproductionError(f"{path}: sensitivity[{i}].key: size-sweep figures take scenario paths, got {sens.key!r}")
    top.done()

    name = rep.get("name", str)
    kind = rep.get("kind", str)
    if kind not in KINDS:
        raise ReproductionError(f"{path}: figure.kind: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    paper, figure = rep.get("paper", str, ""), rep.get("figure", str, "")
    title = rep.get("title", str, name)
    claims_rel = rep.get("claims", str)
    output = rep.get("output", str, name)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", output):
        raise ReproductionError(f"{path}: figure.output: must be a file stem (letters, digits, _ . -), got {output!r}")
    scenario_rel = rep.get("scenario", str, "")
    scenario_path = path.parent / scenario_rel if scenario_rel else scenarios_dir() / "swing" / "network.toml"
    rep.done()

    net_topology = None
    if "topology" in net.data:
        t = net.get("topology", str, what="a topology spec")
        if not _TOPOLOGY_RE.match(t):
            raise net._err("topology", f"{t!r} is not a topology spec (torus:AxB[xC...], hyperx:AxB, hammingmesh:BXxBY,GXxGY)")
        net_topology = (t,)
    latency_ns = net.number("latency_ns")
    switch_latency_ns = net.number("switch_latency_ns")
    backend = net.get("backend", str, "auto")
    if backend not in BACKENDS:
        raise ReproductionError(f"{path}: network.backend: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    net_flow_min = net.get("flow_min_bytes", int, _core.AUTO_FLOW_MIN_BYTES, "an integer")
    if net_flow_min < 1:
        raise net._err("flow_min_bytes", f"must be >= 1, got {net_flow_min}")
    seed = net.get("seed", int, 1, "an integer")
    if not 0 <= seed < 2**64:
        raise ReproductionError(f"{path}: network.seed: must be in [0, 2^64), got {seed}")
    net.done()

    def read_grid(t: _Table, base: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in _GRID_KEYS:
            if k == "topologies":
                dflt: Any = net_topology if base is None else base[k]
                v = t.topologies(k, dflt if dflt is not None else ...)
                if not v:
                    raise t._err(k, "must not be empty")
                out[k] = tuple(v)
            elif k == "reference_topologies":
                out[k] = tuple(t.topologies(k, () if base is None else base[k]))
            elif k == "bandwidths_gbps":
                bws = t.get(k, list, ... if base is None else base[k], "a list of numbers")
                if not bws or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0 for b in bws):
                    raise t._err(k, f"must be a non-empty list of positive numbers, got {bws!r}")
                if len(set(bws)) != len(bws):
                    raise t._err(k, f"has duplicates: {bws!r}")
                out[k] = tuple(sorted(float(b) for b in bws))
            elif k == "flow_min_bytes":
                out[k] = t.get(k, int, net_flow_min if base is None else base[k], "an integer")
                if out[k] < 1:
                    raise t._err(k, f"must be >= 1, got {out[k]}")
            elif k == "stand_ins":
                raw = t.get(k, dict, {}, "a table of SCALE_TOPOLOGY = PAPER_TOPOLOGY")
                if base is None and raw:
                    raise t._err(k, "only [scales.NAME] tables may have stand-ins")
                out[k] = dict(raw)
            elif k == "note":
                out[k] = t.get(k, str, "", "a string")
            else:
                out[k] = t.get(k, int, ... if base is None else base[k], "an integer")
        if set(out["topologies"]) & set(out["reference_topologies"]):
            raise t._err("reference_topologies", "must not repeat a topology of `topologies`")
        t.done()
        return out

    if net_topology is not None and "topologies" in grid.data:
        raise net._err("topology", "give the topology either here or as grid.topologies, not both")
    base = read_grid(grid, None)
    paper_topologies = base["topologies"] + base["reference_topologies"]
    scales = {"full": base}
    for sname, sdata in scales_raw.items():
        t = _Table(path, f"scales.{sname}", sdata)
        g = read_grid(t, base)
        here = g["topologies"] + g["reference_topologies"]
        for actual, stands_for in g["stand_ins"].items():
            if actual not in here:
                raise t._err("stand_ins", f"{actual!r} is not a topology of this scale ({', '.join(here)})")
            if not isinstance(stands_for, str) or stands_for not in paper_topologies:
                raise t._err("stand_ins", f"{actual!r} must stand in for a topology of [grid] ({', '.join(paper_topologies)}), got {stands_for!r}")
        scales[sname] = g
    if scale not in scales:
        raise ReproductionError(f"{path}: unknown scale {scale!r} (known: {', '.join(sorted(scales))})")
    g = scales[scale]
    sizes = _size_grid(path, f"scales.{scale}" if scale != "full" else "grid", g["size_min_bytes"], g["size_max_bytes"], g["size_factor"])

    known = set(_core.algorithms())
    series: list[Series] = []
    for i, raw in enumerate(series_raw):
        t = _Table(path, f"series[{i}]", raw)
        sname = t.get("name", str)
        variants = t.get("variants", list, what="a list of algorithm names")
        if not variants or not all(isinstance(v, str) for v in variants):
            raise t._err("variants", f"must be a non-empty list of algorithm names, got {variants!r}")
        bad = [v for v in variants if v not in known]
        if bad:
            raise t._err("variants", f"unknown algorithm {bad[0]!r} (known: {', '.join(sorted(known))})")
        skip = t.get("skip", dict, {}, "a table of TOPOLOGY = REASON")
        for topo, why in skip.items():
            if not _TOPOLOGY_RE.match(topo) or not isinstance(why, str) or not why:
                raise t._err("skip", f"entries must be TOPOLOGY = \"reason\", got {topo!r} = {why!r}")
        sbackend = t.get("backend", str, None, "a backend name")
        if sbackend is not None and sbackend not in BACKENDS:
            raise t._err("backend", f"unknown backend {sbackend!r} (known: {', '.join(BACKENDS)})")
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
            raise t._err("skip" if s.skip else "optional", "the subject series must run on every network")
        series.append(s)
    if len({s.name for s in series}) != len(series):
        raise ReproductionError(f"{path}: series: names must be unique")
    if sum(s.subject for s in series) != 1 or len(series) < 2:
        raise ReproductionError(f"{path}: series: need exactly one `subject = true` series and at least one other")
    if not any(s.baseline for s in series if not s.subject):
        raise ReproductionError(f"{path}: series: need at least one non-subject series with `baseline = true`")

    notes = (g["note"],) if g["note"] else ()
    if not scenario_path.is_file():
        raise ReproductionError(f"{path}: figure.scenario: {scenario_path}: no such file")
    return Spec(
        scenario_path=scenario_path,
        path=path,
        name=name,
        kind=kind,
        paper=paper,
        figure=figure,
        title=title,
        output=output,
        claims_path=path.parent / claims_rel,
        latency_ns=latency_ns,
        switch_latency_ns=switch_latency_ns,
        backend=backend,
        flow_min_bytes=g["flow_min_bytes"],
        seed=seed,
        scale=scale,
        scales=tuple(sorted(scales)),
        topologies=g["topologies"] + g["reference_topologies"],
        references=g["reference_topologies"],
        stand_ins=g["stand_ins"],
        paper_topologies=paper_topologies,
        bandwidths=g["bandwidths_gbps"],
        sizes=sizes,
        size_factor=g["size_factor"],
        series=tuple(series),
        notes=notes,
        sensitivity=sensitivity,
    )


# ---------------------------------------------------------------------------------------------
# Claims.

@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    quote: str
    claim: str
    paper_value: str
    metric: str
    against: str
    bandwidths: tuple[float, ...] | None  # None = all
    pass_if: str
    note: str = ""
    size_bytes: int | None = None
    min_size_bytes: int | None = None
    max_size_bytes: int | None = None
    subject: str = ""
    """The series measured (default: the spec's subject)."""
    topologies: tuple[str, ...] | None = None
    """Paper topologies evaluated, in this order (None = every one the scale runs)."""
    network_dependent: bool = False
    """Only evaluated on the paper's own networks (n/a where a smaller one stands in)."""
    mark: dict[str, float] | None = None
    """The paper's value drawn on the figure: ``size_bytes`` and one of ``share_of_peak``,
    ``goodput_gbps`` (goodput panels) or ``gain`` (the gain plot or inset), on the claim's
    networks (`reducelab.plots.swing_goodput_png`)."""
    reading: str = ""
    """The reading's name, for a claim the paper words two ways (`claims.expand_readings`)."""
    contradiction: str = ""
    cause: str = ""
    """Why the claim fails at full scale (one of `claims.CAUSES`), with `evidence`."""
    evidence: str = ""
    setting: str = ""
    """With cause ``unstated-setting``: the sensitivity key whose band holds a passing value."""


_MARK_VALUES = ("share_of_peak", "goodput_gbps", "gain")


def _mark(t: _Table) -> dict[str, float] | None:
    raw = t.get("mark", dict, None, "a table { size_bytes = N, share_of_peak | goodput_gbps | gain = X }")
    if raw is None:
        return None
    m = _Table(t.path, f"{t.where}.mark", raw)
    out = {"size_bytes": float(m.get("size_bytes", int, what="an integer"))}
    given = [k for k in _MARK_VALUES if k in raw]
    if len(given) != 1:
        raise m._err("size_bytes", f"give exactly one of {', '.join(_MARK_VALUES)} besides size_bytes")
    out[given[0]] = float(m.get(given[0], (int, float), what="a number"))
    m.done()
    return out


def load_claims(path: str | os.PathLike[str], spec: Spec) -> list[Claim]:
    """Parse and validate a claims file against `spec` (series, variant and topology names)."""
    path = Path(path)
    doc = _read_toml(path, "claims")
    top = _Table(path, "(top level)", doc)
    try:
        raw_claims = expand_readings(str(path), top.get("claim", list, what="an array of [[claim]] tables"))
    except ClaimError as exc:
        raise ReproductionError(str(exc)) from None
    top.done()
    series = {s.name for s in spec.series}
    variants = set(spec.variants)
    claims: list[Claim] = []
    for i, raw in enumerate(raw_claims):
        t = _Table(path, f"claim[{i}]", raw)
        metric = t.get("metric", str)
        if metric not in METRICS:
            raise t._err("metric", f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
        subject = t.get("subject", str, spec.subject.name)
        if subject not in series:
            raise t._err("subject", f"must be a series ({', '.join(sorted(series))}), got {subject!r}")
        if metric in GAIN_METRICS:
            against = t.get("against", str, "best")
            if against != "best" and (against == subject or against not in series | variants):
                raise t._err(
                    "against",
                    f"must be 'best', another series ({', '.join(sorted(series - {subject}))}) or a variant "
                    f"({', '.join(sorted(variants))}), got {against!r}",
                )
        else:
            if "against" in t.data:
                raise t._err("against", f"metric {metric!r} measures the subject alone; remove `against`")
            against = ""
        bws = t.get("bandwidths", (str, list), "all", "'all' or a list of numbers")
        if isinstance(bws, str):
            if bws != "all":
                raise t._err("bandwidths", f"must be 'all' or a list of numbers, got {bws!r}")
            bandwidths = None
        else:
            if not bws or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bws):
                raise t._err("bandwidths", f"must be 'all' or a non-empty list of numbers, got {bws!r}")
            bandwidths = tuple(sorted(float(b) for b in bws))
        topos = t.get("topologies", (str, list), "all", "'all' or a list of topology specs")
        if isinstance(topos, str):
            if topos != "all":
                raise t._err("topologies", f"must be 'all' or a list of topology specs, got {topos!r}")
            topologies = None
        else:
            if not topos or not all(isinstance(x, str) for x in topos):
                raise t._err("topologies", f"must be 'all' or a non-empty list of topology specs, got {topos!r}")
            bad = [x for x in topos if x not in spec.paper_topologies]
            if bad:
                raise t._err("topologies", f"{bad[0]!r} is not a topology of the figure's [grid] ({', '.join(spec.paper_topologies)})")
            topologies = tuple(topos)
        pass_if = t.get("pass_if", str)
        reason = check_pass_rule(pass_if)
        if reason:
            raise t._err("pass_if", reason)
        size = t.get("size_bytes", int, None, "an integer")
        if metric in _AT_SIZE and size is None:
            raise t._err("size_bytes", f"required by metric {metric!r}")
        if metric not in _AT_SIZE and size is not None:
            raise t._err("size_bytes", f"only for the *_at_size metrics; use min_size_bytes / max_size_bytes with {metric!r}")
        claim = Claim(
            id=t.get("id", str),
            source=t.get("source", str, ""),
            quote=t.get("quote", str, ""),
            claim=t.get("claim", str),
            paper_value=t.get("paper_value", str),
            metric=metric,
            against=against,
            bandwidths=bandwidths,
            pass_if=pass_if,
            note=t.get("note", str, ""),
            size_bytes=size,
            min_size_bytes=t.get("min_size_bytes", int, None, "an integer"),
            max_size_bytes=t.get("max_size_bytes", int, None, "an integer"),
            subject=subject,
            topologies=topologies,
            network_dependent=t.get("network_dependent", bool, False, "true or false"),
            mark=_mark(t),
            reading=t.get("reading", str, ""),
            contradiction=t.get("contradiction", str, ""),
            cause=t.get("cause", str, ""),
            evidence=t.get("evidence", str, ""),
            setting=t.get("setting", str, ""),
        )
        bad = check_cause_fields(claim.cause, claim.setting, claim.evidence)
        if bad:
            raise t._err(*bad)
        t.done()
        claims.append(claim)
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ReproductionError(f"{path}: claim ids must be unique, got {ids}")
    return claims


# ---------------------------------------------------------------------------------------------
# Running the grid.


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


def _auto_all_sizes_flow(scenario: Scenario) -> str | None:
    """Why the simulator's `auto` backend runs this point at flow level whatever its size (a
    contention-free plan, or a packet-level data check too large to hold), from a probe run;
    None if it switches at `run.flow_min_bytes`, or if the scenario is rejected (the run itself
    then reports the problem, or marks an optional series absent)."""
    try:
        summary = json.loads(_core.run(scenario.to_toml(), probe=True)["summary_json"])
    except (ValueError, ScenarioError):
        return None
    reason = summary.get("backend_reason") or ""
    if summary.get("backend") != "flow" or "flow_min_bytes" in reason:
        return None
    return reason.removeprefix("auto: ")


def _unavailable(spec: Spec, topo: str, variant: str) -> str | None:
    """Why `variant`'s schedule cannot be built on `topo` (None if it can)."""
    try:
        _core.schedule_export(variant, topo, "json", 1024)
    except ValueError as exc:
        return str(exc)
    return None


def _run_points(
    spec: Spec,
    points: Sequence[PointKey],
    optional: set[str],
    store: ResultStore,
    jobs: int,
    scheduler: Any,
    progress: bool,
    setting: tuple[Sensitivity, Any] | None = None,
) -> list[Run]:
    """Run (topology, bandwidth, variant, size, backend) points through the sweep store (points
    stored before are not run again) and return their runs in the order of `points`.

    A variant of an `optional` series whose schedule cannot be built on a topology is returned
    with `error` set (not run) instead of failing. `setting` (a sensitivity sweep and one of its
    values) sets that field in the points of the sweep's topologies."""
    from .claims import like_default as claims_like_default
    from .scenario import FieldError
    from .sweep import ScenarioSet, SweepRunError

    base = Scenario.from_file(spec.scenario_path)
    name = spec.name

    def scenario_of(p: PointKey) -> Scenario:
        sc = point_scenario(spec, base, p)
        if setting is not None and (not setting[0].topologies or p[0] in setting[0].topologies
                                    or spec.stand_ins.get(p[0]) in setting[0].topologies):
            try:
                values = {}
                for key, v in setting[0].assignments(setting[1]).items():
                    try:
                        values[key] = claims_like_default(sc.get(key), v)
                    except FieldError:
                        values[key] = v  # unset in the base: with_values names a wrong key
                sc = sc.with_values(values)
            except FieldError as exc:
                raise ReproductionError(f"{spec.path}: sensitivity {setting[0].key} = {setting[1]!r}: {exc}") from None
        return sc

    if setting is not None:
        name = f"{spec.name}[{setting[0].key}={setting[1]}]"
    missing: dict[tuple[str, str], str] = {}
    for topo, variant in dict.fromkeys((p[0], p[2]) for p in points):
        if variant in optional:
            why = _unavailable(spec, topo, variant)
            if why is not None:
                missing[(topo, variant)] = why
    todo = [p for p in points if (p[0], p[2]) not in missing]
    scenarios = {p: scenario_of(p) for p in todo}
    if todo:
        # Packet-level runs cost about their size times the network size; flow runs much less.
        # Big packet runs first keep every worker busy to the end (the order of the results
        # does not depend on it: they are read back by point).
        order = sorted(todo, key=lambda p: (p[4] == "packet") * p[3] * topology_nodes(p[0]), reverse=True)
        entries = [({"topology": p[0], "bandwidth_gbps": p[1], "algorithm": p[2], "size_bytes": p[3],
                     "backend": p[4]}, scenarios[p]) for p in order]
        sweep = ScenarioSet(name, entries, spec={"figure": str(spec.path), "scale": spec.scale},
                            spec_path=str(spec.path), scenario_path=str(spec.scenario_path), keep_files=())
        try:
            sweep.run(store, jobs=jobs, scheduler=scheduler, progress=progress, check=False, confirm=True)
        except (FieldError, SweepRunError) as exc:
            raise ReproductionError(str(exc)) from None
    keys = {p: s.key() for p, s in scenarios.items()}
    stored = store.statuses_and_metrics(keys.values())
    out = []
    for p in points:
        topo, bw, variant, size, backend = p
        if (topo, variant) in missing:
            out.append(Run(bw, variant, size, 0, 0.0, backend, None, None, topo, missing[(topo, variant)]))
            continue
        status, m = stored[keys[p]]
        verified = m.get("traffic[0].verified")
        out.append(Run(
            bw, variant, size, int(m["traffic[0].runtime_ps"]), float(m["traffic[0].goodput_gbps"]),
            str(m["backend"]), None if verified is None else bool(verified),
            None if status == "completed" else str(m.get("status_reason") or status), topo,
        ))
    return out


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
            raise ReproductionError(f"{self.spec.path}: no baseline series besides {subject!r} runs on {cfg.topology}")
        return max(others, key=lambda o: o[1].goodput_gbps)  # max keeps the first on a tie

    def run_of(self, cfg: Config, name: str, size: int) -> Run | None:
        """The plotted run of series `name`, or the run of variant `name`."""
        p = self.points.get((cfg, name, size))
        if p is not None:
            return p.run
        if self.spec.series_named(name) is None:
            return self.by.get((cfg.topology, cfg.bandwidth, name, size))
        return None


def best_points(spec: Spec, runs: Iterable[Run]) -> dict[tuple[Config, str, int], Point]:
    """Per (network, series, size) the variant with the shortest runtime (first listed on a tie)."""
    return Results(spec, runs).points


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    values: dict[Config, float]
    """Metric value per network evaluated."""
    measured: str
    verdict: str
    """``pass``, ``fail`` or ``n/a`` (nothing of the claim in this scale's grid)."""
    bands: tuple[Band, ...] = ()
    """One per sensitivity sweep of the figure (`reproduce(..., sensitivity=True)`)."""

    def show_value(self, v: float) -> str:
        """A value of the claim's metric as the claims tables show it."""
        return _fmt_metric(self.claim.metric, v)


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


def _fmt_metric(metric: str, v: float) -> str:
    if metric in ("max_gain_size", "crossover_size"):
        return _fmt_size(v)
    if metric in ("goodput_at_size", "max_goodput"):
        return f"{v:.1f} Gb/s"
    if metric in ("share_of_peak_at_size", "max_share_of_peak"):
        return f"{100 * v:.1f}% of peak"
    if metric == "runtime_at_size":
        return f"{v:.2f} µs"
    return _pct(v)


def _claim_configs(spec: Spec, claim: Claim) -> tuple[list[Config], list[str], list[str]]:
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


def evaluate_claim(spec: Spec, claim: Claim, results: Results) -> ClaimResult:
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
        if claim.metric in _AT_SIZE:
            sizes = [s for s in sizes if s == claim.size_bytes]
        if not sizes:
            continue
        runs = [results.run_of(cfg, subject, s) for s in sizes]
        assert all(r is not None for r in runs)
        at = ""
        if claim.metric in GAIN_METRICS:
            bests: list[str] = []
            vals: list[float] = []
            for s, me in zip(sizes, runs):
                assert me is not None
                if claim.against == "best":
                    name, other = results.best_other(cfg, s, subject)
                else:
                    name, other = claim.against, results.run_of(cfg, claim.against, s)  # type: ignore[assignment]
                    if other is None:
                        raise ReproductionError(f"claim {claim.id}: no run of {claim.against!r} on {cfg.topology}")
                bests.append(name)
                vals.append(me.goodput_gbps / other.goodput_gbps - 1.0)
            if claim.metric == "fraction_positive":
                k = sum(v > 0 for v in vals)
                values[cfg], shown[cfg] = k / len(vals), f"{k}/{len(vals)}"
                continue
            if claim.metric in ("min_gain", "max_gain", "max_gain_size"):
                pick = min if claim.metric == "min_gain" else max
                i = pick(range(len(vals)), key=vals.__getitem__)
                v = vals[i] if claim.metric != "max_gain_size" else float(sizes[i])
                vs = f" vs {bests[i]}" if claim.against == "best" else ""
                at = f" @{_fmt_size(sizes[i])}{vs}" if claim.metric != "max_gain_size" else f" (gain {_pct(vals[i])}{vs})"
            elif claim.metric == "median_gain":
                v = statistics.median(vals)
            elif claim.metric == "crossover_size":
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
            if claim.metric in ("goodput_at_size", "max_goodput"):
                i = max(range(len(gps)), key=gps.__getitem__)
                v = gps[i]
                at = f" @{_fmt_size(sizes[i])}" if claim.metric == "max_goodput" else ""
            elif claim.metric in ("share_of_peak_at_size", "max_share_of_peak"):
                i = max(range(len(gps)), key=gps.__getitem__)
                v = gps[i] / cfg.peak_gbps
                at = (f" @{_fmt_size(sizes[i])}" if claim.metric == "max_share_of_peak" else "") + f" ({gps[i]:.1f} of {cfg.peak_gbps:g} Gb/s)"
            else:  # runtime_at_size
                r = runs[0]
                assert r is not None
                v = r.runtime_ps / 1e6
            if runs[0] is not None and claim.metric in ("goodput_at_size", "share_of_peak_at_size", "runtime_at_size"):
                at += f" ({runs[0].variant})" if runs[0].variant != subject else ""
        values[cfg] = v
        shown[cfg] = _fmt_metric(claim.metric, v) + at

    measured = "; ".join(f"{spec.label(c)}: {shown[c]}" for c in values)
    extra = []
    if missing:
        extra.append(f"not in this scale: {', '.join(missing)}")
    if skipped:
        extra.append(f"n/a at this scale ({'; '.join(skipped)})")
    if absent:
        extra.append(f"not run: {', '.join(absent)}")
    measured = "; ".join([measured, *extra] if measured else extra)
    verdict, detail = _judge(claim.pass_if, list(values.values()))
    if detail:
        keys = list(values)
        if detail in (">", "<=", "<", ">="):
            measured += f" ({spec.label(keys[0], False)} {detail} {spec.label(keys[-1], False)})"
        else:
            measured += f" ({detail})"
    return ClaimResult(claim, values, measured, verdict)


def judge_claims(spec: Spec, claims: Sequence[Claim], runs: Sequence[Run]) -> list[ClaimResult]:
    """Every claim judged on `runs` (the figure's grid points, in order).

    Claims are judged on verified runs only: a run whose data did not verify is reported (and
    makes `reproduce` exit 1) but never counts towards a claim; for the claims its series is
    unavailable on that network, as if its schedule could not run there."""
    judged = Results(spec, [dataclasses.replace(r, error=f"data not verified ({r.mismatch})") if r.verified is False else r
                            for r in runs])
    return [evaluate_claim(spec, c, judged) for c in claims]


def with_bands(results: Sequence[ClaimResult], sens: Sensitivity, at: Sequence[Sequence[ClaimResult]]) -> list[ClaimResult]:
    """`results` each with its band over a sensitivity sweep (`at[i]`: the claims at `sens.values[i]`)."""
    out = []
    for i, r in enumerate(results):
        band = make_band(sens.key, sens.values, [(x[i].verdict, x[i].measured, list(x[i].values.values())) for x in at])
        out.append(dataclasses.replace(r, bands=(*r.bands, band)))
    return out


def runs_from_csv(spec: Spec, text: str) -> list[Run]:
    """The figure's grid runs read back from its ``STEM_runs.csv`` (`runs_csv`), in the order of
    `points` (every (network, variant, size) the spec runs); a variant with no rows on a
    network (an optional series whose schedule could not be built there) comes back with
    `error` set, as when it ran."""
    by: dict[tuple[str, float, str, int], Run] = {}
    for r in csv.DictReader(io.StringIO(text)):
        v = r["verified"]
        run = Run(float(r["bandwidth_gbps"]), r["variant"], int(r["size_bytes"]), int(r["runtime_ps"]),
                  float(r["goodput_gbps"]), r["backend"], None if v == "n/a" else v == "true", None, r["topology"])
        by[(run.topology, run.bandwidth, run.variant, run.size)] = run
    out = []
    for cfg in spec.configs:
        for v in spec.variants:
            if not any(v in s.variants and s.skip_reason(cfg) is None for s in spec.series):
                continue
            for size in spec.sizes:
                run = by.get((cfg.topology, cfg.bandwidth, v, size))
                if run is None:
                    if not any((cfg.topology, cfg.bandwidth, v, x) in by for x in spec.sizes):
                        run = Run(cfg.bandwidth, v, size, 0, 0.0, "", None, None, cfg.topology,
                                  f"no runs of {v} on {cfg.topology} in {spec.output}_runs.csv")
                    else:
                        raise ReproductionError(f"{spec.output}_runs.csv: no run of {v} on {cfg.topology} at "
                                                f"{_fmt_bw(cfg.bandwidth)}, {size} B")
                out.append(run)
    return out


def reevaluate(name_or_path: str | os.PathLike[str], out: str | os.PathLike[str], scale: str = "full") -> list[ClaimResult]:
    """Judge a figure's claims again on its results in `out` without running anything (its
    ``STEM_runs.csv``, e.g. the committed full-scale results) and rewrite ``STEM_claims.csv``
    and ``STEM_claims.md`` there (`reducelab reproduce FIG --claims-only`)."""
    text = os.fspath(name_or_path)
    path = Path(text) if text.endswith(".toml") else spec_path(text)
    spec = load_spec(path, scale)
    claims = load_claims(spec.claims_path, spec)
    out = Path(out)
    runs_file = out / f"{spec.output}_runs.csv"
    try:
        runs = runs_from_csv(spec, runs_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReproductionError(f"{runs_file}: no such file (run the figure first, or give --out its results)") from None
    except (KeyError, ValueError) as exc:
        raise ReproductionError(f"{runs_file}: not a runs table of {spec.name}: {exc}") from None
    results = judge_claims(spec, claims, runs)
    sens_file = out / f"{spec.output}_sensitivity.csv"
    if sens_file.is_file():  # the runs of a --sensitivity sweep: the claims get their bands again
        tables = sensitivity_tables(sens_file.read_text(encoding="utf-8"), str(sens_file))
        for sens in spec.sensitivity:
            at = []
            for value in sens.values:
                text = sensitivity_table_for(tables, sens, value, str(sens_file))
                try:
                    at.append(judge_claims(spec, claims, runs_from_csv(spec, text)))
                except (KeyError, ValueError) as exc:
                    raise ReproductionError(f"{sens_file}: {sens.key} = {value!r}: not a runs table of {spec.name}: {exc}") from None
            results = with_bands(results, sens, at)
    check = None
    check_file = out / f"{spec.output}_backend_check.csv"
    if check_file.is_file():  # the backend check is a result of the run: shown again, not recomputed
        rows = list(csv.DictReader(io.StringIO(check_file.read_text(encoding="utf-8"))))
        if rows:
            check = BackendCheck(int(rows[0]["size_bytes"]), [
                (r["topology"], float(r["bandwidth_gbps"]), r["variant"], int(r["packet_runtime_ps"]), int(r["flow_runtime_ps"]))
                for r in rows])
    data = Results(spec, runs)
    backend = "auto" if check is not None else spec.backend
    (out / f"{spec.output}_claims.csv").write_text(claims_csv(results), encoding="utf-8")
    (out / f"{spec.output}_claims.md").write_text(claims_md(spec, backend, results, data, check), encoding="utf-8")
    return results


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


def claims_csv(results: Sequence[ClaimResult]) -> str:
    """``id,source,claim,paper_value,measured_value,pass``, then ``band,band_passes`` when
    sensitivity sweeps ran."""
    bands = any(r.bands for r in results)
    rows = [[r.claim.id, r.claim.source, r.claim.claim, r.claim.paper_value, r.measured, r.verdict,
             *(band_cells(r.bands, r.show_value) if bands else ())] for r in results]
    return _csv(["id", "source", "claim", "paper_value", "measured_value", "pass", *(BAND_COLUMNS if bands else ())], rows)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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


def claims_md(spec: Spec, backend: str, results: Sequence[ClaimResult], data: Results, check: BackendCheck | None) -> str:
    lines = [
        f"# {spec.name}: {spec.title}",
        "",
        f"{spec.paper}, {spec.figure}. Spec: `{spec.path.name}`, claims: `{spec.claims_path.name}`, scale `{spec.scale}`.",
        "",
        *(f"- {x}" for x in setup_lines(spec, backend, data)),
        "",
        "| id | source | claim | paper | measured | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.claim
        lines.append(
            f"| {c.id} | {c.source} | {_md_cell(c.claim)} | {_md_cell(c.paper_value)} | {_md_cell(r.measured)} | **{r.verdict}** |"
        )
    passed = sum(r.verdict == "pass" for r in results)
    failed = sum(r.verdict == "fail" for r in results)
    lines += ["", f"{passed} pass, {failed} fail, {len(results) - passed - failed} n/a."]
    lines += extra_md(results)
    lines += ["", "## Claims as quoted", ""]
    for r in results:
        lines.append(f"- **{r.claim.id}** ({r.claim.source}): \"{r.claim.quote}\" {_check_text(spec, r.claim)}")
    if check is not None and check.rows:
        t, bw, v, d = check.worst()
        lines += [
            "",
            "## Backend check",
            "",
            f"Every variant at {_fmt_size(check.size)} (where `auto` switches to flow level) on both backends: "
            f"largest flow/packet difference {_pct(d)} ({v} on {t} at {_fmt_bw(bw)}); see `{spec.output}_backend_check.csv`.",
        ]
    return "\n".join(lines) + "\n"


def _check_text(spec: Spec, c: Claim) -> str:
    subj = c.subject if c.subject and c.subject != spec.subject.name else ""
    what = f"`{c.metric}`" + (f" of `{subj}`" if subj else "") + (f" against `{c.against}`" if c.against else "")
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
    note = f" Interpretation: {c.note}." if c.note else ""
    return f"Check: {what}{' ' + ', '.join(where) if where else ''}, pass if `{c.pass_if}`.{dep}{note}"


# ---------------------------------------------------------------------------------------------
# Plots.


# ---------------------------------------------------------------------------------------------
# The whole reproduction.


@dataclass
class Report:
    spec: Spec
    backend: str
    runs: list[Run]
    results: Results
    claims: list[ClaimResult]
    check: BackendCheck | None
    files: dict[str, bytes | str]
    wall_seconds: float
    command: str = ""

    @property
    def points(self) -> dict[tuple[Config, str, int], Point]:
        return self.results.points

    @property
    def gains(self) -> list[Gain]:
        return self.results.gains

    @property
    def unverified(self) -> list[Run]:
        return [r for r in self.runs if r.verified is False]

    def counts(self) -> tuple[int, int, int]:
        p = sum(r.verdict == "pass" for r in self.claims)
        f = sum(r.verdict == "fail" for r in self.claims)
        return p, f, len(self.claims) - p - f

    def claims_table(self) -> str:
        """The claims as a plain-text table for a terminal (measured value last, unpadded)."""
        return claims_table_text([(r.claim.id, r.verdict, r.claim.paper_value, r.measured + band_suffix(r.bands, r.show_value))
                                  for r in self.claims])

    def claim_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """Rows of `reproduce all`'s one claims table (`claims.ALL_CLAIMS_COLUMNS`)."""
        return [(self.spec.name, r.claim.id, r.claim.source, r.claim.claim, r.claim.paper_value, r.measured, r.verdict)
                for r in self.claims]


def _command(name: str, scale: str, backend: str | None, out: Path | str) -> str:
    cmd = f"reducelab reproduce {name} --scale {scale}"
    if backend:
        cmd += f" --backend {backend}"
    return cmd + f" --out {out}"


def reproduce(
    name_or_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    scale: str = "small",
    backend: str | None = None,
    jobs: int | None = None,
    progress: bool = False,
    store: str | os.PathLike[str] | ResultStore | None = None,
    scheduler: Any = None,
    sensitivity: bool = False,
) -> Report:
    """Run a reproduction (a name from `names()` or a spec path) and write its files into `out`.

    With `sensitivity`, also run the figure's points at every value of each ``[[sensitivity]]``
    setting (through the same store) and give each claim its band over them.

    Every point runs through the sweep store `store` (default ``OUT/points.sqlite``): a stored
    point is not run again (an interrupted figure resumes; `reproduce_all` shares one store, so
    figures reaching the same point run it once). Points run in `jobs` local worker processes,
    or on the Dask cluster `scheduler` (``tcp://HOST:PORT``).
    """
    t0 = time.monotonic()
    text = os.fspath(name_or_path)
    path = Path(text) if text.endswith(".toml") else spec_path(text)
    spec = load_spec(path, scale)
    claims = load_claims(spec.claims_path, spec)
    override = backend
    if backend is not None and backend not in BACKENDS:
        raise ReproductionError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1)

    def variant_backend(v: str) -> str:
        if override:
            return override
        s = next(s for s in spec.series if v in s.variants)
        return s.backend or spec.backend

    optional = {v for v in spec.variants if all(s.optional for s in spec.series if v in s.variants)}
    todo: list[tuple[Config, str]] = [
        (cfg, v) for cfg in spec.configs for v in spec.variants
        if any(v in s.variants and s.skip_reason(cfg) is None for s in spec.series)
    ]
    # `auto` runs a variant at flow level at every size where the simulator says flow level
    # is exact (contention-free plans) or packet level is infeasible; elsewhere it switches at
    # the figure's flow_min_bytes. The simulator's own `auto` decides: a probe run (validated,
    # stopped at 1 ps) of the point at 1 B says why it picked its backend.
    all_flow: dict[tuple[str, float, str], str] = {}
    base = Scenario.from_file(spec.scenario_path)
    for cfg, v in todo:
        if variant_backend(v) == "auto":
            why = _auto_all_sizes_flow(point_scenario(spec, base, (cfg.topology, cfg.bandwidth, v, 1, "auto")))
            if why is not None:
                all_flow[(cfg.topology, cfg.bandwidth, v)] = why

    def point_backend(cfg: Config, v: str, size: int) -> str:
        if (cfg.topology, cfg.bandwidth, v) in all_flow:
            return "flow"
        return _resolve(variant_backend(v), size, spec.flow_min_bytes)

    points: list[PointKey] = [
        (cfg.topology, cfg.bandwidth, v, size, point_backend(cfg, v, size))
        for cfg, v in todo for size in spec.sizes
    ]
    check_size = spec.flow_min_bytes
    check_points: list[PointKey] = []
    have = set(points)
    for cfg, v in todo:
        if variant_backend(v) == "auto" and (cfg.topology, cfg.bandwidth, v) not in all_flow:
            for b in ("packet", "flow"):
                p = (cfg.topology, cfg.bandwidth, v, check_size, b)
                if p not in have:
                    check_points.append(p)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = not isinstance(store, ResultStore)
    db = ResultStore(store if store is not None else out / STORE_FILE) if own else store
    swept: list[tuple[Sensitivity, list[list[ClaimResult]]]] = []
    swept_runs: list[tuple[str, Any, str]] = []
    try:
        every = _run_points(spec, [*points, *check_points], optional, db, jobs, scheduler, progress)
        if sensitivity:
            for sens in spec.sensitivity:
                at = []
                for value in sens.values:
                    sruns = _run_points(spec, points, optional, db, jobs, scheduler, progress, (sens, value))
                    at.append(judge_claims(spec, claims, sruns))
                    swept_runs.append((sens.key, value, runs_csv(spec, sruns)))
                swept.append((sens, at))
    finally:
        if own:
            db.close()
    runs, extra = every[:len(points)], every[len(points):]

    results = Results(spec, runs)
    check = None
    if any(variant_backend(v) == "auto" for _, v in todo):
        every = {(r.topology, r.bandwidth, r.variant, r.size, r.backend): r for r in [*runs, *extra] if r.error is None}
        rows = []
        for cfg, v in todo:
            if variant_backend(v) != "auto" or (cfg.topology, cfg.bandwidth, v) in all_flow:
                continue
            pk = every.get((cfg.topology, cfg.bandwidth, v, check_size, "packet"))
            fl = every.get((cfg.topology, cfg.bandwidth, v, check_size, "flow"))
            if pk is not None and fl is not None:
                rows.append((cfg.topology, cfg.bandwidth, v, pk.runtime_ps, fl.runtime_ps))
        check = BackendCheck(check_size, rows)

    claim_results = judge_claims(spec, claims, runs)
    for sens, at in swept:
        claim_results = with_bands(claim_results, sens, at)
    stem = spec.output
    effective = override or spec.backend
    files: dict[str, bytes | str] = {
        f"{stem}.csv": series_csv(spec, results),
        f"{stem}_runs.csv": runs_csv(spec, runs),
        f"{stem}_gain.csv": gain_csv(spec, results.gains),
        f"{stem}_claims.csv": claims_csv(claim_results),
        f"{stem}_claims.md": claims_md(spec, effective, claim_results, results, check),
    }
    if check is not None:
        files[f"{stem}_backend_check.csv"] = check.csv()
    if swept_runs:
        files[f"{stem}_sensitivity.csv"] = sensitivity_table_csv(swept_runs)
    for fname, content in files.items():
        (out / fname).write_text(content, encoding="utf-8") if isinstance(content, str) else (out / fname).write_bytes(content)
    from .plots import swing_gain_png, swing_goodput_png

    marks = [c for c in claims if c.mark is not None]
    if spec.kind == "gain_vs_size":
        png = swing_gain_png(spec, results.gains, marks, out / f"{stem}.png")
    else:
        png = swing_goodput_png(spec, results, marks, out / f"{stem}.png")
    files[png.name] = png.read_bytes()
    return Report(spec, effective, runs, results, claim_results, check, files, time.monotonic() - t0,
                  _command(spec.name, scale, override, out))


# ---------------------------------------------------------------------------------------------
# Every figure and the HTML report.


@dataclass
class AllReport:
    scale: str
    reports: list[Report]
    files: dict[str, str]
    wall_seconds: float


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; text-align: left; }
th { background: #f2f2f2; }
td.pass { background: #dff3df; font-weight: bold; }
td.fail { background: #f8dcdc; font-weight: bold; }
td.na { background: #eee; color: #666; }
code, pre { background: #f6f6f6; padding: 0.1em 0.3em; }
img { max-width: 100%; border: 1px solid #ddd; }
section { border-top: 2px solid #888; margin-top: 2em; }
.quote { color: #555; font-style: italic; }
"""


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def report_html(scale: str, backend: str | None, out: Path, reports: Sequence[Report]) -> str:
    """A self-contained HTML page (no scripts): per figure the plot, setup, command and claims."""
    def cls(v: str) -> str:
        return {"pass": "pass", "fail": "fail"}.get(v, "na")

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ReduceLab reproductions ({_h(scale)})</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>ReduceLab paper reproductions, scale <code>{_h(scale)}</code></h1>",
        f"<p>Regenerate everything: <code>{_h(_command('all', scale, backend, out))}</code>. "
        "Each figure's files (CSV data, every run, claims as CSV/Markdown, plot) are in its directory. "
        "Pass rules were fixed in the claims files before looking at results.</p>",
        "<table><tr><th>figure</th><th>title</th><th>pass</th><th>fail</th><th>n/a</th></tr>",
    ]
    for r in reports:
        p, f, n = r.counts()
        parts.append(
            f'<tr><td><a href="#{_h(r.spec.name)}">{_h(r.spec.name)}</a></td><td>{_h(r.spec.figure)}: {_h(r.spec.title)}</td>'
            f'<td class="pass">{p}</td><td class="fail">{f}</td><td class="na">{n}</td></tr>'
        )
    tp = sum(r.counts()[0] for r in reports)
    tf = sum(r.counts()[1] for r in reports)
    tn = sum(r.counts()[2] for r in reports)
    parts.append(f"<tr><th>all</th><th></th><th>{tp}</th><th>{tf}</th><th>{tn}</th></tr></table>")
    for r in reports:
        s = r.spec
        d = s.name
        p, f, n = r.counts()
        parts += [
            f'<section id="{_h(d)}"><h2>{_h(s.figure)}: {_h(s.title)} <small>({_h(d)})</small></h2>',
            f"<p>{_h(s.paper)}. Spec <code>{_h(str(s.path.relative_to(scenarios_dir().parent)) if s.path.is_relative_to(scenarios_dir().parent) else s.path.name)}</code>, "
            f"claims <code>{_h(s.claims_path.name)}</code>. {p} pass, {f} fail, {n} n/a.</p>",
            f"<p>Regenerate: <code>{_h(_command(d, scale, backend, Path(out) / d))}</code></p>",
            f'<p><img src="{_h(d)}/{_h(s.output)}.png" alt="{_h(s.figure)} reproduction"></p>',
            "<ul>", *(f"<li>{_h(x)}</li>" for x in setup_lines(s, r.backend, r.results)),
        ]
        if r.check is not None and r.check.rows:
            t, bw, v, dd = r.check.worst()
            parts.append(
                f"<li>backend check at {_h(_fmt_size(r.check.size))}: largest flow/packet difference "
                f"{_h(_pct(dd))} ({_h(v)} on {_h(t)} at {_h(_fmt_bw(bw))})</li>"
            )
        parts += [
            "</ul>",
            "<table><tr><th>id</th><th>source</th><th>claim and quote</th><th>paper</th><th>measured</th><th>result</th></tr>",
        ]
        for c in r.claims:
            cl = c.claim
            parts.append(
                f'<tr id="{_h(d)}-{_h(cl.id)}"><td>{_h(cl.id)}</td><td>{_h(cl.source)}</td>'
                f'<td>{_h(cl.claim)}<br><span class="quote">"{_h(cl.quote)}"</span><br><small>{_h(_check_text(s, cl))}</small>'
                f'{extra_html(cl.contradiction, c.verdict, cl.cause, cl.evidence)}</td>'
                f"<td>{_h(cl.paper_value)}</td><td>{_h(c.measured)}</td>"
                f'<td class="{cls(c.verdict)}">{_h(c.verdict)}</td></tr>'
            )
        parts += [
            "</table>",
            "<p>Files: " + ", ".join(f'<a href="{_h(d)}/{_h(n)}">{_h(n)}</a>' for n in sorted(r.files)) + "</p>",
            "</section>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def reproduce_all(
    out: str | os.PathLike[str],
    scale: str = "small",
    backend: str | None = None,
    jobs: int | None = None,
    progress: bool = False,
    figures: Sequence[str] | None = None,
    on_done: Callable[[Report], None] | None = None,
    store: str | os.PathLike[str] | None = None,
    scheduler: Any = None,
    sensitivity: bool = False,
) -> AllReport:
    """Every figure (or `figures`) into ``out/NAME/`` through one store (default
    ``out/points.sqlite``), then ``out/index.html``."""
    t0 = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    for name in figures or names():
        rep = reproduce(name, out / name, scale=scale, backend=backend, jobs=jobs, progress=progress,
                        store=store if store is not None else out / STORE_FILE, scheduler=scheduler,
                        sensitivity=sensitivity)
        reports.append(rep)
        if on_done is not None:
            on_done(rep)
    page = report_html(scale, backend, out, reports)
    (out / "index.html").write_text(page, encoding="utf-8")
    return AllReport(scale, reports, {"index.html": page}, time.monotonic() - t0)


def run_all_cli(out: Path, scale: str, backend: str | None, jobs: int | None, quiet: bool,
                store: Path | None = None, scheduler: Any = None, reports: list[Report] | None = None,
                sensitivity: bool = False) -> int:
    """`reducelab reproduce all`: every figure, a one-line summary each, then the HTML report.
    Appends the figures' reports to `reports` if given.

    Returns the exit status (1 if a packet-level run's data did not verify)."""
    def done(r: Report) -> None:
        if not quiet:
            p, f, n = r.counts()
            print(f"{r.spec.name:<12} {p:>2} pass {f:>2} fail {n:>2} n/a  {len(r.results.runs):>5} runs  {r.wall_seconds:6.1f} s", flush=True)

    try:
        rep = reproduce_all(out, scale=scale, backend=backend, jobs=jobs, progress=not quiet, on_done=done,
                            store=store, scheduler=scheduler, sensitivity=sensitivity)
    except OSError as exc:
        print(f"error: {out}: cannot write results: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if reports is not None:
        reports.extend(rep.reports)
    if not quiet:
        print(f"wrote {out / 'index.html'} ({len(rep.reports)} figures) in {rep.wall_seconds:.0f} s")
    bad = [r for rep1 in rep.reports for r in rep1.unverified]
    if bad:
        r = bad[0]
        print(f"error: {len(bad)} packet-level runs did not verify, e.g. {r.variant} on {r.topology}, {r.size} B: {r.mismatch}", file=sys.stderr)
        return 1
    return 0
