"""The Canary paper (seed 000, §5): the ``canary`` figure kind of `reducelab.figures`, and the
§3.2.2 memory model (`reducelab model canary-memory`).

A Canary figure (``scenarios/canary/figN.toml``) is a set of scenario runs on the §5.2 network
(the base scenario ``scenarios/canary/network.toml``: a two-level fat tree, 100 Gb/s, Canary's
up-port rule): some hosts run an in-network allreduce (`ina_allreduce`: Canary or static trees)
or the host-based ring, the others (with ``congestion``) background traffic (the figure's ``background``).
This module turns a figure's parameters into scenarios (`CanaryKind.points`) and a run's stored
summary into one row of ``STEM.csv`` (`CanaryKind.row`). Point parameters:

- ``series``: ``ring`` | ``canary`` | ``canary-tN`` (any name starting ``canary``) |
  ``static_trees:N`` (N static trees);
- ``fraction`` (allreduce hosts = round(fraction x hosts), at least 2, the rest congest; drawn
  by random allocation ``allocation``: hosts shuffled with ``random.Random(1000 + allocation)``)
  or ``tenants`` (k disjoint allreduces partitioning all hosts, shuffled with
  ``random.Random(2000 + allocation)``, ``slots_per_tenant = table_size / k``) or neither (every
  host of the topology runs it: Fig. 6's two hosts);
- ``congestion`` (default false), ``allocation`` (scenario seed = allocation + 1), ``bytes``,
  ``noise`` (probability, ``noise_delay_ns`` each), ``timeout_ns`` (> 0: Canary's switch
  timeout), ``elements`` (elements per packet), ``bg_bytes`` (background message size).

Figure parameters besides those: ``background`` (`BACKGROUNDS`: the congesting hosts' traffic
kind, default ``random_uniform``), ``bg_inflight`` (messages each background host keeps in
flight: a positive integer, or ``"line_rate"``, the default: the window that holds a host's link
busy, `line_rate_inflight`; the resolved number is each congested row's ``bg_inflight`` column),
``window`` (the static trees' per-host window in
blocks; absent = the simulator's default, 1024), ``noise_mode`` and ``noise_hosts`` (written to
the scenario's ``[noise] mode`` / ``hosts`` when set: ``packet`` delays only the chosen packet,
``foreground`` spares the background hosts; absent = the simulator's default, today's NIC-port
stall on every host).

Utilisation, two ways: ``net_util`` is the mean over network links
(switch-switch, the simulator's ``links.network_mean_utilization``), ``all_util`` over every
directed link, host links included (``links.all_mean_utilization`` when the simulator reports
it, else the mean of every row of ``links.csv``, which lists every directed link). Both are
scaled to the allreduce span (`CanaryKind.row`). A figure's ``[links] kind`` picks which links
its per-link distribution (``STEM_links.csv``, cdf panels) holds.
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .figures import TableKind
from .scenario import Scenario

if TYPE_CHECKING:
    from .figures import Figure, ScaleSpec
    from .store import StoredRun

TOFINO_LINE_RATE_GBPS = 100 * 128 / (128 + 57)  # §5.1: 128 B payload + 57 B headers at 100 Gb/s


LINE_RATE = "line_rate"
"""``bg_inflight = "line_rate"``: §5.2 "We calibrated the simulator so that hosts can inject packets
into the network at line rate" — each background host keeps `line_rate_inflight` messages going."""

MAX_INFLIGHT = 1024
"""The simulator's largest ``inflight`` of a background generator (scenario.rs)."""


class CanaryError(ValueError):
    """An option of the memory model was rejected (the message says why)."""


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
            raise CanaryError(f"{name} must be a finite number >= 0, got {v}")
    if bandwidth_gbps <= 0:
        raise CanaryError(f"bandwidth_gbps must be > 0, got {bandwidth_gbps}")
    if diameter < 1:
        raise CanaryError(f"diameter must be >= 1, got {diameter}")
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
# Host allocations.


def allocation(n_hosts: int, k: int, alloc: int) -> tuple[list[int], list[int]]:
    """Random allocation number `alloc` (seeded): `k` allreduce hosts and the rest (sorted)."""
    hosts = list(range(n_hosts))
    random.Random(1000 + alloc).shuffle(hosts)
    return sorted(hosts[:k]), sorted(hosts[k:])


def partition(n_hosts: int, parts: int, alloc: int) -> list[list[int]]:
    """`parts` disjoint groups of n_hosts // parts hosts (random allocation `alloc`, seeded)."""
    hosts = list(range(n_hosts))
    random.Random(2000 + alloc).shuffle(hosts)
    per = n_hosts // parts
    return [sorted(hosts[i * per:(i + 1) * per]) for i in range(parts)]


def host_count(n_hosts: int, fraction: float) -> int:
    """Allreduce hosts for a fraction of the hosts: at least 2, at most all but one."""
    return max(2, min(n_hosts - 1, int(round(fraction * n_hosts))))


def topology_hosts(topology: Mapping[str, Any]) -> int:
    kind = topology.get("kind")
    if kind == "fat_tree_2":
        return int(topology["leaves"]) * int(topology["hosts_per_leaf"])
    if kind == "star":
        return int(topology["hosts"])
    raise ValueError(f"topology.kind: the canary figure kind supports fat_tree_2 and star, got {kind!r}")


def describe_network(topology: Mapping[str, Any]) -> str:
    if topology.get("kind") == "fat_tree_2":
        t = topology
        return (f"fat_tree_2 {t['leaves']} leaves x {t['hosts_per_leaf']} hosts, {t['spines']} spines "
                f"({topology_hosts(t)} hosts), {t.get('bandwidth_gbps', 100):g} Gb/s")
    return f"{topology.get('kind')} {topology_hosts(topology)} hosts, {topology.get('bandwidth_gbps', 100):g} Gb/s"


def _traffic(series: str, hosts: Sequence[int], nbytes: int, elements: int | None,
             window: int | None = None) -> dict[str, Any]:
    h = list(hosts)
    if series == "ring":
        return {"kind": "collective", "algorithm": "ring", "hosts": h, "bytes": nbytes}
    t: dict[str, Any] = {"kind": "ina_allreduce", "hosts": h, "bytes": nbytes}
    if series.startswith("canary"):
        t["protocol"] = "canary"
    elif series.startswith("static_trees:") and series[13:].isdigit():
        t["protocol"] = "static_trees"
        t["trees"] = int(series[13:])
        if window is not None:
            t["window"] = window
    else:
        raise ValueError(f"series {series!r}: expected ring, canary[-...] or static_trees:N")
    if elements is not None:
        t["elements_per_packet"] = elements
    return t


def background_path(topology: Mapping[str, Any]) -> tuple[int, int, int]:
    """(host links, network links, switches) of the longest path between two hosts: fat_tree_2
    host-leaf-spine-leaf-host (2, 2, 3); star host-switch-host (2, 0, 1)."""
    kind = topology.get("kind")
    if kind == "fat_tree_2":
        return 2, 2, 3
    if kind == "star":
        return 2, 0, 1
    raise ValueError(f"topology.kind: the canary figure kind supports fat_tree_2 and star, got {kind!r}")


def line_rate_delay_ns(doc: Mapping[str, Any]) -> float:
    """How long after a host's NIC sends the last packet of a message that message may be
    delivered on the longest background path of scenario `doc`, every switch of it with a full
    buffer ahead of the packet: links (host links at ``topology.host_latency_ns``, default
    ``latency_ns``) + per switch ``network.switch_latency_ns`` + one ``network.mtu_bytes``
    serialisation (store-and-forward) + ``network.buffer_bytes`` serialisation (the queue a
    lossless credit-controlled port holds at most), at the link bandwidth."""
    topo, net = doc["topology"], doc.get("network", {})
    host_links, net_links, switches = background_path(topo)
    gbps = float(topo["bandwidth_gbps"])
    host_gbps = float(topo.get("host_bandwidth_gbps", gbps))
    lat = float(topo["latency_ns"])
    host_lat = float(topo.get("host_latency_ns", lat))
    mtu = net.get("mtu_bytes", 4096)
    buf = net.get("buffer_bytes", 65536)
    for name, v in (("network.mtu_bytes", mtu), ("network.buffer_bytes", buf)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"params.bg_inflight = {LINE_RATE!r} needs a number of bytes in {name}, got {v!r}")
    per_switch = float(net.get("switch_latency_ns", 100)) + (mtu + buf) * 8 / min(gbps, host_gbps)
    return host_links * host_lat + net_links * lat + switches * per_switch


def line_rate_inflight(doc: Mapping[str, Any], bg_bytes: int) -> int:
    """Messages of `bg_bytes` a background host keeps in flight so that its link stays busy
    (``bg_inflight = "line_rate"``): the bandwidth-delay product of the longest background path
    (`line_rate_delay_ns`, host-link bandwidth) in messages, rounded up, plus the one being
    sent; at most `MAX_INFLIGHT`. The §5.2 network (100 Gb/s, 500 ns links, 300 ns switches,
    4 KiB MTU, 64 KiB buffers) with 64 KiB messages: 19 612 ns, 245 146 B, 4 + 1 = 5."""
    if isinstance(bg_bytes, bool) or not isinstance(bg_bytes, int) or bg_bytes <= 0:
        raise ValueError(f"params.bg_bytes: expected a positive integer (bytes), got {bg_bytes!r}")
    topo = doc["topology"]
    gbps = float(topo.get("host_bandwidth_gbps", topo["bandwidth_gbps"]))
    bdp_bytes = gbps / 8 * line_rate_delay_ns(doc)
    return min(MAX_INFLIGHT, math.ceil(bdp_bytes / bg_bytes) + 1)


def resolve_bg_inflight(value: Any, doc: Mapping[str, Any], bg_bytes: int) -> int:
    """``params.bg_inflight`` as a number of messages: a positive integer as given, or
    ``"line_rate"`` resolved by `line_rate_inflight`; anything else is a ValueError naming it."""
    if value == LINE_RATE:
        return line_rate_inflight(doc, bg_bytes)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INFLIGHT:
        raise ValueError(f"params.bg_inflight: expected {LINE_RATE!r} or an integer 1..{MAX_INFLIGHT} "
                         f"(messages per host), got {value!r}")
    return value


BACKGROUNDS = ("random_uniform", "random_permutation")
"""Background traffic kinds of the congesting hosts: independent uniform destinations (the
simulator's ``random_uniform``) or a permutation (``random_permutation``: each host sends to one
host and receives from one other, redrawn per message; the traffic branch's kind)."""

LINK_KINDS = ("network", "all")
"""Which links a figure's per-link distribution holds: switch-switch links, or every link."""

CSV_COLUMNS = ("series", "congestion", "fraction", "hosts", "tenants", "allocation", "bytes", "noise", "timeout_ns",
               "bg_bytes", "bg_inflight")
"""Parameter columns of ``STEM.csv``; ``bg_bytes`` / ``bg_inflight`` (the resolved number of
messages) only on rows with background traffic."""
METRIC_COLUMNS = ("goodput_gbps", "runtime_ps", "verified", "end", "sim_time_ps", "net_util", "all_util",
                  "peak_descriptor_bytes", "stragglers", "collisions")
BINS = 20


class CanaryKind(TableKind):
    """Scenario runs of the Canary paper (see the module docstring)."""

    name = "canary"
    columns = (*CSV_COLUMNS, *METRIC_COLUMNS, "runtime_us")
    params = ("allocations", "bytes", "bg_bytes", "table_size", "noise_delay_ns", "elements", "util_tenants",
              "background", "bg_inflight", "window", "noise_mode", "noise_hosts")
    """Figure parameters ([params], [scales.NAME.params]) this kind reads, besides the grid's."""
    keep_files = ("links.csv",)
    """Result files stored per point (besides summary.json): what `row` reads."""

    def network(self, base: Scenario) -> str:
        return describe_network(base.to_dict()["topology"])

    def points(self, fig: Figure, scale: ScaleSpec, base: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
        doc = base.to_dict()
        n_hosts = topology_hosts(doc["topology"])
        background_kind = scale.params.get("background", "random_uniform")
        if background_kind not in BACKGROUNDS:
            raise ValueError(f"params.background: expected one of {', '.join(BACKGROUNDS)}, got {background_kind!r}")
        bg_bytes = scale.params.get("bg_bytes", 65536)
        bg_inflight = resolve_bg_inflight(scale.params.get("bg_inflight", LINE_RATE), doc, bg_bytes)
        window = scale.params.get("window")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"params.window: expected a positive integer (blocks), got {window!r}")
        out = []
        for p in scale.grid_points():
            series = p["series"]
            alloc = int(p.get("allocation", 0))
            nbytes = int(p.get("bytes", scale.params["bytes"]))
            elements = p.get("elements", scale.params.get("elements"))
            params: dict[str, Any] = {"series": series, "congestion": bool(p.get("congestion", False))}
            d = {k: v for k, v in doc.items() if k != "traffic"}
            d["name"] = f"{fig.stem}-{series}"
            d["seed"] = alloc + 1
            background: list[int] = []
            if "tenants" in p:
                k = int(p["tenants"])
                groups = partition(n_hosts, k, alloc)
                tenants = groups
                params.update(tenants=k, hosts=len(groups[0]))
                d["name"] = f"{fig.stem}-{series}-{k}"
                d["ina"] = {**d.get("ina", {}), "table_size": int(scale.params["table_size"]),
                            "slots_per_tenant": int(scale.params["table_size"]) // k}
            elif "fraction" in p:
                k = host_count(n_hosts, float(p["fraction"]))
                fg, bg = allocation(n_hosts, k, alloc)
                tenants = [fg]
                background = bg if params["congestion"] else []
                params.update(fraction=p["fraction"], hosts=k)
            else:
                tenants = [list(range(n_hosts))]
                params["hosts"] = n_hosts
            params.update(allocation=alloc, bytes=nbytes)
            for extra in ("noise", "timeout_ns"):
                if extra in p:
                    params[extra] = p[extra]
            noise = float(p.get("noise", 0.0))
            if noise > 0:
                d["noise"] = {"probability": noise, "delay_ns": int(scale.params.get("noise_delay_ns", 1000))}
                for param, key in (("noise_mode", "mode"), ("noise_hosts", "hosts")):
                    if param in scale.params:
                        d["noise"][key] = scale.params[param]
            timeout = p.get("timeout_ns", 0)
            if timeout:
                d["ina"] = {**d.get("ina", {}), "timeout_ns": timeout}
            d["traffic"] = [_traffic(series, t, nbytes, elements, window) for t in tenants]
            if background:
                d["traffic"].append({"kind": background_kind, "hosts": background,
                                     "bytes": bg_bytes, "inflight": bg_inflight})
                params.update(bg_bytes=bg_bytes, bg_inflight=bg_inflight)
            params["_tenants"] = len(tenants)
            out.append((params, Scenario.from_dict(d)))
        return out

    def row(self, params: Mapping[str, Any], stored: StoredRun, links: bool, link_kind: str = "network") -> dict[str, Any]:
        """One run's row: its parameters, goodput (mean over tenants), runtime (longest tenant),
        verified, end, network-link and all-link utilisation over the allreduce span, switch
        counters; with `links`, the utilisation of every link of `link_kind` (`LINK_KINDS`:
        ``link_utils``)."""
        import json

        s = json.loads(stored.summary_json)
        entries = [t for t in s["traffic"] if t["kind"] in ("ina_allreduce", "collective")]
        if len(entries) != params["_tenants"]:
            raise AssertionError(f"expected {params['_tenants']} allreduce entries, got {len(entries)}")
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
        net_utils, all_utils = link_utilisations(s, stored.files.get("links.csv"))
        summary_links = s["links"]
        all_mean = summary_links.get("all_mean_utilization")
        if all_mean is None and all_utils:
            all_mean = statistics.fmean(all_utils)
        utils = [u * scale for u in (all_utils if link_kind == "all" else net_utils)] if links else []
        row = {k: v for k, v in params.items() if not k.startswith("_")}
        row.update(
            goodput_gbps=statistics.fmean(goodputs), runtime_ps=max(runtimes), verified=ok, end=s["status"],
            sim_time_ps=sim_ps, net_util=float(summary_links["network_mean_utilization"]) * scale,
            all_util=None if all_mean is None else float(all_mean) * scale,
            peak_descriptor_bytes=int(ina.get("peak_descriptor_bytes", 0)), stragglers=int(ina.get("stragglers", 0)),
            collisions=int(ina.get("collisions", 0)), link_utils=utils,
        )
        row["runtime_us"] = row["runtime_ps"] / 1e6
        return row

    def files(self, fig: Figure, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        out = {f"{fig.stem}.csv": results_csv(rows)}
        if fig.links is not None:
            out[f"{fig.stem}_links.csv"] = links_csv(rows, fig.links.keys)
        return out


def link_utilisations(summary: Mapping[str, Any], links_csv_text: str | None) -> tuple[list[float], list[float]]:
    """(network-link, every-link) utilisations of one run, from its ``links.csv`` (none without
    it). A link is a network link if links.csv says so (``kind`` column: ``network`` | ``host``)
    or, in a links.csv without that column, if neither end is a host (hosts have one port). The
    means are checked against the summary's (``links.network_mean_utilization``, and
    ``links.all_mean_utilization`` when present): a disagreement is a bug, not a result."""
    if links_csv_text is None:
        return [], []
    rows = list(csv.DictReader(io.StringIO(links_csv_text)))
    if rows and "kind" in rows[0]:
        bad = {r["kind"] for r in rows} - {"host", "network"}
        if bad:
            raise AssertionError(f"links.csv: unknown link kind {sorted(bad)[0]!r} (expected host or network)")
        net = [float(r["utilization"]) for r in rows if r["kind"] == "network"]
    else:
        ports: dict[int, set[int]] = {}
        for r in rows:
            ports.setdefault(int(r["from_node"]), set()).add(int(r["from_port"]))
        hosts = {n for n, ps in ports.items() if len(ps) == 1}
        if len(hosts) != summary["topology"]["hosts"]:
            raise AssertionError(f"found {len(hosts)} one-port nodes, topology has {summary['topology']['hosts']} hosts")
        net = [float(r["utilization"]) for r in rows if int(r["from_node"]) not in hosts and int(r["to_node"]) not in hosts]
    every = [float(r["utilization"]) for r in rows]
    lk = summary["links"]
    if net and abs(statistics.fmean(net) - lk["network_mean_utilization"]) > 1e-5:
        raise AssertionError("network-link filter disagrees with links.network_mean_utilization")
    if every and lk.get("all_mean_utilization") is not None and abs(statistics.fmean(every) - lk["all_mean_utilization"]) > 1e-5:
        raise AssertionError("links.csv disagrees with links.all_mean_utilization")
    return net, every


def results_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``STEM.csv``: one row per run (parameters a figure does not have are empty)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS, *RESULT_COLUMNS])
    for r in rows:
        w.writerow([*(r.get(k, "") for k in CSV_COLUMNS), f"{r['goodput_gbps']:.4f}", r["runtime_ps"],
                    str(r["verified"]).lower(), r["end"], r["sim_time_ps"], f"{r['net_util']:.6f}",
                    r["peak_descriptor_bytes"], r["stragglers"], r["collisions"],
                    "" if r.get("all_util") is None else f"{r['all_util']:.6f}"])
    return buf.getvalue()


RESULT_COLUMNS = ("goodput_gbps", "runtime_ps", "verified", "end", "sim_time_ps", "network_utilization",
                  "peak_descriptor_bytes", "stragglers", "collisions", "all_utilization")
"""The result columns of ``STEM.csv`` after the parameters (`CSV_COLUMNS`)."""

_OLD_SERIES = re.compile(r"^static-([0-9]+)$")


def rows_from_csv(text: str) -> list[dict[str, Any]]:
    """The rows of a figure's table read back from its ``STEM.csv`` (`results_csv`), for judging
    claims again without running (`reducelab reproduce FIG --claims-only`). Accepts the files of
    earlier versions: no ``all_utilization`` column (``all_util`` is then None: claims on it are
    n/a), series ``static-N`` (now ``static_trees:N``)."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {}
        for k in CSV_COLUMNS:
            v = r.get(k, "")
            if v == "":
                continue
            if k == "series":
                m = _OLD_SERIES.match(v)
                row[k] = f"static_trees:{m.group(1)}" if m else v
            elif k == "congestion":
                row[k] = v.lower() == "true"
            elif k in ("hosts", "tenants", "allocation", "bytes", "timeout_ns", "bg_bytes", "bg_inflight"):
                row[k] = int(v)
            else:
                row[k] = float(v)
        all_util = r.get("all_utilization", "")
        row.update(
            goodput_gbps=float(r["goodput_gbps"]), runtime_ps=int(r["runtime_ps"]), verified=r["verified"] == "true",
            end=r["end"], sim_time_ps=int(r["sim_time_ps"]), net_util=float(r["network_utilization"]),
            all_util=float(all_util) if all_util else None, peak_descriptor_bytes=int(r["peak_descriptor_bytes"]),
            stragglers=int(r["stragglers"]), collisions=int(r["collisions"]), link_utils=[],
        )
        row["runtime_us"] = row["runtime_ps"] / 1e6
        out.append(row)
    return out


def links_csv(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """Histogram (5% bins) of network-link utilisation, pooled over allocations."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        if r.get("link_utils"):
            groups.setdefault(tuple(r[k] for k in keys), []).extend(r["link_utils"])
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
