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

LARGE = frozenset({"ndp-permutation-8k", "ndp-permutation-27k"})
"""Engine benchmarks that take minutes: run only when named (`--name`)."""


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


# ---------------------------------------------------------------------------------------------
# Collective sweeps (issue: Swing reproduction performance goals).

SIZES_32B_512MIB = [32 << i for i in range(25)]  # 32 B ... 512 MiB, every power of two
SIZES_32B_64MIB = [32 << i for i in range(22)]  # 32 B ... 64 MiB

#: Algorithm sets of the benchmarks below that are not a fixed subset: the series variants of the
#: Swing Fig. 7 spec, and every variant of the algorithm registry.
FIG7_VARIANTS = "fig7"
EVERY_VARIANT = "registry"

#: name -> (topology, algorithms, sizes, backend, what it measures)
COLLECTIVE_BENCHES: dict[str, tuple[str, tuple[str, ...] | str, list[int], str, str]] = {
    "fig7-flow": (
        "torus:64x64", FIG7_VARIANTS, SIZES_32B_512MIB, "flow",
        "Swing Fig. 7 grid at flow level: 4096-node torus, every algorithm, 32 B - 512 MiB (goal < 2 min)",
    ),
    "torus128-flow": (
        "torus:128x128", ("swing-latency", "swing-bandwidth", "bucket"), SIZES_32B_512MIB, "flow",
        "16384-node torus, Swing (both variants) and bucket, 32 B - 512 MiB at flow level (goal < 5 min, < 8 GB)",
    ),
    "packet-8x8": (
        "torus:8x8", EVERY_VARIANT, SIZES_32B_64MIB, "packet",
        "8x8 torus, every algorithm, 32 B - 64 MiB at packet level, data verified",
    ),
}


def bench_algorithms(algs: tuple[str, ...] | str) -> list[str]:
    """The algorithms of a collective benchmark: a fixed tuple, or FIG7_VARIANTS (the series
    variants of scenarios/swing/fig7.toml, in order) or EVERY_VARIANT (the registry's variants)."""
    if not isinstance(algs, str):
        return list(algs)
    if algs == EVERY_VARIANT:
        return list(_core.algorithms())
    if algs == FIG7_VARIANTS:
        import tomllib

        from .figures import scenarios_dir

        spec = tomllib.loads((scenarios_dir() / "swing" / "fig7.toml").read_text(encoding="utf-8"))
        return [v for series in spec["series"] for v in series["variants"]]
    raise ValueError(f"unknown algorithm set {algs!r}")


_CHILD = """
import json, sys, time
from reducelab import _core
topo, algs, sizes, backend, threads = json.loads(sys.argv[1])
t0 = time.perf_counter()
runs = 0
verified = True
for a in algs:
    for r in _core.run_collective_sizes(topo, a, sizes, backend=backend, threads=threads):
        runs += 1
        verified = verified and r["verified"] is not False
wall = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) * 1024
print(json.dumps({"wall_seconds": wall, "runs": runs, "verified": verified, "peak_rss_bytes": hwm}))
"""


@dataclass(frozen=True)
class CollectiveBench:
    """Wall time of one collective sweep over `repeat` fresh processes (no schedule cache)."""

    name: str
    what: str
    repeat: int
    threads: int
    runs: int
    wall_s_median: float
    wall_s_min: float
    wall_s_max: float
    peak_rss_bytes: int
    verified: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_collective_bench(name: str, repeat: int = 1, threads: int = 1) -> CollectiveBench:
    """Run collective benchmark `name` `repeat` times, each in a fresh Python process, the
    sizes of each algorithm on `threads` threads."""
    import json
    import subprocess
    import sys

    if name not in COLLECTIVE_BENCHES:
        raise ValueError(f"unknown benchmark {name!r}; available: {', '.join(COLLECTIVE_BENCHES)}")
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    topo, algs, sizes, backend, what = COLLECTIVE_BENCHES[name]
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    arg = json.dumps([topo, bench_algorithms(algs), sizes, backend, threads])
    outs = []
    for _ in range(repeat):
        p = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"benchmark {name} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        outs.append(json.loads(p.stdout))
    walls = [o["wall_seconds"] for o in outs]
    return CollectiveBench(
        name=name, what=what, repeat=repeat, threads=threads, runs=outs[0]["runs"],
        wall_s_median=statistics.median(walls), wall_s_min=min(walls), wall_s_max=max(walls),
        peak_rss_bytes=max(o["peak_rss_bytes"] for o in outs), verified=all(o["verified"] for o in outs),
    )


def format_collective_table(rows: list[CollectiveBench]) -> str:
    header = ("benchmark", "threads", "runs", "wall s (median)", "min", "max", "peak MiB", "verified")
    body = [
        (r.name, str(r.threads), str(r.runs), f"{r.wall_s_median:.2f}", f"{r.wall_s_min:.2f}", f"{r.wall_s_max:.2f}",
         f"{r.peak_rss_bytes / MIB:.0f}", "yes" if r.verified else "NO")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
