"""Paper figures as data: ``scenarios/<paper>/figN.toml`` + ``figN.claims.toml``, run through the
sweep store (`reducelab.sweep.ScenarioSet`), judged by the claims engine (`reducelab.claims`),
drawn by `reducelab.plots.figure_png`.

A figure file names a base scenario, the figure's parameters and grid, its scales, its plot
panels and its claims file (docs/reproductions.md, "Figure format"); its ``kind`` names the code
that turns parameters into scenarios and a stored run into a row of the figure's table
(`KINDS`; e.g. `reducelab.canary.CanaryKind`). Adding a figure of an existing kind is those two
files. Every point is a scenario run by `_core.run`: stored points are not run again (an
interrupted figure resumes; two figures sharing a point run it once), and points run in local
worker processes or on a Dask cluster (``scheduler``).

Every figure file has a ``[figure]`` table; its ``kind`` picks the code. The size-sweep kinds of the
Swing paper (`SIZE_SWEEP_KINDS`) are read by `reducelab.reproduce`, whose runs go through the same
store and the same claims engine.
"""

from __future__ import annotations

import itertools
import os
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import claims as claims_engine
from .claims import ClaimError, RunTable, Sensitivity, TableClaim, Verdict
from .scenario import FieldError, Scenario
from .store import ResultStore, StoreError
from .sweep import ScenarioSet, SweepReport

STORE_FILE = "points.sqlite"
"""The run store a reproduction writes into its output directory unless given one."""

PANEL_KINDS = ("bars", "lines", "cdf")

SIZE_SWEEP_KINDS = ("gain_vs_size", "goodput_vs_size")
"""Figure kinds read by `reducelab.reproduce` (a grid of topologies x bandwidths x algorithm
variants x vector sizes) rather than by this module."""


class FigureError(ValueError):
    """A figure file, scale or option was rejected: ``FILE: FIELD: REASON``."""


def scenarios_dir() -> Path:
    """``$REDUCELAB_SCENARIOS`` if set, else the repository's ``scenarios/`` folder (figures
    live in ``scenarios/<paper>/``)."""
    env = os.environ.get("REDUCELAB_SCENARIOS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "scenarios"


def _kinds() -> dict[str, Any]:
    from .canary import CanaryKind
    from .dsa import DsaKind
    from .flare import FlareKind
    from .flare_sparse import FlareSparseKind

    return {"canary": CanaryKind(), "dsa": DsaKind(), "flare": FlareKind(), "flare_sparse": FlareSparseKind()}


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
    """A scenario figure read from ``figN.toml`` (`load`)."""

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
    params: dict[str, Any]
    grid: list[dict[str, Any]]
    scales: dict[str, dict[str, Any]]
    panels: list[Panel]
    links: Links | None
    plot_title: str = ""
    sensitivity: list[Sensitivity] = field(default_factory=list)
    """Settings the paper does not state, swept with ``--sensitivity`` (`claims.read_sensitivity`)."""

    def scale(self, name: str) -> ScaleSpec:
        if name not in self.scale_names():
            raise FigureError(f"{self.path}: unknown scale {name!r} for {self.name}; known: {', '.join(self.scale_names())}")
        over = self.scales.get(name, {})
        return ScaleSpec(
            name, dict(over.get("set", {})), {**self.params, **over.get("params", {})},
            list(over.get("grid", self.grid)), str(over.get("note", "")),
        )

    def scale_names(self) -> list[str]:
        return list(dict.fromkeys(["full", *self.scales]))

    def base(self, scale: ScaleSpec) -> Scenario:
        try:
            return Scenario.from_file(self.scenario_path).with_values(scale.set)
        except FieldError as exc:
            raise FigureError(f"{self.path}: scales.{scale.name}.set: {exc.field}: {exc.reason}") from None

    def claims(self) -> list[TableClaim]:
        try:
            doc = tomllib.loads(self.claims_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FigureError(f"{self.path}: figure.claims: {self.claims_path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise FigureError(f"{self.claims_path}: not valid TOML: {exc}") from None
        try:
            return claims_engine.read_table_claims(str(self.claims_path), doc, _kinds()[self.kind].columns)
        except ClaimError as exc:
            raise FigureError(str(exc)) from None


class _T:
    """Strict reading of a TOML table: `get` typed fields, `done` rejects unknown ones."""

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


def load(path: str | os.PathLike[str]) -> Figure:
    """Read and check a figure file (not its claims: `Figure.claims`). FigureError naming the
    file and the field for anything wrong."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FigureError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise FigureError(f"{path}: not valid TOML: {exc}") from None
    top = _T(path, "", doc)
    f = _T(path, "figure", top.get("figure", dict, what="a [figure] table"))
    kinds = _kinds()
    kind = f.get("kind", str)
    if kind not in kinds:
        known = ", ".join([*kinds, *SIZE_SWEEP_KINDS])
        raise f.err("kind", f"unknown figure kind {kind!r} (known: {known})")
    name = f.get("name", str)
    scenario_path = path.parent / f.get("scenario", str)
    if not scenario_path.is_file():
        raise f.err("scenario", f"{scenario_path}: no such file")
    claims_path = path.parent / f.get("claims", str)
    fig = Figure(
        name=name, paper=f.get("paper", str), kind=kind, figure=f.get("figure", str, ""), title=f.get("title", str),
        path=path, scenario_path=scenario_path, claims_path=claims_path, stem=f.get("output", str),
        description=f.get("description", str, ""), params=dict(top.get("params", dict, {})),
        grid=_grid(path, "grid", top.get("grid", list)), scales={}, panels=[], links=None,
        plot_title=f.get("plot_title", str, ""),
    )
    f.done()
    scales = top.get("scales", dict, {})
    for sname, sraw in scales.items():
        s = _T(path, f"scales.{sname}", sraw)
        entry: dict[str, Any] = {"set": s.get("set", dict, {}), "params": s.get("params", dict, {}),
                                 "note": s.get("note", str, "")}
        if "grid" in s.data:
            entry["grid"] = _grid(path, f"scales.{sname}.grid", s.get("grid", list))
        s.done()
        fig.scales[sname] = entry
    if "links" in doc:
        lk = _T(path, "links", top.get("links", dict))
        from .canary import LINK_KINDS

        lkind = lk.get("kind", str, "network")
        if lkind not in LINK_KINDS:
            raise lk.err("kind", f"expected one of {', '.join(LINK_KINDS)}, got {lkind!r}")
        lk.get("source", str, "")  # the paper's words defining the figure's links (documentation)
        fig.links = Links(tuple(lk.get("keys", list)), dict(lk.get("where", dict, {})), lkind)
        lk.done()
    try:
        fig.sensitivity = claims_engine.read_sensitivity(str(path), top.get("sensitivity", list, None))
    except ClaimError as exc:
        raise FigureError(str(exc)) from None
    for i, raw in enumerate(top.get("panel", list, [], "an array of [[panel]] tables")):
        p = _T(path, f"panel[{i}]", raw)
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
    top.done()
    unknown = set(fig.params) - set(kinds[kind].params)
    if unknown:
        raise FigureError(f"{path}: params.{sorted(unknown)[0]}: not a parameter of kind {kind!r} "
                          f"({', '.join(kinds[kind].params)})")
    return fig


def figure_files(root: Path | None = None) -> list[Path]:
    """Every scenario figure file under ``scenarios/*/`` (a ``figN.toml`` with a [figure] table)."""
    root = root or scenarios_dir()
    out = []
    for p in sorted(root.glob("*/fig*.toml"), key=lambda p: (p.parent.name, _fig_number(p))):
        if p.name.endswith(".claims.toml"):
            continue
        try:
            fig = tomllib.loads(p.read_text(encoding="utf-8")).get("figure")
            if isinstance(fig, dict) and fig.get("kind") not in SIZE_SWEEP_KINDS:
                out.append(p)
        except (OSError, tomllib.TOMLDecodeError):
            out.append(p)  # reported when loaded
    return out


def _fig_number(p: Path) -> int:
    digits = "".join(ch for ch in p.stem if ch.isdigit())
    return int(digits) if digits else 0


def registry() -> dict[str, Path]:
    """Figure name -> file, for the figures under ``scenarios/``."""
    out = {}
    for p in figure_files():
        out[load(p).name] = p
    return out


def names() -> list[str]:
    return list(registry())


def figure(name_or_path: str | os.PathLike[str]) -> Figure:
    """A figure by name (``canary-fig8``) or by file path."""
    p = Path(name_or_path)
    if str(name_or_path).endswith(".toml"):
        return load(p)
    reg = registry()
    if str(name_or_path) not in reg:
        raise FigureError(f"unknown figure {str(name_or_path)!r}; known: {', '.join(reg)}")
    return load(reg[str(name_or_path)])


# ---------------------------------------------------------------------------------------------
# Running.


@dataclass
class FigureReport:
    """What `reproduce` made of one figure at one scale."""

    figure: Figure
    scale: ScaleSpec
    network: str
    rows: list[dict[str, Any]]
    verdicts: list[Verdict]
    files: dict[str, str]
    sweep: SweepReport | None
    wall_seconds: float
    out: Path = field(default_factory=Path)

    @property
    def unverified(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["verified"]]

    def counts(self) -> tuple[int, int, int]:
        return claims_engine.counts(self.verdicts)

    def claims_table(self) -> str:
        return claims_engine.claims_table_text(
            [(v.id, v.verdict.upper(), v.paper_value, v.measured + claims_engine.band_suffix(v.bands, v.show_value))
             for v in self.verdicts])

    def claim_rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """Rows of `reproduce all`'s one claims table (`claims.ALL_CLAIMS_COLUMNS`)."""
        return [(self.figure.name, v.id, v.source, v.claim, v.paper_value, v.measured, v.verdict) for v in self.verdicts]


def _links_wanted(fig: Figure, params: Mapping[str, Any], scale: ScaleSpec) -> bool:
    if fig.links is None:
        return False
    table = RunTable([], scale.params)
    return all(table._match(params, k, v) for k, v in fig.links.where.items())


def points(fig: Figure, scale: ScaleSpec) -> list[tuple[dict[str, Any], Scenario]]:
    """The figure's points at `scale`: (parameters, scenario), in figure order."""
    try:
        return _kinds()[fig.kind].points(fig, scale, fig.base(scale))
    except (KeyError, ValueError) as exc:
        if isinstance(exc, FigureError):
            raise
        raise FigureError(f"{fig.path}: scale {scale.name}: {exc}") from None


def run_points(
    fig: Figure, scale: ScaleSpec, store: ResultStore, *, jobs: int | None = None, scheduler: Any = None,
    progress: bool = False, on_point: Any = None,
) -> tuple[list[tuple[dict[str, Any], Scenario]], SweepReport]:
    """Run the figure's points not yet in `store` (the sweep store's runner; `on_point` as in
    `Sweep.run`)."""
    pts = points(fig, scale)
    entries = [({k: v for k, v in p.items() if not k.startswith("_")}, s) for p, s in pts]
    sweep = ScenarioSet(f"{fig.name}@{scale.name}", entries, spec={"figure": str(fig.path), "scale": scale.name},
                        spec_path=str(fig.path), scenario_path=str(fig.scenario_path),
                        keep_files=_kinds()[fig.kind].keep_files)
    rep = sweep.run(store, jobs=jobs, scheduler=scheduler, progress=progress, check=False, confirm=True,
                    on_point=on_point)
    return pts, rep


def reproduce(
    name: str | os.PathLike[str], out: str | os.PathLike[str], scale: str = "small", *, jobs: int | None = None,
    store: str | os.PathLike[str] | ResultStore | None = None, scheduler: Any = None, progress: bool = False,
    plot: bool = True, on_point: Any = None, sensitivity: bool = False,
) -> FigureReport:
    """Run figure `name` (a name or a figure file) at `scale` through the store (default:
    ``OUT/points.sqlite``), judge its claims on its verified runs, and write ``STEM.csv`` (and
    the kind's other files), ``STEM_claims.csv``, ``STEM_claims.md`` and ``STEM.png`` into `out`.

    With `sensitivity`, also run the figure at every value of each ``[[sensitivity]]`` setting
    (through the same store) and give each claim its band over them (`claims.with_bands`).

    Stored points are not run again: a figure interrupted (Ctrl-C, an error, an `on_point`
    that raises) resumes where it stopped. Raises `FigureError` for a bad figure or scale,
    `reducelab.sweep.SweepRunError` if a point cannot run."""
    t0 = time.monotonic()
    fig = figure(name)
    sc = fig.scale(scale)
    claims = fig.claims()
    kind = _kinds()[fig.kind]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = not isinstance(store, ResultStore)
    db = ResultStore(store if store is not None else out / STORE_FILE) if own else store
    link_kind = fig.links.kind if fig.links is not None else "network"
    try:
        pts, rep = run_points(fig, sc, db, jobs=jobs, scheduler=scheduler, progress=progress, on_point=on_point)
        rows = [kind.row(p, db.get(s.key()), _links_wanted(fig, p, sc), link_kind) for p, s in pts]
        swept: list[tuple[Sensitivity, list[list[Verdict]]]] = []
        swept_rows: list[tuple[str, Any, str]] = []
        swept_runs: list[tuple[str, list[dict[str, Any]]]] = []
        if sensitivity:
            for sens in fig.sensitivity:
                at = []
                for value in sens.values:
                    ssc = sensitivity_scale(fig, sc, sens, value)
                    spts, _ = run_points(fig, ssc, db, jobs=jobs, scheduler=scheduler, progress=progress)
                    srows = [kind.row(p, db.get(s.key()), False, link_kind) for p, s in spts]
                    stable = RunTable([r for r in srows if r["verified"]], ssc.params)
                    at.append([claims_engine.evaluate(c, stable) for c in claims])
                    swept_rows.append((sens.key, value, kind.files(fig, srows)[f"{fig.stem}.csv"]))
                    swept_runs.append((sens.key, srows))
                swept.append((sens, at))
    finally:
        if own:
            db.close()
    network = _network(kind, fig, sc)
    table = RunTable([r for r in rows if r["verified"]], sc.params)
    verdicts = [claims_engine.evaluate(c, table) for c in claims]
    for sens, at in swept:
        verdicts = claims_engine.with_bands(verdicts, sens.key, sens.values, at)
    files = kind.files(fig, rows)
    if swept_rows:
        files[f"{fig.stem}_sensitivity.csv"] = claims_engine.sensitivity_table_csv(swept_rows)
    files[f"{fig.stem}_claims.csv"] = claims_engine.claims_csv(verdicts)
    files[f"{fig.stem}_claims.md"] = claims_md(fig, sc, network, len(rows), verdicts)
    for n, text in files.items():
        (out / n).write_text(text, encoding="utf-8", newline="")
    if plot:
        from .plots import figure_png

        marks = [(c.mark, c.id, c.paper_value) for c in claims if c.mark is not None]
        title = f"{fig.plot_title or fig.title} ({sc.name}: {network})"
        figure_png(rows, fig.panels, sc.params, title, marks, out / f"{fig.stem}.png", swept_runs)
        files[f"{fig.stem}.png"] = ""
    return FigureReport(fig, sc, network, rows, verdicts, files, rep, time.monotonic() - t0, out)


def _network(kind: Any, fig: Figure, sc: ScaleSpec) -> str:
    """The kind's one-line description of the network at `sc` (with the scale's parameters when
    the kind reads them: `network_at`)."""
    at = getattr(kind, "network_at", None)
    return at(fig.base(sc), sc.params) if at is not None else kind.network(fig.base(sc))


def sensitivity_scale(fig: Figure, sc: ScaleSpec, sens: Sensitivity, value: Any) -> ScaleSpec:
    """`sc` with one sensitivity setting: ``params.NAME`` sets a figure parameter, any other key
    a field of the base scenario (checked when the points are built: an unknown key fails
    naming it)."""
    if sens.key.startswith("params."):
        pname = sens.key[len("params."):]
        if pname not in _kinds()[fig.kind].params:
            raise FigureError(f"{fig.path}: sensitivity.key: {sens.key!r}: not a parameter of kind {fig.kind!r} "
                              f"({', '.join(_kinds()[fig.kind].params)})")
        value = claims_engine.like_default(sc.params.get(pname), value)
        return ScaleSpec(sc.name, dict(sc.set), {**sc.params, pname: value}, list(sc.grid), sc.note)
    values = {}
    for key, v in sens.assignments(value).items():
        try:
            values[key] = claims_engine.like_default(fig.base(sc).get(key), v)
        except FieldError:
            values[key] = v  # a key the base scenario leaves unset: building the points names it if it is wrong
    return ScaleSpec(sc.name, {**sc.set, **values}, dict(sc.params), list(sc.grid), sc.note)


def claims_md(fig: Figure, sc: ScaleSpec, network: str, n_runs: int, verdicts: Sequence[Verdict]) -> str:
    md = claims_engine.md_cell
    lines = [
        f"# {fig.title}",
        "",
        f"{fig.description} Scale `{sc.name}`: {network}; {sc.params.get('allocations', 1)} random allocation(s); "
        f"{n_runs} runs; `reducelab reproduce {fig.name} --scale {sc.name}`. Pass rules fixed before the runs.".lstrip(),
        "",
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


def reevaluate(name: str, out: str | os.PathLike[str], scale: str, *, plot: bool = True) -> list[Verdict]:
    """Judge figure `name`'s claims again without running anything, and rewrite the claims files
    in `out`: on the runs stored in ``OUT/points.sqlite`` if it exists (every point must be
    stored), else on the figure's table ``OUT/STEM.csv`` (e.g. the committed full-scale results;
    `reducelab.canary.rows_from_csv`). With `plot`, ``STEM.png`` is drawn again from the same
    runs (and the sensitivity sweep's, as bands)."""
    fig = figure(name)
    sc = fig.scale(scale)
    out = Path(out)
    path = out / STORE_FILE
    kind = _kinds()[fig.kind]
    import importlib

    # The kind's own table reader (a method, as flare's and flare_sparse's), else its module's
    # (canary, dsa): for the figure's table and for the tables of a sensitivity sweep alike.
    read = getattr(kind, "rows_from_csv", None) or importlib.import_module(f"reducelab.{fig.kind}").rows_from_csv
    if path.is_file():
        with ResultStore(path) as db:
            rows = [kind.row(p, db.get(s.key()), False) for p, s in points(fig, sc)]
    elif (out / f"{fig.stem}.csv").is_file():
        rows = read((out / f"{fig.stem}.csv").read_text(encoding="utf-8"))
    else:
        raise StoreError(f"{out}: neither {STORE_FILE} nor {fig.stem}.csv: nothing to judge")
    table = RunTable([r for r in rows if r["verified"]], sc.params)
    claims = fig.claims()
    verdicts = [claims_engine.evaluate(c, table) for c in claims]
    sens_file = out / f"{fig.stem}_sensitivity.csv"
    swept_runs: list[tuple[str, list[dict[str, Any]]]] = []
    if sens_file.is_file():  # the runs of a --sensitivity sweep: the claims get their bands again
        tables = claims_engine.sensitivity_tables(sens_file.read_text(encoding="utf-8"), str(sens_file))
        for sens in fig.sensitivity:
            at = []
            for value in sens.values:
                srows = read(claims_engine.sensitivity_table_for(tables, sens, value, str(sens_file)))
                swept_runs.append((sens.key, srows))
                stable = RunTable([r for r in srows if r["verified"]], sensitivity_scale(fig, sc, sens, value).params)
                at.append([claims_engine.evaluate(c, stable) for c in claims])
            verdicts = claims_engine.with_bands(verdicts, sens.key, sens.values, at)
    network = _network(kind, fig, sc)
    (out / f"{fig.stem}_claims.csv").write_text(claims_engine.claims_csv(verdicts), encoding="utf-8", newline="")
    (out / f"{fig.stem}_claims.md").write_text(claims_md(fig, sc, network, len(rows), verdicts), encoding="utf-8", newline="")
    if plot:
        from .plots import figure_png

        marks = [(c.mark, c.id, c.paper_value) for c in claims if c.mark is not None]
        title = f"{fig.plot_title or fig.title} ({sc.name}: {network})"
        figure_png(rows, fig.panels, sc.params, title, marks, out / f"{fig.stem}.png", swept_runs)
    return verdicts


def index_section(reports: Sequence[FigureReport], out: str | os.PathLike[str]) -> str:
    """The scenario figures' part of `reproduce all`'s ``index.html`` (figures in ``out/NAME/``):
    a summary table, then per figure the plot, the command and the claims with their sources."""
    from html import escape as h

    parts = [
        '<section id="scenario-figures"><h2>Scenario figures (Canary §5: in-network allreduce on a fat tree)</h2>',
        "<p>Packet-level scenario runs (scenarios/&lt;paper&gt;/figN.toml, run through the sweep store); "
        "<code>--backend</code> does not apply to them.</p>",
        "<table><tr><th>figure</th><th>title</th><th>pass</th><th>fail</th><th>n/a</th></tr>",
    ]
    for r in reports:
        p, f, n = r.counts()
        parts.append(f'<tr><td><a href="#{h(r.figure.name)}">{h(r.figure.name)}</a></td><td>{h(r.figure.title)}</td>'
                     f'<td class="pass">{p}</td><td class="fail">{f}</td><td class="na">{n}</td></tr>')
    parts.append("</table>")
    cls = {"pass": "pass", "fail": "fail"}
    for r in reports:
        d, stem = r.figure.name, r.figure.stem
        p, f, n = r.counts()
        parts += [
            f'<section id="{h(d)}"><h3>{h(r.figure.title)} <small>({h(d)})</small></h3>',
            f"<p>Scale <code>{h(r.scale.name)}</code>: {h(r.network)}; {len(r.rows)} runs. "
            f"{p} pass, {f} fail, {n} n/a. Regenerate: "
            f"<code>reducelab reproduce {h(d)} --scale {h(r.scale.name)} --out {h(str(Path(out) / d))}</code></p>",
            f'<p><img src="{h(d)}/{h(stem)}.png" alt="{h(d)} reproduction"></p>',
            "<table><tr><th>id</th><th>source</th><th>claim</th><th>paper</th><th>rule</th><th>measured</th><th>result</th></tr>",
        ]
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
    parts.append("</section>")
    return "\n".join(parts) + "\n"
