"""Canary paper (seed 000, §5) reproductions: `reducelab reproduce canary-figN`.

Unlike the Swing figures (size sweeps of one collective, `reproduce.py`), the Canary figures are
scenario runs on the §5.2 network: a two-level fat tree (32 leaves x 64 ports, 32 spines, 1024
hosts, 100 Gb/s, Canary's up-port rule), some hosts running an in-network allreduce
(`ina_allreduce`: Canary or static trees) or the host-based ring, the others generating random
uniform background traffic; 5 random allocations of hosts (seeded), 4 MiB unless stated.

Each figure builds its runs from the scale (``tiny``: 4 leaves x 4 hosts x 4 spines, for the
tests; ``small``: 8 x 8 x 8; ``full``: the paper's network), runs them one after the other (or on
``jobs`` threads), and writes into the output directory (``STEM`` = e.g. ``fig8``):

- ``STEM.csv``           one row per run: parameters, goodput, runtime, verified, utilisation,
                         descriptor/straggler counters
- ``STEM_links.csv``     (Figs. 7 and 10) histogram of network-link utilisation per series
- ``STEM_claims.csv`` / ``STEM_claims.md``  claim, paper value, measured value, pass/fail
- ``STEM.png``           the figure

The pass rules were fixed when the claims were written, before any result was seen, and are
never tuned; smaller scales change the network (and usually the numbers) and are labelled so.
Same figure and scale give byte-identical files (no wall-clock values in them).
"""

from __future__ import annotations

import csv
import io
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runs import run as run_scenario

SCALES = ("tiny", "small", "full")
TOFINO_LINE_RATE_GBPS = 100 * 128 / (128 + 57)  # §5.1: 128 B payload + 57 B headers at 100 Gb/s


class CanaryReproError(ValueError):
    """A figure name, scale or option was rejected (the message says why)."""


# ---------------------------------------------------------------------------------------------
# The memory model of §3.2.2.


def canary_memory_bytes(
    bandwidth_gbps: float = 100.0, diameter: int = 5, hop_latency_ns: float = 300.0,
    timeout_ns: float = 1000.0, leader_ns: float = 1000.0,
) -> float:
    """b·(2d(l+t)+r) in bytes: descriptor bytes one allreduce may hold in a switch (§3.2.2)."""
    for name, v in (("bandwidth_gbps", bandwidth_gbps), ("hop_latency_ns", hop_latency_ns),
                    ("timeout_ns", timeout_ns), ("leader_ns", leader_ns)):
        if not math.isfinite(v) or v < 0:
            raise CanaryReproError(f"{name} must be a finite number >= 0, got {v}")
    if bandwidth_gbps <= 0:
        raise CanaryReproError(f"bandwidth_gbps must be > 0, got {bandwidth_gbps}")
    if diameter < 1:
        raise CanaryReproError(f"diameter must be >= 1, got {diameter}")
    seconds = (2 * diameter * (hop_latency_ns + timeout_ns) + leader_ns) * 1e-9
    return bandwidth_gbps * 1e9 / 8 * seconds


def format_canary_memory(bandwidth_gbps: float, diameter: int, hop_latency_ns: float,
                         timeout_ns: float, leader_ns: float) -> str:
    b = canary_memory_bytes(bandwidth_gbps, diameter, hop_latency_ns, timeout_ns, leader_ns)
    t_ns = 2 * diameter * (hop_latency_ns + timeout_ns) + leader_ns
    return "\n".join([
        "Canary descriptor memory per switch and allreduce (§3.2.2): b·(2d(l+t)+r)",
        f"  b = {bandwidth_gbps:g} Gb/s, d = {diameter}, l = {hop_latency_ns:g} ns, "
        f"t = {timeout_ns:g} ns, r = {leader_ns:g} ns",
        f"  descriptor lifetime 2d(l+t)+r = {t_ns:g} ns",
        f"  memory = {b:.0f} B = {b / 1e3:.1f} kB = {b / 1024:.1f} KiB",
        "  (the paper's example, 100 Gb/s, d=5, l=300 ns, t=1 us, r=1 us, states \"175KiB\": "
        "the formula gives 175 kB = 170.9 KiB)",
    ])


# ---------------------------------------------------------------------------------------------
# Scales and scenarios.


@dataclass(frozen=True)
class Scale:
    name: str
    leaves: int
    hosts_per_leaf: int
    spines: int
    allocations: int
    bytes: int
    bg_bytes: int

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    def network(self) -> str:
        return (f"fat_tree_2 {self.leaves} leaves x {self.hosts_per_leaf} hosts, {self.spines} spines "
                f"({self.hosts} hosts), 100 Gb/s")


_SCALES = {
    "tiny": Scale("tiny", 4, 4, 4, 1, 64 << 10, 16 << 10),
    "small": Scale("small", 8, 8, 8, 2, 1 << 20, 64 << 10),
    "full": Scale("full", 32, 32, 32, 5, 4 << 20, 64 << 10),
}


def get_scale(name: str) -> Scale:
    if name not in _SCALES:
        raise CanaryReproError(f"unknown scale {name!r}; known: {', '.join(SCALES)}")
    return _SCALES[name]


@dataclass
class Tenant:
    hosts: list[int]
    series: str  # ring | canary | static-N


@dataclass
class Point:
    """One simulation: parameters (for the CSV) and the scenario."""
    params: dict[str, Any]
    toml: str
    tenants: int
    links: bool = False  # keep the network-link utilisations (Figs. 7b, 10b)


def _fat_tree(sc: Scale) -> str:
    return (
        "[topology]\nkind = \"fat_tree_2\"\n"
        f"leaves = {sc.leaves}\nhosts_per_leaf = {sc.hosts_per_leaf}\nspines = {sc.spines}\n"
        f"radix = {sc.hosts_per_leaf + sc.spines}\nbandwidth_gbps = 100\nlatency_ns = 500\n"
    )


# The paper's numbers come from SST, whose merlin routers are input-queued with round-robin
# arbitration over inputs; `input_round_robin` models that (docs/engine.md). Under the default
# output-queued FIFO, the aggregates a switch emits take output bandwidth in proportion to their
# number, which shields static trees from congestion (docs/reproductions.md, Canary section).
_NETWORK = (
    "[network]\nmtu_bytes = 4096\nheader_bytes = 64\nswitch_latency_ns = 300\n"
    "buffer_bytes = 65536\nrouting = \"canary\"\narbitration = \"input_round_robin\"\n"
)


def _traffic(series: str, hosts: Sequence[int], nbytes: int, elements: int | None = None) -> str:
    h = list(hosts)
    if series == "ring":
        return f"[[traffic]]\nkind = \"collective\"\nalgorithm = \"ring\"\nhosts = {h}\nbytes = {nbytes}\n"
    s = f"[[traffic]]\nkind = \"ina_allreduce\"\nhosts = {h}\nbytes = {nbytes}\n"
    if series.startswith("canary"):
        s += "protocol = \"canary\"\n"
    elif series.startswith("static-"):
        s += f"protocol = \"static_trees\"\ntrees = {int(series.split('-')[1])}\n"
    else:
        raise AssertionError(series)
    if elements is not None:
        s += f"elements_per_packet = {elements}\n"
    return s


def scenario_toml(
    name: str, seed: int, sc: Scale | None, tenants: Sequence[Tenant], nbytes: int,
    background: Sequence[int] = (), bg_bytes: int = 65536, noise: float = 0.0,
    timeout_ns: float | None = None, slots_per_tenant: int | None = None,
    elements: int | None = None, star_hosts: int | None = None,
) -> str:
    parts = [f"name = \"{name}\"\nseed = {seed}\n"]
    if star_hosts is not None:
        parts.append(f"[topology]\nkind = \"star\"\nhosts = {star_hosts}\nbandwidth_gbps = 100\nlatency_ns = 500\n")
    else:
        assert sc is not None
        parts.append(_fat_tree(sc))
    parts.append(_NETWORK)
    if noise > 0:
        parts.append(f"[noise]\nprobability = {noise!r}\ndelay_ns = 1000\n")
    ina = []
    if timeout_ns is not None:
        ina.append(f"timeout_ns = {timeout_ns:g}")
    if slots_per_tenant is not None:
        ina.append(f"table_size = 32768\nslots_per_tenant = {slots_per_tenant}")
    if ina:
        parts.append("[ina]\n" + "\n".join(ina) + "\n")
    for t in tenants:
        parts.append(_traffic(t.series, t.hosts, nbytes, elements))
    if background:
        parts.append(f"[[traffic]]\nkind = \"random_uniform\"\nhosts = {list(background)}\nbytes = {bg_bytes}\n")
    return "\n".join(parts)


def allocation(n_hosts: int, k: int, alloc: int) -> tuple[list[int], list[int]]:
    """Random allocation number `alloc` (seeded): `k` allreduce hosts and the rest (sorted)."""
    hosts = list(range(n_hosts))
    random.Random(1000 + alloc).shuffle(hosts)
    return sorted(hosts[:k]), sorted(hosts[k:])


def partition(n_hosts: int, parts: int, alloc: int) -> list[list[int]]:
    hosts = list(range(n_hosts))
    random.Random(2000 + alloc).shuffle(hosts)
    per = n_hosts // parts
    return [sorted(hosts[i * per:(i + 1) * per]) for i in range(parts)]


def _count(sc: Scale, fraction: float) -> int:
    return max(2, min(sc.hosts - 1, int(round(fraction * sc.hosts))))


def _ina_point(fig: str, sc: Scale, series: str, fraction: float, congestion: bool, alloc: int,
               nbytes: int | None = None, noise: float = 0.0, timeout_ns: float | None = None,
               links: bool = False, extra: dict[str, Any] | None = None) -> Point:
    k = _count(sc, fraction)
    fg, bg = allocation(sc.hosts, k, alloc)
    nb = sc.bytes if nbytes is None else nbytes
    toml = scenario_toml(f"{fig}-{series}", alloc + 1, sc, [Tenant(fg, series)], nb,
                         bg if congestion else (), sc.bg_bytes, noise, timeout_ns)
    params = {"series": series, "congestion": congestion, "fraction": fraction, "hosts": k,
              "allocation": alloc, "bytes": nb}
    params.update(extra or {})
    return Point(params, toml, 1, links)


# ---------------------------------------------------------------------------------------------
# Running.


@dataclass
class RunResult:
    params: dict[str, Any]
    goodput_gbps: float  # mean over tenants
    runtime_ps: int  # longest tenant
    verified: bool
    end: str
    sim_time_ps: int
    net_util: float  # mean network-link utilisation over the allreduce span
    peak_descriptor_bytes: int
    stragglers: int
    collisions: int
    link_utils: list[float] = field(default_factory=list)


def _execute(p: Point) -> RunResult:
    res = run_scenario(p.toml)
    s = res.summary
    entries = [t for t in s["traffic"] if t["kind"] in ("ina_allreduce", "collective")]
    if len(entries) != p.tenants:
        raise AssertionError(f"expected {p.tenants} allreduce entries, got {len(entries)}")
    goodputs, runtimes, ok = [], [], s["status"] == "completed"
    for t in entries:
        g, r = t.get("goodput_gbps"), t.get("runtime_ps")
        if g is None or r is None:
            ok = False
            g, r = 0.0, 0
        if t["kind"] == "collective":
            ok = ok and bool(t["result_verified"])
        else:
            ok = ok and t["verified"] == t["hosts"] and t["hosts"] > 0
        goodputs.append(float(g))
        runtimes.append(int(r))
    ina = s.get("ina") or {}
    # Utilisation over the allreduce span [0, end of the last tenant]. A run with background
    # traffic stops when the allreduces end (span = simulated time); one without drains, so
    # Canary's soft state times out (descriptor reclaim: ms), and the simulator's utilisation
    # (busy time / simulated time) would be diluted by the idle drain.
    span = max((max(int(t.get("runtime_ps") or 0), int(t.get("completion_ps") or 0)) for t in entries), default=0)
    sim_ps = int(s["sim_time_ps"])
    scale = sim_ps / span if span > 0 else 1.0
    utils: list[float] = []
    if p.links:
        rows = list(csv.DictReader(io.StringIO(res.files["links.csv"])))
        ports: dict[int, set[int]] = {}
        for r in rows:
            ports.setdefault(int(r["from_node"]), set()).add(int(r["from_port"]))
        # Hosts have one port (node ids interleave leaves and hosts); network links join switches.
        hosts = {n for n, ps in ports.items() if len(ps) == 1}
        if len(hosts) != s["topology"]["hosts"]:
            raise AssertionError(f"found {len(hosts)} one-port nodes, topology has {s['topology']['hosts']} hosts")
        utils = [float(r["utilization"]) for r in rows
                 if int(r["from_node"]) not in hosts and int(r["to_node"]) not in hosts]
        # The filtered mean must be the simulator's own.
        if utils and abs(statistics.fmean(utils) - s["links"]["network_mean_utilization"]) > 1e-5:
            raise AssertionError("network-link filter disagrees with links.network_mean_utilization")
        utils = [u * scale for u in utils]
    return RunResult(
        p.params, statistics.fmean(goodputs), max(runtimes), ok, s["status"], sim_ps,
        float(s["links"]["network_mean_utilization"]) * scale, int(ina.get("peak_descriptor_bytes", 0)),
        int(ina.get("stragglers", 0)), int(ina.get("collisions", 0)), utils,
    )


def run_points(points: Sequence[Point], jobs: int = 1, progress: bool = False) -> list[RunResult]:
    out: list[RunResult | None] = [None] * len(points)
    t0 = time.monotonic()

    def one(i: int) -> None:
        out[i] = _execute(points[i])

    if jobs <= 1:
        for i in range(len(points)):
            one(i)
            if progress:
                print(f"\r  {i + 1}/{len(points)} runs, {time.monotonic() - t0:.0f} s", end="", flush=True)
    else:
        with ThreadPoolExecutor(jobs) as ex:
            for n, _ in enumerate(ex.map(one, range(len(points))), 1):
                if progress:
                    print(f"\r  {n}/{len(points)} runs, {time.monotonic() - t0:.0f} s", end="", flush=True)
    if progress:
        print()
    return [r for r in out if r is not None]


# ---------------------------------------------------------------------------------------------
# Claims.


@dataclass
class Claim:
    id: str
    claim: str
    paper: str
    rule: str
    measured: str
    verdict: str  # pass | fail | n/a


def _within(v: float, lo: float, hi: float) -> str:
    return "pass" if lo <= v <= hi else "fail"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


class Table:
    """Mean over allocations of a metric, by (series, congestion, key...)."""

    def __init__(self, results: Sequence[RunResult], keys: Sequence[str]) -> None:
        self.keys = tuple(keys)
        self.vals: dict[tuple[Any, ...], list[RunResult]] = {}
        for r in results:
            self.vals.setdefault(tuple(r.params[k] for k in self.keys), []).append(r)

    def mean(self, metric: str = "goodput_gbps", **kw: Any) -> float:
        key = tuple(kw[k] for k in self.keys)
        rs = self.vals.get(key)
        if not rs:
            raise KeyError(f"no runs for {kw}")
        return statistics.fmean(float(getattr(r, metric)) for r in rs)


# ---------------------------------------------------------------------------------------------
# Figures: each has points(scale) -> [Point] and claims(scale, results) -> [Claim] and plot().


@dataclass
class Figure:
    name: str
    stem: str
    title: str
    points: Callable[[Scale], list[Point]]
    claims: Callable[[Scale, list[RunResult]], list[Claim]]
    plot: Callable[[Scale, list[RunResult], Path], None]
    links: bool = False


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cond(c: bool) -> str:
    return "congestion" if c else "no congestion"


# --- Fig. 2 -----------------------------------------------------------------------------------

FIG2_SERIES = ("ring", "static-1", "static-4", "canary")


def _fig2_fracs(sc: Scale) -> tuple[float, ...]:
    return (0.01, 0.75)


def fig2_points(sc: Scale) -> list[Point]:
    return [_ina_point("fig2", sc, s, f, c, a)
            for f in _fig2_fracs(sc) for c in (False, True) for s in FIG2_SERIES for a in range(sc.allocations)]


def fig2_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "congestion", "fraction"))
    fr = _fig2_fracs(sc)
    ratios = {(s, f): t.mean(series=s, congestion=False, fraction=f) / t.mean(series="ring", congestion=False, fraction=f)
              for s in FIG2_SERIES[1:] for f in fr}
    best = all(t.mean(series="canary", congestion=True, fraction=f) > t.mean(series=s, congestion=True, fraction=f)
               for f in fr for s in FIG2_SERIES[:-1])
    worse = [(s, f) for s in ("static-1", "static-4") for f in fr
             if t.mean(series=s, congestion=True, fraction=f) <= t.mean(series="ring", congestion=True, fraction=f)]
    lo, hi = min(ratios.values()), max(ratios.values())
    return [
        Claim("fig2-2x-ring", "no congestion: static tree(s) and Canary ≈ 2× the ring's goodput", "2×",
              "every in-network/ring ratio (1 and 4 static trees, Canary; both fractions) within 1.6–2.4",
              f"{lo:.2f}–{hi:.2f}× (" + ", ".join(f"{s}@{f:g}: {v:.2f}" for (s, f), v in ratios.items()) + ")",
              "pass" if 1.6 <= lo and hi <= 2.4 else "fail"),
        Claim("fig2-canary-best", "with congestion Canary beats the ring and the static trees", "Canary fastest",
              "Canary mean goodput > every other series at both fractions under congestion",
              "; ".join(f"{f:g}: " + ", ".join(f"{s} {t.mean(series=s, congestion=True, fraction=f):.1f}" for s in FIG2_SERIES)
                        for f in fr) + " Gb/s", "pass" if best else "fail"),
        Claim("fig2-static-below-ring", "with congestion a static-tree allreduce can be worse than the ring",
              "static ≤ ring in some case", "some static series ≤ ring under congestion at some fraction",
              ", ".join(f"{s}@{f:g}" for s, f in worse) or "none", "pass" if worse else "fail"),
    ]


def _bars(sc: Scale, rs: list[RunResult], out: Path, series: Sequence[str], xkey: str, title: str,
          conds: Sequence[bool] = (False, True)) -> None:
    plt = _plt()
    t = Table(rs, ("series", "congestion", xkey))
    xs = sorted({r.params[xkey] for r in rs})
    fig, axes = plt.subplots(1, len(conds), figsize=(5 * len(conds), 3.6), squeeze=False)
    for ax, c in zip(axes[0], conds):
        w = 0.8 / len(series)
        for i, s in enumerate(series):
            ys = []
            for x in xs:
                try:
                    ys.append(t.mean(series=s, congestion=c, **{xkey: x}))
                except KeyError:
                    ys.append(float("nan"))
            ax.bar([j + i * w for j in range(len(xs))], ys, w, label=s)
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(xs))], [f"{x:g}" for x in xs])
        ax.set_xlabel(xkey)
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title(_cond(c))
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{title} ({sc.name}: {sc.network()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def fig2_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    _bars(sc, rs, out, FIG2_SERIES, "fraction", "Fig. 2: allreduce goodput on 1% and 75% of hosts")


# --- Fig. 6 -----------------------------------------------------------------------------------


def fig6_points(sc: Scale) -> list[Point]:
    nb = sc.bytes
    pts = []
    for s in ("canary", "static-1"):
        toml = scenario_toml(f"fig6-{s}", 1, None, [Tenant([0, 1], s)], nb, elements=32, star_hosts=2)
        pts.append(Point({"series": s, "congestion": False, "hosts": 2, "bytes": nb, "allocation": 0}, toml, 1))
    return pts


def fig6_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    g = {r.params["series"]: r.goodput_gbps for r in rs}
    ref = TOFINO_LINE_RATE_GBPS
    return [Claim("fig6-line-rate",
                  "2 hosts + 1 switch, 32 elements (128 B) per packet: the simulator matches the Tofino, "
                  "which runs at line rate (100·128/(128+57) Gb/s)", f"{ref:.1f} Gb/s",
                  "Canary goodput within ±5% of 69.2 Gb/s",
                  f"Canary {g['canary']:.1f} Gb/s ({_pct(g['canary'] / ref - 1)}), static tree {g['static-1']:.1f} Gb/s",
                  _within(g["canary"] / ref, 0.95, 1.05))]


def fig6_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4, 3.2))
    names = [r.params["series"] for r in rs] + ["Tofino (line rate)"]
    vals = [r.goodput_gbps for r in rs] + [TOFINO_LINE_RATE_GBPS]
    ax.bar(names, vals, color=["C0", "C1", "C7"])
    ax.set_ylabel("goodput (Gb/s)")
    ax.set_title(f"Fig. 6: 2 hosts, 1 switch, 32 el./packet ({sc.name})", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# --- Fig. 7 -----------------------------------------------------------------------------------

FIG7_SERIES = ("static-1", "static-2", "static-4", "static-8", "canary")
UTIL_SERIES = ("static-1", "static-4", "canary")


def fig7_points(sc: Scale) -> list[Point]:
    return [_ina_point("fig7", sc, s, 0.5, c, a, links=s in UTIL_SERIES)
            for c in (False, True) for s in FIG7_SERIES for a in range(sc.allocations)]


def _util_claims(prefix: str, t: Table, kw: dict[str, Any], paper: dict[str, float]) -> list[Claim]:
    out = []
    m = {s: t.mean("net_util", series=s, **kw) for s in paper}
    for s, p in paper.items():
        out.append(Claim(f"{prefix}-util-{s}", f"average network-link utilisation, {s}", f"{p:.1f}%",
                         "within ±5 percentage points", f"{m[s] * 100:.1f}%",
                         _within(m[s] * 100 - p, -5, 5)))
    order = sorted(paper, key=lambda s: -paper[s])
    ok = all(m[a] > m[b] for a, b in zip(order, order[1:]))
    out.append(Claim(f"{prefix}-util-order", "utilisation order " + " > ".join(order), " > ".join(order),
                     "same strict order", " > ".join(sorted(m, key=lambda s: -m[s])), "pass" if ok else "fail"))
    return out


def fig7_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "congestion"))
    g = {(s, c): t.mean(series=s, congestion=c) for s in FIG7_SERIES for c in (False, True)}
    nc = [g[(s, False)] for s in FIG7_SERIES]
    vs1 = g[("canary", True)] / g[("static-1", True)]
    vsn = {s: g[("canary", True)] / g[(s, True)] for s in ("static-2", "static-4", "static-8")}
    degr = g[("canary", True)] / g[("canary", False)]
    more = g[("static-8", True)] / g[("static-4", True)]
    claims = [
        Claim("fig7a-nocong-comparable", "without congestion all approaches are comparable", "comparable",
              "max/min mean goodput over the 5 series ≤ 1.15", f"{max(nc) / min(nc):.3f} ({min(nc):.1f}–{max(nc):.1f} Gb/s)",
              "pass" if max(nc) / min(nc) <= 1.15 else "fail"),
        Claim("fig7a-vs-1tree", "congestion: Canary up to 2× one static tree", "2×",
              "Canary/1 tree (mean goodput) within 1.6–2.4", f"{vs1:.2f}×", _within(vs1, 1.6, 2.4)),
        Claim("fig7a-vs-ntrees", "congestion: Canary up to 40% over multiple static trees", "+40%",
              "largest Canary gain over 2/4/8 trees within +20%..+60%",
              ", ".join(f"{s} {_pct(v - 1)}" for s, v in vsn.items()), _within(max(vsn.values()), 1.2, 1.6)),
        Claim("fig7a-canary-unaffected", "Canary shows no degradation under congestion", "no degradation",
              "Canary congestion/no-congestion ≥ 0.90", f"{degr:.3f}", "pass" if degr >= 0.9 else "fail"),
        Claim("fig7a-4trees-enough", "more than 4 trees gives only a marginal improvement", "marginal",
              "8 trees / 4 trees under congestion ≤ 1.10", f"{more:.3f}", "pass" if more <= 1.10 else "fail"),
    ]
    claims += _util_claims("fig7b", t, {"congestion": True}, {"canary": 40.2, "static-4": 29.5, "static-1": 20.9})
    return claims


BINS = 20


def links_csv(rs: list[RunResult], keys: Sequence[str]) -> str:
    """Histogram (5% bins) of network-link utilisation, pooled over allocations."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for r in rs:
        if r.link_utils:
            groups.setdefault(tuple(r.params[k] for k in keys), []).extend(r.link_utils)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*keys, "bin_lo", "bin_hi", "links", "fraction", "mean_utilization"])
    for key in sorted(groups, key=str):
        us = groups[key]
        counts = [0] * BINS
        for u in us:
            counts[min(BINS - 1, int(u * BINS))] += 1
        for i, n in enumerate(counts):
            w.writerow([*key, f"{i / BINS:.2f}", f"{(i + 1) / BINS:.2f}", n, f"{n / len(us):.6f}", f"{statistics.fmean(us):.6f}"])
    return buf.getvalue()


def _cdf_panel(ax: Any, rs: list[RunResult], series: Sequence[str], match: Callable[[RunResult], bool], title: str) -> None:
    for s in series:
        us = sorted(u for r in rs if r.params["series"] == s and match(r) for u in r.link_utils)
        if us:
            ax.plot([u * 100 for u in us], [(i + 1) / len(us) for i in range(len(us))], label=s)
    ax.set_xlabel("link utilisation (%)")
    ax.set_ylabel("CDF of network links")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def fig7_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    t = Table(rs, ("series", "congestion"))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    w = 0.4
    for j, c in enumerate((False, True)):
        axes[0].bar([i + j * w for i in range(len(FIG7_SERIES))], [t.mean(series=s, congestion=c) for s in FIG7_SERIES], w, label=_cond(c))
    axes[0].set_xticks([i + w / 2 for i in range(len(FIG7_SERIES))], FIG7_SERIES)
    axes[0].set_ylabel("goodput (Gb/s)")
    axes[0].set_title("7a: 50% hosts allreduce", fontsize=9)
    axes[0].legend(fontsize=7)
    _cdf_panel(axes[1], rs, UTIL_SERIES, lambda r: not r.params["congestion"], "7b: no congestion")
    _cdf_panel(axes[2], rs, UTIL_SERIES, lambda r: r.params["congestion"], "7b: congestion")
    fig.suptitle(f"Fig. 7 ({sc.name}: {sc.network()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# --- Fig. 8 -----------------------------------------------------------------------------------

FIG8_SERIES = ("ring", "static-1", "static-4", "canary")


def _fig8_fracs(sc: Scale) -> tuple[float, ...]:
    return {"tiny": (0.25, 0.75), "small": (0.05, 0.25, 0.5, 0.75)}.get(sc.name, (0.05, 0.25, 0.5, 0.75))


def fig8_points(sc: Scale) -> list[Point]:
    fr = _fig8_fracs(sc)
    pts = [_ina_point("fig8", sc, s, f, True, a) for f in fr for s in FIG8_SERIES for a in range(sc.allocations)]
    # Without congestion only at the smallest fraction (the §5.2.2 drops are relative to it).
    pts += [_ina_point("fig8", sc, s, fr[0], False, a) for s in FIG8_SERIES for a in range(sc.allocations)]
    return pts


def fig8_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "congestion", "fraction"))
    fr = _fig8_fracs(sc)
    f0, f1 = fr[0], fr[-1]
    claims = []
    for s, paper in (("canary", -0.20), ("static-1", -0.66), ("static-4", -0.47)):
        d = t.mean(series=s, congestion=True, fraction=f0) / t.mean(series=s, congestion=False, fraction=f0) - 1
        claims.append(Claim(f"fig8-low-{s}-drop",
                            f"at 5% allreduce hosts (95% congesting), {s} loses {-paper:.0%} vs no congestion",
                            _pct(paper), "within ±10 percentage points",
                            f"{_pct(d)} at {f0:g} ({_count(sc, f0)} hosts)", _within(d - paper, -0.10, 0.10)))
    r1 = t.mean(series="canary", congestion=True, fraction=f1) / t.mean(series="static-1", congestion=True, fraction=f1)
    r4 = t.mean(series="canary", congestion=True, fraction=f1) / t.mean(series="static-4", congestion=True, fraction=f1)
    claims.append(Claim("fig8-high-vs-1tree", "larger fractions: Canary still 2× one static tree", "2×",
                        "Canary/1 tree at the largest fraction within 1.6–2.4", f"{r1:.2f}× at {f1:g}", _within(r1, 1.6, 2.4)))
    claims.append(Claim("fig8-high-vs-4trees", "larger fractions: Canary +23% over four static trees", "+23%",
                        "Canary/4 trees at the largest fraction within +13%..+33%", f"{_pct(r4 - 1)} at {f1:g}",
                        _within(r4, 1.13, 1.33)))
    bad = [f"{s}@{f:g}" for f in fr for s in FIG8_SERIES[:-1]
           if t.mean(series=s, congestion=True, fraction=f) > t.mean(series="canary", congestion=True, fraction=f)]
    claims.append(Claim("fig8-canary-best", "Canary consistently improves over the other solutions", "Canary fastest",
                        "Canary mean goodput ≥ every other series at every fraction (congestion)",
                        "beaten by " + ", ".join(bad) if bad else "fastest everywhere", "fail" if bad else "pass"))
    le = [f"{f:g}" for f in fr if t.mean(series="static-1", congestion=True, fraction=f) <= t.mean(series="ring", congestion=True, fraction=f)]
    ring = ", ".join(f"{f:g}: ring {t.mean(series='ring', congestion=True, fraction=f):.1f} / 1 tree "
                     f"{t.mean(series='static-1', congestion=True, fraction=f):.1f}" for f in fr)
    claims.append(Claim("fig8-1tree-no-better-than-ring", "in some cases one static tree is no better than the ring",
                        "1 tree ≤ ring somewhere", "1 tree ≤ ring at some fraction (congestion)",
                        f"{ring} Gb/s", "pass" if le else "fail"))
    return claims


def fig8_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    t = Table(rs, ("series", "congestion", "fraction"))
    fr = _fig8_fracs(sc)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for s in FIG8_SERIES:
        ax.plot([f * 100 for f in fr], [t.mean(series=s, congestion=True, fraction=f) for f in fr], marker="o", label=s)
        ax.scatter([fr[0] * 100], [t.mean(series=s, congestion=False, fraction=fr[0])], marker="x", color="k")
    ax.set_xlabel("% of hosts running the allreduce (rest congest)")
    ax.set_ylabel("goodput (Gb/s)")
    ax.set_title(f"Fig. 8 ({sc.name}: {sc.network()}); x = no congestion", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# --- Fig. 9 -----------------------------------------------------------------------------------

FIG9_SERIES = ("ring", "static-4", "canary")


def _fig9_sizes(sc: Scale) -> tuple[int, ...]:
    return {"tiny": (1 << 10, 256 << 10), "small": (1 << 10, 16 << 10, 256 << 10, 1 << 20)}.get(
        sc.name, (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20))


def fig9_points(sc: Scale) -> list[Point]:
    return [_ina_point("fig9", sc, s, 0.2, c, a, nbytes=n)
            for n in _fig9_sizes(sc) for c in (False, True) for s in FIG9_SERIES for a in range(sc.allocations)]


def fig9_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "congestion", "bytes"))
    sz = _fig9_sizes(sc)
    lo, hi = sz[0], sz[-1]

    def rt(s: str, c: bool, n: int) -> float:
        return t.mean("runtime_ps", series=s, congestion=c, bytes=n) / 1e6

    small = {c: (rt("canary", c, lo), rt("static-4", c, lo)) for c in (False, True)}
    big = (rt("canary", True, hi), rt("static-4", True, hi), rt("ring", True, hi))
    ring = {c: rt("ring", c, 256 << 10) / rt("ring", c, 1 << 10) for c in (False, True)}
    return [
        Claim("fig9-small-canary-slower", "small allreduces: Canary has a higher runtime (switch timeout)",
              "Canary slower at small sizes", f"Canary runtime > 4 static trees at {lo} B, with and without congestion",
              "; ".join(f"{_cond(c)}: Canary {a:.1f} µs vs 4 trees {b:.1f} µs" for c, (a, b) in small.items()),
              "pass" if all(a > b for a, b in small.values()) else "fail"),
        Claim("fig9-large-canary-faster", "large allreduces: Canary's advantage grows (bandwidth-bound)",
              "Canary fastest at large sizes", f"Canary runtime < 4 trees and < ring at {hi >> 10} KiB under congestion",
              f"Canary {big[0]:.1f} µs, 4 trees {big[1]:.1f} µs, ring {big[2]:.1f} µs",
              "pass" if big[0] < big[1] and big[0] < big[2] else "fail"),
        Claim("fig9-ring-1k-256k", "1 KiB and 256 KiB ring allreduces have the same runtime", "same runtime",
              "ring runtime 256 KiB / 1 KiB ≤ 1.25, with and without congestion",
              ", ".join(f"{_cond(c)} {v:.2f}" for c, v in ring.items()),
              "pass" if all(v <= 1.25 for v in ring.values()) else "fail"),
    ]


def fig9_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    t = Table(rs, ("series", "congestion", "bytes"))
    sz = _fig9_sizes(sc)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, c in zip(axes, (False, True)):
        for s in FIG9_SERIES:
            ax.plot(sz, [t.mean("runtime_ps", series=s, congestion=c, bytes=n) / 1e6 for n in sz], marker="o", label=s)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("allreduce size (B)")
        ax.set_ylabel("runtime (µs)")
        ax.set_title(_cond(c), fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Fig. 9: 20% hosts allreduce ({sc.name}: {sc.network()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# --- Fig. 10 ----------------------------------------------------------------------------------

FIG10_SERIES = ("ring", "static-1", "static-4", "canary")


def _fig10_tenants(sc: Scale) -> tuple[tuple[int, ...], int]:
    """Tenant counts of 10a and the one of 10b (the paper's 20 at full scale)."""
    return {"tiny": ((1, 2, 4), 4), "small": ((1, 2, 4, 8), 8)}.get(sc.name, ((1, 2, 4, 8, 16, 20, 32), 20))


def fig10_points(sc: Scale) -> list[Point]:
    counts, util_at = _fig10_tenants(sc)
    pts = []
    for k in counts:
        for s in FIG10_SERIES:
            for a in range(sc.allocations):
                groups = partition(sc.hosts, k, a)
                toml = scenario_toml(f"fig10-{s}-{k}", a + 1, sc, [Tenant(g, s) for g in groups], sc.bytes,
                                     slots_per_tenant=32768 // k)
                pts.append(Point({"series": s, "congestion": False, "tenants": k, "hosts": len(groups[0]),
                                  "allocation": a, "bytes": sc.bytes}, toml, k, links=k == util_at and s in UTIL_SERIES))
    return pts


def fig10_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "tenants"))
    counts, util_at = _fig10_tenants(sc)
    k0, k1 = counts[0], counts[-1]
    c1 = t.mean(series="canary", tenants=k1)
    cdrop = t.mean(series="canary", tenants=k1) / t.mean(series="canary", tenants=k0) - 1
    sdrop = {s: t.mean(series=s, tenants=k1) / t.mean(series=s, tenants=k0) - 1 for s in ("static-1", "static-4")}
    claims = [
        Claim("fig10a-canary-many", "Canary allows up to 32 concurrent allreduces at ~80 Gb/s each", "80 Gb/s",
              "Canary mean goodput at the most tenants within 70–90 Gb/s", f"{c1:.1f} Gb/s at {k1} tenants",
              _within(c1, 70, 90)),
        Claim("fig10a-canary-flat", "Canary is almost unaffected by the number of tenants", "almost unaffected",
              f"Canary drop from {k0} to {k1} tenants ≤ 10%", _pct(cdrop), "pass" if cdrop >= -0.10 else "fail"),
        Claim("fig10a-static-drop", "static in-network allreduces drop by 40% with more tenants", "−40%",
              f"drop of 1 and 4 static trees from {k0} to {k1} tenants each within −30%..−50%",
              ", ".join(f"{s} {_pct(v)}" for s, v in sdrop.items()),
              "pass" if all(-0.5 <= v <= -0.3 for v in sdrop.values()) else "fail"),
    ]
    claims += _util_claims("fig10b", t, {"tenants": util_at}, {"canary": 67.2, "static-4": 62.9, "static-1": 21.8})
    return claims


def fig10_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    t = Table(rs, ("series", "tenants"))
    counts, util_at = _fig10_tenants(sc)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for s in FIG10_SERIES:
        axes[0].plot(counts, [t.mean(series=s, tenants=k) for k in counts], marker="o", label=s)
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("concurrent allreduces")
    axes[0].set_ylabel("average goodput (Gb/s)")
    axes[0].legend(fontsize=7)
    axes[0].set_title("10a", fontsize=9)
    _cdf_panel(axes[1], rs, UTIL_SERIES, lambda r: r.params["tenants"] == util_at, f"10b: {util_at} concurrent")
    fig.suptitle(f"Fig. 10 ({sc.name}: {sc.network()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


# --- Fig. 11 ----------------------------------------------------------------------------------


def _fig11_grid(sc: Scale) -> tuple[tuple[float, ...], tuple[int, ...]]:
    return {"tiny": ((0.001, 0.1), (1000, 3000)), "small": ((0.0001, 0.01, 0.1), (1000, 2000, 3000))}.get(
        sc.name, ((0.0001, 0.001, 0.01, 0.1), (1000, 2000, 3000)))


def fig11_points(sc: Scale) -> list[Point]:
    noises, timeouts = _fig11_grid(sc)
    pts = []
    for n in noises:
        for c in (False, True):
            for a in range(sc.allocations):
                for to in timeouts:
                    pts.append(_ina_point("fig11", sc, f"canary-t{to}", 0.5, c, a, noise=n, timeout_ns=to,
                                          extra={"noise": n, "timeout_ns": to}))
                pts.append(_ina_point("fig11", sc, "static-4", 0.5, c, a, noise=n, extra={"noise": n, "timeout_ns": 0}))
    return pts


def fig11_claims(sc: Scale, rs: list[RunResult]) -> list[Claim]:
    t = Table(rs, ("series", "congestion", "noise"))
    noises, timeouts = _fig11_grid(sc)
    spread = {(c, n): max(t.mean(series=f"canary-t{to}", congestion=c, noise=n) for to in timeouts)
              / min(t.mean(series=f"canary-t{to}", congestion=c, noise=n) for to in timeouts) - 1
              for c in (False, True) for n in noises}
    beats = [(n, to) for n in noises for to in timeouts
             if t.mean(series=f"canary-t{to}", congestion=True, noise=n) <= t.mean(series="static-4", congestion=True, noise=n)]
    short = f"canary-t{timeouts[0]}"
    g_lo, g_hi = t.mean(series=short, congestion=False, noise=noises[0]), t.mean(series=short, congestion=False, noise=noises[-1])
    st_lo = t.mean("stragglers", series=short, congestion=False, noise=noises[0])
    st_hi = t.mean("stragglers", series=short, congestion=False, noise=noises[-1])
    worst = max(spread, key=lambda k: spread[k])
    return [
        Claim("fig11-timeout-spread", f"across a {timeouts[-1] / timeouts[0]:g}× timeout range at most 30% difference",
              "≤ 30%", "Canary max/min goodput over timeouts ≤ 1.30 at every noise level, with and without congestion",
              f"largest {_pct(spread[worst])} ({_cond(worst[0])}, noise {worst[1]:g})",
              "pass" if spread[worst] <= 0.30 else "fail"),
        Claim("fig11-canary-beats-static", "with congestion Canary beats 4 static trees at every noise level and timeout",
              "Canary > 4 trees", "every Canary timeout > 4 trees at every noise level (congestion)",
              "beaten at " + ", ".join(f"noise {n:g} t={to} ns" for n, to in beats) if beats else "always faster",
              "fail" if beats else "pass"),
        Claim("fig11-short-timeout-noise", "a 1 µs timeout with 1 µs noise generates stragglers and lowers goodput",
              "goodput decreases", f"no congestion, timeout {timeouts[0]} ns: goodput at noise {noises[-1]:g} < at {noises[0]:g}",
              f"{g_lo:.1f} → {g_hi:.1f} Gb/s, stragglers {st_lo:.0f} → {st_hi:.0f}", "pass" if g_hi < g_lo else "fail"),
    ]


def fig11_plot(sc: Scale, rs: list[RunResult], out: Path) -> None:
    plt = _plt()
    t = Table(rs, ("series", "congestion", "noise"))
    noises, timeouts = _fig11_grid(sc)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, c in zip(axes, (False, True)):
        for s in [f"canary-t{to}" for to in timeouts] + ["static-4"]:
            ax.plot([n * 100 for n in noises], [t.mean(series=s, congestion=c, noise=n) for n in noises], marker="o", label=s)
        ax.set_xscale("log")
        ax.set_xlabel("noise probability (%), 1 µs delay")
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title(_cond(c), fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Fig. 11: 50% hosts ({sc.name}: {sc.network()})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


FIGURES: dict[str, Figure] = {
    "canary-fig2": Figure("canary-fig2", "fig2", "Fig. 2: ring vs static trees vs Canary on 1% and 75% of hosts",
                          fig2_points, fig2_claims, fig2_plot),
    "canary-fig6": Figure("canary-fig6", "fig6", "Fig. 6: one switch, two hosts, 32 elements per packet",
                          fig6_points, fig6_claims, fig6_plot),
    "canary-fig7": Figure("canary-fig7", "fig7", "Fig. 7: Canary vs 1/2/4/8 static trees, 512+512 hosts; link utilisation",
                          fig7_points, fig7_claims, fig7_plot, links=True),
    "canary-fig8": Figure("canary-fig8", "fig8", "Fig. 8: goodput vs fraction of hosts allreducing (rest congest)",
                          fig8_points, fig8_claims, fig8_plot),
    "canary-fig9": Figure("canary-fig9", "fig9", "Fig. 9: runtime vs size, 20% hosts allreduce, 80% congest",
                          fig9_points, fig9_claims, fig9_plot),
    "canary-fig10": Figure("canary-fig10", "fig10", "Fig. 10: concurrent allreduces (tenants); link utilisation",
                           fig10_points, fig10_claims, fig10_plot, links=True),
    "canary-fig11": Figure("canary-fig11", "fig11", "Fig. 11: noise and Canary timeouts vs 4 static trees",
                           fig11_points, fig11_claims, fig11_plot),
}


def names() -> list[str]:
    return list(FIGURES)


# ---------------------------------------------------------------------------------------------
# Output.

CSV_COLUMNS = ("series", "congestion", "fraction", "hosts", "tenants", "allocation", "bytes", "noise", "timeout_ns")


def results_csv(rs: Sequence[RunResult]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS, "goodput_gbps", "runtime_ps", "verified", "end", "sim_time_ps", "network_utilization",
                "peak_descriptor_bytes", "stragglers", "collisions"])
    for r in rs:
        w.writerow([*(r.params.get(k, "") for k in CSV_COLUMNS), f"{r.goodput_gbps:.4f}", r.runtime_ps,
                    str(r.verified).lower(), r.end, r.sim_time_ps, f"{r.net_util:.6f}", r.peak_descriptor_bytes, r.stragglers, r.collisions])
    return buf.getvalue()


def results_from_csv(text: str) -> list[RunResult]:
    """The runs of a ``STEM.csv`` written by `results_csv` (link utilisations are not in it)."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        params: dict[str, Any] = {"series": r["series"], "congestion": r["congestion"] == "True",
                                  "allocation": int(r["allocation"]), "bytes": int(r["bytes"]), "hosts": int(r["hosts"])}
        for k, conv in (("fraction", float), ("tenants", int), ("noise", float), ("timeout_ns", int)):
            if r[k] != "":
                params[k] = conv(r[k])
        out.append(RunResult(params, float(r["goodput_gbps"]), int(r["runtime_ps"]), r["verified"] == "true", r["end"],
                             int(r["sim_time_ps"]), float(r["network_utilization"]), int(r["peak_descriptor_bytes"]),
                             int(r["stragglers"]), int(r["collisions"])))
    return out


def judge(fig: Figure, sc: Scale, results: list[RunResult]) -> list[Claim]:
    """The figure's claims, judged on its verified runs only: an unverified run is reported (and
    makes `reproduce` exit 1) but never counts towards a claim. If what is left does not cover
    the claims, they are one `n/a` verdict saying so."""
    verified = [r for r in results if r.verified]
    if len(verified) == len(results):
        return fig.claims(sc, results)
    try:
        return fig.claims(sc, verified)
    except (KeyError, ValueError, ZeroDivisionError) as exc:
        return [Claim(f"{fig.stem}-claims", "every claim of the figure", "", "judged on verified runs only",
                      f"not evaluated: {len(results) - len(verified)} unverified runs left out and the others "
                      f"do not cover every claim (missing {exc})", "n/a")]


def reevaluate(name: str, out: str | Path, scale: str) -> list[Claim]:
    """Re-evaluate the claims of figure `name` from its ``STEM.csv`` in `out` (no simulation) and
    rewrite the claims files there."""
    fig, sc = FIGURES[name], get_scale(scale)
    out = Path(out)
    rs = results_from_csv((out / f"{fig.stem}.csv").read_text(encoding="utf-8"))
    cs = judge(fig, sc, rs)
    (out / f"{fig.stem}_claims.csv").write_text(claims_csv(cs), encoding="utf-8", newline="")
    (out / f"{fig.stem}_claims.md").write_text(claims_md(fig, sc, len(rs), cs), encoding="utf-8", newline="")
    return cs


def claims_csv(cs: Sequence[Claim]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "claim", "paper_value", "rule", "measured_value", "pass"])
    for c in cs:
        w.writerow([c.id, c.claim, c.paper, c.rule, c.measured, c.verdict])
    return buf.getvalue()


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def claims_md(fig: Figure, sc: Scale, n_runs: int, cs: Sequence[Claim]) -> str:
    lines = [
        f"# {fig.title}",
        "",
        f"Canary (seed 000) §5. Scale `{sc.name}`: {sc.network()}; {sc.allocations} random allocation(s); "
        f"{n_runs} runs; `reducelab reproduce {fig.name} --scale {sc.name}`. Pass rules fixed before the runs.",
        "",
        "| id | claim | paper | rule | measured | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in cs:
        lines.append(f"| {c.id} | {_md(c.claim)} | {_md(c.paper)} | {_md(c.rule)} | {_md(c.measured)} | {c.verdict.upper()} |")
    return "\n".join(lines) + "\n"


@dataclass
class CanaryReport:
    figure: Figure
    scale: Scale
    results: list[RunResult]
    claims: list[Claim]
    files: dict[str, str]
    wall_seconds: float

    @property
    def unverified(self) -> list[RunResult]:
        return [r for r in self.results if not r.verified]

    def counts(self) -> tuple[int, int, int]:
        p = sum(c.verdict == "pass" for c in self.claims)
        f = sum(c.verdict == "fail" for c in self.claims)
        return p, f, len(self.claims) - p - f

    def claims_table(self) -> str:
        head = ("id", "result", "paper", "measured")
        rows = [(c.id, c.verdict.upper(), c.paper, c.measured) for c in self.claims]
        w = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]
        fmt = lambda r: "  ".join([*(x.ljust(w[i]) for i, x in enumerate(r[:-1])), r[-1]])  # noqa: E731
        return "\n".join([fmt(head), fmt(["-" * x for x in w]), *map(fmt, rows)])


def reproduce(name: str, out: str | Path, scale: str = "small", jobs: int = 1, progress: bool = False) -> CanaryReport:
    if name not in FIGURES:
        raise CanaryReproError(f"unknown Canary figure {name!r}; known: {', '.join(names())}")
    sc = get_scale(scale)
    if jobs < 1:
        raise CanaryReproError(f"jobs must be >= 1, got {jobs}")
    fig = FIGURES[name]
    t0 = time.monotonic()
    points = fig.points(sc)
    results = run_points(points, jobs, progress)
    claims = judge(fig, sc, results)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        f"{fig.stem}.csv": results_csv(results),
        f"{fig.stem}_claims.csv": claims_csv(claims),
        f"{fig.stem}_claims.md": claims_md(fig, sc, len(results), claims),
    }
    if fig.links:
        keys = ("series", "congestion") if fig.stem == "fig7" else ("series", "tenants")
        files[f"{fig.stem}_links.csv"] = links_csv(results, keys)
    for n, text in files.items():
        (out / n).write_text(text, encoding="utf-8", newline="")
    fig.plot(sc, results, out / f"{fig.stem}.png")
    files[f"{fig.stem}.png"] = ""
    return CanaryReport(fig, sc, results, claims, files, time.monotonic() - t0)


def index_section(reports: Sequence[CanaryReport], out: str | Path) -> str:
    """The Canary figures' part of `reproduce all`'s ``index.html`` (figures in ``out/NAME/``):
    a summary table, then per figure the plot, the command and the claims."""
    from html import escape as h

    parts = [
        '<section id="canary"><h2>Canary (§5): in-network allreduce on a fat tree</h2>',
        "<p>Packet-level scenario runs (python/reducelab/canary_repro.py); "
        "<code>--backend</code> does not apply to them.</p>",
        "<table><tr><th>figure</th><th>title</th><th>pass</th><th>fail</th><th>n/a</th></tr>",
    ]
    for r in reports:
        p, f, n = r.counts()
        parts.append(f'<tr><td><a href="#{h(r.figure.name)}">{h(r.figure.name)}</a></td><td>{h(r.figure.title)}</td>'
                     f'<td class="pass">{p}</td><td class="fail">{f}</td><td class="na">{n}</td></tr>')
    parts.append("</table>")
    for r in reports:
        d, stem = r.figure.name, r.figure.stem
        p, f, n = r.counts()
        parts += [
            f'<section id="{h(d)}"><h3>{h(r.figure.title)} <small>({h(d)})</small></h3>',
            f"<p>Scale <code>{h(r.scale.name)}</code>: {h(r.scale.network())}; {len(r.results)} runs. "
            f"{p} pass, {f} fail, {n} n/a. Regenerate: "
            f"<code>reducelab reproduce {h(d)} --scale {h(r.scale.name)} --out {h(str(Path(out) / d))}</code></p>",
            f'<p><img src="{h(d)}/{h(stem)}.png" alt="{h(d)} reproduction"></p>',
            "<table><tr><th>id</th><th>claim</th><th>paper</th><th>rule</th><th>measured</th><th>result</th></tr>",
        ]
        cls = {"pass": "pass", "fail": "fail"}
        for c in r.claims:
            parts.append(f'<tr id="{h(d)}-{h(c.id)}"><td>{h(c.id)}</td><td>{h(c.claim)}</td><td>{h(c.paper)}</td>'
                         f'<td>{h(c.rule)}</td><td>{h(c.measured)}</td>'
                         f'<td class="{cls.get(c.verdict, "na")}">{h(c.verdict)}</td></tr>')
        parts += [
            "</table>",
            "<p>Files: " + ", ".join(f'<a href="{h(d)}/{h(x)}">{h(x)}</a>' for x in sorted(r.files)) + "</p>",
            "</section>",
        ]
    parts.append("</section>")
    return "\n".join(parts) + "\n"
