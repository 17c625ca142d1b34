"""Paper-figure reproductions (`reducelab reproduce FIGURE`).

A reproduction is two TOML files under ``scenarios/`` (format: docs/reproductions.md):

- a **spec** (e.g. ``scenarios/swing/fig9.toml``): the network, a grid of bandwidths and vector
  sizes, and the series (algorithms) of the figure; ``[scales.NAME]`` tables shrink the grid;
- a **claims file** (e.g. ``scenarios/swing/fig9.claims.toml``): what the paper says about the
  figure, with the paper's value and how to compute the measured one.

`reproduce` runs every (bandwidth, schedule, size) point with `_core.run_collective` (one allreduce
on the whole topology, packet or flow level; see crates/sim/src/collective_run.rs), keeps per
series and size the fastest variant (as the Swing paper plots the best of the latency- and
bandwidth-optimal versions), computes the subject series' goodput gain over the best other series,
evaluates the claims and writes, into the output directory (``STEM`` = the spec's ``output``):

- ``STEM.csv``          one row per (bandwidth, series, size): the chosen variant and its run
- ``STEM_runs.csv``     every run of every variant
- ``STEM_gain.csv``     the plotted data: gain of the subject over the best other series
- ``STEM_backend_check.csv``  (``auto`` backend only) every variant at the packet/flow switch-over
  size on both backends
- ``STEM_claims.csv`` and ``STEM_claims.md``  claim, paper value, measured value, pass/fail
- ``STEM.png``          the figure: gain vs vector size, one line per bandwidth

The same spec, scale and backend give byte-identical files (no wall-clock values in them; runs are
seeded and their results are ordered before writing). Runs execute on a thread pool: the simulator
releases the GIL, and built schedules are shared through its process-wide cache.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import statistics
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core

#: Reproductions known by name: name -> spec file relative to the scenarios directory.
REPRODUCTIONS: dict[str, str] = {
    "swing-fig9": "swing/fig9.toml",
}

BACKENDS = ("auto", "packet", "flow")
KINDS = ("gain_vs_size",)
METRICS = ("fraction_positive", "min_gain", "max_gain", "median_gain", "gain_at_size")


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


def names() -> list[str]:
    """Names `reproduce` accepts."""
    return sorted(REPRODUCTIONS)


def spec_path(name: str) -> Path:
    """The spec file of reproduction `name`; raises `ReproductionError` for an unknown name."""
    rel = REPRODUCTIONS.get(name)
    if rel is None:
        raise ReproductionError(
            f"unknown figure {name!r}; known: {', '.join(names())} (see `reducelab reproduce --list`)"
        )
    return scenarios_dir() / rel


@dataclass(frozen=True)
class Series:
    name: str
    label: str
    variants: tuple[str, ...]
    subject: bool = False


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
    topology: str
    latency_ns: float
    hop_ns: float
    backend: str
    seed: int
    scale: str
    scales: tuple[str, ...]
    bandwidths: tuple[float, ...]
    sizes: tuple[int, ...]
    size_factor: int
    series: tuple[Series, ...]

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


def load_spec(path: str | os.PathLike[str], scale: str = "full") -> Spec:
    """Parse and validate a reproduction spec, with the grid of `scale` applied."""
    path = Path(path)
    doc = _read_toml(path, "reproduction spec")
    top = _Table(path, "(top level)", doc)
    rep = _Table(path, "reproduction", top.get("reproduction", dict))
    net = _Table(path, "network", top.get("network", dict))
    grid = _Table(path, "grid", top.get("grid", dict))
    series_raw = top.get("series", list, what="an array of [[series]] tables")
    scales_raw = top.get("scales", dict, default={}, what="a table of [scales.NAME] tables")
    top.done()

    name = rep.get("name", str)
    kind = rep.get("kind", str)
    if kind not in KINDS:
        raise ReproductionError(f"{path}: reproduction.kind: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    paper, figure = rep.get("paper", str, ""), rep.get("figure", str, "")
    title = rep.get("title", str, name)
    claims_rel = rep.get("claims", str)
    output = rep.get("output", str, name)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", output):
        raise ReproductionError(f"{path}: reproduction.output: must be a file stem (letters, digits, _ . -), got {output!r}")
    rep.done()

    topology = net.get("topology", str)
    latency_ns = net.number("latency_ns")
    hop_ns = net.number("hop_ns")
    backend = net.get("backend", str, "auto")
    if backend not in BACKENDS:
        raise ReproductionError(f"{path}: network.backend: unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    seed = net.get("seed", int, 1, "an integer")
    if not 0 <= seed < 2**64:
        raise ReproductionError(f"{path}: network.seed: must be in [0, 2^64), got {seed}")
    net.done()

    keys = ("bandwidths_gbps", "size_min_bytes", "size_max_bytes", "size_factor")

    def read_grid(t: _Table, base: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in keys:
            default = ... if base is None else base[k]
            if k == "bandwidths_gbps":
                bws = t.get(k, list, default, "a list of numbers")
                if not bws or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0 for b in bws):
                    raise t._err(k, f"must be a non-empty list of positive numbers, got {bws!r}")
                if len(set(bws)) != len(bws):
                    raise t._err(k, f"has duplicates: {bws!r}")
                out[k] = tuple(sorted(float(b) for b in bws))
            else:
                out[k] = t.get(k, int, default, "an integer")
        t.done()
        return out

    base = read_grid(grid, None)
    scales = {"full": base}
    for sname, sdata in scales_raw.items():
        scales[sname] = read_grid(_Table(path, f"scales.{sname}", sdata), base)
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
        series.append(Series(sname, t.get("label", str, sname), tuple(variants), t.get("subject", bool, False, "true or false")))
        t.done()
    if len({s.name for s in series}) != len(series):
        raise ReproductionError(f"{path}: series: names must be unique")
    if sum(s.subject for s in series) != 1 or len(series) < 2:
        raise ReproductionError(f"{path}: series: need exactly one `subject = true` series and at least one other")

    return Spec(
        path=path,
        name=name,
        kind=kind,
        paper=paper,
        figure=figure,
        title=title,
        output=output,
        claims_path=path.parent / claims_rel,
        topology=topology,
        latency_ns=latency_ns,
        hop_ns=hop_ns,
        backend=backend,
        seed=seed,
        scale=scale,
        scales=tuple(sorted(scales)),
        bandwidths=g["bandwidths_gbps"],
        sizes=sizes,
        size_factor=g["size_factor"],
        series=tuple(series),
    )


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


_PASS_RE = re.compile(
    r"^\s*(?:(all)\s*(>=|<=|>|<)\s*(-?[0-9.]+(?:e-?[0-9]+)?)"
    r"|(all)\s+in\s*\[\s*(-?[0-9.]+)\s*,\s*(-?[0-9.]+)\s*\]"
    r"|first\s*(>|<)\s*last)\s*$"
)


def load_claims(path: str | os.PathLike[str], spec: Spec) -> list[Claim]:
    """Parse and validate a claims file against `spec` (series names for `against`)."""
    path = Path(path)
    doc = _read_toml(path, "claims")
    top = _Table(path, "(top level)", doc)
    raw_claims = top.get("claim", list, what="an array of [[claim]] tables")
    top.done()
    series = {s.name for s in spec.others}
    claims: list[Claim] = []
    for i, raw in enumerate(raw_claims):
        t = _Table(path, f"claim[{i}]", raw)
        metric = t.get("metric", str)
        if metric not in METRICS:
            raise t._err("metric", f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
        against = t.get("against", str, "best")
        if against != "best" and against not in series:
            raise t._err("against", f"must be 'best' or a non-subject series ({', '.join(sorted(series))}), got {against!r}")
        bws = t.get("bandwidths", (str, list), "all", "'all' or a list of numbers")
        if isinstance(bws, str):
            if bws != "all":
                raise t._err("bandwidths", f"must be 'all' or a list of numbers, got {bws!r}")
            bandwidths = None
        else:
            if not bws or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bws):
                raise t._err("bandwidths", f"must be 'all' or a non-empty list of numbers, got {bws!r}")
            bandwidths = tuple(sorted(float(b) for b in bws))
        pass_if = t.get("pass_if", str)
        if not _PASS_RE.match(pass_if):
            raise t._err("pass_if", f"expected 'all OP X', 'all in [A, B]' or 'first > last', got {pass_if!r}")
        size = t.get("size_bytes", int, None, "an integer")
        if metric == "gain_at_size" and size is None:
            raise t._err("size_bytes", "required by metric 'gain_at_size'")
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
        )
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


class _Progress:
    """`[#####-----] 12/340 runs  3 s` on stderr, redrawn in place; only on a terminal."""

    def __init__(self, total: int, enabled: bool, label: str = "runs") -> None:
        self.total, self.label = total, label
        self.enabled = enabled and sys.stderr.isatty()
        self.done = 0
        self.t0 = time.monotonic()
        self.last = 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self.last > 0.1 or self.done == self.total):
            self.last = now
            frac = self.done / self.total if self.total else 1.0
            filled = int(frac * 40)
            sys.stderr.write(
                f"\r[{'#' * filled}{'-' * (40 - filled)}] {self.done}/{self.total} {self.label}  {now - self.t0:.0f} s"
            )
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _resolve(backend: str, size: int) -> str:
    if backend == "auto":
        return "flow" if size >= _core.AUTO_FLOW_MIN_BYTES else "packet"
    return backend


def _run_points(
    spec: Spec,
    points: Sequence[tuple[float, str, int, str]],
    jobs: int,
    progress: _Progress,
) -> list[Run]:
    """Runs (bandwidth, variant, size, backend) points on a thread pool, slowest first."""

    def one(bw: float, variant: str, size: int, backend: str) -> Run:
        try:
            r = _core.run_collective(
                spec.topology, variant, size, backend=backend, bandwidth_gbps=bw,
                latency_ns=spec.latency_ns, hop_ns=spec.hop_ns, seed=spec.seed,
            )
        except ValueError as exc:
            raise ReproductionError(f"{variant}, {size} B at {bw:g} Gb/s: {exc}") from None
        return Run(bw, variant, size, r["runtime_ps"], r["goodput_gbps"], r["backend"], r["verified"], r["mismatch"])

    # Packet-level runs cost about their size; flow runs almost nothing. Big packet runs first
    # keep both workers busy to the end.
    order = sorted(points, key=lambda p: (_resolve(p[3], p[2]) == "packet") * p[2], reverse=True)
    runs: list[Run] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures: list[Future[Run]] = [pool.submit(one, *p) for p in order]
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                for f in done:
                    runs.append(f.result())
                    progress.step()
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    return runs


# ---------------------------------------------------------------------------------------------
# Analysis.


@dataclass(frozen=True)
class Point:
    """The plotted value of one series at one (bandwidth, size): its fastest variant."""

    bandwidth: float
    series: str
    run: Run


@dataclass(frozen=True)
class Gain:
    bandwidth: float
    size: int
    subject: Run
    best_other: str
    best_other_run: Run
    gain: float
    """goodput(subject) / goodput(best other) - 1."""
    over: dict[str, float] = field(default_factory=dict)
    """Gain over each other series by name."""


def best_points(spec: Spec, runs: Iterable[Run]) -> dict[tuple[float, str, int], Point]:
    """Per (bandwidth, series, size) the variant with the shortest runtime (first listed on a tie)."""
    by = {(r.bandwidth, r.variant, r.size): r for r in runs}
    out: dict[tuple[float, str, int], Point] = {}
    for bw in spec.bandwidths:
        for s in spec.series:
            for size in spec.sizes:
                cands = [by[(bw, v, size)] for v in s.variants]
                best = min(cands, key=lambda r: r.runtime_ps)  # min keeps the first on a tie
                out[(bw, s.name, size)] = Point(bw, s.name, best)
    return out


def gains(spec: Spec, points: dict[tuple[float, str, int], Point]) -> list[Gain]:
    out: list[Gain] = []
    subj = spec.subject.name
    for bw in spec.bandwidths:
        for size in spec.sizes:
            me = points[(bw, subj, size)].run
            others = [(s.name, points[(bw, s.name, size)].run) for s in spec.others]
            best_name, best_run = max(others, key=lambda o: o[1].goodput_gbps)  # first on a tie
            over = {n: me.goodput_gbps / r.goodput_gbps - 1.0 for n, r in others}
            out.append(Gain(bw, size, me, best_name, best_run, over[best_name], over))
    return out


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    values: dict[float, float]
    """Metric value per bandwidth evaluated."""
    measured: str
    verdict: str
    """``pass``, ``fail`` or ``n/a`` (nothing of the claim in this scale's grid)."""


def _fmt_bw(bw: float) -> str:
    if bw >= 1000:
        return f"{bw / 1000:g} Tb/s"
    return f"{bw:g} Gb/s"


def _fmt_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def evaluate_claim(spec: Spec, claim: Claim, table: Sequence[Gain]) -> ClaimResult:
    bws = [b for b in (claim.bandwidths or spec.bandwidths) if b in spec.bandwidths]
    missing = [b for b in (claim.bandwidths or ()) if b not in spec.bandwidths]

    def g(x: Gain) -> float:
        return x.gain if claim.against == "best" else x.over[claim.against]

    values: dict[float, float] = {}
    shown: dict[float, str] = {}
    for bw in bws:
        rows = [x for x in table if x.bandwidth == bw]
        if claim.min_size_bytes is not None:
            rows = [x for x in rows if x.size >= claim.min_size_bytes]
        if claim.max_size_bytes is not None:
            rows = [x for x in rows if x.size <= claim.max_size_bytes]
        if claim.metric == "gain_at_size":
            rows = [x for x in rows if x.size == claim.size_bytes]
        if not rows:
            continue
        vals = [g(x) for x in rows]
        if claim.metric == "fraction_positive":
            k = sum(v > 0 for v in vals)
            values[bw], shown[bw] = k / len(vals), f"{k}/{len(vals)}"
        else:
            if claim.metric == "min_gain":
                i = min(range(len(vals)), key=vals.__getitem__)
                v, at = vals[i], f" @{_fmt_size(rows[i].size)}"
            elif claim.metric == "max_gain":
                i = max(range(len(vals)), key=vals.__getitem__)
                v, at = vals[i], f" @{_fmt_size(rows[i].size)}"
            elif claim.metric == "median_gain":
                v, at = statistics.median(vals), ""
            else:  # gain_at_size
                v, at = vals[0], ""
                if claim.against == "best":
                    at = f" (best other: {rows[0].best_other})"
            values[bw], shown[bw] = v, _pct(v) + at

    measured = "; ".join(f"{_fmt_bw(b)}: {shown[b]}" for b in values)
    if missing:
        measured += ("; " if measured else "") + f"not in this scale: {', '.join(_fmt_bw(b) for b in missing)}"
    m = _PASS_RE.match(claim.pass_if)
    assert m is not None  # validated when loading
    vals = [values[b] for b in values]
    verdict = "n/a"
    if m.group(1) and vals:
        op, x = m.group(2), float(m.group(3))
        test: Callable[[float], bool] = {
            ">": lambda v: v > x, ">=": lambda v: v >= x, "<": lambda v: v < x, "<=": lambda v: v <= x,
        }[op]
        verdict = "pass" if all(test(v) for v in vals) else "fail"
    elif m.group(4) and vals:
        lo, hi = float(m.group(5)), float(m.group(6))
        verdict = "pass" if all(lo <= v <= hi for v in vals) else "fail"
    elif m.group(7) and len(vals) >= 2:
        first, last = vals[0], vals[-1]
        verdict = "pass" if (first > last if m.group(7) == ">" else first < last) else "fail"
        keys = list(values)
        measured += f" ({_fmt_bw(keys[0])} {'>' if first > last else '<='} {_fmt_bw(keys[-1])})"
    return ClaimResult(claim, values, measured, verdict)


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


def series_csv(spec: Spec, points: dict[tuple[float, str, int], Point]) -> str:
    rows = []
    for bw in spec.bandwidths:
        for s in spec.series:
            for size in spec.sizes:
                r = points[(bw, s.name, size)].run
                rows.append([_num(bw), s.name, r.variant, size, r.runtime_ps, f"{r.goodput_gbps:.9g}", r.backend, _verified(r.verified)])
    header = ["bandwidth_gbps", "algorithm", "variant", "size_bytes", "runtime_ps", "goodput_gbps", "backend", "verified"]
    return _csv(header, rows)


def runs_csv(spec: Spec, runs: Iterable[Run]) -> str:
    order = {v: i for i, v in enumerate(spec.variants)}
    rows = [
        [_num(r.bandwidth), r.variant, r.size, r.runtime_ps, f"{r.goodput_gbps:.9g}", r.backend, _verified(r.verified)]
        for r in sorted(runs, key=lambda r: (r.bandwidth, order[r.variant], r.size))
    ]
    return _csv(["bandwidth_gbps", "variant", "size_bytes", "runtime_ps", "goodput_gbps", "backend", "verified"], rows)


def gain_csv(spec: Spec, table: Sequence[Gain]) -> str:
    others = [s.name for s in spec.others]
    header = ["bandwidth_gbps", "size_bytes", f"{spec.subject.name}_variant", "best_other", "best_other_variant", "gain"]
    header += [f"gain_over_{n}" for n in others]
    rows = [
        [_num(x.bandwidth), x.size, x.subject.variant, x.best_other, x.best_other_run.variant, f"{x.gain:.6f}"]
        + [f"{x.over[n]:.6f}" for n in others]
        for x in table
    ]
    return _csv(header, rows)


def claims_csv(results: Sequence[ClaimResult]) -> str:
    rows = [[r.claim.id, r.claim.source, r.claim.claim, r.claim.paper_value, r.measured, r.verdict] for r in results]
    return _csv(["id", "source", "claim", "paper_value", "measured_value", "pass"], rows)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass
class BackendCheck:
    size: int
    rows: list[tuple[float, str, int, int]]
    """(bandwidth, variant, packet runtime ps, flow runtime ps)."""

    def csv(self) -> str:
        return _csv(
            ["bandwidth_gbps", "variant", "size_bytes", "packet_runtime_ps", "flow_runtime_ps", "flow_vs_packet"],
            [[_num(bw), v, self.size, p, f, f"{f / p - 1:+.6f}"] for bw, v, p, f in self.rows],
        )

    def worst(self) -> tuple[float, str, float]:
        bw, v, p, f = max(self.rows, key=lambda r: abs(r[3] / r[2] - 1))
        return bw, v, f / p - 1


def claims_md(spec: Spec, backend: str, results: Sequence[ClaimResult], runs: Sequence[Run], check: BackendCheck | None) -> str:
    sizes = f"{_fmt_size(spec.sizes[0])} to {_fmt_size(spec.sizes[-1])}, every {spec.size_factor}x ({len(spec.sizes)} sizes)"
    backend_text = {
        "auto": f"auto (packet level below {_fmt_size(_core.AUTO_FLOW_MIN_BYTES)}, flow level from there on)",
        "packet": "packet level at every size",
        "flow": "flow level at every size",
    }[backend]
    packet = [r for r in runs if r.backend == "packet"]
    ok = sum(r.verified is True for r in packet)
    lines = [
        f"# {spec.name}: {spec.title}",
        "",
        f"{spec.paper}, {spec.figure}. Spec: `{spec.path.name}`, claims: `{spec.claims_path.name}`, scale `{spec.scale}`.",
        "",
        f"- network: {spec.topology}, links {', '.join(_fmt_bw(b) for b in spec.bandwidths)}, "
        f"{spec.latency_ns:g} ns link latency, {spec.hop_ns:g} ns per hop, seed {spec.seed}",
        f"- sizes: {sizes}",
        f"- series: " + "; ".join(f"{s.name} ({' / '.join(s.variants)})" for s in spec.series),
        f"- backend: {backend_text}",
        f"- runs: {len(runs)}; packet level {len(packet)}, data verified on every rank in {ok}",
        f"- gain = goodput({spec.subject.name}) / goodput(best other) - 1, per bandwidth and size",
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
    lines += ["", f"{passed} pass, {failed} fail, {len(results) - passed - failed} n/a.", "", "## Claims as quoted", ""]
    for r in results:
        c = r.claim
        note = f" Interpretation: {c.note}." if c.note else ""
        lines.append(f"- **{c.id}** ({c.source}): \"{c.quote}\" Check: `{c.metric}` against `{c.against}`, pass if `{c.pass_if}`.{note}")
    if check is not None and check.rows:
        bw, v, d = check.worst()
        lines += [
            "",
            "## Backend check",
            "",
            f"Every variant at {_fmt_size(check.size)} (where `auto` switches to flow level) on both backends: "
            f"largest flow/packet difference {_pct(d)} ({v} at {_fmt_bw(bw)}); see `{spec.output}_backend_check.csv`.",
        ]
    return "\n".join(lines) + "\n"


def plot_png(spec: Spec, table: Sequence[Gain], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0), layout="constrained")
    try:
        cmap = plt.get_cmap("viridis")
        n = len(spec.bandwidths)
        for i, bw in enumerate(spec.bandwidths):
            rows = [x for x in table if x.bandwidth == bw]
            ax.plot(
                [x.size for x in rows], [100 * x.gain for x in rows], marker="o", markersize=3.5,
                linewidth=1.4, color=cmap(i / max(1, n - 1) * 0.9), label=_fmt_bw(bw),
            )
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        lo, hi = spec.sizes[0], spec.sizes[-1]
        ticks = sorted({lo, hi, *(1 << k for k in range(0, 64, 5) if lo <= 1 << k <= hi)})
        if len(ticks) > 2 and ticks[-1] / ticks[-2] < 8:  # keep the end label readable
            ticks.pop(-2)
        ax.set_xticks(ticks, [_fmt_size(s).replace(" ", "") for s in ticks])
        ax.minorticks_off()
        ax.set_xlabel("allreduce size")
        ax.set_ylabel(f"{spec.subject.label} goodput gain (%)")
        ax.set_title(f"{spec.figure}: {spec.title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(title="link bandwidth", fontsize=8, title_fontsize=8)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150, metadata={"Software": None})
    finally:
        plt.close(fig)
    return out


# ---------------------------------------------------------------------------------------------
# The whole reproduction.


@dataclass
class Report:
    spec: Spec
    backend: str
    runs: list[Run]
    points: dict[tuple[float, str, int], Point]
    gains: list[Gain]
    claims: list[ClaimResult]
    check: BackendCheck | None
    files: dict[str, bytes | str]
    wall_seconds: float

    @property
    def unverified(self) -> list[Run]:
        return [r for r in self.runs if r.verified is False]

    def claims_table(self) -> str:
        """The claims as a plain-text table for a terminal (measured value last, unpadded)."""
        head = ("id", "result", "paper", "measured")
        rows = [(r.claim.id, r.verdict, r.claim.paper_value, r.measured) for r in self.claims]
        w = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(head)]

        def fmt(row: Sequence[str]) -> str:
            return "  ".join([*(c.ljust(w[i]) for i, c in enumerate(row[:-1])), row[-1]])

        return "\n".join([fmt(head), fmt(["-" * x for x in w]), *map(fmt, rows)])


def reproduce(
    name_or_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    scale: str = "small",
    backend: str | None = None,
    jobs: int | None = None,
    progress: bool = False,
) -> Report:
    """Run a reproduction (a name from `names()` or a spec path) and write its files into `out`."""
    t0 = time.monotonic()
    text = os.fspath(name_or_path)
    path = Path(text) if text.endswith(".toml") else spec_path(text)
    spec = load_spec(path, scale)
    claims = load_claims(spec.claims_path, spec)
    backend = backend or spec.backend
    if backend not in BACKENDS:
        raise ReproductionError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1)

    points = [(bw, v, size, backend) for bw in spec.bandwidths for v in spec.variants for size in spec.sizes]
    check_size = _core.AUTO_FLOW_MIN_BYTES
    check_points: list[tuple[float, str, int, str]] = []
    if backend == "auto":
        have = {(bw, v, size, _resolve(backend, size)) for bw, v, size, _ in points}
        for bw in spec.bandwidths:
            for v in spec.variants:
                for b in ("packet", "flow"):
                    if (bw, v, check_size, b) not in have:
                        check_points.append((bw, v, check_size, b))
    bar = _Progress(len(points) + len(check_points), progress)
    try:
        runs = _run_points(spec, points, jobs, bar)
        extra = _run_points(spec, check_points, jobs, bar) if check_points else []
    finally:
        bar.close()

    check = None
    if backend == "auto":
        every = {(r.bandwidth, r.variant, r.size, r.backend): r for r in [*runs, *extra]}
        check = BackendCheck(check_size, [
            (bw, v, every[(bw, v, check_size, "packet")].runtime_ps, every[(bw, v, check_size, "flow")].runtime_ps)
            for bw in spec.bandwidths for v in spec.variants
        ])

    best = best_points(spec, runs)
    table = gains(spec, best)
    results = [evaluate_claim(spec, c, table) for c in claims]
    stem = spec.output
    files: dict[str, bytes | str] = {
        f"{stem}.csv": series_csv(spec, best),
        f"{stem}_runs.csv": runs_csv(spec, runs),
        f"{stem}_gain.csv": gain_csv(spec, table),
        f"{stem}_claims.csv": claims_csv(results),
        f"{stem}_claims.md": claims_md(spec, backend, results, runs, check),
    }
    if check is not None:
        files[f"{stem}_backend_check.csv"] = check.csv()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for fname, content in files.items():
        (out / fname).write_text(content, encoding="utf-8") if isinstance(content, str) else (out / fname).write_bytes(content)
    png = plot_png(spec, table, out / f"{stem}.png")
    files[png.name] = png.read_bytes()
    return Report(spec, backend, runs, best, table, results, check, files, time.monotonic() - t0)
