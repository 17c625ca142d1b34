"""The one claims engine of the paper reproductions (`reducelab reproduce`).

A figure's claims are data: ``scenarios/<paper>/figN.claims.toml``, one ``[[claim]]`` per
statement of the paper, each with its source and quote (the paper's words), the claim as a
checkable statement, the paper's value, the metric that measures it, and the pass rule. The
rules were written before any result was seen and are never tuned.

This module holds what every claim of every paper shares:

- one claim type (`Claim`), read from a claims file by `read_claims` (readings expanded by
  `expand_readings`, causes checked by `check_cause_fields`), and one verdict type (`Verdict`);
- the metric families (`METRICS`, `Metrics`): a figure kind names the family of its claims
  (`reducelab.figures.FigureKind.metrics`). The built-in family ``table`` measures a table of
  runs (`TABLE_METRICS`: ``mean``, ``ratio``, ``difference``, ``max_over_min``; the Canary, DSA
  and Flare figures); a kind may register its own (`register_metrics`), as the size sweeps do
  (`reducelab.sizesweep`: ``fraction_positive``, ``gain_at_size``, ``crossover_size``, ...),
  with the units its values are shown in (`UNITS`). `evaluate` judges a claim by its family;
- the pass rules (`PASS_RULES`, `check_pass_rule`, `judge`): ``all OP X``, ``any OP X``,
  ``all in [A, B]``, ``max in [A, B]``, ``min in [A, B]``, ``first > last``, ``first < last``,
  ``increasing``, ``decreasing``, ``spread <= X`` (numbers may carry ``%``, ``B``, ``KiB``,
  ``MiB``, ``GiB``);
- a claim the paper words two ways carries ``contradiction`` (how the paper disagrees with
  itself, or why its words allow two readings) and ``[[claim.reading]]`` tables, each with the
  words (``quote``, ``source``) behind that reading and the fields it changes; it is checked once
  per reading (ids ``ID/NAME``). A claim that fails carries ``cause`` (one of `CAUSES`) and
  ``evidence``, which the reports print next to the failure (`cause_problems` checks them);
- sensitivity bands (`Band`, `with_bands`): one claim judged at several values of a setting the
  paper does not state, summarised as the range of its measured values and where it passes;
- the output every figure shares: ``STEM_claims.csv`` (`claims_csv`), the Markdown after the
  claims table (`extra_md`), and ``reproduce all``'s table of every claim (`all_claims_csv`,
  `all_claims_html`).

Only runs whose status is "completed" (verified) ever reach a claim.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import itertools
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

_NUM = r"-?[0-9]+(?:\.[0-9]*)?(?:e-?[0-9]+)?\s*(?:%|B|KiB|MiB|GiB|TiB)?"
_UNITS = {"%": 0.01, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
PASS_RE = re.compile(
    rf"^\s*(?:(all|any)\s*(>=|<=|==|>|<)\s*({_NUM})"
    rf"|(all|max|min)\s+in\s*\[\s*({_NUM})\s*,\s*({_NUM})\s*\]"
    r"|first\s*(>|<)\s*last"
    r"|(increasing|decreasing)"
    rf"|spread\s*<=\s*({_NUM}))\s*$"
)
PASS_RULES = (
    "'all OP X' / 'any OP X' (OP: > >= < <= ==), 'all in [A, B]', 'max in [A, B]', 'min in [A, B]', "
    "'first > last', 'first < last', 'increasing', 'decreasing' or 'spread <= X'"
)

PASS, FAIL, NA = "pass", "fail", "n/a"


class ClaimError(ValueError):
    """A claims file was rejected: ``FILE: FIELD: REASON``."""


CAUSES = ("unstated-setting", "model-limitation", "paper-inconsistency")
"""Why a reading still fails at full scale, one per failing reading:

- ``unstated-setting``: a setting the paper does not state decides it; ``setting`` names the
  figure's ``[[sensitivity]]`` key, and the band over it must contain a value at which the reading
  passes (`cause_problems`), otherwise this is not the cause;
- ``model-limitation``: something of the paper's setup that ReduceLab does not model (``evidence``
  names it);
- ``paper-inconsistency``: the paper's own numbers, words or model disagree with the claim
  (``evidence`` gives the arithmetic or the two quotes)."""

_READING_KEYS = ("name", "quote", "source")
"""Keys every ``[[claim.reading]]`` has; any other key replaces the claim's field of that name."""


_WORDS_ONLY = {"note", "cause", "evidence", "setting", "paper_value", "rule", "claim"}
"""Keys that change what a claim says, not how it is judged."""


def check_cause(cause: Any) -> str | None:
    """None if `cause` is a valid ``cause`` of a claim, else the reason."""
    if cause not in CAUSES:
        return f"expected one of {', '.join(repr(c) for c in CAUSES)}, got {cause!r}"
    return None


def check_cause_fields(cause: str, setting: str, evidence: str) -> tuple[str, str] | None:
    """None if a claim's ``cause``, ``setting`` and ``evidence`` fit together, else (field,
    reason): a cause needs its evidence, ``unstated-setting`` needs the ``setting`` it names and
    the other causes take none."""
    if cause and check_cause(cause):
        return "cause", str(check_cause(cause))
    if evidence and not cause:
        return "evidence", "evidence without a `cause`"
    if cause and not evidence.strip():
        return "evidence", f"required with cause {cause!r}: the numbers, the arithmetic or the quotes behind it"
    if cause == "unstated-setting" and not setting:
        return "setting", "required with cause 'unstated-setting': the [[sensitivity]] key whose band holds a passing value"
    if setting and cause != "unstated-setting":
        return "setting", f"only with cause 'unstated-setting', got cause {cause!r}"
    return None


def cause_problems(verdicts: Sequence[Verdict]) -> list[str]:
    """What is wrong with the causes of judged claims, one line each: a failing reading without
    a cause, an ``unstated-setting`` cause whose band over its ``setting`` was not run, or never
    passes."""
    out = []
    for v in verdicts:
        cid = v.id
        if v.verdict != FAIL:
            continue
        cause = v.cause
        if not cause:
            out.append(f"{cid}: fails and has no cause")
            continue
        if cause != "unstated-setting":
            continue
        band = next((b for b in v.bands if b.key == v.setting), None)
        if band is None:
            out.append(f"{cid}: cause unstated-setting {v.setting!r} but no band over it (run --sensitivity)")
        elif band.passes not in ("some", "all"):
            out.append(f"{cid}: cause unstated-setting {v.setting!r} but it passes at no value of the band "
                       f"({band.text()}): not an unstated setting")
    return out


def expand_readings(file: str, raw: Any) -> list[Any]:
    """The ``[[claim]]`` tables of a claims file with every claim that has ``reading`` tables
    replaced by one claim per reading: id ``ID/NAME``, the reading's quote and source, its other
    keys replacing the claim's, ``reading = NAME`` and the claim's ``contradiction`` kept. A
    claim with readings must say why (``contradiction``) and have at least two; a reading must
    have a name, a quote (the words it rests on) and change something. Other tables pass
    unchanged (the caller's strict reader checks them)."""
    if not isinstance(raw, list):
        return raw
    out: list[Any] = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or "reading" not in c:
            out.append(c)
            continue
        where = f"{file}: claim[{i}]"
        readings = c["reading"]
        if not isinstance(readings, list) or len(readings) < 2:
            raise ClaimError(f"{where}.reading: expected two or more [[claim.reading]] tables, got {readings!r}")
        if not isinstance(c.get("contradiction"), str) or not c["contradiction"].strip():
            raise ClaimError(f"{where}.contradiction: required with readings: say how the paper disagrees with "
                             "itself or why its words allow each reading")
        base = {k: v for k, v in c.items() if k != "reading"}
        names: list[str] = []
        for j, r in enumerate(readings):
            rw = f"{where}.reading[{j}]"
            if not isinstance(r, dict):
                raise ClaimError(f"{rw}: expected a table")
            for k in ("name", "quote"):
                if not isinstance(r.get(k), str) or not r[k].strip():
                    raise ClaimError(f"{rw}.{k}: required (a non-empty string)")
            if not re.fullmatch(r"[A-Za-z0-9_.%+-]+", r["name"]):
                raise ClaimError(f"{rw}.name: letters, digits and _ . % + - only, got {r['name']!r}")
            for k in ("id", "reading", "contradiction"):
                if k in r:
                    raise ClaimError(f"{rw}.{k}: set on the claim, not on a reading")
            if not set(r) - set(_READING_KEYS) - _WORDS_ONLY:
                raise ClaimError(f"{rw}: a reading must change how the claim is judged (e.g. pass_if, of, metric, "
                                 f"topologies), not only {', '.join(sorted(set(r) & (set(_READING_KEYS) | _WORDS_ONLY)))}")
            names.append(r["name"])
            out.append({**base, **r, "id": f"{c.get('id')}/{r['name']}", "reading": r["name"]})
            out[-1].pop("name")
        if len(set(names)) != len(names):
            raise ClaimError(f"{where}.reading: names must be unique, got {names}")
    return out


def number(text: str) -> float:
    """A rule's number: ``25%`` = 0.25, ``8 MiB`` = 8388608."""
    m = re.fullmatch(r"\s*(-?[0-9]+(?:\.[0-9]*)?(?:e-?[0-9]+)?)\s*(%|B|KiB|MiB|GiB|TiB)?\s*", text)
    if m is None:
        raise ValueError(f"not a number: {text!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2) or "", 1)


def check_pass_rule(rule: Any) -> str | None:
    """None if `rule` is a valid pass rule, else the reason."""
    if not isinstance(rule, str) or not PASS_RE.match(rule):
        return f"expected {PASS_RULES}, got {rule!r}"
    return None


def judge(pass_if: str, vals: Sequence[float]) -> tuple[str, str]:
    """Verdict of a pass rule on values (in the claim's order), and a detail to append to the
    measured value ("" if none). No values: ``n/a``."""
    m = PASS_RE.match(pass_if)
    if m is None:
        raise ValueError(f"invalid pass rule {pass_if!r}")
    ops: dict[str, Callable[[float, float], bool]] = {
        ">": lambda v, x: v > x, ">=": lambda v, x: v >= x, "<": lambda v, x: v < x,
        "<=": lambda v, x: v <= x, "==": lambda v, x: v == x,
    }
    if m.group(1) and vals:
        op, x = ops[m.group(2)], number(m.group(3))
        test = all if m.group(1) == "all" else any
        return (PASS if test(op(v, x) for v in vals) else FAIL), ""
    if m.group(4) and vals:
        lo, hi = number(m.group(5)), number(m.group(6))
        which = m.group(4)
        if which == "all":
            return (PASS if all(lo <= v <= hi for v in vals) else FAIL), ""
        v = max(vals) if which == "max" else min(vals)
        return (PASS if lo <= v <= hi else FAIL), ""
    if m.group(7) and len(vals) >= 2:
        first, last = vals[0], vals[-1]
        ok = first > last if m.group(7) == ">" else first < last
        return (PASS if ok else FAIL), (">" if first > last else "<=")
    if m.group(8) and len(vals) >= 2:
        inc = m.group(8) == "increasing"
        ok = all((a < b) if inc else (a > b) for a, b in zip(vals, vals[1:]))
        return (PASS if ok else FAIL), ("" if ok else f"not strictly {m.group(8)}")
    if m.group(9) and len(vals) >= 2:
        lo, hi = min(vals), max(vals)
        spread = hi / lo - 1 if lo > 0 else math.inf
        return (PASS if spread <= number(m.group(9)) else FAIL), f"spread {100 * spread:.1f}%"
    return NA, ""


# ---------------------------------------------------------------------------------------------
# Claims over a table of runs.

TABLE_METRICS = ("mean", "ratio", "difference", "max_over_min")
"""Metrics of a `Claim` over a `RunTable`, per combination of its `each` values:

- ``mean``: mean of `of` over the runs selected by `where` and `subject`, times `scale` (e.g.
  100 for a utilisation in percent);
- ``ratio``: that mean / the mean selected by `against` (or / `against_value`), minus 1 if
  `minus_one`;
- ``difference``: that mean - the mean selected by `against`;
- ``max_over_min``: highest / lowest of the means over the values of `over` (minus 1 if
  `minus_one`).

Then `subtract` is subtracted (e.g. the paper's value, for "within ±X of the paper"). Means are
over the matching runs in figure order (e.g. over a figure's random allocations)."""

UNITS: dict[str, Callable[[float], str]] = {
    "": lambda v: f"{v:.3g}",
    "x": lambda v: f"{v:.2f}×",
    "pct": lambda v: f"{v * 100:.1f}%",
    "gain": lambda v: f"{v * 100:+.1f}%",
    "gbps": lambda v: f"{v:.1f} Gb/s",
    "us": lambda v: f"{v / 1e6:.1f} µs",
    "bytes": lambda v: f"{v:.0f} B",
}
"""How `Claim.unit` shows a value: plain (3 significant digits), ``x`` (``1.85×``), ``pct``
(value × 100 with ``%``), ``gain`` (signed %, ``+12.3%``), ``gbps`` (``Gb/s``), ``us`` (a value in
ps shown in µs), ``bytes``; and the units a figure kind adds with its metrics (`register_metrics`)."""


@dataclass(frozen=True)
class Mark:
    """Where a claim's paper value is drawn on the figure (`reducelab.plots.figure_png`)."""

    panel: int
    y: float
    x: Any = None
    """None: a horizontal line across the panel."""


@dataclass(frozen=True)
class Claim:
    """One ``[[claim]]`` of a figure's claims file. The fields from `where` to `subtract` are the
    terms of the built-in table metrics (`TABLE_METRICS`); a metric a figure kind registers
    (`register_metrics`) reads its own terms into `terms`."""

    id: str
    claim: str
    paper_value: str
    rule: str
    """The pass rule in words (the `pass_if` below, as fixed before the runs)."""
    metric: str
    pass_if: str
    of: str = "goodput_gbps"
    where: Mapping[str, Any] = field(default_factory=dict)
    subject: Mapping[str, Any] = field(default_factory=dict)
    against: Mapping[str, Any] = field(default_factory=dict)
    against_value: float | None = None
    each: Mapping[str, Any] = field(default_factory=dict)
    over: str = ""
    minus_one: bool = False
    scale: float = 1.0
    subtract: float = 0.0
    unit: str = ""
    source: str = ""
    quote: str = ""
    note: str = ""
    mark: Mark | None = None
    reading: str = ""
    """The reading's name, for a claim the paper words two ways (`expand_readings`)."""
    contradiction: str = ""
    cause: str = ""
    """Why the claim fails at full scale (one of `CAUSES`), with `evidence`."""
    evidence: str = ""
    setting: str = ""
    """With cause ``unstated-setting``: the sensitivity key whose band holds a passing value."""
    terms: Any = None
    """The terms of a kind's registered metric (e.g. `reducelab.sizesweep.SizeTerms`)."""


@dataclass(frozen=True)
class Verdict:
    """A judged claim: the measured value in words, the values the rule saw, the verdict."""

    id: str
    source: str
    quote: str
    claim: str
    paper_value: str
    rule: str
    measured: str
    verdict: str
    values: tuple[float, ...] = ()
    note: str = ""
    reading: str = ""
    contradiction: str = ""
    cause: str = ""
    evidence: str = ""
    setting: str = ""
    bands: tuple[Band, ...] = ()
    """One per sensitivity sweep of the figure (`with_bands`), when they were run."""
    unit: str = ""
    pass_if: str = ""
    """The claim's pass rule (`PASS_RE`), over `values`."""
    shift: float = 0.0
    """What `values` had subtracted (the claim's `subtract`): a value as measured is value + shift."""
    paper: float | None = None
    """The paper's value in the space of `values` (`paper_number`), None if the paper states none."""

    def show_value(self, v: float) -> str:
        """A value the rule saw, in the claim's unit (`UNITS`)."""
        return _show(v, self.unit)


@dataclass(frozen=True)
class Band:
    """One claim judged at every value of a sensitivity sweep: the values of the setting, the
    verdict and measured values at each, and the range of every value the rule saw."""

    key: str
    settings: tuple[Any, ...]
    verdicts: tuple[str, ...]
    measured: tuple[str, ...]
    lo: float | None
    hi: float | None

    @property
    def passes(self) -> str:
        """``all`` / ``some`` / ``none`` of the judged settings pass (``n/a``: none judged)."""
        judged = [v for v in self.verdicts if v in (PASS, FAIL)]
        if not judged:
            return NA
        k = sum(v == PASS for v in judged)
        return "all" if k == len(judged) else ("none" if k == 0 else "some")

    def range_text(self, show: Callable[[float], str] | None = None) -> str:
        """``LO..HI`` of the values the rule saw over the sweep (``no values`` if none)."""
        show = show or (lambda v: _show(v, ""))
        return "no values" if self.lo is None or self.hi is None else f"{show(self.lo)}..{show(self.hi)}"

    def text(self, show: Callable[[float], str] | None = None) -> str:
        """``KEY in {values}: LO..HI; passes at all|some|none (value: verdict, ...)``."""
        rng = self.range_text(show)
        per = ", ".join(f"{_setting(s)}: {v}" for s, v in zip(self.settings, self.verdicts))
        return f"{self.key} in {{{', '.join(_setting(x) for x in self.settings)}}}: {rng}; passes at {self.passes} ({per})"


def _setting(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Sensitivity:
    """A ``[[sensitivity]]`` table of a figure file: a scenario `key` the paper does not state,
    the `values` to judge the figure's claims at (besides the figure's own), and the `source`
    (the paper's words, or why the value is unstated). Run only when asked
    (``reducelab reproduce FIG --sensitivity``)."""

    key: str
    values: tuple[Any, ...]
    source: str
    topologies: tuple[str, ...] = ()
    """Size-sweep (Swing) figures: the topologies whose points get the setting (e.g. a
    HammingMesh board key); empty = every point."""
    settings: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    """Named settings of several fields at once (``[sensitivity.settings]``: value name →
    {scenario path: value}); empty = each value is the value of `key` itself."""

    def assignments(self, value: Any) -> dict[str, Any]:
        """The scenario fields one value of the sweep sets: ``{key: value}``, or the fields of
        the named setting `value`."""
        if not self.settings:
            return {self.key: value}
        return dict(dict(self.settings)[value])

    def fields_on(self, base: Any, value: Any) -> dict[str, Any]:
        """`assignments` of `value` for scenario `base`, each written as `base` writes the same
        number (`like_default`), so a value equal to the base's gives the base scenario byte for
        byte; a field `base` leaves unset is kept as given (building the point names a bad one)."""
        from .scenario import FieldError

        out = {}
        for key, v in self.assignments(value).items():
            try:
                out[key] = like_default(base.get(key), v)
            except FieldError:
                out[key] = v
        return out


def like_default(default: Any, value: Any) -> Any:
    """`value` written as the setting's `default` is when they are the same number (``201.0`` for
    a default of ``201``, or the other way round), else `value`. A sensitivity value equal to
    the default then gives the default run's scenario byte for byte, so the result store finds
    those runs instead of running them again under another key."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (default, value))
    return default if numbers and default == value else value


def read_sensitivity(file: str, raw: Any) -> list[Sensitivity]:
    """The ``[[sensitivity]]`` tables of a figure file (ClaimError naming file and field).
    Whether `key` is a field of the base scenario is checked when the sweep runs (the key may
    come from another branch of the scenario format)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ClaimError(f"{file}: sensitivity: expected an array of [[sensitivity]] tables")
    out = []
    for i, r in enumerate(raw):
        t = _Strict(file, f"sensitivity[{i}]", r)
        key = t.get("key", str)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?(\.[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?)*", key):
            raise t.err("key", f"expected a scenario path such as traffic[0].window or topology.board_latency_ns, got {key!r}")
        values = t.get("values", list, what="a non-empty array of values")
        if not values or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in values):
            raise t.err("values", f"expected a non-empty array of numbers or strings, got {values!r}")
        if len(set(values)) != len(values):
            raise t.err("values", f"has duplicates: {values!r}")
        source = t.get("source", str)
        if not source.strip():
            raise t.err("source", "required: the paper's words, or why the setting is unstated")
        topos = t.get("topologies", list, [], "an array of topology specs")
        if not all(isinstance(x, str) for x in topos):
            raise t.err("topologies", f"expected an array of topology specs, got {topos!r}")
        named = t.get("settings", dict, {}, "a table of named settings")
        settings = []
        if named:
            if set(named) != set(values):
                raise t.err("settings", f"must name exactly the values {list(values)!r}, got {sorted(named)!r}")
            for name in values:
                fields = named[name]
                if not isinstance(fields, dict):
                    raise t.err(f"settings.{name}", f"expected a table of scenario paths, got {fields!r}")
                for path, v in fields.items():
                    if not path.startswith(key + ".") or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\[\]]*", path):
                        raise t.err(f"settings.{name}", f"{path!r}: expected a scenario path under {key!r}")
                    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                        raise t.err(f"settings.{name}.{path}", f"expected a number or string, got {v!r}")
                settings.append((name, tuple(sorted(fields.items()))))
        t.done()
        out.append(Sensitivity(key, tuple(values), source, tuple(topos), tuple(settings)))
    keys = [x.key for x in out]
    if len(set(keys)) != len(keys):
        raise ClaimError(f"{file}: sensitivity: one table per key, got {keys}")
    return out


def make_band(key: str, settings: Sequence[Any], judged: Sequence[tuple[str, str, Sequence[float]] | None]) -> Band:
    """The `Band` of one claim over a sweep of `key`: `judged[i]` is (verdict, measured, values)
    at `settings[i]` (None: the claim was not judged there)."""
    vals = [y for j in judged if j is not None for y in j[2]]
    return Band(key, tuple(settings), tuple(j[0] if j is not None else NA for j in judged),
                tuple(j[1] if j is not None else "" for j in judged),
                min(vals) if vals else None, max(vals) if vals else None)


def with_bands(default: Sequence[Verdict], key: str, settings: Sequence[Any],
               swept: Sequence[Sequence[Verdict]]) -> list[Verdict]:
    """`default` (the figure's verdicts at its own setting) each with one more `Band`: the same
    claim over `swept` (the verdicts at each of `settings`, in that order)."""
    out = []
    for v in default:
        at = [next((x for x in vs if x.id == v.id), None) for vs in swept]
        band = make_band(key, settings, [None if x is None else (x.verdict, x.measured, x.values) for x in at])
        out.append(replace(v, bands=(*v.bands, band)))
    return out


SENSITIVITY_COLUMNS = ("sensitivity_key", "sensitivity_value")


def sensitivity_table_csv(tables: Sequence[tuple[str, Any, str]]) -> str:
    """The runs of a ``--sensitivity`` sweep as one CSV (``STEM_sensitivity.csv``): each
    `(key, value, table)` is a figure's own results table (`table`, a CSV text) at one setting,
    its rows prefixed with the key and the value (JSON, so 201 and 201.0 stay apart). Committed
    beside the figure's results, it lets ``--claims-only`` give the claims their bands again."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header: list[str] | None = None
    for key, value, table in tables:
        rows = list(csv.reader(io.StringIO(table)))
        if not rows:
            continue
        if header is None:
            header = rows[0]
            w.writerow([*SENSITIVITY_COLUMNS, *header])
        elif rows[0] != header:
            raise ValueError(f"sensitivity {key} = {value!r}: its table's columns differ from the first setting's")
        for r in rows[1:]:
            w.writerow([key, json.dumps(value), *r])
    return buf.getvalue()


def sensitivity_tables(text: str, file: str) -> dict[tuple[str, str], str]:
    """`sensitivity_table_csv` read back: (key, JSON value) -> that setting's results table
    (CSV text, header included). ClaimError naming `file` if it is not such a table."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or tuple(rows[0][:2]) != SENSITIVITY_COLUMNS:
        raise ClaimError(f"{file}: not a sensitivity table (first columns must be {', '.join(SENSITIVITY_COLUMNS)})")
    header = rows[0][2:]
    groups: dict[tuple[str, str], list[list[str]]] = {}
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(rows[0]):
            raise ClaimError(f"{file}: line {i}: {len(r)} fields, expected {len(rows[0])}")
        groups.setdefault((r[0], r[1]), []).append(r[2:])
    out = {}
    for k, rs in groups.items():
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rs)
        out[k] = buf.getvalue()
    return out


def swept_values(tables: Mapping[tuple[str, str], str], sens: Sensitivity) -> tuple[Any, ...]:
    """The values of `sens` that a sweep's `tables` (`sensitivity_tables`) hold, in the order of
    ``sens.values``."""
    return tuple(v for v in sens.values if (sens.key, json.dumps(v)) in tables)


def sensitivity_table_for(tables: Mapping[tuple[str, str], str], sens: Sensitivity, value: Any, file: str) -> str:
    """The results table of setting `sens.key` = `value` in `tables` (ClaimError naming `file`
    and the setting when the sweep did not reach it)."""
    t = tables.get((sens.key, json.dumps(value)))
    if t is None:
        raise ClaimError(f"{file}: no runs for sensitivity {sens.key} = {json.dumps(value)} "
                         f"(run `reducelab reproduce FIG --sensitivity` again)")
    return t


class _Strict:
    """A TOML table read field by field; `done` rejects the fields nobody asked for."""

    def __init__(self, file: str, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ClaimError(f"{file}: {where}: expected a table")
        self.file, self.where, self.data, self.seen = file, where, data, set()

    def err(self, key: str, reason: str) -> ClaimError:
        return ClaimError(f"{self.file}: {self.where}.{key}: {reason}")

    def get(self, key: str, types: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise self.err(key, "required")
            return default
        v = self.data[key]
        if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise self.err(key, f"expected {what or types}, got {v!r}")
        if not isinstance(v, types):
            raise self.err(key, f"expected {what or getattr(types, '__name__', types)}, got {v!r}")
        return v

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self.err(extra[0], "unknown key")


@dataclass(frozen=True)
class Metrics:
    """A family of claim metrics: the built-in table metrics (`TABLE_METRICS`, family ``table``)
    or those a figure kind registers (`register_metrics`; e.g. the size sweeps' gains in
    `reducelab.sizesweep`). `read` reads a claim's terms (the keys besides those every claim has,
    which `read_claims` reads) from its table into `Claim` fields; `judge` judges a claim on the
    figure kind's table of runs."""

    names: tuple[str, ...]
    read: Callable[[_Strict, str, Any], dict[str, Any]]
    """(claim table, metric, the kind's context) -> the `Claim` fields of the terms."""
    judge: Callable[[Claim, Any], Verdict]


METRICS: dict[str, Metrics] = {}
"""Every metric family by name: ``table`` and the ones figure kinds register."""


def register_metrics(family: str, metrics: Metrics, units: Mapping[str, Callable[[float], str]] | None = None) -> None:
    """Add a figure kind's metric family (and the units its values are shown in) to the engine."""
    METRICS[family] = metrics
    UNITS.update(units or {})


def read_claims(file: str, doc: Mapping[str, Any], family: str, context: Any) -> list[Claim]:
    """The ``[[claim]]`` tables of a parsed claims file whose metrics are of `family`
    (`METRICS`), readings expanded (`expand_readings`). `context` is what the family's reader
    checks the terms against (the table family: the run table's columns). Raises `ClaimError`
    naming the file, the claim and the field."""
    metrics = METRICS[family]
    top = _Strict(file, "(top level)", doc)
    raw = expand_readings(file, top.get("claim", list, what="an array of [[claim]] tables"))
    top.done()
    out: list[Claim] = []
    for i, r in enumerate(raw):
        t = _Strict(file, f"claim[{i}]", r)
        metric = t.get("metric", str)
        if metric not in metrics.names:
            raise t.err("metric", f"unknown metric {metric!r} (known: {', '.join(metrics.names)})")
        pass_if = t.get("pass_if", str)
        reason = check_pass_rule(pass_if)
        if reason:
            raise t.err("pass_if", reason)
        common = dict(
            id=t.get("id", str), claim=t.get("claim", str), paper_value=t.get("paper_value", str),
            source=t.get("source", str, ""), quote=t.get("quote", str, ""), note=t.get("note", str, ""),
            reading=t.get("reading", str, ""), contradiction=t.get("contradiction", str, ""),
            cause=t.get("cause", str, ""), evidence=t.get("evidence", str, ""), setting=t.get("setting", str, ""),
        )
        terms = metrics.read(t, metric, context)
        claim = Claim(metric=metric, pass_if=pass_if, **common, **terms)
        bad = check_cause_fields(claim.cause, claim.setting, claim.evidence)
        if bad:
            raise t.err(*bad)
        t.done()
        out.append(claim)
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ClaimError(f"{file}: claim ids must be unique, got {ids}")
    return out


def _read_table_terms(t: _Strict, metric: str, columns: Sequence[str]) -> dict[str, Any]:
    """The terms of a table metric (`TABLE_METRICS`); `columns` are the run table's columns
    (parameters and metrics) that selectors and `of` may name."""
    known = set(columns)

    def selector(key: str) -> dict[str, Any]:
        sel = t.get(key, dict, {}, "a table of COLUMN = value")
        for k in sel:
            if k not in known:
                raise t.err(f"{key}.{k}", f"not a column of the runs ({', '.join(columns)})")
        return dict(sel)

    of = t.get("of", str, "goodput_gbps")
    if of not in known:
        raise t.err("of", f"not a column of the runs ({', '.join(columns)})")
    against = selector("against")
    against_value = t.get("against_value", (int, float), None, "a number")
    if metric in ("ratio", "difference") and not against and against_value is None:
        raise t.err("against", f"metric {metric!r} needs `against` (a selector) or `against_value`")
    if metric not in ("ratio", "difference") and (against or against_value is not None):
        raise t.err("against", f"metric {metric!r} compares nothing; remove `against`")
    over = t.get("over", str, "")
    if metric == "max_over_min" and over not in known:
        raise t.err("over", f"metric 'max_over_min' needs `over`, a column of the runs ({', '.join(columns)})")
    unit = t.get("unit", str, "")
    if unit not in UNITS:
        raise t.err("unit", f"expected one of {', '.join(repr(u) for u in UNITS)}, got {unit!r}")
    mark = None
    if "mark" in t.data:
        m = _Strict(t.file, f"{t.where}.mark", t.get("mark", dict))
        mark = Mark(m.get("panel", int, 0, "an integer"), float(m.get("y", (int, float), what="a number")),
                    m.get("x", (int, float, str), None))
        m.done()
    return dict(
        rule=t.get("rule", str), of=of, where=selector("where"), subject=selector("subject"), against=against,
        against_value=None if against_value is None else float(against_value), each=selector("each"),
        over=over, minus_one=t.get("minus_one", bool, False, "true or false"),
        scale=float(t.get("scale", (int, float), 1.0, "a number")),
        subtract=float(t.get("subtract", (int, float), 0.0, "a number")), unit=unit, mark=mark,
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


class RunTable:
    """The verified runs of a figure (one dict per run: parameters and metrics) and the values
    selectors may name: ``first`` / ``last`` (lowest / highest value of a column), ``$NAME`` (a
    figure parameter of the scale), a glob (``canary-t*``), a list (any of), or a value."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], variables: Mapping[str, Any]) -> None:
        self.rows = list(rows)
        self.variables = dict(variables)

    def values(self, col: str) -> list[Any]:
        vals = [r[col] for r in self.rows if r.get(col) is not None and r.get(col) != ""]
        try:
            return sorted(set(vals))
        except TypeError:
            return list(dict.fromkeys(vals))

    def resolve(self, col: str, v: Any) -> Any:
        if isinstance(v, str):
            if v.startswith("$"):
                if v[1:] not in self.variables:
                    raise KeyError(f"figure parameter {v[1:]!r}")
                return self.variables[v[1:]]
            if v in ("first", "last"):
                vals = self.values(col)
                if not vals:
                    raise KeyError(f"no runs with a {col}")
                return vals[0] if v == "first" else vals[-1]
        return v

    def expand(self, col: str, v: Any) -> list[Any]:
        """The values an `each` (or list-valued `against`) entry iterates over."""
        if v == "all":
            return self.values(col)
        if isinstance(v, list):
            return [self.resolve(col, x) for x in v]
        if isinstance(v, str) and any(ch in v for ch in "*?["):
            return [x for x in self.values(col) if isinstance(x, str) and fnmatch.fnmatchcase(x, v)]
        return [self.resolve(col, v)]

    def _match(self, row: Mapping[str, Any], col: str, want: Any) -> bool:
        got = row.get(col)
        if isinstance(want, list):
            return any(self._match(row, col, w) for w in want)
        if isinstance(want, str) and any(ch in want for ch in "*?[") and isinstance(got, str):
            return fnmatch.fnmatchcase(got, want)
        return _same(got, self.resolve(col, want))

    def mean(self, of: str, sel: Mapping[str, Any]) -> float:
        rows = [r for r in self.rows if all(self._match(r, c, w) for c, w in sel.items())]
        if not rows:
            raise KeyError("no verified runs with " + ", ".join(f"{c} = {w}" for c, w in sel.items()))
        vals = [float(r[of]) for r in rows if r.get(of) is not None]
        if len(vals) < len(rows):
            raise KeyError(f"{len(rows) - len(vals)} of the runs with " + ", ".join(f"{c} = {w}" for c, w in sel.items())
                           + f" have no {of} (results made before it was reported)")
        return statistics.fmean(vals)


def _show(v: float, unit: str) -> str:
    return UNITS[unit](v)


def _label(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in key.items())


def evaluate(claim: Claim, table: Any) -> Verdict:
    """Judge one claim on a figure kind's table of verified runs (`Metrics.judge` of the claim's
    metric family)."""
    return next(m for m in METRICS.values() if claim.metric in m.names).judge(claim, table)


def _evaluate_table(claim: Claim, table: RunTable) -> Verdict:
    """Judge one table claim on a figure's verified runs. Runs missing for some value make the claim
    ``n/a`` (naming what is missing)."""
    try:
        items = _evaluate(claim, table)
    except KeyError as exc:
        msg = exc.args[0] if exc.args else str(exc)
        return Verdict(claim.id, claim.source, claim.quote, claim.claim, claim.paper_value, claim.rule,
                       f"not evaluated: {msg}", NA, (), claim.note, *_extras(claim), unit=claim.unit,
                       **chart_terms(claim))
    vals = [v for _, v in items]
    verdict, detail = judge(claim.pass_if, vals)

    def show(v: float) -> str:
        if not claim.subtract:
            return _show(v, claim.unit)
        return f"{_show(v + claim.subtract, claim.unit)} ({_show(v, claim.unit)} from {claim.subtract:g})"

    shown = [f"{lab}: {show(v)}" if lab else show(v) for lab, v in items]
    measured = "; ".join(shown) + (f" ({detail})" if detail else "")
    return Verdict(claim.id, claim.source, claim.quote, claim.claim, claim.paper_value, claim.rule, measured,
                   verdict, tuple(vals), claim.note, *_extras(claim), unit=claim.unit, **chart_terms(claim))


_PAPER_TOKEN = re.compile(
    r"(?<![\w.])([-+−]?[0-9]+(?:\.[0-9]+)?)(?:\s*(%|×|x(?![a-zA-Z0-9])|KiB|MiB|GiB|TiB|B(?![a-zA-Z])|Tb/s|Gb/s))?")
_PAPER_SCALE = {"%": 0.01, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "B": 1}


def paper_numbers(text: str) -> list[tuple[float, str]]:
    """Every number a claim's ``paper_value`` states, with its unit: ``+40%`` = (0.4, "%"),
    ``2×`` = (2, "×"), ``2 MiB`` = (2097152, "B"), ``1.6 Tb/s`` = (1.6, "Tb/s"). Numbers glued
    to letters or shapes (``8x8``, ``Hx2Mesh``, ``3D``) are names, not values."""
    out = []
    for m in _PAPER_TOKEN.finditer(text):
        if text[m.end():m.end() + 1].isalnum() or re.match(r"x[0-9]", text[m.end(1):m.end(1) + 2]):
            continue
        unit = m.group(2) or ""
        unit = "B" if unit in _PAPER_SCALE and unit != "%" else "x" if unit == "×" else unit
        out.append((float(m.group(1).replace("−", "-")) * _PAPER_SCALE.get(m.group(2) or "", 1), unit))
    return out


def paper_number(claim: Claim) -> float | None:
    """The paper's value of `claim` in the space of the values its rule sees, or None when the
    claim states no such number. 0 for a claim that subtracts the paper's value; 1 (0 with
    `minus_one`) for a ratio to an `against_value` the paper states. Else the first number of
    ``paper_value`` (`paper_numbers`) that the rule itself is built on — inside the rule's
    interval, its threshold, or a ratio or percentage on the passing side of it — read as written, as a ratio (``+23%`` = 1.23 for a rule on
    ratios), in percent (``+100%`` = 100) or in KiB (``2 MiB`` = 2048): the rule's interval
    decides which reading it is. A number no reading fits (a size in the wording, a quantity of
    another unit) is not taken for the paper's value."""
    if claim.subtract:
        return 0.0
    m = PASS_RE.match(claim.pass_if)
    if m is None:
        return None
    for p, unit in paper_numbers(claim.paper_value):
        if claim.against_value is not None and math.isclose(p, claim.against_value, rel_tol=1e-3):  # as printed
            return 0.0 if claim.minus_one else 1.0
        readings = [p, 1 + p, 100 * p] if unit == "%" else [p, p / 1024] if unit == "B" else [p]
        for q in readings:
            if m.group(4) and number(m.group(5)) <= q <= number(m.group(6)):
                return q
            if m.group(1) and math.isclose(q, number(m.group(3)), rel_tol=1e-9, abs_tol=1e-12):
                return q
            if m.group(1) and unit in ("%", "x") and judge(claim.pass_if, [q])[0] == PASS:
                return q  # "≥ 2×" judged as "all >= 1.6": the paper's 2 is on the passing side
    return None


def chart_terms(claim: Claim) -> dict[str, Any]:
    """The terms of a `Verdict` that its chart draws (`reducelab.plots.claims_png`)."""
    return {"pass_if": claim.pass_if, "shift": claim.subtract, "paper": paper_number(claim)}


def _extras(claim: Claim) -> tuple[str, str, str, str, str]:
    """(reading, contradiction, cause, evidence, setting) of a claim, for its `Verdict`."""
    return claim.reading, claim.contradiction, claim.cause, claim.evidence, claim.setting


def _evaluate(claim: Claim, table: RunTable) -> list[tuple[str, float]]:
    each_cols = list(claim.each)
    each_vals = [table.expand(c, claim.each[c]) for c in each_cols]
    for c, vs in zip(each_cols, each_vals):
        if not vs:
            raise KeyError(f"no verified runs for {c} = {claim.each[c]}")
    against_lists = {c: table.expand(c, v) for c, v in claim.against.items() if isinstance(v, list)}
    out: list[tuple[str, float]] = []
    for combo in itertools.product(*each_vals):
        key = dict(zip(each_cols, combo))
        base = {**claim.where, **key}
        num_sel = {**base, **claim.subject}
        if claim.metric == "max_over_min":
            means = [table.mean(claim.of, {**num_sel, claim.over: v}) for v in table.expand(claim.over, claim.subject.get(claim.over, "all"))]
            if not means:
                raise KeyError(f"no verified runs for {claim.over}")
            v = max(means) / min(means) if min(means) > 0 else math.inf  # (a zero among positives: unbounded)
            if claim.minus_one:
                v -= 1
            out.append((_label(key), v - claim.subtract))
            continue
        num = table.mean(claim.of, num_sel)
        if claim.metric == "mean":
            out.append((_label(key), num * claim.scale - claim.subtract))
            continue
        combos = [dict(zip(against_lists, c)) for c in itertools.product(*against_lists.values())] or [{}]
        for extra in combos:
            if claim.against_value is not None:
                den = claim.against_value
            else:
                den = table.mean(claim.of, {**base, **claim.against, **extra})
            if claim.metric == "ratio":
                v = num / den
                if claim.minus_one:
                    v -= 1
            else:
                v = num - den
            lab = _label({**key, **{f"vs {c}": x for c, x in extra.items()}})
            out.append((lab, v - claim.subtract))
    return out


# ---------------------------------------------------------------------------------------------
# Output.


def counts(verdicts: Sequence[Verdict]) -> tuple[int, int, int]:
    """(pass, fail, n/a)."""
    p = sum(v.verdict == PASS for v in verdicts)
    f = sum(v.verdict == FAIL for v in verdicts)
    return p, f, len(verdicts) - p - f


CLAIMS_COLUMNS = ("id", "claim", "paper_value", "rule", "measured_value", "pass")
"""The columns of ``STEM_claims.csv`` unless a figure kind names others (`claims_csv`)."""

_VERDICT_FIELDS = {"measured_value": "measured", "pass": "verdict"}


def claims_csv(verdicts: Sequence[Verdict], columns: Sequence[str] = CLAIMS_COLUMNS) -> str:
    """``STEM_claims.csv``: one row per verdict with `columns` (fields of `Verdict`;
    ``measured_value`` is `Verdict.measured`, ``pass`` `Verdict.verdict`), then, when
    sensitivity sweeps ran, ``band`` and ``band_passes`` (`band_cells`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    with_bands = any(c.bands for c in verdicts)
    w.writerow([*columns, *(BAND_COLUMNS if with_bands else ())])
    for c in verdicts:
        w.writerow([getattr(c, _VERDICT_FIELDS.get(k, k)) for k in columns]
                   + list(band_cells(c.bands, c.show_value) if with_bands else ()))
    return buf.getvalue()


BAND_COLUMNS = ("band", "band_passes")


def band_cells(bands: Sequence[Band], show: Callable[[float], str] | None = None) -> tuple[str, str]:
    """The claims CSVs' ``band`` (every sweep's range and per-value verdicts, ``; ``-separated)
    and ``band_passes`` (``all`` / ``some`` / ``none`` per sweep)."""
    return "; ".join(b.text(show) for b in bands), "; ".join(f"{b.key}: {b.passes}" for b in bands)


def band_suffix(bands: Sequence[Band], show: Callable[[float], str] | None = None) -> str:
    """What the terminal claims table adds to a measured value after a sensitivity sweep:
    `` [KEY: LO..HI, passes at all|some|none]`` per sweep ("" without one)."""
    return "".join(f" [{b.key}: {b.range_text(show)}, passes at {b.passes}]" for b in bands)


def extra_html(contradiction: str, verdict: str, cause: str, evidence: str) -> str:
    """What a claim's row in index.html adds below its quote: how the paper words it two ways,
    and, when it fails, the recorded cause and evidence ("" if none)."""
    from html import escape as h

    out = ""
    if contradiction:
        out += f'<br><small class="quote">read two ways: {h(contradiction)}</small>'
    if verdict == FAIL and cause:
        out += f"<br><small><b>why it fails</b> ({h(cause)}): {h(evidence)}</small>"
    return out


def extra_md(verdicts: Sequence[Verdict]) -> list[str]:
    """Markdown after a claims table: the claims the paper words two ways (with how it
    disagrees with itself), the sensitivity bands, and the causes recorded for failures."""
    md = md_cell
    rows = [(v.id, v) for v in verdicts]

    def field_of(v: Verdict, name: str) -> str:
        return str(getattr(v, name))

    lines: list[str] = []
    contra: dict[str, list[str]] = {}
    for cid, v in rows:
        c = field_of(v, "contradiction")
        if c:
            contra.setdefault(c, []).append(f"{cid} {v.verdict.upper()}")
    if contra:
        lines += ["", "## Claims the paper words two ways (each reading checked)", ""]
        for text, ids in contra.items():
            lines.append(f"- {', '.join(ids)}: {md(text)}")
    banded = [(cid, v) for cid, v in rows if v.bands]
    if banded:
        lines += ["", "## Sensitivity (settings the paper does not state)", "",
                  "| id | result here | band over the sweep | passes at |", "| --- | --- | --- | --- |"]
        for cid, v in banded:
            cells = band_cells(v.bands, v.show_value)
            lines.append(f"| {cid} | {v.verdict.upper()} | {md(cells[0])} | {md(cells[1])} |")
    failing = [(cid, v) for cid, v in rows if v.verdict == FAIL and field_of(v, "cause")]
    if failing:
        lines += ["", "## Why the failing claims fail", ""]
        for cid, v in failing:
            lines.append(f"- **{cid}** ({field_of(v, 'cause')}): {md(field_of(v, 'evidence'))}")
    return lines


def md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def claims_table_text(rows: Sequence[tuple[str, str, str, str]]) -> str:
    """The claims table printed by `reducelab reproduce`: id, result, paper, measured."""
    head = ("id", "result", "paper", "measured")
    w = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]

    def fmt(r: Sequence[str]) -> str:
        return "  ".join([*(x.ljust(w[i]) for i, x in enumerate(r[:-1])), r[-1]])

    return "\n".join([fmt(head), fmt(["-" * x for x in w]), *map(fmt, rows)])


ALL_CLAIMS_COLUMNS = ("figure", "id", "source", "claim", "paper_value", "measured_value", "pass")


def all_claims_csv(rows: Sequence[Sequence[str]]) -> str:
    """``claims.csv`` of `reproduce all`: every claim of every figure (`ALL_CLAIMS_COLUMNS`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ALL_CLAIMS_COLUMNS)
    w.writerows(rows)
    return buf.getvalue()


def all_claims_html(rows: Sequence[Sequence[str]]) -> str:
    """The one claims table of `reproduce all`'s index.html: every claim of every figure, each
    linked to its row in the figure's section."""
    from html import escape as h

    cls = {PASS: "pass", FAIL: "fail"}
    p = sum(r[6] == PASS for r in rows)
    f = sum(r[6] == FAIL for r in rows)
    parts = [
        '<section id="all-claims"><h2>Every claim</h2>',
        f"<p>{len(rows)} claims of every paper: {p} pass, {f} fail, {len(rows) - p - f} n/a "
        "(also in <a href=\"claims.csv\">claims.csv</a>).</p>",
        "<table><tr><th>figure</th><th>id</th><th>source</th><th>claim</th><th>paper</th><th>measured</th><th>result</th></tr>",
    ]
    for fig, cid, src, claim, paper, measured, verdict in rows:
        parts.append(f'<tr><td>{h(fig)}</td><td><a href="#{h(fig)}-{h(cid)}">{h(cid)}</a></td><td>{h(src)}</td>'
                     f"<td>{h(claim)}</td><td>{h(paper)}</td><td>{h(measured)}</td>"
                     f'<td class="{cls.get(verdict, "na")}">{h(verdict)}</td></tr>')
    parts.append("</table></section>")
    return "\n".join(parts) + "\n"


register_metrics("table", Metrics(TABLE_METRICS, _read_table_terms, _evaluate_table))
