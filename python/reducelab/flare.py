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
    link_gbps: float = 100.0,
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
) -> Scenario:
    """A one-switch Flare scenario (docs/flare.md, "Scenario files")."""
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
                "link_gbps": link_gbps,
                "dtype": dtype,
                "design": design,
                "staggered": staggered,
                "jitter_ns": jitter_ns,
                "reproducible": reproducible,
                "data": data,
                "window_blocks": window_blocks,
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
        f"P = {params.get('hosts', 64)} children at {params.get('link_gbps', 100.0):g} Gb/s, "
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
