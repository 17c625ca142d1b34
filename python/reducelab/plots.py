"""Plots of result files.

`link_utilization` draws the distribution of per-link utilisation of one run: x is utilisation in
percent, y the fraction of links in each bin (the kind of plot Canary's evaluation uses to show how
evenly an allreduce spreads over the network). matplotlib and numpy are imported only when a plot
is drawn, so the rest of the package works without them.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

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
    writes a PNG, by default ``RESULTS_DIR/link_utilization.png``. Returns the PNG path.
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultFileError(f"{results_dir}: not a directory")
    utilization = read_link_utilization(results_dir / LINKS_FILE)
    if not utilization:
        raise ResultFileError(f"{results_dir / LINKS_FILE}: no links")
    out_path = Path(out) if out is not None else results_dir / LINK_UTILIZATION_PNG

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
        fig.savefig(out_path, dpi=150)
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
