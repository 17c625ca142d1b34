"""Plots of result files and sweeps.

`link_utilization` draws the distribution of per-link utilisation of one run: x is utilisation in
percent, y the fraction of links in each bin (the kind of plot Canary's evaluation uses to show how
evenly an allreduce spreads over the network). The figure functions below it draw the source
papers' other plot forms from long-form data (runtime vs size, gain heat map, utilisation CDFs,
JCT bars, memory vs time, bandwidth vs size by type) and any sweep metric (`sweep_plot`).
matplotlib, numpy and pandas are imported only when a plot is drawn, so the rest of the package
works without them.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LINKS_FILE = "links.csv"
LINK_UTILIZATION_PNG = "link_utilization.png"


class ResultFileError(ValueError):
    """A result file is missing or malformed."""


def read_link_utilization(path: str | os.PathLike[str]) -> list[float]:
    """Per-link utilisation (fraction, 0..1) from a ``links.csv`` result file."""
    path = Path(path)
    try:
        f = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such file (write it with `reducelab run`)") from None
    except IsADirectoryError:
        raise ResultFileError(f"{path}: is a directory, expected a CSV file") from None
    with f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "utilization" not in reader.fieldnames:
            raise ResultFileError(f"{path}: no 'utilization' column in the header")
        values = []
        for row in reader:
            text = row["utilization"]
            try:
                value = float(text)
            except (TypeError, ValueError):
                raise ResultFileError(
                    f"{path}:{reader.line_num}: utilization {text!r} is not a number"
                ) from None
            if not 0.0 <= value <= 1.0 + 1e-9:
                raise ResultFileError(
                    f"{path}:{reader.line_num}: utilization {value} is outside [0, 1]"
                )
            values.append(min(value, 1.0))
    return values


def utilization_histogram(utilization: Sequence[float], bins: int = 20) -> tuple[list[float], list[float]]:
    """Bin edges in percent (``bins + 1`` values over 0..100) and the fraction of links per bin.

    A link at exactly 100 % falls into the last bin; the fractions sum to 1 when there are links.
    """
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    edges = [100.0 * i / bins for i in range(bins + 1)]
    counts = [0] * bins
    for u in utilization:
        counts[min(int(u * bins), bins - 1)] += 1
    n = len(utilization)
    return edges, [c / n if n else 0.0 for c in counts]


def link_utilization(
    results_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    bins: int = 20,
) -> Path:
    """Plot the per-link utilisation distribution of a results directory.

    Reads ``RESULTS_DIR/links.csv`` (and the scenario name from ``summary.json`` if present) and
    writes the image to exactly `out` (PNG, or SVG/PDF by its suffix), by default
    ``RESULTS_DIR/link_utilization.png``. Returns that path. PlotDataError for an unknown suffix.
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultFileError(f"{results_dir}: not a directory")
    utilization = read_link_utilization(results_dir / LINKS_FILE)
    if not utilization:
        raise ResultFileError(f"{results_dir / LINKS_FILE}: no links")
    out_path = Path(out) if out is not None else results_dir / LINK_UTILIZATION_PNG
    fmt = image_format(out_path)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges, fractions = utilization_histogram(utilization, bins)
    mean_pct = 100.0 * sum(utilization) / len(utilization)

    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    try:
        ax.stairs(fractions, edges, fill=True, alpha=0.75, label=f"{len(utilization)} links")
        ax.axvline(mean_pct, color="black", linestyle="--", linewidth=1, label=f"mean {mean_pct:.1f} %")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, max(1e-3, max(fractions)) * 1.08)
        ax.set_xlabel("link utilisation (%)")
        ax.set_ylabel("fraction of links")
        ax.set_title(f"Link utilisation: {_scenario_name(results_dir)}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper center")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_path, dpi=150, format=fmt)  # exactly out_path, with or without a suffix
    finally:
        plt.close(fig)
    return out_path


def _scenario_name(results_dir: Path) -> str:
    try:
        summary = json.loads((results_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return results_dir.name
    name = summary.get("scenario") if isinstance(summary, dict) else None
    if isinstance(name, dict):
        name = name.get("name")
    return name if isinstance(name, str) and name else results_dir.name


# ---------------------------------------------------------------------------------------------
# Figures in the forms the source papers use. Each function takes plain data (a pandas
# DataFrame, or anything `pandas.DataFrame(...)` accepts, e.g. a list of dicts, in long form:
# one row per measurement), returns the matplotlib `Figure` (built without pyplot, so no global
# state and nothing to close) and, given `out`, saves it: one path or several, the format from
# each suffix (``.png``, ``.svg``, ``.pdf``). Repeated rows of one (x, series) pair, e.g. the
# seeds of a sweep, are drawn as their mean with a min-max band or error bar.

PathLike = str | os.PathLike[str]


class PlotDataError(ValueError):
    """The data given to a plot lacks a column or has nothing to draw."""


_SIZE_STEPS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_size(n: float) -> str:
    """``32 B``, ``4 KiB``, ``1.5 MiB``: byte counts as the papers label their x axes."""
    for unit, scale in _SIZE_STEPS:
        if n >= scale:
            v = n / scale
            return f"{v:g} {unit}"
    return f"{n:g} B"


def _frame(data: Any) -> pandas.DataFrame:
    import pandas

    return data if isinstance(data, pandas.DataFrame) else pandas.DataFrame(data)


def _require(df: pandas.DataFrame, *columns: str | None) -> None:
    missing = [c for c in columns if c is not None and c not in df.columns]
    if missing:
        raise PlotDataError(
            f"no column {missing[0]!r} in the data (columns: {', '.join(map(str, df.columns))})"
        )
    if df.empty:
        raise PlotDataError("no rows to plot")


def _label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "x".join(map(str, value))
    return str(value)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _is_numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


@dataclass(frozen=True)
class Series:
    """One line or bar series: x values, and per x the mean, min and max of y over the rows."""

    label: str
    x: list[Any]
    mean: list[float]
    low: list[float]
    high: list[float]
    count: list[int]


def series(data: Any, x: str, y: str, hue: str | None = None, *, name_hue: bool = True) -> list[Series]:
    """Group long-form data into series (one per `hue` value, in order of first appearance; one
    series labelled `y` without `hue`), each sorted by x when x is numeric (else in order of
    first appearance). Rows with a missing y are left out. Series are labelled
    ``"HUE = VALUE"``, or just ``"VALUE"`` without `name_hue`."""
    df = _frame(data)
    _require(df, x, y, hue)
    groups: dict[Any, dict[Any, list[float]]] = {}
    for row_x, row_y, row_h in zip(df[x], df[y], df[hue] if hue else [None] * len(df)):
        if row_y is None or (isinstance(row_y, float) and math.isnan(row_y)):
            continue
        try:
            value = float(row_y)
        except (TypeError, ValueError):
            raise PlotDataError(f"column {y!r} has a non-numeric value {row_y!r}") from None
        groups.setdefault(_hashable(row_h), {}).setdefault(_hashable(row_x), []).append(value)
    out = []
    for h, by_x in groups.items():
        xs = list(by_x)
        if _is_numeric(xs):
            xs.sort()
        vals = [by_x[v] for v in xs]
        label = y if hue is None else f"{hue} = {_label(h)}" if name_hue else _label(h)
        out.append(
            Series(
                label, xs, [sum(v) / len(v) for v in vals], [min(v) for v in vals], [max(v) for v in vals],
                [len(v) for v in vals],
            )
        )
    if not out:
        raise PlotDataError(f"no numeric values of {y!r} to plot")
    return out


def image_format(path: Path) -> str:
    """The image format of an output path: its suffix (``.png``, ``.svg``, ``.pdf``), PNG for a
    path without one; PlotDataError for another suffix."""
    suffix = path.suffix.lower()
    if suffix == "":
        return "png"
    if suffix not in (".png", ".svg", ".pdf"):
        raise PlotDataError(f"{path}: unknown image format {path.suffix!r} (use .png, .svg or .pdf)")
    return suffix[1:]


def save_figure(fig: Figure, out: PathLike | Sequence[PathLike]) -> list[Path]:
    """Save `fig` to each path, exactly that path (format from the suffix, PNG without one);
    returns the paths."""
    import matplotlib

    paths = [Path(out)] if isinstance(out, (str, os.PathLike)) else [Path(p) for p in out]
    formats = [image_format(p) for p in paths]
    for p, fmt in zip(paths, formats):
        p.parent.mkdir(parents=True, exist_ok=True)
        # No date and a fixed id salt keep SVG/PDF output byte-stable from run to run.
        metadata = {"Date": None} if fmt in ("svg", "pdf") else {}
        with matplotlib.rc_context({"svg.hashsalt": "reducelab"}):
            # An explicit format: matplotlib would otherwise add ".png" to a path without suffix.
            fig.savefig(p, dpi=150, metadata=metadata, format=fmt)
    return paths


def _figure(width: float = 6.4, height: float = 4.0) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _size_axis(ax: Axes, sizes: Sequence[float]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    if len(ticks) > 10:
        step = math.ceil(len(ticks) / 10)
        ticks = ticks[::step]
    ax.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45, ha="right")
    ax.minorticks_off()


def _lines(
    ax: Axes, groups: Sequence[Series], scale: float = 1.0, band: bool = True
) -> None:
    markers = "osD^v<>ph*"
    for i, s in enumerate(groups):
        ys = [v * scale for v in s.mean]
        (line,) = ax.plot(s.x, ys, marker=markers[i % len(markers)], markersize=4, label=s.label)
        if band and any(c > 1 for c in s.count):
            ax.fill_between(
                s.x, [v * scale for v in s.low], [v * scale for v in s.high], alpha=0.2,
                color=line.get_color(), linewidth=0,
            )


def _bars(ax: Axes, groups: Sequence[Series], scale: float = 1.0) -> None:
    categories: list[Any] = []
    for s in groups:
        for v in s.x:
            if v not in categories:
                categories.append(v)
    width = 0.8 / len(groups)
    for i, s in enumerate(groups):
        pos = {v: j for j, v in enumerate(categories)}
        xs = [pos[v] - 0.4 + width * (i + 0.5) for v in s.x]
        ys = [m * scale for m in s.mean]
        err = None
        if any(c > 1 for c in s.count):
            err = [[(m - lo) * scale for m, lo in zip(s.mean, s.low)], [(hi - m) * scale for m, hi in zip(s.mean, s.high)]]
        ax.bar(xs, ys, width=width * 0.95, yerr=err, capsize=3 if err else 0, label=s.label)
    ax.set_xticks(range(len(categories)), [_label(c) for c in categories])


def _finish(ax: Axes, title: str, xlabel: str, ylabel: str, legend: bool) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        if len(ax.get_legend_handles_labels()[1]) > 5:  # beside the axes: a long legend hides the curves
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        else:
            ax.legend(fontsize="small")


def sweep_plot(
    data: Any,
    x: str,
    y: str,
    hue: str | None = None,
    *,
    title: str | None = None,
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """`y` against `x`, one series per value of `hue` (a sweep's DataFrame, or any long data).

    Numeric x gives lines (log scale when x spans two decades or more; sizes labelled in
    KiB/MiB when x is a ``*bytes`` field); other x gives grouped bars. Repetitions (seeds) are
    averaged, with their min-max range as a band or error bar.
    """
    groups = series(data, x, y, hue)
    fig, ax = _figure()
    xs = [v for s in groups for v in s.x]
    if _is_numeric(xs):
        _lines(ax, groups)
        positive = [v for v in xs if v > 0]
        if len(positive) == len(xs) and max(xs) >= 100 * min(xs):
            if x.endswith("bytes"):
                _size_axis(ax, xs)
            else:
                ax.set_xscale("log")
    else:
        _bars(ax, groups)
    ys = [v for s in groups for v in s.low]
    if ys and min(ys) > 0 and max(v for s in groups for v in s.high) >= 100 * min(ys):
        ax.set_yscale("log")
    _finish(ax, title or f"{y} vs {x}", x, y, legend=hue is not None)
    if out is not None:
        save_figure(fig, out)
    return fig


def runtime_vs_size(
    data: Any,
    *,
    size: str = "bytes",
    runtime: str = "runtime_ps",
    hue: str = "algorithm",
    title: str = "Allreduce runtime",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Runtime (µs, log) against vector size (log2, in B/KiB/MiB), one line per `hue` value
    (the algorithm): Canary Fig. 9, Swing Fig. 7's inset. `runtime` is in picoseconds."""
    groups = series(data, size, runtime, hue, name_hue=False)
    fig, ax = _figure()
    _lines(ax, groups, scale=1e-6)
    _size_axis(ax, [v for s in groups for v in s.x])
    ax.set_yscale("log")
    _finish(ax, title, "vector size", "runtime (µs)", legend=True)
    if out is not None:
        save_figure(fig, out)
    return fig


def bandwidth_vs_size(
    data: Any,
    *,
    size: str = "bytes",
    bandwidth: str = "goodput_gbps",
    hue: str = "dtype",
    title: str = "Bandwidth by data type",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Bandwidth (Gb/s) against data size (log2), one line per `hue` value (the data type, or
    the aggregation design): Flare Fig. 11, Swing's goodput plots."""
    groups = series(data, size, bandwidth, hue, name_hue=False)
    fig, ax = _figure()
    _lines(ax, groups)
    _size_axis(ax, [v for s in groups for v in s.x])
    ax.set_ylim(bottom=0)
    _finish(ax, title, "data size", "bandwidth (Gb/s)", legend=True)
    if out is not None:
        save_figure(fig, out)
    return fig


def jct_bars(
    data: Any,
    *,
    group: str = "jobs",
    jct: str = "jct_ps",
    hue: str = "system",
    title: str = "Average job completion time",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Grouped bars of the mean job completion time (ms), one bar series per `hue` value (the
    aggregation system) in each `group` (number of jobs or workers): DSA Figs. 8-9. `jct` is in
    picoseconds; rows of one (group, system), e.g. the jobs of a run, are averaged."""
    groups = series(data, group, jct, hue, name_hue=False)
    fig, ax = _figure()
    _bars(ax, groups, scale=1e-9)
    _finish(ax, title, group, "JCT (ms)", legend=True)
    ax.grid(axis="x", visible=False)
    if out is not None:
        save_figure(fig, out)
    return fig


def memory_vs_time(
    runs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str = "Switch memory occupancy",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Memory occupancy (KiB) over time (µs), one step line per run: label -> (times in ps,
    bytes in use from each time on). Flare Figs. 7 and 10, DSA Fig. 10."""
    if not runs:
        raise PlotDataError("no memory series to plot")
    fig, ax = _figure()
    for label, (times, used) in runs.items():
        if len(times) != len(used) or not times:
            raise PlotDataError(f"series {label!r}: {len(times)} times but {len(used)} values")
        ax.step([t * 1e-6 for t in times], [b / 1024 for b in used], where="post", label=label)
    ax.set_ylim(bottom=0)
    _finish(ax, title, "time (µs)", "memory in use (KiB)", legend=True)
    if out is not None:
        save_figure(fig, out)
    return fig


def link_utilization_distribution(
    runs: Mapping[str, Sequence[float]],
    *,
    kind: str = "cdf",
    bins: int = 20,
    title: str = "Link utilisation",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Distribution of per-link utilisation (fractions 0..1) of several runs on one axis:
    ``kind="cdf"`` (fraction of links at or below each utilisation, one step line per run) or
    ``"hist"`` (fraction of links per bin, outlined). Canary Figs. 7 and 10."""
    if kind not in ("cdf", "hist"):
        raise ValueError(f"kind must be 'cdf' or 'hist', got {kind!r}")
    if not runs:
        raise PlotDataError("no runs to plot")
    fig, ax = _figure()
    for label, utilization in runs.items():
        if not utilization:
            raise PlotDataError(f"run {label!r} has no links")
        if kind == "cdf":
            xs = sorted(100.0 * min(max(u, 0.0), 1.0) for u in utilization)
            n = len(xs)
            ax.step([0.0, *xs, 100.0], [0.0, *[(i + 1) / n for i in range(n)], 1.0], where="post", label=label)
        else:
            edges, fractions = utilization_histogram(utilization, bins)
            ax.stairs(fractions, edges, label=label, linewidth=1.5)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1.02 if kind == "cdf" else None)
    ylabel = "fraction of links ≤ x" if kind == "cdf" else "fraction of links"
    _finish(ax, title, "link utilisation (%)", ylabel, legend=True)
    if out is not None:
        save_figure(fig, out)
    return fig


def goodput_gains(
    data: Any,
    *,
    subject: str,
    size: str = "bytes",
    group: str = "topology",
    algorithm: str = "algorithm",
    goodput: str = "goodput_gbps",
) -> pandas.DataFrame:
    """Swing's goodput gain per (`group`, `size`): subject's goodput over the best other
    algorithm's, minus 1 (0.25 = 25 % faster), with the name of that best other algorithm.
    Repeated rows (seeds) are averaged first. Columns: group, size, ``gain``, ``best_other``."""
    import pandas

    df = _frame(data)
    _require(df, size, group, algorithm, goodput)
    mean = df.groupby([group, size, algorithm], sort=False)[goodput].mean()
    rows = []
    for (g, s), block in mean.groupby(level=[0, 1], sort=False):
        by_alg = {k[2]: v for k, v in block.items()}
        if subject not in by_alg:
            continue
        others = {a: v for a, v in by_alg.items() if a != subject}
        if not others:
            continue
        best = max(others, key=lambda a: others[a])
        rows.append({group: g, size: s, "gain": by_alg[subject] / others[best] - 1.0, "best_other": best})
    if not rows:
        raise PlotDataError(f"no (group, size) with both {subject!r} and another algorithm")
    return pandas.DataFrame(rows)


def gain_heatmap(
    data: Any,
    *,
    size: str = "bytes",
    topology: str = "topology",
    gain: str = "gain",
    title: str = "Goodput gain",
    out: PathLike | Sequence[PathLike] | None = None,
) -> Figure:
    """Heat map of a goodput gain (fraction; 0.25 = +25 %) over sizes (columns) × topologies
    (rows), diverging around 0 and annotated in percent: the Swing paper's per-topology gain
    summary (Fig. 16) as a grid. `goodput_gains` computes the gain column."""
    df = _frame(data)
    _require(df, size, topology, gain)
    sizes = sorted({_hashable(v) for v in df[size]})
    topologies = list(dict.fromkeys(_hashable(v) for v in df[topology]))
    cells: dict[tuple[Any, Any], list[float]] = {}
    for t, s, g in zip(df[topology], df[size], df[gain]):
        cells.setdefault((_hashable(t), _hashable(s)), []).append(float(g))
    nan = float("nan")
    grid = [
        [100.0 * sum(cells[(t, s)]) / len(cells[(t, s)]) if (t, s) in cells else nan for s in sizes]
        for t in topologies
    ]
    from matplotlib.colors import TwoSlopeNorm

    finite = [v for row in grid for v in row if not math.isnan(v)]
    span = max(1.0, max(abs(v) for v in finite))
    fig, ax = _figure(max(4.0, 1.0 + 0.6 * len(sizes)), max(2.5, 1.2 + 0.45 * len(topologies)))
    image = ax.imshow(grid, cmap="RdBu", norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:+.0f}", ha="center", va="center", fontsize="x-small",
                        color="white" if abs(v) > 0.6 * span else "black")
    ax.set_xticks(range(len(sizes)), [format_size(s) if isinstance(s, (int, float)) else str(s) for s in sizes],
                  rotation=45, ha="right")
    ax.set_yticks(range(len(topologies)), [_label(t) for t in topologies])
    fig.colorbar(image, ax=ax, label="goodput gain (%)")
    ax.set_title(title)
    ax.set_xlabel("vector size")
    ax.set_ylabel("topology")
    if out is not None:
        save_figure(fig, out)
    return fig


def wrap_title(title: str, width_in: float, fontsize: float = 9) -> str:
    """`title` broken into lines that fit a figure `width_in` inches wide at `fontsize` points
    (about 0.55 em per character), so no title is cut at the figure's edge."""
    import textwrap

    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars)) or title


def figure_png(
    rows: Sequence[Mapping[str, Any]], panels: Sequence[Any], variables: Mapping[str, Any], title: str,
    marks: Sequence[tuple[Any, str, str]], out: PathLike,
    swept: Sequence[tuple[str, Sequence[Mapping[str, Any]]]] = (),
) -> Path:
    """A paper figure (`reducelab.figures`): one panel per `panels` entry (`figures.Panel`:
    ``bars``/``lines`` of the mean of ``y`` over the runs of each (x, hue) group, or a ``cdf``
    of the runs' per-link utilisation by hue), over the verified `rows` matching the panel's
    ``where``. `marks` are the paper's values ``(claims.Mark, claim id, paper value)``: drawn in
    their panel as a black cross at (x, y), or a dashed line at y, labelled "paper: ...", beside
    the measured curves. `swept` are the runs of a sensitivity sweep, ``(label, rows)`` per
    swept setting: on line panels each curve gets a shaded band from the lowest to the highest
    mean over the figure's own runs and every swept setting's. The title is wrapped to fit."""
    from matplotlib.figure import Figure as MplFigure

    from .claims import RunTable

    good = [r for r in rows if r.get("verified")]
    table = RunTable(good, variables)
    n = max(1, len(panels))
    fig = MplFigure(figsize=(4.6 * n, 3.8), layout="constrained")
    axes = [fig.add_subplot(1, n, i + 1) for i in range(n)]
    for i, (ax, p) in enumerate(zip(axes, panels)):
        sel = [r for r in good if all(table._match(r, k, v) for k, v in p.where.items())]

        def hue_of(r: Mapping[str, Any], hue: Sequence[str] = p.hue) -> str:
            return ", ".join(_label(r.get(h)) if h != "congestion" else
                             ("congestion" if r.get(h) else "no congestion") for h in hue)

        if p.kind == "cdf":
            for label in dict.fromkeys(hue_of(r) for r in sel):
                us = sorted(u for r in sel if hue_of(r) == label for u in r.get("link_utils") or [])
                if us:
                    ax.plot([u * 100 for u in us], [(k + 1) / len(us) for k in range(len(us))], label=label)
            _finish(ax, p.title, p.xlabel or "link utilisation (%)", p.ylabel or "CDF of network links", True)
            continue
        data = _panel_data(p, sel, hue_of)
        if not data:
            _finish(ax, p.title + " (no runs)", p.xlabel or p.x, p.ylabel or p.y, False)
            continue
        groups = series(data, "x", "y", "hue", name_hue=False)
        if p.kind == "bars":
            _bars(ax, groups)
        else:
            _lines(ax, groups, band=False)
            if swept:
                _sensitivity_bands(ax, groups, [_panel_groups(p, rs, table, hue_of) for _, rs in swept],
                                   " / ".join(dict.fromkeys(k for k, _ in swept)))
            if p.xscale in ("log", "log2"):
                ax.set_xscale("log", base=2 if p.xscale == "log2" else 10)
        if p.yscale == "log":
            ax.set_yscale("log")
        for mark, cid, value in marks:
            if mark.panel != i:
                continue
            if mark.x is None:
                ax.axhline(mark.y, color="k", linestyle="--", linewidth=1, label=f"paper {cid}: {value}")
            else:
                x = mark.x
                if p.kind == "bars":
                    cats = list(dict.fromkeys(d["x"] for d in data))
                    x = cats.index(x) if x in cats else None
                if x is not None:
                    ax.plot([x], [mark.y], marker="X", color="k", markersize=9, linestyle="none",
                            label=f"paper {cid}: {value}")
        _finish(ax, p.title, p.xlabel or p.x, p.ylabel or p.y, True)
    fig.suptitle(wrap_title(title, 4.6 * n), fontsize=9)
    return save_figure(fig, out)[0]


def _panel_data(p: Any, rows: Sequence[Mapping[str, Any]], hue_of: Callable[[Mapping[str, Any]], str]) -> list[dict[str, Any]]:
    """(x, y, hue) of each of `rows` on panel `p` (x scaled by the panel's ``xfactor``)."""
    return [{"x": r.get(p.x) * p.xfactor if p.xfactor != 1 else r.get(p.x), "y": r.get(p.y), "hue": hue_of(r)}
            for r in rows]


def _panel_groups(p: Any, rows: Sequence[Mapping[str, Any]], table: Any, hue_of: Callable[[Mapping[str, Any]], str]) -> list[Series]:
    """The curves of line panel `p` drawn from `rows` (a swept setting's runs)."""
    data = _panel_data(p, [r for r in rows if r.get("verified") and all(table._match(r, k, v) for k, v in p.where.items())], hue_of)
    return series(data, "x", "y", "hue", name_hue=False) if data else []


def _sensitivity_bands(ax: Axes, groups: Sequence[Series], swept: Sequence[Sequence[Series]], key: str) -> None:
    """Shade each curve of `groups` from its lowest to its highest mean at each x over itself
    and the same curve in every `swept` setting."""
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    labelled = False
    for g in groups:
        others = [dict(zip(o.x, o.mean)) for setting in swept for o in setting if o.label == g.label]
        xs, lo, hi = _swept_span(dict(zip(g.x, g.mean)), others)
        if lo != hi:
            ax.fill_between(xs, lo, hi, alpha=0.15, linewidth=0,
                            color=colors.get(g.label), label=None if labelled else f"band over {key}")
            labelled = True


def _swing_size_ticks(ax: Any, sizes: Sequence[int], every: int = 5) -> None:
    lo, hi = sizes[0], sizes[-1]
    ticks = sorted({lo, hi, *(1 << k for k in range(0, 64, every) if lo <= 1 << k <= hi)})
    if len(ticks) > 2 and ticks[-1] / ticks[-2] < 8:  # keep the end label readable
        ticks.pop(-2)
    ax.set_xticks(ticks, [format_size(s).replace(" ", "") for s in ticks])
    ax.minorticks_off()


def _swept_span(own: Mapping[Any, float], others: Sequence[Mapping[Any, float]]) -> tuple[list[Any], list[float], list[float]]:
    """(x, low, high) over a curve's own values and the same curve's in every swept setting
    (only the x of the curve itself)."""
    xs = list(own)
    lo = [min([own[x], *(o[x] for o in others if x in o)]) for x in xs]
    hi = [max([own[x], *(o[x] for o in others if x in o)]) for x in xs]
    return xs, lo, hi


def swing_gain_png(spec: Any, table: Sequence[Any], marks: Sequence[Any], out: Path,
                   swept: tuple[str, Sequence[Sequence[Any]]] | None = None) -> Path:
    """A Swing ``gain_vs_size`` figure (`reducelab.sizesweep`): gain of the subject vs size, one
    line per network; the paper's values (`marks`: claims with a ``mark`` ``gain``) as black
    crosses labelled with the claim. `swept` (the sweep's key and each swept setting's gain
    table): each line gets a shaded band from its lowest to its highest gain over the settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0), layout="constrained")
    try:
        cmap = plt.get_cmap("viridis")
        n = len(spec.configs)
        banded = False
        for i, cfg in enumerate(spec.configs):
            rows = [x for x in table if x.config == cfg]
            color = cmap(i / max(1, n - 1) * 0.9)
            ax.plot(
                [x.size for x in rows], [100 * x.gain for x in rows], marker="o", markersize=3.5,
                linewidth=1.4, color=color, label=spec.label(cfg),
                linestyle="--" if cfg.reference else "-",
            )
            if swept is not None:
                xs, lo, hi = _swept_span({x.size: 100 * x.gain for x in rows},
                                         [{x.size: 100 * x.gain for x in t if x.config == cfg} for t in swept[1]])
                if lo != hi:
                    ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0,
                                    label=None if banded else f"band over {swept[0]}")
                    banded = True
        ax.axhline(0, color="black", linewidth=0.8)
        _swing_marks(ax, marks, "gain", None)
        ax.set_xscale("log", base=2)
        _swing_size_ticks(ax, spec.sizes)
        ax.set_xlabel("allreduce size")
        ax.set_ylabel(f"{spec.subject.label} goodput gain (%)")
        ax.set_title(f"{spec.figure}: {spec.title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(title="link bandwidth" if len(spec.bandwidths) > 1 else "network", fontsize=8, title_fontsize=8)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150, metadata={"Software": None})
    finally:
        plt.close(fig)
    return out


def swing_goodput_png(spec: Any, results: Any, marks: Sequence[Any], out: Path,
                      swept: tuple[str, Sequence[Any]] | None = None) -> Path:
    """A Swing ``goodput_vs_size`` figure (`reducelab.sizesweep`): per network a panel with
    goodput vs size per series, a large dot where a multi-variant series switches variant, the
    subject's gain over the best other (letter of the best other at each point) as a top-left
    inset, and the runtime at small sizes (<= 32 KiB, log scale, 32 B runtimes in its title) as a
    second inset. The paper's values (`marks`: claims with a ``mark``) are black crosses
    labelled with the claim, in the panels of the claim's networks (``share_of_peak`` x the
    panel's peak, ``goodput_gbps``; ``gain`` in the gain inset). `swept` (the sweep's key and
    each swept setting's `Results`): each curve gets a shaded band from its lowest to its highest
    goodput over the settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = spec.configs
    ncols = 1 if len(configs) == 1 else 2
    nrows = math.ceil(len(configs) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.6 * ncols, 4.6 * nrows), layout="constrained", squeeze=False)
    tab = plt.get_cmap("tab10")
    fixed = {"swing": 0, "recursive-doubling": 1, "mirrored-recursive-doubling": 2, "ring": 3, "bucket": 4}
    index = {s.name: fixed.get(s.name, 5 + i) for i, s in enumerate(spec.series)}

    def colors(i: int) -> Any:
        return tab(index[spec.series[i].name] % 10)

    small = [s for s in spec.sizes if s <= 32 << 10]
    try:
        for k, cfg in enumerate(configs):
            ax = axes[k // ncols][k % ncols]
            banded = False
            for i, s in enumerate(spec.series):
                pts = [results.points.get((cfg, s.name, size)) for size in spec.sizes]
                xs = [size for size, p in zip(spec.sizes, pts) if p is not None]
                ys = [p.run.goodput_gbps for p in pts if p is not None]
                if not xs:
                    continue
                ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.5 if s.subject else 1.1, color=colors(i),
                        label=f"{s.letter}: {s.label}" + ("" if s.baseline else " (not in gain)"),
                        linestyle="-" if s.baseline else ":")
                if swept is not None:
                    others = [{size: p.run.goodput_gbps for size in spec.sizes
                               if (p := r.points.get((cfg, s.name, size))) is not None} for r in swept[1]]
                    bx, lo, hi = _swept_span(dict(zip(xs, ys)), others)
                    if lo != hi:
                        ax.fill_between(bx, lo, hi, color=colors(i), alpha=0.15, linewidth=0,
                                        label=None if banded else f"band over {swept[0]}")
                        banded = True
                if len(s.variants) > 1:
                    chosen = [p.run.variant for p in pts if p is not None]
                    for j in range(1, len(chosen)):
                        if chosen[j] != chosen[j - 1]:
                            ax.plot([xs[j]], [ys[j]], marker="o", markersize=8, color=colors(i), zorder=5)
            ax.axhline(cfg.peak_gbps, color="grey", linewidth=0.8, linestyle="--")
            ax.text(spec.sizes[-1], cfg.peak_gbps, f"peak {cfg.peak_gbps:g} Gb/s", fontsize=6, va="bottom", ha="right", color="grey")
            ax.set_xscale("log", base=2)
            _swing_size_ticks(ax, spec.sizes)
            ax.set_ylim(0, cfg.peak_gbps * 1.12)
            _swing_marks(ax, marks, "goodput", cfg)
            ax.set_xlabel("allreduce size")
            ax.set_ylabel("goodput (Gb/s)")
            title = cfg.topology + (f" (for {cfg.paper})" if cfg.stand_in else "")
            if len(spec.bandwidths) > 1:
                title += f", {(f'{cfg.bandwidth / 1000:g} Tb/s' if cfg.bandwidth >= 1000 else f'{cfg.bandwidth:g} Gb/s')}"
            if cfg.reference:
                title += " [reference]"
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower right")
            # Gain inset (top left).
            gi = ax.inset_axes((0.08, 0.58, 0.4, 0.34))
            rows = [x for x in results.gains if x.config == cfg]
            gi.plot([x.size for x in rows], [100 * x.gain for x in rows], marker="o", markersize=2, linewidth=1, color="black")
            for x in rows:
                best = spec.series_named(x.best_other)
                gi.annotate(best.letter if best else "?", (x.size, 100 * x.gain), fontsize=4.5,
                            textcoords="offset points", xytext=(0, 2.5), ha="center")
            gi.axhline(0, color="grey", linewidth=0.6)
            _swing_marks(gi, marks, "gain", cfg, legend=False)
            gi.set_xscale("log", base=2)
            _swing_size_ticks(gi, spec.sizes, every=10)
            gi.tick_params(labelsize=5)
            gi.set_title(f"{spec.subject.letter} gain over best other (%)", fontsize=6)
            gi.grid(alpha=0.3)
            # Small-size runtime inset (left, middle).
            if len(small) >= 2:
                ri = ax.inset_axes((0.08, 0.17, 0.4, 0.28))
                at32 = []
                for i, s in enumerate(spec.series):
                    pts = [results.points.get((cfg, s.name, size)) for size in small]
                    if any(p is None for p in pts):
                        continue
                    ri.plot(small, [p.run.runtime_ps / 1e6 for p in pts if p is not None], marker="o", markersize=1.5,
                            linewidth=0.9, color=colors(i), linestyle="-" if s.baseline else ":")
                    first = pts[0]
                    assert first is not None
                    at32.append(f"{s.letter} {first.run.runtime_ps / 1e6:.3g}")
                ri.set_xscale("log", base=2)
                ri.set_yscale("log")
                _swing_size_ticks(ri, small, every=5)
                ri.tick_params(labelsize=5)
                ri.set_title(f"runtime (µs), {format_size(small[0])}: " + ", ".join(at32), fontsize=5)
                ri.grid(alpha=0.3)
        for k in range(len(configs), nrows * ncols):
            axes[k // ncols][k % ncols].axis("off")
        fig.suptitle(f"{spec.figure}: {spec.title}", fontsize=10)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, metadata={"Software": None})
    finally:
        plt.close(fig)
    return out



def _swing_marks(ax: Axes, marks: Sequence[Any], what: str, cfg: Any, legend: bool = True) -> None:
    """Draw the paper's values of size-sweep claims (`reducelab.sizesweep.SizeTerms.mark`) that
    apply to this axis: ``gain`` marks on gain axes (y in %), ``share_of_peak``/``goodput_gbps`` on
    goodput panels; only on the claim's networks (cfg.paper in its topologies, when it names them)."""
    for c in marks:
        m = c.terms.mark
        if cfg is not None and c.terms.topologies is not None and cfg.paper not in c.terms.topologies:
            continue
        if what == "gain" and "gain" in m:
            y = 100 * m["gain"]
        elif what == "goodput" and "share_of_peak" in m:
            y = m["share_of_peak"] * cfg.peak_gbps
        elif what == "goodput" and "goodput_gbps" in m:
            y = m["goodput_gbps"]
        else:
            continue
        ax.plot([m["size_bytes"]], [y], marker="X", color="black", markersize=7 if legend else 4, linestyle="none",
                zorder=6, label=f"paper ({c.id}): {c.paper_value}" if legend else None)
        if not legend:
            ax.annotate(f"paper {c.id}", (m["size_bytes"], y), fontsize=4, textcoords="offset points", xytext=(0, -6), ha="center")


def claims_png(title: str, verdicts: Sequence[Any], out: PathLike) -> Path | None:
    """A figure's claims against the paper (``STEM_claims.png``), one row per claim reading, each
    on its own axis in the claim's unit: the pass region of its rule (green), the values the rule
    saw (dots: green pass, red fail), the paper's value (black cross, `claims.paper_number`,
    where the paper states one) and each sensitivity band's range (grey bar, labelled with its
    setting, in the row's order). Every row is labelled with its id, verdict and the paper's
    words. None when there
    are no claims."""
    import textwrap

    from matplotlib.figure import Figure as MplFigure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    from .claims import FAIL, PASS, PASS_RE, number

    if not verdicts:
        return None
    row_h = 0.62
    fig = MplFigure(figsize=(9.0, 0.9 + row_h * len(verdicts)))
    top = 1 - 0.75 / (0.9 + row_h * len(verdicts))
    fig.subplots_adjust(left=0.27, right=0.76, top=top, bottom=0.15 / (0.9 + row_h * len(verdicts)) + 0.02, hspace=1.3)
    axes = fig.subplots(len(verdicts), 1, squeeze=False)[:, 0]
    colors = {PASS: "tab:green", FAIL: "tab:red"}
    for ax, v in zip(axes, verdicts):
        shown = [x + v.shift for x in v.values if math.isfinite(x)]
        xs = list(shown)
        if v.paper is not None:
            xs.append(v.paper + v.shift)
        bands = [(b.key, b.lo + v.shift, b.hi + v.shift) for b in v.bands
                 if b.lo is not None and b.hi is not None and math.isfinite(b.lo) and math.isfinite(b.hi)]
        xs += [x for _, lo, hi in bands for x in (lo, hi)]
        m = PASS_RE.match(v.pass_if) if v.pass_if else None
        region: tuple[float, float] | None = None
        if m and m.group(4):
            region = (number(m.group(5)) + v.shift, number(m.group(6)) + v.shift)
            xs += list(region)
        elif m and m.group(1):
            x0 = number(m.group(3)) + v.shift
            xs.append(x0)
            region = (x0, math.inf) if m.group(2).startswith(">") else (-math.inf, x0) if m.group(2).startswith("<") else (x0, x0)
        positive = bool(xs) and min(xs) > 0
        log = positive and (max(xs) / min(xs) > 64 or v.unit in ("size", "bytes"))
        if xs:
            lo, hi = min(xs), max(xs)
            if log:
                lo, hi = lo / 2, hi * 2
            else:
                pad = (hi - lo) * 0.12 or abs(hi) * 0.1 or 1.0
                lo, hi = lo - pad, hi + pad
            if log:
                ax.set_xscale("log", base=2)
            ax.set_xlim(lo, hi)
            if region is not None:
                a, b = max(region[0], lo), min(region[1], hi)
                if b > a:
                    ax.axvspan(a, b, color="tab:green", alpha=0.18, linewidth=0)
                else:
                    ax.axvline(a, color="tab:green", linewidth=2, alpha=0.5)
        for k, (_key, blo, bhi) in enumerate(bands):
            y = -0.35 - 0.25 * k
            ax.plot([blo, bhi], [y, y], color="0.55", linewidth=3, solid_capstyle="butt")
        if shown:
            ax.plot(shown, [0.0] * len(shown), "o", color=colors.get(v.verdict, "0.5"), markersize=4,
                    markeredgecolor="k", markeredgewidth=0.4, zorder=5)
        if v.paper is not None:
            ax.plot([v.paper + v.shift], [0.0], "X", color="k", markersize=8, zorder=6)
        ax.set_ylim(-0.45 - 0.25 * max(len(bands), 1), 0.5)
        ax.set_yticks([])
        ax.tick_params(axis="x", labelsize=6, length=2, pad=1)
        ax.xaxis.set_major_locator(MaxNLocator(5) if not log else ax.xaxis.get_major_locator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos, v=v: v.show_value(x)))
        ax.minorticks_off()
        name = v.id + (f" ({v.reading})" if v.reading and not v.id.endswith(v.reading) else "")
        ax.text(-0.01, 0.5, textwrap.fill(f"{name}: {v.verdict.upper()}", 34), transform=ax.transAxes, ha="right",
                va="center", fontsize=6.5, color=colors.get(v.verdict, "0.3"), fontweight="bold")
        right = textwrap.fill(f"paper: {v.paper_value}", 40)
        if bands:
            right += "\n" + textwrap.fill("bands (top down): " + ", ".join(k for k, _, _ in bands), 48)
        ax.text(1.01, 0.5, right, transform=ax.transAxes, ha="left", va="center", fontsize=5.5)
        if not shown:
            ax.text(0.5, 0.2, "no value", transform=ax.transAxes, ha="center", fontsize=6, color="0.4")
    handles = [
        Patch(color="tab:green", alpha=0.3, label="passes the rule"),
        Line2D([], [], marker="X", color="k", linestyle="none", label="paper's value"),
        Line2D([], [], marker="o", color="tab:green", markeredgecolor="k", linestyle="none", label="measured (pass)"),
        Line2D([], [], marker="o", color="tab:red", markeredgecolor="k", linestyle="none", label="measured (fail)"),
        Line2D([], [], color="0.55", linewidth=3, label="sensitivity band"),
    ]
    fig.legend(handles=handles, loc="upper center", ncol=5, fontsize=6.5, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.32 / (0.9 + row_h * len(verdicts))))
    fig.suptitle(wrap_title(f"{title}: the paper's values against the measured", 9.0), fontsize=9, y=0.999)
    return save_figure(fig, out)[0]
