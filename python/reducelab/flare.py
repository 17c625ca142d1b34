"""Flare (seed 004) on a PsPIN switch: scenarios of one switch, its §4–6 model, its figures.

A Flare switch run is a scenario file with a ``[pspin]`` table (docs/flare.md): the same door
(`_core.run`) as every other run, so figures use the sweep store and the claims engine
unchanged. `pspin_scenario` builds one; `model_rows` reads the §4–6 model of each design from a
probe of that scenario (validated, modelled, not run); `FlareKind` turns a figure's grid into
scenarios and stored runs into rows (`reducelab.figures`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .figures import TableKind
from .scenario import Scenario

DESIGNS = ("single", "multi-2", "multi-4", "tree")
"""The dense designs of §6 as the model and figures show them; `flare` is the size policy."""

DTYPES = ("int32", "int16", "int8", "f32", "f16")


class FlareError(ValueError):
    """A Flare model or figure parameter was rejected (the message says which and why)."""


def pspin_scenario(
    *,
    name: str = "flare",
    seed: int = 1,
    design: str = "flare",
    bytes: int = 1 << 20,
    hosts: int = 64,
    bandwidth_gbps: float = 100.0,
    dtype: str = "int32",
    staggered: bool = True,
    subset_cores: int = 8,
    clusters: int = 64,
    hpus_per_cluster: int = 8,
    l2_full: str = "drop",
    jitter_ns: float = 0.0,
    reproducible: bool = False,
    data: bool = False,
    window_blocks: int = 0,
    density: float = 0.0,
    storage: str = "hash",
    simulate: bool = True,
) -> Scenario:
    """A one-switch Flare scenario (docs/flare.md, "Scenario files"); `density` > 0 makes it a
    sparse allreduce with `storage` ``hash`` or ``array`` (docs/flare-sparse.md)."""
    sparse = {"density": density, "storage": storage} if density else {}
    return Scenario.from_dict({
        "name": name,
        "seed": seed,
        "pspin": {
            "clusters": clusters,
            "hpus_per_cluster": hpus_per_cluster,
            "subset_cores": subset_cores,
            "l2_full": l2_full,
            "allreduce": {
                "hosts": hosts,
                "bytes": bytes,
                "bandwidth_gbps": bandwidth_gbps,
                "dtype": dtype,
                "design": design,
                "staggered": staggered,
                "jitter_ns": jitter_ns,
                "reproducible": reproducible,
                "data": data,
                "window_blocks": window_blocks,
                "simulate": simulate,
                **sparse,
            },
        },
    })


def probe(scenario: Scenario) -> dict[str, Any]:
    """The summary of a probe of a one-switch scenario: validated and modelled, not run.
    Raises `ScenarioError` (naming the field) for a bad parameter."""
    from . import _core

    out = _core.run(scenario.to_toml(), None, False, True)
    return json.loads(out["summary_json"])


def model_rows(designs: Sequence[str] = DESIGNS, **params: Any) -> list[dict[str, Any]]:
    """The §4–6 model of each design for the scenario `pspin_scenario(**params)`: one dict per
    design with ``design`` and the model's values (τ, ℬ, δ, δc, Q, 𝒬, ℒ, M, ℛ)."""
    rows = []
    for d in designs:
        s = probe(pspin_scenario(**{**params, "design": d}))
        rows.append({"design": d, "resolved": s["design"], **s["model"]})
    return rows


def sparse_model_rows(density: float, designs: Sequence[str] = DESIGNS, **params: Any) -> list[dict[str, Any]]:
    """The §4–6 model with the sparse handlers' L (seed 004 §7, Fig. 13) for hash and array
    storage at `density`: one dict per (storage, design) with ``storage``, ``design`` and the
    model's values."""
    if not 0 < density <= 1:
        raise FlareError(f"density: expected a fraction in (0, 1], got {density}")
    rows = []
    for storage in ("hash", "array"):
        for d in designs:
            s = probe(pspin_scenario(**{**params, "design": d, "density": density, "storage": storage}))
            rows.append({"storage": storage, "design": d, "resolved": s["design"], "span": s["sparse"]["span"],
                         "block_bytes": s["sparse"]["block_bytes"], **s["model"]})
    return rows


def format_sparse_model(rows: Sequence[Mapping[str, Any]], dense: Sequence[Mapping[str, Any]], density: float) -> str:
    """The sparse rows of `sparse_model_rows` beside the dense bandwidth of each design."""
    dense_bw = {r["design"]: r["bandwidth_gbps"] for r in dense}
    out = [
        "",
        f"Sparse allreduce (seed 004 §7, Fig. 13) at {density:.3g} density: 1 KiB packets of 128 (index, value) pairs, "
        f"span {rows[0]['span'] if rows else '?'} elements per block",
        f"  {'storage/design':<15} {'L (cyc)':>8} {'τ (cyc)':>9} {'ℬ (Tb/s)':>9} {'dense ℬ':>9} {'sparse/dense':>13} {'block mem':>10}",
    ]
    for r in rows:
        d = dense_bw.get(r["design"])
        ratio = f"{r['bandwidth_gbps'] / d:.2f}×" if d else "–"
        out.append(
            f"  {r['storage'] + '/' + r['design']:<15} {r['l_cycles']:>8.0f} {r['tau_cycles']:>9.0f} {r['bandwidth_gbps'] / 1000:>9.3f} "
            f"{(d or float('nan')) / 1000:>9.3f} {ratio:>13} {_bytes(r['block_bytes']):>10}"
        )
    out += [
        "",
        "  L: a packet's pair insertions (hash 11, array 7 cycles per pair) and shard counter, plus the block's",
        "  completion scan over its P packets (docs/flare-sparse.md, \"Sparse handler costs\"); ℬ in payload bytes.",
    ]
    return "\n".join(out)


def _bytes(n: float) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n:.0f} B"


def format_model(rows: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """The model as a table (one row per design), with its inputs above it."""
    if not rows:
        return ""
    r0 = rows[0]
    clusters, hpus = params.get("clusters", 64), params.get("hpus_per_cluster", 8)
    head = [
        "Flare switch model (seed 004 §4–6): "
        f"{clusters * hpus} cores ({clusters} clusters × {hpus}), S = {params.get('subset_cores', 8)}, "
        f"P = {params.get('hosts', 64)} children at {params.get('bandwidth_gbps', 100.0):g} Gb/s, "
        f"{_bytes(params.get('bytes', 1 << 20))} of {params.get('dtype', 'int32')} in 1 KiB packets, "
        f"{'staggered' if params.get('staggered', True) else 'not staggered'}",
        f"  L = {r0['l_cycles']:.0f} cycles per packet, δ = {r0['delta_cycles']:.2f} cycles, "
        f"δc = {r0['delta_c_cycles']:.1f} cycles",
        "",
        f"  {'design':<13} {'τ (cyc)':>9} {'ℬ (Tb/s)':>9} {'Q':>7} {'𝒬 (pkts)':>9} {'input buf':>10} "
        f"{'ℒ (µs)':>8} {'M':>6} {'ℛ':>10}",
    ]
    for r in rows:
        name = r["design"] if r["design"] == r["resolved"] else f"{r['design']}→{r['resolved']}"
        head.append(
            f"  {name:<13} {r['tau_cycles']:>9.0f} {r['bandwidth_gbps'] / 1000:>9.3f} {r['queue']:>7.2f} "
            f"{r['packets_in_switch']:>9.0f} {_bytes(r['input_buffer_bytes']):>10} "
            f"{r['block_latency_cycles'] / 1000:>8.2f} {r['buffers_per_block']:>6.2f} {_bytes(r['working_bytes']):>10}"
        )
    head += [
        "",
        "  τ service time per packet; ℬ = min(K/τ, 1/δ); Q longest queue at a core and 𝒬 = (Q + 1)K packets",
        "  in the switch (eq. 1); ℒ = (P − 1)δc + (Q + 1)τ block latency; M buffers per block;",
        "  ℛ = M·(ℬ/P)·ℒ working memory (docs/flare.md, \"Models\").",
    ]
    return "\n".join(head)


# ---------------------------------------------------------------------------------------------
# Figures: `kind = "flare"` (scenarios/flare/figN.toml; docs/flare.md, "Figures").

CSV_COLUMNS = ("series", "design", "storage", "density", "bytes", "allreduces", "dtype", "subset_cores", "staggered", "hosts",
               "seed", "window_blocks", "simulated_clusters", "scale_factor")
METRIC_COLUMNS = (
    "bandwidth_tbps", "model_bandwidth_tbps", "giga_elements_per_s", "model_giga_elements_per_s",
    "tau_cycles", "model_tau_cycles", "spin_share", "input_buffer_kib", "model_input_buffer_kib",
    "working_kib", "model_working_kib", "memory_kib", "model_memory_kib", "block_latency_us",
    "model_block_latency_us", "drops", "verified", "end",
    # Sparse runs (§7, Figs. 13-14): L of the model, a block's working memory, pairs sent beyond
    # the block's distinct indices (%), and whether the blocks in flight fit in L1 (1/0).
    "model_l_cycles", "block_memory_kib", "extra_traffic_pct", "spilled_pairs", "fits",
)

STORAGES = ("dense", "hash", "array")
"""How a block's partial aggregate is kept: dense buffers (§6), or sparse (§7) in a hash table
with a spill buffer, or in an array of the block's span."""

_GRID_KEYS = ("series", "bytes", "dtype", "subset_cores", "staggered", "seed", "density")

BLOCKS_PER_CORE = 1
"""Blocks each host keeps in flight per core of the switch, unless a figure or scenario sets
``window_blocks``: §6.1, "to avoid contention there should never be two cores working on two
packets of the same block. This can only happen if the data to be reduced is large enough to
have, at any time, one block per core" (W = 512 on the paper's 512 cores)."""

SCALED = ("bandwidth_tbps", "giga_elements_per_s", "input_buffer_kib", "working_kib")
"""Measurements of a simulated replica of some clusters that are multiplied by the scale factor
(§6.4: "we scale the results linearly with the number of deployed clusters"); per-packet and
per-block times (τ, the spin share, ℒ) are the replica's own."""


def window_blocks(sw: Mapping[str, Any], a: Mapping[str, Any], par: Mapping[str, Any]) -> int:
    """W, the blocks each host keeps in flight on the switch `sw` (its ``[pspin]`` table, `a` its
    allreduce): the figure's ``window_blocks`` parameter, else the scenario's, else
    ``blocks_per_core`` (default `BLOCKS_PER_CORE`) × the switch's cores (0: no limit)."""
    if "window_blocks" in par:
        return int(par["window_blocks"])
    if "window_blocks" in a:
        return int(a["window_blocks"])
    per_core = int(par.get("blocks_per_core", BLOCKS_PER_CORE))
    if per_core < 0:
        raise ValueError(f"blocks_per_core: expected 0 (no limit) or more, got {per_core}")
    return per_core * int(sw.get("clusters", 64)) * int(sw.get("hpus_per_cluster", 8))


def replica(doc: dict[str, Any], simulated_clusters: int) -> tuple[dict[str, Any], int]:
    """The scenario `doc` (a one-switch ``[pspin]`` scenario, its ``window_blocks`` set) as a
    shared-nothing replica of `simulated_clusters` of its clusters, and the scale factor f =
    clusters / simulated_clusters (§6.4: "The actual PsPIN implementation [13] only simulates 4
    clusters. Because the clusters are organized in a shared-nothing configuration, we scale the
    results linearly with the number of deployed clusters"). The replica is 1/f of the switch in
    everything the switch has in total: its clusters, its L2 packet memory, the blocks in flight
    and the rate of each port (the same P children, each sending 1/f of the rate, with the mean
    gap between packets f× longer), so the replica's offered load over its capacity is the
    switch's (ports at the switch's own rate, 16× the replica's share, were tried: the same
    verdicts). Its measured bandwidth and memory, × f, stand for the switch's."""
    sw = doc["pspin"]
    a = sw["allreduce"]
    clusters = int(sw.get("clusters", 64))
    if simulated_clusters <= 0 or simulated_clusters > clusters or clusters % simulated_clusters:
        raise ValueError(f"simulated_clusters: expected a divisor of the switch's {clusters} clusters, got {simulated_clusters}")
    f = clusters // simulated_clusters
    d = json.loads(json.dumps(doc))
    sw, a = d["pspin"], d["pspin"]["allreduce"]
    sw["clusters"] = simulated_clusters
    sw["l2_packet_bytes"] = int(sw.get("l2_packet_bytes", 4 << 20)) // f
    a["bandwidth_gbps"] = float(a.get("bandwidth_gbps", 100.0)) / f
    a["jitter_ns"] = float(a.get("jitter_ns", 0.0)) * f
    w = int(a.get("window_blocks", 0))
    if w % f:
        raise ValueError(f"window_blocks: {w} blocks in flight cannot be split over {f} replicas of {simulated_clusters} clusters")
    a["window_blocks"] = w // f
    return d, f


def _series(series: str, par: Mapping[str, Any]) -> tuple[str, str]:
    """(storage, design) of a figure series: ``DESIGN`` (dense), ``STORAGE`` (sparse, the
    design from the ``design`` parameter, default single) or ``STORAGE/DESIGN``."""
    head, _, tail = series.partition("/")
    if head in STORAGES:
        return head, tail or str(par.get("design", "single"))
    if tail:
        raise ValueError(f"grid.series: {series!r}: expected DESIGN, STORAGE or STORAGE/DESIGN (storages: {', '.join(STORAGES)})")
    return "dense", head


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


class FlareKind(TableKind):
    """One-switch runs of the Flare paper (seed 004 §6): each point is a ``[pspin]`` scenario
    (the figure's base scenario with the point's design, size, type, subset and staggering); a
    row holds the simulated switch's measurements and the §4–6 model's values side by side."""

    name = "flare"
    columns = (*CSV_COLUMNS, *METRIC_COLUMNS)
    params = ("bytes", "dtype", "subset_cores", "staggered", "hosts", "bandwidth_gbps", "jitter_ns", "window_blocks",
              "stream_bytes", "density", "design", "simulate", "hash_slots", "blocks_per_core", "simulated_clusters")
    """Figure parameters ([params], [scales.NAME.params]) this kind reads, besides the grid's."""
    keep_files: tuple[str, ...] = ()

    def network(self, base: Scenario) -> str:
        p = base.to_dict()["pspin"]
        a = p.get("allreduce", {})
        c, h = p.get("clusters", 64), p.get("hpus_per_cluster", 8)
        return (f"one PsPIN switch: {c} clusters x {h} HPUs ({c * h} cores), S = {p.get('subset_cores', 8)}, "
                f"{a.get('hosts', '?')} ports at {a.get('bandwidth_gbps', 100):g} Gb/s, L2 full: {p.get('l2_full', 'drop')}")

    def network_at(self, base: Scenario, params: Mapping[str, Any]) -> str:
        """`network` with the figure's parameters: the blocks in flight and, when a replica of
        some clusters is simulated, its size and the scale factor."""
        d = base.to_dict()
        p = d["pspin"]
        a = dict(p.get("allreduce", {}))
        for key in ("bandwidth_gbps", "hosts"):
            if key in params:
                a[key] = params[key]
        p = {**p, "allreduce": a}
        c, h = int(p.get("clusters", 64)), int(p.get("hpus_per_cluster", 8))
        w = window_blocks(p, a, params)
        text = (f"one PsPIN switch: {c} clusters x {h} HPUs ({c * h} cores), S = {params.get('subset_cores', p.get('subset_cores', 8))}, "
                f"{a.get('hosts', '?')} ports at {a.get('bandwidth_gbps', 100):g} Gb/s, L2 full: {p.get('l2_full', 'drop')}, "
                f"W = {w or 'every'} blocks in flight per host"
                + (f" ({params.get('blocks_per_core', BLOCKS_PER_CORE)} per core)" if "window_blocks" not in params
                   and "window_blocks" not in a else ""))
        sim = int(params.get("simulated_clusters", 0) or 0)
        if sim and sim != c and params.get("simulate", a.get("simulate", True)):
            f = c // sim if sim and c % sim == 0 else 0
            text += (f"; simulated: {sim} clusters ({sim * h} cores, 1/{f} of the ports' rate, L2 and blocks in flight), "
                     f"bandwidth and memory scaled x{f} (§6.4); model: the whole switch")
        return text

    def points(self, fig: Any, scale: Any, base: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
        doc = base.to_dict()
        if "pspin" not in doc:
            raise ValueError("the base scenario has no [pspin] table (a Flare figure runs one PsPIN switch)")
        out = []
        for p in scale.grid_points():
            unknown = set(p) - set(_GRID_KEYS)
            if unknown:
                raise ValueError(f"grid.{sorted(unknown)[0]}: not a grid key of kind flare ({', '.join(_GRID_KEYS)})")
            par = {**scale.params, **p}
            d = json.loads(json.dumps(doc))
            sw = d["pspin"]
            a = sw.setdefault("allreduce", {})
            series = str(p["series"])
            storage, design = _series(series, par)
            a["design"] = design
            for key in ("bytes", "dtype", "staggered", "hosts", "bandwidth_gbps", "jitter_ns", "window_blocks", "simulate"):
                if key in par:
                    a[key] = par[key]
            density = float(par.get("density", 0) or 0) if storage != "dense" else 0.0
            if storage != "dense":
                if density <= 0:
                    raise ValueError(f"series {series!r}: a sparse storage needs a density (grid or params)")
                a["density"] = density
                a["storage"] = storage
                if "hash_slots" in par and storage == "hash":
                    a["hash_slots"] = par["hash_slots"]
            # `stream_bytes`: back-to-back allreduces of `bytes` (as many as make stream_bytes,
            # `allreduces` in the scenario: one allreduce's blocks in flight per host), so that a
            # small size's bandwidth is the sustained rate of such allreduces, not one's fill and drain.
            z = int(a.get("bytes", 0))
            repeat = max(1, int(par.get("stream_bytes", 0)) // z) if z else 1
            if repeat > 1:
                a["allreduces"] = repeat
            if "subset_cores" in par:
                sw["subset_cores"] = par["subset_cores"]
            a["window_blocks"] = window_blocks(sw, a, par)
            seed = int(par.get("seed", 0))
            d["seed"] = seed + 1
            d["name"] = f"{fig.stem}-{series.replace('/', '-')}-{z}" + (f"-d{density:g}" if density else "")
            clusters = int(sw.get("clusters", 64))
            simulate = bool(a.get("simulate", True))
            sim = int(par.get("simulated_clusters", 0) or 0)
            row = {"series": series, "storage": storage, "density": density, "bytes": z, "allreduces": repeat, "dtype": a.get("dtype", "int32"),
                   "subset_cores": int(sw.get("subset_cores", 8)), "staggered": bool(a.get("staggered", True)),
                   "hosts": int(a.get("hosts", 0)), "seed": seed, "window_blocks": int(a["window_blocks"]),
                   "simulated_clusters": clusters if simulate else 0, "scale_factor": 1}
            if simulate and sim and sim != clusters:
                if storage != "dense":
                    raise ValueError(f"series {series!r}: simulated_clusters: only dense runs are scaled from a replica")
                # The model is the whole switch's (its probe: modelled, not run); the run is the replica.
                row["_model"] = probe(Scenario.from_dict(d))["model"]
                d, f = replica(d, sim)
                d["name"] += f"-c{sim}"
                row.update(simulated_clusters=sim, scale_factor=f)
            out.append((row, Scenario.from_dict(d)))
        return out

    def row(self, params: Mapping[str, Any], stored: Any, links: bool = False, link_kind: str = "network") -> dict[str, Any]:
        s = json.loads(stored.summary_json)
        m = params.get("_model") or s.get("model") or {}
        f = float(params.get("scale_factor", 1) or 1)
        ebytes = {"int32": 4, "int16": 2, "int8": 1, "f32": 4, "f16": 2}[s["dtype"]]
        busy, spin = _num(s["busy_cycles"]), _num(s["spin_cycles"])
        kib = 1 / 1024
        row = {k: v for k, v in params.items() if not k.startswith("_")}
        row.update(
            design=s["design"],
            bandwidth_tbps=_num(s["bandwidth_gbps"]) / 1000,
            model_bandwidth_tbps=_num(m.get("bandwidth_gbps")) / 1000,
            giga_elements_per_s=_num(s["elements_per_s"]) / 1e9,
            model_giga_elements_per_s=_num(m.get("bandwidth_gbps")) / 8 / ebytes,
            tau_cycles=_num(s["tau_cycles"]),
            model_tau_cycles=_num(m.get("tau_cycles")),
            spin_share=spin / (busy + spin) if busy + spin > 0 else 0.0,
            input_buffer_kib=_num(s["peak_l2_bytes"]) * kib,
            model_input_buffer_kib=_num(m.get("input_buffer_bytes")) * kib,
            working_kib=_num(s["peak_working_bytes"]) * kib,
            model_working_kib=_num(m.get("working_bytes")) * kib,
            block_latency_us=_num(s["block_latency_ns"]) / 1000,
            model_block_latency_us=_num(m.get("block_latency_ns")) / 1000,
            drops=int(s["drops"]),
            verified=s["status"] == "completed" and s.get("verified") is not False,
            end=s["status"],
        )
        for k in SCALED:
            row[k] *= f
        row["memory_kib"] = row["input_buffer_kib"] + row["working_kib"]
        row["model_memory_kib"] = row["model_input_buffer_kib"] + row["model_working_kib"]
        row["model_l_cycles"] = _num(m.get("l_cycles"))
        sp = s.get("sparse") or {}
        nan = float("nan")
        row["block_memory_kib"] = _num(sp.get("block_bytes")) * kib if sp else nan
        row["extra_traffic_pct"] = _num(sp.get("extra_traffic")) * 100 if "extra_traffic" in sp else nan
        row["spilled_pairs"] = _num(sp.get("spilled_pairs"))
        row["fits"] = (1.0 if sp.get("fits") else 0.0) if sp and s.get("simulated", True) else nan
        if not s.get("simulated", True):
            # A model-only point (simulate = false, Fig. 13): nothing was simulated.
            for k in ("bandwidth_tbps", "giga_elements_per_s", "tau_cycles", "spin_share", "input_buffer_kib",
                      "working_kib", "memory_kib", "block_latency_us"):
                row[k] = nan
        elif sp and not sp.get("fits"):
            # The blocks in flight did not fit in L1: the run is refused, not measured (its
            # reason is the summary's status_reason); the refusal itself is the result.
            for k in ("bandwidth_tbps", "giga_elements_per_s", "tau_cycles", "spin_share", "working_kib",
                      "memory_kib", "block_latency_us", "extra_traffic_pct"):
                row[k] = nan
            row["verified"] = True
            row["end"] = "does_not_fit"
        return row

    def files(self, fig: Any, rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        return {f"{fig.stem}.csv": results_csv(rows)}


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


def results_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``STEM.csv``: one row per run, parameters then measurements and model values."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CSV_COLUMNS, *METRIC_COLUMNS])
    for r in rows:
        w.writerow([_cell(r.get(k)) for k in (*CSV_COLUMNS, *METRIC_COLUMNS)])
    return buf.getvalue()


def rows_from_csv(text: str) -> list[dict[str, Any]]:
    """The rows of ``STEM.csv`` read back (`results_csv`), for judging claims without running."""
    import csv
    import io

    out = []
    for r in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {}
        for k, v in r.items():
            if k in ("series", "design", "dtype", "end", "storage"):
                row[k] = v
            elif k in ("staggered", "verified"):
                row[k] = v == "true"
            elif k in ("bytes", "allreduces", "subset_cores", "hosts", "seed", "drops", "window_blocks", "simulated_clusters"):
                row[k] = int(v) if v else 0
            else:
                row[k] = float(v) if v else float("nan")
        out.append(row)
    return out
