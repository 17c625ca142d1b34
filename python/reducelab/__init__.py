"""ReduceLab: a packet-level network simulator for allreduce research.

The simulator is written in Rust (crates/) and reached through the compiled module
`reducelab._core`; this package adds result handling, benchmarks, plots and the `reducelab`
command line.

Example::

    import reducelab

    result = reducelab.run_file("scenarios/example.toml", seed=7)
    print(result.summary["messages"])
    result.write("results/example")
    result.messages_df()                      # pandas DataFrames of the CSV files

    sweep = reducelab.Sweep.load("scenarios/sweeps/torus_bandwidth.toml")
    sweep.run("results/torus_bandwidth.sqlite", jobs=2)   # skips points already stored
    sweep.dataframe("results/torus_bandwidth.sqlite")     # one row per point
"""

from __future__ import annotations

try:
    from ._core import ScenarioError, __version__
except ImportError as exc:  # pragma: no cover - only without a built extension
    raise ImportError(
        "reducelab's compiled extension (reducelab._core) is missing: "
        "build it with `bash scripts/setup.sh` (or `maturin develop --release` in a virtualenv)"
    ) from exc

from . import schedule
from .runs import EXIT_CODES, STATUSES, Result, run, run_file
from .scenario import FieldError, Scenario
from .schedule import AlgorithmInfo, algorithms
from .sweep import Sweep

RunResult = Result
"""The result of one run (an alias of `Result`)."""

__all__ = [
    "EXIT_CODES", "STATUSES", "AlgorithmInfo", "FieldError", "Result", "RunResult", "Scenario", "ScenarioError", "Sweep",
    "__version__", "algorithms", "run", "run_file", "schedule",
]
