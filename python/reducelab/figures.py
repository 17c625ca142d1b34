"""Paper figures as data: the one harness of every paper's figures (`reducelab reproduce`).

A figure is two files under ``scenarios/<paper>/``: ``figN.toml`` (a ``[figure]`` table naming
the figure, its ``kind``, its base scenario, its claims file and the STEM of its output files,
then the tables its kind reads: a grid of parameters, scales, plot panels, sensitivity sweeps)
and ``figN.claims.toml`` (the paper's words and the pass rules). This module is the one door
for all of them:

- one loader and registry (`load`, `registry`, `figure`): ``reducelab reproduce NAME`` finds
  every paper's figures by name, and its kind (`_kinds`: a `FigureKind`) reads the rest of its file;
- one runner (`reproduce`): every point is a scenario run by `_core.run` through the sweep
  store (`reducelab.sweep.ScenarioSet`): stored points are not run again (an interrupted figure
  resumes; two figures sharing a point run it once), in local worker processes or on a Dask
  cluster (``scheduler``);
- one claims engine (`reducelab.claims`): the kind names its metric family (the table metrics,
  or the ones it registers, e.g. the size sweeps' gains in `reducelab.sizesweep`) and gives the
  table its runs are judged on;
- one writer of the claims files (`claims_md`, `reducelab.claims.claims_csv`), and one HTML
  report for ``reproduce all`` (`index_html`); plots by `reducelab.plots`.

Adding a figure of an existing kind is its two files; a new kind is a module with a
`FigureKind` (canary.py, dsa.py, flare.py, flare_sparse.py, sizesweep.py) added to `_kinds`.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import claims as claims_engine
from .claims import Claim, ClaimError, RunTable, Sensitivity, Verdict
from .scenario import FieldError, Scenario
from .store import ResultStore, StoreError, StoredRun
from .sweep import ScenarioSet, SweepReport

STORE_FILE = "points.sqlite"
"""The run store a reproduction writes into its output directory unless given one."""

PANEL_KINDS = ("bars", "lines", "cdf")


class FigureError(ValueError):
    """A figure file, scale or option was rejected: ``FILE: FIELD: REASON``."""


def scenarios_dir() -> Path:
    """``$REDUCELAB_SCENARIOS`` if set, else the repository's ``scenarios/`` folder (figures
    live in ``scenarios/<paper>/``)."""
    env = os.environ.get("REDUCELAB_SCENARIOS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "scenarios"


@functools.cache
def _kinds() -> dict[str, FigureKind]:
    """Every figure kind by name (the one registry of them; a kind holds no state)."""
    from .canary import CanaryKind
    from .dsa import DsaKind
    from .flare import FlareKind
    from .flare_sparse import FlareSparseKind
    from .sizesweep import KINDS as SIZE_SWEEPS, SizeSweepKind

    return {"canary": CanaryKind(), "dsa": DsaKind(), "flare": FlareKind(), "flare_sparse": FlareSparseKind(),
            **{k: SizeSweepKind(k) for k in SIZE_SWEEPS}}


@dataclass(frozen=True)
class Panel:
    """One panel of a figure's plot: `y` (mean over the runs of a group) against `x`, one line
    or bar group per value of `hue`, over the runs matching `where`."""

    kind: str
    x: str
    y: str
    hue: tuple[str, ...]
    where: Mapping[str, Any]
    title: str
    xlabel: str
    ylabel: str
    xscale: str
    yscale: str
    xfactor: float


@dataclass(frozen=True)
class Links:
    """Which runs keep their per-link utilisation (``STEM_links.csv``, cdf panels)."""

    keys: tuple[str, ...]
    where: Mapping[str, Any]
    kind: str = "network"
    """Which links (`reducelab.canary.LINK_KINDS`): ``network`` (switch-switch) or ``all``."""


@dataclass
class ScaleSpec:
    """A figure at one scale: the base scenario's overrides, the parameters, the grid."""

    name: str
    set: dict[str, Any]
    params: dict[str, Any]
    grid: list[dict[str, Any]]
    note: str = ""

    def grid_points(self) -> list[dict[str, Any]]:
        """Every point's parameters: per grid block, the product of its axes in the order
        written (the last varies fastest); blocks one after the other. An axis value ``"$NAME"``
        is the figure parameter NAME (an integer n means 0..n-1); a table value sets several
        parameters at once."""
        out: list[dict[str, Any]] = []
        for block in self.grid:
            axes = []
            for k, v in block.items():
                if isinstance(v, str) and v.startswith("$"):
                    n = self.params[v[1:]]
                    v = list(range(n)) if isinstance(n, int) else list(n)
                axes.append([(k, x) for x in v])
            for combo in itertools.product(*axes):
                p: dict[str, Any] = {}
                for k, x in combo:
                    if isinstance(x, dict):
                        p.update(x)
                    else:
                        p[k] = x
                out.append(p)
        return out


@dataclass
class Figure:
    """A figure read from ``figN.toml`` (`load`): its ``[figure]`` table, and what its kind read
    from the rest of the file (the table kinds: `params` to `links`; others: `data`)."""

    name: str
    paper: str
    kind: str
    figure: str
    title: str
    path: Path
    scenario_path: Path
    claims_path: Path
    stem: str
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    grid: list[dict[str, Any]] = field(default_factory=list)
    scales: dict[str, dict[str, Any]] = field(default_factory=dict)
    panels: list[Panel] = field(default_factory=list)
    links: Links | None = None
    plot_title: str = ""
    sensitivity: list[Sensitivity] = field(default_factory=list)
    """Settings the paper does not state, swept with ``--sensitivity`` (`claims.read_sensitivity`)."""
    data: Any = None
    """What a kind that is not a table kind read from the file (e.g. `reducelab.sizesweep`)."""

    @property
    def kind_of(self) -> FigureKind:
        return _kinds()[self.kind]

    def scale(self, name: str) -> Any:
        """The figure at scale `name` (a `ScaleSpec` for the table kinds; the kind's own, e.g.
        `reducelab.sizesweep.Spec`, for others). FigureError for an unknown scale."""
        if name not in self.scale_names():
            raise FigureError(f"{self.path}: unknown scale {name!r} for {self.name}; known: {', '.join(self.scale_names())}")
        return self.kind_of.scale(self, name)

    def scale_names(self) -> list[str]:
        return self.kind_of.scale_names(self)

    def base(self, scale: ScaleSpec) -> Scenario:
        try:
            return Scenario.from_file(self.scenario_path).with_values(scale.set)
        except FieldError as exc:
            raise FigureError(f"{self.path}: scales.{scale.name}.set: {exc.field}: {exc.reason}") from None

    def claims(self) -> list[Claim]:
        try:
            doc = tomllib.loads(self.claims_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FigureError(f"{self.path}: figure.claims: {self.claims_path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise FigureError(f"{self.claims_path}: not valid TOML: {exc}") from None
        kind = self.kind_of
        try:
            return claims_engine.read_claims(str(self.claims_path), doc, kind.metrics, kind.claims_context(self))
        except ClaimError as exc:
            raise FigureError(str(exc)) from None


class TomlTable:
    """Strict reading of a TOML table of a figure file: `get` typed fields, `done` rejects unknown ones."""

    def __init__(self, file: Path, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise FigureError(f"{file}: {where}: expected a table")
        self.file, self.where, self.data, self.seen = file, where, data, set()

    def err(self, key: str, reason: str) -> FigureError:
        w = f"{self.where}.{key}" if self.where else key
        return FigureError(f"{self.file}: {w}: {reason}")

    def get(self, key: str, types: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise self.err(key, "required")
            return default
        v = self.data[key]
        tt = types if isinstance(types, tuple) else (types,)
        if (isinstance(v, bool) and bool not in tt) or not isinstance(v, tt):
            raise self.err(key, f"expected {what or ' or '.join(t.__name__ for t in tt)}, got {v!r}")
        return v

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self.err(extra[0], "unknown key")


def _grid(file: Path, where: str, raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise FigureError(f"{file}: {where}: expected one or more [[grid]] tables of PARAMETER = [values]")
    out = []
    for i, block in enumerate(raw):
        if not isinstance(block, dict) or not block:
            raise FigureError(f"{file}: {where}[{i}]: expected a table of PARAMETER = [values]")
        for k, v in block.items():
            ok = (isinstance(v, list) and len(v) > 0) or (isinstance(v, str) and v.startswith("$"))
            if not ok:
                raise FigureError(f"{file}: {where}[{i}].{k}: expected a non-empty array of values or \"$PARAMETER\", got {v!r}")
        out.append(dict(block))
    return out


class FigureKind:
    """What a figure kind does for the one harness (`reproduce`, `reevaluate`): read its part of a
    figure file, give the figure at a scale, turn it into points (scenarios), a stored run into a
    row, rows into the table its claims are judged on (`metrics`: its family in the claims
    engine) and into its output files, and draw it. `TableKind` implements it for figures whose
    points are a grid of parameters judged by the table metrics."""

    metrics = "table"
    """The claims engine's metric family of the kind's claims (`reducelab.claims.METRICS`)."""
    claims_columns: tuple[str, ...] = claims_engine.CLAIMS_COLUMNS
    """The columns of ``STEM_claims.csv``."""
    results_file = ".csv"
    """``STEM`` + this: the results table ``--claims-only`` judges without a store."""
    takes_backend = False
    """Whether ``--backend`` applies to the kind's points."""
    keep_files: tuple[str, ...] = ()
    """Result files the store keeps for `row` (e.g. ``links.csv``)."""

    def read(self, fig: Figure, top: TomlTable) -> None:
        """Read the kind's tables of the figure file (`top`: the file; unknown keys are errors)."""
        raise NotImplementedError

    def scale_names(self, fig: Figure) -> list[str]:
        raise NotImplementedError

    def scale(self, fig: Figure, name: str) -> Any:
        raise NotImplementedError

    def claims_context(self, fig: Figure) -> Any:
        """What the metric family checks a claim's terms against."""
        raise NotImplementedError

    def with_backend(self, fig: Figure, sc: Any, backend: str | None) -> Any:
        if backend is not None:
            raise FigureError(f"{fig.name}: figure kind {fig.kind!r} runs scenarios as they are; --backend does not apply")
        return sc

    def sensitivity_scale(self, fig: Figure, sc: Any, sens: Sensitivity, value: Any) -> Any:
        raise NotImplementedError

    def scenarios(self, fig: Figure, sc: Any) -> list[tuple[dict[str, Any], Scenario]]:
        """The figure's points at `sc`: (parameters, scenario), in figure order; parameters whose
        name starts with ``_`` are the kind's own (not recorded in the store)."""
        raise NotImplementedError

    def cost(self, params: Mapping[str, Any]) -> float:
        """How long a point runs, roughly: the runner starts the costliest first."""
        return 0.0

    def row(self, params: Mapping[str, Any], stored: StoredRun, links: bool, link_kind: str = "network") -> dict[str, Any]:
        raise NotImplementedError

    def table(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
        """What the claims are judged on: the verified runs only."""
        raise NotImplementedError

    def outputs(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """The kind's result files (name -> text)."""
        raise NotImplementedError

    def results_table(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]]) -> str:
        """The results table a sensitivity sweep's runs are kept in (``STEM_sensitivity.csv``)."""
        raise NotImplementedError

    def rows_from_table(self, fig: Figure, sc: Any, text: str) -> list[dict[str, Any]]:
        """`results_table` read back."""
        raise NotImplementedError

    def saved_rows(self, fig: Figure, sc: Any, out: Path) -> list[dict[str, Any]] | None:
        """The rows of the results files in `out` (``--claims-only`` without a store); None if absent."""
        path = out / f"{fig.stem}{self.results_file}"
        return self.rows_from_table(fig, sc, path.read_text(encoding="utf-8")) if path.is_file() else None

    def summary(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]]) -> str:
        """The sentence that opens ``STEM_claims.md`` and the figure's section of index.html."""
        raise NotImplementedError

    def setup(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """The figure's setup as bullet texts (networks, backends, what did not run and why)."""
        return []

    def command_options(self, sc: Any) -> str:
        """What the command regenerating the figure adds after ``--scale`` (e.g. ``--backend``)."""
        return ""

    def plot(self, fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]], claims: Sequence[Claim], out: Path,
             swept: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = ()) -> None:
        """Draw ``STEM.png``; `swept` are the runs of the sensitivity sweeps, ``(key, rows)`` per setting."""
        raise NotImplementedError


class TableKind(FigureKind):
    """A kind whose figure file is a base scenario, ``[params]``, ``[[grid]]`` blocks,
    ``[scales.NAME]`` overrides, ``[links]`` and ``[[panel]]`` tables (docs/reproductions.md,
    "Figure format"), judged by the table metrics over one row per run. A subclass turns
    parameters into scenarios (`points`), a stored run into a row (`row`) and rows into its
    files (`files`); `columns` are the rows' columns and `params` the figure parameters it reads."""

    columns: tuple[str, ...] = ()
    params: tuple[str, ...] = ()

    def points(self, fig: Figure, scale: ScaleSpec, base: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
        raise NotImplementedError

    def files(self, fig: Figure, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        raise NotImplementedError

    def network(self, base: Scenario) -> str:
        raise NotImplementedError

    def network_at(self, base: Scenario, params: Mapping[str, Any]) -> str:
        """`network` at a scale (a kind whose description depends on the scale's parameters
        overrides this)."""
        return self.network(base)

    def read(self, fig: Figure, top: TomlTable) -> None:
        path = fig.path
        fig.params = dict(top.get("params", dict, {}))
        fig.grid = _grid(path, "grid", top.get("grid", list))
        for sname, sraw in top.get("scales", dict, {}).items():
            s = TomlTable(path, f"scales.{sname}", sraw)
            entry: dict[str, Any] = {"set": s.get("set", dict, {}), "params": s.get("params", dict, {}),
                                     "note": s.get("note", str, "")}
            if "grid" in s.data:
                entry["grid"] = _grid(path, f"scales.{sname}.grid", s.get("grid", list))
            s.done()
            fig.scales[sname] = entry
        if "links" in top.data:
            lk = TomlTable(path, "links", top.get("links", dict))
            from .canary import LINK_KINDS

            lkind = lk.get("kind", str, "network")
            if lkind not in LINK_KINDS:
                raise lk.err("kind", f"expected one of {', '.join(LINK_KINDS)}, got {lkind!r}")
            lk.get("source", str, "")  # the paper's words defining the figure's links (documentation)
            fig.links = Links(tuple(lk.get("keys", list)), dict(lk.get("where", dict, {})), lkind)
            lk.done()
        for i, raw in enumerate(top.get("panel", list, [], "an array of [[panel]] tables")):
            p = TomlTable(path, f"panel[{i}]", raw)
            pk = p.get("kind", str)
            if pk not in PANEL_KINDS:
                raise p.err("kind", f"expected one of {', '.join(PANEL_KINDS)}, got {pk!r}")
            hue = p.get("hue", (str, list), "series")
            fig.panels.append(Panel(
                pk, p.get("x", str, ""), p.get("y", str, "goodput_gbps"), (hue,) if isinstance(hue, str) else tuple(hue),
                dict(p.get("where", dict, {})), p.get("title", str, ""), p.get("xlabel", str, ""), p.get("ylabel", str, ""),
                p.get("xscale", str, "linear"), p.get("yscale", str, "linear"), float(p.get("xfactor", (int, float), 1)),
            ))
            p.done()
        unknown = set(fig.params) - set(self.params)
        if unknown:
            raise FigureError(f"{path}: params.{sorted(unknown)[0]}: not a parameter of kind {fig.kind!r} "
                              f"({', '.join(self.params)})")

    def scale_names(self, fig: Figure) -> list[str]:
        return list(dict.fromkeys(["full", *fig.scales]))

    def scale(self, fig: Figure, name: str) -> ScaleSpec:
        over = fig.scales.get(name, {})
        return ScaleSpec(
            name, dict(over.get("set", {})), {**fig.params, **over.get("params", {})},
            list(over.get("grid", fig.grid)), str(over.get("note", "")),
        )

    def claims_context(self, fig: Figure) -> tuple[str, ...]:
        return self.columns

    def sensitivity_scale(self, fig: Figure, sc: ScaleSpec, sens: Sensitivity, value: Any) -> ScaleSpec:
        """`sc` with one sensitivity setting: ``params.NAME`` sets a figure parameter, any other
        key a field of the base scenario (checked when the points are built: an unknown key
        fails naming it)."""
        if sens.key.startswith("params."):
            pname = sens.key[len("params."):]
            if pname not in self.params:
                raise FigureError(f"{fig.path}: sensitivity.key: {sens.key!r}: not a parameter of kind {fig.kind!r} "
                                  f"({', '.join(self.params)})")
            value = claims_engine.like_default(sc.params.get(pname), value)
            return ScaleSpec(sc.name, dict(sc.set), {**sc.params, pname: value}, list(sc.grid), sc.note)
        values = sens.fields_on(fig.base(sc), value)
        return ScaleSpec(sc.name, {**sc.set, **values}, dict(sc.params), list(sc.grid), sc.note)

    def scenarios(self, fig: Figure, sc: ScaleSpec) -> list[tuple[dict[str, Any], Scenario]]:
        return self.points(fig, sc, fig.base(sc))

    def table(self, fig: Figure, sc: ScaleSpec, rows: Sequence[Mapping[str, Any]]) -> RunTable:
        return RunTable([r for r in rows if r["verified"]], sc.params)

    def outputs(self, fig: Figure, sc: ScaleSpec, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        return self.files(fig, rows)

    def results_table(self, fig: Figure, sc: ScaleSpec, rows: Sequence[Mapping[str, Any]]) -> str:
        return self.files(fig, rows)[f"{fig.stem}.csv"]

    def rows_from_table(self, fig: Figure, sc: ScaleSpec, text: str) -> list[dict[str, Any]]:
        import importlib

        # The kind's own reader (a method, as flare's and flare_sparse's), else its module's (canary, dsa).
        read = getattr(self, "rows_from_csv", None) or importlib.import_module(type(self).__module__).rows_from_csv
        return read(text)

    def summary(self, fig: Figure, sc: ScaleSpec, rows: Sequence[Mapping[str, Any]]) -> str:
        return (f"{fig.description} Scale `{sc.name}`: {self.network_at(fig.base(sc), sc.params)}; "
                f"{sc.params.get('allocations', 1)} random allocation(s); {len(rows)} runs; "
                f"`{command(fig, sc)}`. Pass rules fixed before the runs.").lstrip()

    def plot(self, fig: Figure, sc: ScaleSpec, rows: Sequence[Mapping[str, Any]], claims: Sequence[Claim], out: Path,
             swept: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = ()) -> None:
        from .plots import figure_png

        marks = [(c.mark, c.id, c.paper_value) for c in claims if c.mark is not None]
        title = f"{fig.plot_title or fig.title} ({sc.name}: {self.network_at(fig.base(sc), sc.params)})"
        figure_png(rows, fig.panels, sc.params, title, marks, out, swept)


def load(path: str | os.PathLike[str]) -> Figure:
    """Read and check a figure file of any kind (not its claims: `Figure.claims`). FigureError
    naming the file and the field for anything wrong."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FigureError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise FigureError(f"{path}: not valid TOML: {exc}") from None
    top = TomlTable(path, "", doc)
    f = TomlTable(path, "figure", top.get("figure", dict, what="a [figure] table"))
    kinds = _kinds()
    kind = f.get("kind", str)
    if kind not in kinds:
        raise f.err("kind", f"unknown figure kind {kind!r} (known: {', '.join(kinds)})")
    scenario_path = path.parent / f.get("scenario", str)
    if not scenario_path.is_file():
        raise f.err("scenario", f"{scenario_path}: no such file")
    stem = f.get("output", str)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", stem):
        raise f.err("output", f"must be a file stem (letters, digits, _ . -), got {stem!r}")
    fig = Figure(
        name=f.get("name", str), paper=f.get("paper", str), kind=kind, figure=f.get("figure", str, ""),
        title=f.get("title", str), path=path, scenario_path=scenario_path,
        claims_path=path.parent / f.get("claims", str), stem=stem, description=f.get("description", str, ""),
        plot_title=f.get("plot_title", str, ""),
    )
    f.done()
    try:
        fig.sensitivity = claims_engine.read_sensitivity(str(path), top.get("sensitivity", list, None))
    except ClaimError as exc:
        raise FigureError(str(exc)) from None
    kinds[kind].read(fig, top)
    top.done()
    return fig


def figure_files(root: Path | None = None) -> list[Path]:
    """Every figure file under ``scenarios/*/`` (a ``figN.toml`` beside its claims file), by
    paper, then figure number."""
    root = root or scenarios_dir()
    return [p for p in sorted(root.glob("*/fig*.toml"), key=lambda p: (p.parent.name, _fig_number(p)))
            if not p.name.endswith(".claims.toml")]


def _fig_number(p: Path) -> int:
    digits = "".join(ch for ch in p.stem if ch.isdigit())
    return int(digits) if digits else 0


def registry() -> dict[str, Path]:
    """Figure name -> file, for every figure under ``scenarios/``."""
    out = {}
    for p in figure_files():
        out[load(p).name] = p
    return out


def names() -> list[str]:
    """Every figure's name (what ``reducelab reproduce`` accepts besides ``all``), in figure order."""
    return list(registry())


def figure(name_or_path: str | os.PathLike[str]) -> Figure:
    """A figure by name (``canary-fig8``) or by file path."""
    p = Path(name_or_path)
    if str(name_or_path).endswith(".toml"):
        return load(p)
    reg = registry()
    if str(name_or_path) not in reg:
        raise FigureError(f"unknown figure {str(name_or_path)!r}; known: {', '.join(reg)} (see `reducelab reproduce --list`)")
    return load(reg[str(name_or_path)])


# ---------------------------------------------------------------------------------------------
# Running.


@dataclass
class FigureReport:
    """What `reproduce` made of one figure at one scale."""

    figure: Figure
    scale: Any
    """The figure at the scale it ran (`Figure.scale`, with `--backend` if given)."""
    rows: list[dict[str, Any]]
    verdicts: list[Verdict]
    files: dict[str, str]
    sweep: SweepReport | None
    wall_seconds: float
    out: Path = field(default_factory=Path)

    @property
    def unverified(self) -> list[dict[str, Any]]:
        """Runs that did not complete with verified results (never counted towards a claim)."""
        return [r for r in self.rows if r["verified"] is False]

    def counts(self) -> tuple[int, int, int]:
        return claims_engine.counts(self.verdicts)

    def command(self, out: Path | str | None = None) -> str:
        """The command that regenerates the figure (into `out`)."""
        return command(self.figure, self.scale, out)

    def claims_table(self) -> str:
        return claims_engine.claims_table_text(
            [(v.id, v.verdict.upper(), v.paper_value, v.measured + claims_engine.band_suffix(v.bands, v.show_value))
             for v in self.verdicts])

    def claim_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """Rows of `reproduce all`'s one claims table (`claims.ALL_CLAIMS_COLUMNS`)."""
        return [(self.figure.name, v.id, v.source, v.claim, v.paper_value, v.measured, v.verdict) for v in self.verdicts]


def _links_wanted(fig: Figure, params: Mapping[str, Any], scale: Any) -> bool:
    if fig.links is None:
        return False
    table = RunTable([], scale.params)
    return all(table._match(params, k, v) for k, v in fig.links.where.items())


def points(fig: Figure, scale: Any) -> list[tuple[dict[str, Any], Scenario]]:
    """The figure's points at `scale`: (parameters, scenario), in figure order."""
    try:
        return fig.kind_of.scenarios(fig, scale)
    except (KeyError, ValueError) as exc:
        if isinstance(exc, FigureError):
            raise
        raise FigureError(f"{fig.path}: scale {_scale_name(scale)}: {exc}") from None


def run_points(
    fig: Figure, scale: Any, store: ResultStore, *, jobs: int | None = None, scheduler: Any = None,
    progress: bool = False, on_point: Any = None,
) -> tuple[list[tuple[dict[str, Any], Scenario]], SweepReport]:
    """Run the figure's points not yet in `store` (the sweep store's runner; `on_point` as in
    `Sweep.run`), the costliest first (`FigureKind.cost`; the results do not depend on the
    order: they are read back by point)."""
    kind = fig.kind_of
    pts = points(fig, scale)
    entries = [({k: v for k, v in p.items() if not k.startswith("_")}, s)
               for p, s in sorted(pts, key=lambda e: kind.cost(e[0]), reverse=True)]
    sweep = ScenarioSet(f"{fig.name}@{_scale_name(scale)}", entries, spec={"figure": str(fig.path), "scale": _scale_name(scale)},
                        spec_path=str(fig.path), scenario_path=str(fig.scenario_path), keep_files=kind.keep_files)
    rep = sweep.run(store, jobs=jobs, scheduler=scheduler, progress=progress, check=False, confirm=True,
                    on_point=on_point)
    return pts, rep


def _scale_name(scale: Any) -> str:
    return scale.name if isinstance(scale, ScaleSpec) else scale.scale


def command(fig: Figure, scale: Any, out: Path | str | None = None) -> str:
    """``reducelab reproduce NAME --scale SCALE`` (and the kind's options, `--out OUT`) for `fig`
    at `scale`."""
    return (f"reducelab reproduce {fig.name} --scale {_scale_name(scale)}" + fig.kind_of.command_options(scale)
            + (f" --out {out}" if out is not None else ""))


def _rows(fig: Figure, scale: Any, db: ResultStore, pts: Sequence[tuple[dict[str, Any], Scenario]],
          links: bool = True) -> list[dict[str, Any]]:
    kind = fig.kind_of
    link_kind = fig.links.kind if fig.links is not None else "network"
    return [kind.row(p, db.get(s.key()), links and _links_wanted(fig, p, scale), link_kind) for p, s in pts]


def reproduce(
    name: str | os.PathLike[str], out: str | os.PathLike[str], scale: str = "small", *, jobs: int | None = None,
    store: str | os.PathLike[str] | ResultStore | None = None, scheduler: Any = None, progress: bool = False,
    plot: bool = True, on_point: Any = None, sensitivity: bool = False, backend: str | None = None,
) -> FigureReport:
    """Run figure `name` (a name or a figure file) at `scale` through the store (default:
    ``OUT/points.sqlite``), judge its claims on its verified runs, and write the kind's files
    (`FigureKind.outputs`), ``STEM_claims.csv``, ``STEM_claims.md`` and ``STEM.png`` into `out`.
    `backend` (size-sweep kinds only) runs every point on that backend.

    With `sensitivity`, also run the figure at every value of each ``[[sensitivity]]`` setting
    (through the same store) and give each claim its band over them (`claims.with_bands`).

    Stored points are not run again: a figure interrupted (Ctrl-C, an error, an `on_point`
    that raises) resumes where it stopped. Raises `FigureError` for a bad figure or scale,
    `reducelab.sweep.SweepRunError` if a point cannot run."""
    t0 = time.monotonic()
    fig = figure(name)
    kind = fig.kind_of
    sc = kind.with_backend(fig, fig.scale(scale), backend)
    claims = fig.claims()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = not isinstance(store, ResultStore)
    db = ResultStore(store if store is not None else out / STORE_FILE) if own else store
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1)
    try:
        pts, rep = run_points(fig, sc, db, jobs=jobs, scheduler=scheduler, progress=progress, on_point=on_point)
        rows = _rows(fig, sc, db, pts)
        swept: list[tuple[Sensitivity, list[list[Verdict]]]] = []
        swept_rows: list[tuple[str, Any, str]] = []
        swept_runs: list[tuple[str, list[dict[str, Any]]]] = []
        if sensitivity:
            for sens in fig.sensitivity:
                at = []
                for value in sens.values:
                    ssc = kind.sensitivity_scale(fig, sc, sens, value)
                    spts, _ = run_points(fig, ssc, db, jobs=jobs, scheduler=scheduler, progress=progress)
                    srows = _rows(fig, ssc, db, spts, links=False)
                    at.append(judge(fig, ssc, claims, srows))
                    swept_rows.append((sens.key, value, kind.results_table(fig, ssc, srows)))
                    swept_runs.append((sens.key, srows))
                swept.append((sens, at))
    finally:
        if own:
            db.close()
    verdicts = judge(fig, sc, claims, rows)
    for sens, at in swept:
        verdicts = claims_engine.with_bands(verdicts, sens.key, sens.values, at)
    files = kind.outputs(fig, sc, rows)
    if swept_rows:
        files[f"{fig.stem}_sensitivity.csv"] = claims_engine.sensitivity_table_csv(swept_rows)
    files[f"{fig.stem}_claims.csv"] = claims_engine.claims_csv(verdicts, kind.claims_columns)
    files[f"{fig.stem}_claims.md"] = claims_md(fig, sc, rows, verdicts)
    for n, text in files.items():
        (out / n).write_text(text, encoding="utf-8", newline="")
    if plot:
        files.update(draw(fig, sc, rows, claims, verdicts, out, swept_runs))
    return FigureReport(fig, sc, rows, verdicts, files, rep, time.monotonic() - t0, out)


def judge(fig: Figure, sc: Any, claims: Sequence[Claim], rows: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """The figure's claims judged on its runs (the kind's table of the verified ones)."""
    table = fig.kind_of.table(fig, sc, rows)
    return [claims_engine.evaluate(c, table) for c in claims]


def sensitivity_scale(fig: Figure, sc: Any, sens: Sensitivity, value: Any) -> Any:
    """`sc` with one value of a sensitivity sweep (`FigureKind.sensitivity_scale`)."""
    return fig.kind_of.sensitivity_scale(fig, sc, sens, value)


def claims_md(fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]], verdicts: Sequence[Verdict]) -> str:
    """``STEM_claims.md`` of every kind: the figure's summary and setup, the claims table, the
    claims worded two ways, the sensitivity bands, why the failing ones fail, and the sources."""
    md = claims_engine.md_cell
    kind = fig.kind_of
    lines = [f"# {fig.title}", "", kind.summary(fig, sc, rows), ""]
    setup = kind.setup(fig, sc, rows)
    if setup:
        lines += [*(f"- {md(x)}" for x in setup), ""]
    lines += [
        "| id | claim | paper | rule | measured | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in verdicts:
        lines.append(f"| {c.id} | {md(c.claim)} | {md(c.paper_value)} | {md(c.rule)} | {md(c.measured)} | {c.verdict.upper()} |")
    lines += claims_engine.extra_md(verdicts)
    quoted = [c for c in verdicts if c.quote or c.note]
    if quoted:
        lines += ["", "## Sources", ""]
        for c in quoted:
            src = f" ({c.source})" if c.source else ""
            if c.quote:
                lines.append(f"- **{c.id}**{src}: \"{md(c.quote)}\"" + (f" — {md(c.note)}" if c.note else ""))
            else:
                lines.append(f"- **{c.id}**{src}: {md(c.note)}")
    return "\n".join(lines) + "\n"


def reevaluate(name: str | os.PathLike[str], out: str | os.PathLike[str], scale: str, *, plot: bool = True) -> list[Verdict]:
    """Judge figure `name`'s claims again without running anything, and rewrite the claims files
    in `out`: on the runs stored in ``OUT/points.sqlite`` if it exists (every point must be
    stored), else on the figure's results table (`FigureKind.saved_rows`, e.g. the committed
    full-scale results). With ``OUT/STEM_sensitivity.csv``, the claims get their bands again, each
    over the values of its setting that the file holds (a setting it does not hold gets no band).
    With `plot`, ``STEM.png`` is drawn again from the same runs (and the sensitivity sweep's)."""
    fig = figure(name)
    kind = fig.kind_of
    sc = fig.scale(scale)
    out = Path(out)
    path = out / STORE_FILE
    if path.is_file():
        with ResultStore(path) as db:
            rows = _rows(fig, sc, db, points(fig, sc), links=False)
    else:
        saved = kind.saved_rows(fig, sc, out)
        if saved is None:
            raise StoreError(f"{out}: neither {STORE_FILE} nor {fig.stem}{kind.results_file}: nothing to judge")
        rows = saved
    claims = fig.claims()
    verdicts = judge(fig, sc, claims, rows)
    sens_file = out / f"{fig.stem}_sensitivity.csv"
    swept_runs: list[tuple[str, list[dict[str, Any]]]] = []
    if sens_file.is_file():  # the runs of a --sensitivity sweep: the claims get their bands again
        tables = claims_engine.sensitivity_tables(sens_file.read_text(encoding="utf-8"), str(sens_file))
        for sens in fig.sensitivity:
            # A committed sweep may hold some of the values (a full-scale band costs a run of the
            # figure per value); the band is over those, and says so in its settings.
            ran = claims_engine.swept_values(tables, sens)
            if not ran:
                continue
            at = []
            for value in ran:
                ssc = kind.sensitivity_scale(fig, sc, sens, value)
                text = claims_engine.sensitivity_table_for(tables, sens, value, str(sens_file))
                srows = kind.rows_from_table(fig, ssc, text)
                swept_runs.append((sens.key, srows))
                at.append(judge(fig, ssc, claims, srows))
            verdicts = claims_engine.with_bands(verdicts, sens.key, ran, at)
    (out / f"{fig.stem}_claims.csv").write_text(claims_engine.claims_csv(verdicts, kind.claims_columns), encoding="utf-8", newline="")
    (out / f"{fig.stem}_claims.md").write_text(claims_md(fig, sc, rows, verdicts), encoding="utf-8", newline="")
    if plot:
        draw(fig, sc, rows, claims, verdicts, out, swept_runs)
    return verdicts


def draw(fig: Figure, sc: Any, rows: Sequence[Mapping[str, Any]], claims: Sequence[Claim], verdicts: Sequence[Verdict],
         out: Path, swept_runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = ()) -> dict[str, str]:
    """Draw the figure's plots into `out`: ``STEM.png`` (the kind's, `FigureKind.plot`) and
    ``STEM_claims.png`` (every claim against the paper, `reducelab.plots.claims_png`); returns
    the names drawn (as `FigureReport.files` keys)."""
    from .plots import claims_png

    fig.kind_of.plot(fig, sc, rows, claims, out / f"{fig.stem}.png", swept_runs)
    drawn = {f"{fig.stem}.png": ""}
    if claims_png(fig.title, verdicts, out / f"{fig.stem}_claims.png") is not None:
        drawn[f"{fig.stem}_claims.png"] = ""
    return drawn


# ---------------------------------------------------------------------------------------------
# Every figure and the HTML report.


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


def index_html(scale: str, command: str, out: str | os.PathLike[str], reports: Sequence[FigureReport]) -> str:
    """``index.html`` of `reproduce all`: a self-contained page (inline CSS, no scripts) with a
    summary table, per figure its plot, summary, setup, regenerating command and claims (quote,
    rule, paper and measured values, result), then the one table of every claim."""
    from html import escape as h

    cls = {"pass": "pass", "fail": "fail"}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ReduceLab reproductions ({h(scale)})</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>ReduceLab paper reproductions, scale <code>{h(scale)}</code></h1>",
        f"<p>Regenerate everything: <code>{h(command)}</code>. "
        "Each figure's files (CSV data, claims as CSV/Markdown, plot) are in its directory. "
        "Pass rules were fixed in the claims files before looking at results.</p>",
        "<table><tr><th>figure</th><th>title</th><th>pass</th><th>fail</th><th>n/a</th></tr>",
    ]
    for r in reports:
        p, f, n = r.counts()
        parts.append(f'<tr><td><a href="#{h(r.figure.name)}">{h(r.figure.name)}</a></td><td>{h(r.figure.title)}</td>'
                     f'<td class="pass">{p}</td><td class="fail">{f}</td><td class="na">{n}</td></tr>')
    totals = [sum(r.counts()[i] for r in reports) for i in range(3)]
    parts.append(f"<tr><th>all</th><th></th><th>{totals[0]}</th><th>{totals[1]}</th><th>{totals[2]}</th></tr></table>")
    for r in reports:
        d, stem, kind = r.figure.name, r.figure.stem, r.figure.kind_of
        p, f, n = r.counts()
        parts += [
            f'<section id="{h(d)}"><h2>{h(r.figure.title)} <small>({h(d)})</small></h2>',
            f"<p>{h(kind.summary(r.figure, r.scale, r.rows))} {p} pass, {f} fail, {n} n/a. Regenerate: "
            f"<code>{h(r.command(Path(out) / d))}</code></p>",
            f'<p><img src="{h(d)}/{h(stem)}.png" alt="{h(d)} reproduction"></p>',
        ]
        if f"{stem}_claims.png" in r.files:
            parts.append(f'<p><img src="{h(d)}/{h(stem)}_claims.png" alt="{h(d)}: the paper\'s values against the measured"></p>')
        setup = kind.setup(r.figure, r.scale, r.rows)
        if setup:
            parts += ["<ul>", *(f"<li>{h(x)}</li>" for x in setup), "</ul>"]
        parts.append("<table><tr><th>id</th><th>source</th><th>claim</th><th>paper</th><th>rule</th><th>measured</th><th>result</th></tr>")
        for c in r.verdicts:
            quote = f'<br><span class="quote">"{h(c.quote)}"</span>' if c.quote else ""
            quote += claims_engine.extra_html(c.contradiction, c.verdict, c.cause, c.evidence)
            parts.append(f'<tr id="{h(d)}-{h(c.id)}"><td>{h(c.id)}</td><td>{h(c.source)}</td><td>{h(c.claim)}{quote}</td>'
                         f'<td>{h(c.paper_value)}</td><td>{h(c.rule)}</td><td>{h(c.measured)}</td>'
                         f'<td class="{cls.get(c.verdict, "na")}">{h(c.verdict)}</td></tr>')
        parts += [
            "</table>",
            "<p>Files: " + ", ".join(f'<a href="{h(d)}/{h(x)}">{h(x)}</a>' for x in sorted(r.files)) + "</p>",
            "</section>",
        ]
    parts.append(claims_engine.all_claims_html([row for r in reports for row in r.claim_rows()]))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def reproduce_all(
    out: str | os.PathLike[str], scale: str = "small", *, names_: Sequence[str] | None = None, backend: str | None = None,
    jobs: int | None = None, store: str | os.PathLike[str] | None = None, scheduler: Any = None,
    progress: bool = False, sensitivity: bool = False, on_done: Any = None, command: str = "",
) -> list[FigureReport]:
    """Every figure (or `names_`) into ``out/NAME/`` through one store (default
    ``out/points.sqlite``), then ``out/index.html`` (`index_html`) and ``out/claims.csv`` (every
    claim of every figure). `backend` applies to the kinds that take one (`FigureKind.takes_backend`);
    `on_done(report)` is called after each figure."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    for name in names_ if names_ is not None else names():
        fig = figure(name)
        rep = reproduce(name, out / name, scale=scale, jobs=jobs, store=store if store is not None else out / STORE_FILE,
                        scheduler=scheduler, progress=progress, sensitivity=sensitivity,
                        backend=backend if fig.kind_of.takes_backend else None)
        reports.append(rep)
        if on_done is not None:
            on_done(rep)
    cmd = command or f"reducelab reproduce all --scale {scale}" + (f" --backend {backend}" if backend else "") + f" --out {out}"
    (out / "index.html").write_text(index_html(scale, cmd, out, reports), encoding="utf-8")
    rows = [row for r in reports for row in r.claim_rows()]
    (out / "claims.csv").write_text(claims_engine.all_claims_csv(rows), encoding="utf-8", newline="")
    return reports
