"""The figure functions of `reducelab.plots` draw the right series, and `reducelab plot sweep`."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli
from reducelab import plots
from reducelab.sweep import Sweep

DATA = Path(__file__).parent / "data"
TINY_SWEEP = DATA / "tiny_sweep.toml"


def line_data(ax) -> dict[str, tuple[list[float], list[float]]]:  # type: ignore[no-untyped-def]
    return {
        line.get_label(): (list(map(float, line.get_xdata())), list(map(float, line.get_ydata())))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_sweep_plot_lines_average_the_seeds() -> None:
    rows = [
        {"bytes": b, "bw": bw, "seed": s, "t": b / bw + s}
        for b in (1024, 131072, 4096) for bw in (100, 400) for s in (1, 2)
    ]
    fig = plots.sweep_plot(rows, "bytes", "t", "bw")
    ax = fig.axes[0]
    lines = line_data(ax)
    assert list(lines) == ["bw = 100", "bw = 400"]
    xs, ys = lines["bw = 400"]
    assert xs == [1024, 4096, 131072]
    assert ys == pytest.approx([b / 400 + 1.5 for b in xs])
    assert len(ax.collections) == 2, "one min-max band per series (two seeds)"
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "bytes" and ax.get_ylabel() == "t"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["bw = 100", "bw = 400"]


def test_sweep_plot_categorical_x_gives_bars() -> None:
    rows = [{"routing": r, "kind": k, "u": i + j} for i, r in enumerate(["ecmp", "adaptive"]) for j, k in enumerate("ab")]
    ax = plots.sweep_plot(rows, "routing", "u", "kind").axes[0]
    assert [c.get_label() for c in ax.containers] == ["kind = a", "kind = b"]
    assert [p.get_height() for p in ax.containers[1]] == [1, 2]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ecmp", "adaptive"]


def test_runtime_vs_size() -> None:
    rows = [{"bytes": b, "algorithm": a, "runtime_ps": b * k * 1e3} for b in (32, 1 << 20) for a, k in (("ring", 2), ("swing", 1))]
    ax = plots.runtime_vs_size(rows).axes[0]
    lines = line_data(ax)
    assert list(lines) == ["ring", "swing"]
    assert lines["swing"][1] == pytest.approx([32e-3, (1 << 20) * 1e-3])  # µs
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32 B", "1 MiB"]
    assert ax.get_ylabel() == "runtime (µs)"


def test_bandwidth_vs_size_by_type() -> None:
    rows = [{"bytes": b, "dtype": t, "goodput_gbps": g * b} for b in (1024, 4096) for t, g in (("int32", 1), ("float16", 2))]
    lines = line_data(plots.bandwidth_vs_size(rows).axes[0])
    assert list(lines) == ["int32", "float16"]
    assert lines["float16"][1] == [2048, 8192]


def test_goodput_gains_and_heatmap() -> None:
    rows = []
    for topo, k in (("8x8", 1.0), ("16x16", 2.0)):
        for size in (32, 1024):
            rows += [
                {"topology": topo, "bytes": size, "algorithm": "swing", "goodput_gbps": 150 * k},
                {"topology": topo, "bytes": size, "algorithm": "ring", "goodput_gbps": 100},
                {"topology": topo, "bytes": size, "algorithm": "bucket", "goodput_gbps": 120 if size == 32 else 90},
            ]
    gains = plots.goodput_gains(rows, subject="swing")
    assert len(gains) == 4
    first = gains.iloc[0]
    assert (first["topology"], first["bytes"], first["best_other"]) == ("8x8", 32, "bucket")
    assert first["gain"] == pytest.approx(150 / 120 - 1)
    fig = plots.gain_heatmap(gains)
    ax = fig.axes[0]
    grid = ax.images[0].get_array()
    assert grid.shape == (2, 2)
    assert grid[0][1] == pytest.approx(50.0)   # 8x8, 1 KiB: 150 vs ring 100
    assert grid[1][0] == pytest.approx(150.0)  # 16x16, 32 B: 300 vs bucket 120
    assert [t.get_text() for t in ax.get_yticklabels()] == ["8x8", "16x16"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32 B", "1 KiB"]
    assert "+50" in [t.get_text() for t in ax.texts]
    assert fig.axes[1].get_ylabel() == "goodput gain (%)"


def test_link_utilization_cdf_and_histogram() -> None:
    runs = {"canary": [0.1, 0.2, 0.2, 0.9], "static tree": [0.0, 1.0]}
    ax = plots.link_utilization_distribution(runs).axes[0]
    lines = line_data(ax)
    assert list(lines) == ["canary", "static tree"]
    xs, ys = lines["canary"]
    assert xs == pytest.approx([0, 10, 20, 20, 90, 100])
    assert ys == [0, 0.25, 0.5, 0.75, 1.0, 1.0]
    ax = plots.link_utilization_distribution(runs, kind="hist", bins=10).axes[0]
    assert [p.get_label() for p in ax.patches] == ["canary", "static tree"]
    assert list(ax.patches[1].get_data().values) == [0.5] + [0.0] * 8 + [0.5]


def test_jct_bars() -> None:
    rows = [{"jobs": j, "system": s, "jct_ps": (j * k + d) * 1e9}
            for j in (2, 4) for s, k in (("DSA", 1), ("ATP", 2)) for d in (0, 2)]
    ax = plots.jct_bars(rows).axes[0]
    assert [c.get_label() for c in ax.containers if hasattr(c, "patches")] == ["DSA", "ATP"]
    bars = [c for c in ax.containers if hasattr(c, "patches")]
    assert [p.get_height() for p in bars[1]] == pytest.approx([5.0, 9.0])  # ms, mean of the two rows
    assert ax.get_ylabel() == "JCT (ms)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4"]


def test_memory_vs_time() -> None:
    ax = plots.memory_vs_time({"flare": ([0, 1e6, 2e6], [0, 2048, 1024])}).axes[0]
    assert line_data(ax)["flare"] == ([0.0, 1.0, 2.0], [0.0, 2.0, 1.0])
    assert ax.get_xlabel() == "time (µs)"
    with pytest.raises(plots.PlotDataError):
        plots.memory_vs_time({"bad": ([0, 1], [0])})


def test_missing_column_is_named() -> None:
    with pytest.raises(plots.PlotDataError, match="no column 'nope'"):
        plots.sweep_plot([{"a": 1, "b": 2}], "a", "nope")


def test_save_png_and_svg(tmp_path: Path) -> None:
    fig = plots.sweep_plot([{"a": 1, "b": 2}, {"a": 2, "b": 3}], "a", "b")
    png, svg = plots.save_figure(fig, [tmp_path / "p.png", tmp_path / "p.svg"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in svg.read_bytes()[:1000]
    first = svg.read_bytes()
    plots.save_figure(fig, tmp_path / "p.svg")
    assert svg.read_bytes() == first, "SVG output is stable"
    with pytest.raises(plots.PlotDataError, match="unknown image format"):
        plots.save_figure(fig, tmp_path / "p.jpeg")


def test_plot_sweep_command(tmp_path: Path) -> None:
    db = tmp_path / "tiny.sqlite"
    Sweep.load(TINY_SWEEP).run(db, jobs=1)
    proc = cli("plot", "sweep", db, "--x", "traffic[0].bytes", "--y", "messages.fct_ps.p99",
               "--hue", "topology.bandwidth_gbps")
    assert proc.returncode == 0, proc.stderr
    stem = tmp_path / "tiny_messages.fct_ps.p99_vs_traffic_0_.bytes"
    png, svg = Path(f"{stem}.png"), Path(f"{stem}.svg")
    assert proc.stdout == f"wrote {png}, {svg}\n"
    assert png.stat().st_size > 1000 and b"<svg" in svg.read_bytes()[:1000]
    # The same series, drawn from the sweep's DataFrame through the library function.
    df = Sweep.load(TINY_SWEEP).dataframe(db)
    ax = plots.sweep_plot(df, "traffic[0].bytes", "messages.fct_ps.p99", "topology.bandwidth_gbps").axes[0]
    lines = line_data(ax)
    assert list(lines) == ["topology.bandwidth_gbps = 100", "topology.bandwidth_gbps = 400"]
    xs, ys = lines["topology.bandwidth_gbps = 100"]
    assert xs == [4096, 16384, 65536]
    sub = df[df["topology.bandwidth_gbps"] == 100]
    assert ys == pytest.approx(sub.groupby("traffic[0].bytes")["messages.fct_ps.p99"].mean().tolist())


def test_plot_sweep_errors(tmp_path: Path) -> None:
    db = tmp_path / "tiny.sqlite"
    Sweep.load(TINY_SWEEP).run(db, jobs=1)
    proc = cli("plot", "sweep", db, "--x", "traffic[0].bytes", "--y", "nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {db}: --y: no column 'nope'; columns: point, key, ")
    proc = cli("plot", "sweep", tmp_path / "missing.sqlite", "--x", "seed", "--y", "sim_time_ps")
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = cli("plot", "sweep", db, "--x", "seed", "--y", "sim_time_ps", "--sweep", "other")
    assert proc.returncode == 2 and "no sweep named 'other'" in proc.stderr
    out = tmp_path / "only.svg"
    proc = cli("plot", "sweep", db, "--x", "seed", "--y", "sim_time_ps", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and not list(tmp_path.glob("*.png"))
