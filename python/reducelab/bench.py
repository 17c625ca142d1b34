"""Engine benchmarks: built-in scenarios (defined in Rust) timed over repeated runs.

Counters (events, packets, packet hops) are the same on every repeat of a deterministic
benchmark; wall time is reported as median, min and max, and rates use the median.
"""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from . import _core

MIB = 1024 * 1024


@dataclass(frozen=True)
class EngineBench:
    """Timings of one engine benchmark over `repeat` runs."""

    name: str
    repeat: int
    wall_s_median: float
    wall_s_min: float
    wall_s_max: float
    events: int
    packets: int
    packet_hops: int
    sim_time_ps: int
    peak_rss_bytes: int
    """Largest peak resident set size reported over the repeats."""

    @property
    def events_per_s(self) -> float:
        return _rate(self.events, self.wall_s_median)

    @property
    def packets_per_s(self) -> float:
        """Simulated packets per wall-clock second."""
        return _rate(self.packets, self.wall_s_median)

    @property
    def packet_hops_per_s(self) -> float:
        return _rate(self.packet_hops, self.wall_s_median)

    @property
    def peak_rss_mib(self) -> float:
        return self.peak_rss_bytes / MIB

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = asdict(self)
        d.update(
            events_per_s=self.events_per_s,
            packets_per_s=self.packets_per_s,
            packet_hops_per_s=self.packet_hops_per_s,
        )
        return d


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def names() -> list[str]:
    """Names of the built-in engine benchmarks."""
    return list(_core.bench_names())


def run_engine_bench(name: str, repeat: int = 3) -> EngineBench:
    """Run engine benchmark `name` `repeat` times. Raises `ScenarioError` for an unknown name."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    runs = [_core.bench_engine(name) for _ in range(repeat)]
    walls = [r["wall_seconds"] for r in runs]
    first = runs[0]
    return EngineBench(
        name=first["name"],
        repeat=repeat,
        wall_s_median=statistics.median(walls),
        wall_s_min=min(walls),
        wall_s_max=max(walls),
        events=first["events"],
        packets=first["packets"],
        packet_hops=first["packet_hops"],
        sim_time_ps=first["sim_time_ps"],
        peak_rss_bytes=max(r["peak_rss_bytes"] for r in runs),
    )


def format_table(rows: list[EngineBench]) -> str:
    """A fixed-width table of benchmark results for the terminal."""
    header = (
        "benchmark", "wall s (median)", "min", "max",
        "events/s", "packets/s", "pkt-hops/s", "peak MiB",
    )
    body = [
        (
            r.name,
            f"{r.wall_s_median:.3f}",
            f"{r.wall_s_min:.3f}",
            f"{r.wall_s_max:.3f}",
            f"{r.events_per_s:.3e}",
            f"{r.packets_per_s:.3e}",
            f"{r.packet_hops_per_s:.3e}",
            f"{r.peak_rss_mib:.1f}",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """Where the numbers were measured (stored next to them in JSON output)."""
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "reducelab": _core.__version__,
    }
