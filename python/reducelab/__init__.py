"""ReduceLab: a packet-level network simulator for allreduce research.

The simulator is written in Rust (crates/) and reached through the compiled module
`reducelab._core`; this package adds result handling, benchmarks, plots and the `reducelab`
command line.

Example::

    import reducelab

    result = reducelab.run_file("scenarios/example.toml", seed=7)
    print(result.summary["messages"])
    result.write("results/example")
"""

from __future__ import annotations

try:
    from ._core import ScenarioError, __version__
except ImportError as exc:  # pragma: no cover - only without a built extension
    raise ImportError(
        "reducelab's compiled extension (reducelab._core) is missing: "
        "build it with `bash scripts/setup.sh` (or `maturin develop --release` in a virtualenv)"
    ) from exc

from .runs import Result, run, run_file

__all__ = ["Result", "ScenarioError", "__version__", "run", "run_file"]
