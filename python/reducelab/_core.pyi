"""Typed stubs for the compiled module `reducelab._core` (crates/py).

Use the wrappers in `reducelab` (`run`, `run_file`, `Result`) rather than this module directly.
"""

from typing import TypedDict

__version__: str

class ScenarioError(ValueError):
    """A scenario (or benchmark name) was rejected.

    `str(err)` is ``"FIELD: REASON"`` (just ``"REASON"`` when `field` is empty).
    """

    field: str
    """Dotted path of the offending field, e.g. ``"network.bogus"`` or ``"topology.dims[1]"``."""
    reason: str
    """Why the field is wrong."""

class EngineStats(TypedDict):
    """Engine counters of one run (never written to result files)."""

    wall_seconds: float
    events: int
    packets: int
    packet_hops: int
    sim_time_ps: int

class RunOutput(TypedDict):
    summary_json: str
    """Contents of ``summary.json``."""
    files: list[tuple[str, str]]
    """Other result files as ``(file name, contents)``, e.g. ``messages.csv``, ``links.csv``."""
    table: str
    """Short human-readable summary for a terminal."""
    stats: EngineStats

class BenchResult(EngineStats):
    name: str
    peak_rss_bytes: int

def run(text: str, seed: int | None = None, progress: bool = False) -> RunOutput:
    """Parse, validate and run a TOML scenario given as text (GIL released).

    `seed` (0 <= seed < 2**64) overrides the scenario's seed. With `progress`, a progress bar is
    drawn on stderr when it is a terminal and the run lasts more than 2 s.

    Raises `ScenarioError` if the scenario is invalid.
    """

def bench_names() -> list[str]:
    """Names of the built-in engine benchmark scenarios."""

def bench_engine(name: str) -> BenchResult:
    """Run one built-in engine benchmark (GIL released). Raises `ScenarioError` for an unknown name."""
