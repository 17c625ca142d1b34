"""Collective algorithms and their schedules, from Python.

The algorithm registry (``crates/sched/src/registry.rs``) is the one list of algorithm names:
:func:`algorithms` returns it, and every other front end (scenario files, ``reducelab model``,
the MPI runtime's ``REDUCELAB_ALLREDUCE``) accepts exactly these names. :func:`export` writes the
schedule of any of them for a topology in a format other tools read::

    import reducelab

    [a.name for a in reducelab.algorithms()]          # every name, variants first
    text = reducelab.schedule.export("swing-bandwidth", "torus:4x4", format="goal", size_bytes=1 << 20)
    reducelab.schedule.check(reducelab.schedule.export("ring", "torus:6"))   # JSON IR -> checker

Formats: ``json`` (the schedule IR, docs/schedules.md), ``msccl`` (MSCCL's XML algorithm format)
and ``goal`` (LogGOPSim's GOAL text format).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import _core

FORMATS = ("json", "msccl", "goal")


@dataclass(frozen=True)
class AlgorithmInfo:
    """One entry of the algorithm registry."""

    name: str
    family: str
    kind: str
    """``variant`` (builds a schedule), ``family`` (latency or bandwidth variant by size),
    ``alias`` (another name of a variant) or ``policy`` (a fixed size rule, ``auto``)."""
    summary: str
    size_class: str | None
    """Variants: ``latency`` or ``bandwidth``."""
    resolves_to: tuple[str, ...]
    """The variants the name may run (a variant: itself)."""
    direct_plan: bool
    model_row: bool
    """Whether the Swing paper's Table 2 has a row for it (``reducelab model`` shows it)."""
    max_ranks: int | None
    min_dims: int | None
    """Variants: fewest torus dimensions (of size >= 2) it builds on."""
    substitute: str | None
    collectives: tuple[str, ...]
    """The collectives the name runs (a family, alias or policy: those of its variants)."""


def algorithms() -> list[AlgorithmInfo]:
    """Every name of the algorithm registry, in registry order (variants first)."""
    return [
        AlgorithmInfo(**{**d, "resolves_to": tuple(d["resolves_to"]), "collectives": tuple(d["collectives"])})  # type: ignore[arg-type]
        for d in _core.algorithm_registry()
    ]


def algorithm_names() -> list[str]:
    """The registry's names (what ``reducelab model --list`` prints first)."""
    return [a.name for a in algorithms()]


def export(
    algorithm: str,
    topology: str,
    format: str = "json",
    size_bytes: int = 1 << 20,
    collective: str = "allreduce",
    calc_ns_per_byte: float = 0.0,
    out: str | Path | None = None,
    root: int = 0,
) -> str:
    """The schedule of `algorithm` (any registry name; families and ``auto`` are resolved for
    `size_bytes`) on the rank layout of `topology` (``torus:4x4``, ``hyperx:8x8``,
    ``hammingmesh:2x2,2x2``) in `format` (``json``, ``msccl`` or ``goal``). GOAL message sizes
    are for a vector of `size_bytes` of 4-byte elements per rank (an ``alltoall``: a rank's send
    buffer), reductions cost `calc_ns_per_byte`. `collective` is one of ``allreduce``,
    ``reduce_scatter``, ``allgather``, ``broadcast``, ``reduce`` (from rank `root`) and
    ``alltoall``.
    Written to `out` too if given. Raises `ValueError` naming the problem (an unknown name lists
    the known ones)."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r} (known: {', '.join(FORMATS)})")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1:
        raise ValueError(f"size_bytes must be a positive integer, got {size_bytes!r}")
    text = _core.schedule_export(algorithm, topology, format, size_bytes, collective, float(calc_ns_per_byte), root)
    if out is not None:
        Path(out).write_text(text)
    return text


@dataclass(frozen=True)
class CheckedSchedule:
    algorithm: str
    ranks: int
    blocks: int
    steps: int


def check(json_text: str) -> CheckedSchedule:
    """Parses a schedule in the JSON IR and proves it with the symbolic checker (every rank ends
    with every contribution exactly once). Raises `ValueError` with the reason otherwise."""
    algorithm, ranks, blocks, steps = _core.schedule_check(json_text)
    return CheckedSchedule(algorithm, ranks, blocks, steps)
