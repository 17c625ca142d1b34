"""Running scenarios and handling their results.

The simulator (Rust, `reducelab._core`) returns file contents as strings; this module wraps them in
a `Result` that parses the summary on demand and writes the result files byte for byte.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _core

if TYPE_CHECKING:
    import pandas

    from ._core import EngineStats

SUMMARY_FILE = "summary.json"
MESSAGES_FILE = "messages.csv"
LINKS_FILE = "links.csv"

# Column types of the simulator's CSV files (docs/scenario-format.md, "Results"). Nullable Int64
# where a value may be missing (an undelivered message has no end or FCT); columns not listed
# here are left to pandas' inference.
CSV_DTYPES: dict[str, dict[str, str]] = {
    MESSAGES_FILE: {
        "id": "int64", "src": "int64", "dst": "int64", "bytes": "int64", "start_ps": "int64",
        "end_ps": "Int64", "fct_ps": "Int64", "verified": "boolean",
    },
    LINKS_FILE: {
        "link": "int64", "from_node": "int64", "from_port": "int64", "to_node": "int64",
        "to_port": "int64", "bytes": "int64", "packets": "int64", "utilization": "float64",
        "max_queue_bytes": "int64", "mean_queue_bytes": "float64", "drops": "int64",
        "ecn_marks": "int64", "kind": "string",
    },
}
_SEED_LIMIT = 2**64

# summary.json's ``status`` (docs/engine.md, "Run status and exit codes").
STATUS_COMPLETED = "completed"
"""Every finite workload finished and every result was verified on every host."""
STATUS_UNVERIFIED = "unverified"
"""Everything finished but some result failed verification (wrong data)."""
STATUS_STALLED = "stalled"
"""A finite workload could not finish; ``status_reason`` names it first, then the network cause."""
STATUS_TIME_LIMIT = "time_limit"
"""The scenario's ``run.time_limit_us`` came before the finite workloads finished."""
STATUS_INTERRUPTED = "interrupted"
"""Stopped by SIGINT/SIGTERM; the files hold what was measured so far."""
STATUSES = (STATUS_COMPLETED, STATUS_UNVERIFIED, STATUS_STALLED, STATUS_TIME_LIMIT, STATUS_INTERRUPTED)

EXIT_CODES: dict[str, int] = {
    STATUS_COMPLETED: 0,
    STATUS_UNVERIFIED: 3,
    STATUS_STALLED: 4,
    STATUS_TIME_LIMIT: 5,
    STATUS_INTERRUPTED: 130,
}
"""Exit code of ``reducelab run`` for each status (an interrupted run exits 143 on SIGTERM)."""
EXIT_SIGTERM = 143


@dataclass(frozen=True)
class Result:
    """Everything one simulation run produced.

    Same scenario and seed give identical `summary_json` and `files`; only `stats` (engine
    counters, including wall time) varies between runs and is never written to disk.
    """

    summary_json: str
    """Contents of ``summary.json``."""
    files: dict[str, str]
    """The other result files, by file name (e.g. ``messages.csv``, ``links.csv``), in the order
    the simulator produced them."""
    table: str = ""
    """Short human-readable summary for a terminal."""
    stats: EngineStats | dict[str, Any] = field(default_factory=dict)
    """Engine counters: wall_seconds, events, packets, packet_hops, sim_time_ps."""

    @cached_property
    def summary(self) -> dict[str, Any]:
        """`summary_json` parsed."""
        parsed = json.loads(self.summary_json)
        if not isinstance(parsed, dict):
            raise ValueError("summary.json is not a JSON object")
        return parsed

    @property
    def status(self) -> str:
        """How the run ended: one of `STATUSES` (summary.json's ``status``).

        Only ``"completed"`` means every result is there and verified. Raises ValueError for a
        summary without a valid status (e.g. one written by an older version).
        """
        return summary_status(self.summary)

    @property
    def status_reason(self) -> str | None:
        """Why the run did not complete (None when it did)."""
        reason = self.summary.get("status_reason")
        return reason if isinstance(reason, str) else None

    def write(self, outdir: str | os.PathLike[str]) -> Path:
        """Write ``summary.json`` and every file of `files` into `outdir` (created if needed).

        Contents are written exactly as produced (UTF-8, no newline translation), so two runs
        with the same seed give byte-identical files. The directory holds this run's files
        only: the result files of an earlier run in it are deleted first, and a non-empty
        directory that is not a results directory is refused with FileExistsError
        (`reducelab.resultdir.prepare_run_dir`). Returns the output directory.
        """
        from .resultdir import prepare_run_dir

        out = Path(outdir)
        for name in self.files:
            _check_file_name(name)
        prepare_run_dir(out)
        (out / SUMMARY_FILE).write_text(self.summary_json, encoding="utf-8", newline="")
        for name, contents in self.files.items():
            (out / name).write_text(contents, encoding="utf-8", newline="")
        return out

    def messages_df(self) -> pandas.DataFrame:
        """``messages.csv`` as a DataFrame, one row per message (needs pandas).

        Columns ``id, src, dst, bytes, start_ps, end_ps, fct_ps, verified``; ``end_ps`` and
        ``fct_ps`` are nullable integers (``<NA>`` for an undelivered message).
        """
        return csv_dataframe(self.files[MESSAGES_FILE], MESSAGES_FILE)

    def links_df(self) -> pandas.DataFrame:
        """``links.csv`` as a DataFrame, one row per link direction (needs pandas)."""
        return csv_dataframe(self.files[LINKS_FILE], LINKS_FILE)


def summary_status(summary: dict[str, Any]) -> str:
    """The ``status`` of a parsed summary.json; ValueError if it is missing or unknown."""
    status = summary.get("status")
    if status not in STATUSES:
        raise ValueError(f"summary.json has no valid status (got {status!r}; expected one of {', '.join(STATUSES)})")
    return str(status)


def csv_dataframe(text: str, name: str = "") -> pandas.DataFrame:
    """A result CSV file's contents as a DataFrame, typed by `CSV_DTYPES` for known files."""
    import pandas

    header = text.split("\n", 1)[0].strip().split(",")
    known = CSV_DTYPES.get(name, {})
    dtypes = {c: known[c] for c in header if c in known}
    return pandas.read_csv(io.StringIO(text), dtype=dtypes)  # type: ignore[arg-type]


def _check_file_name(name: str) -> None:
    # Result files go into one directory; a name with a path in it is a simulator bug, and
    # writing it could land outside the output directory.
    if not name or name in (".", "..", SUMMARY_FILE) or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"refusing to write result file with unsafe or reserved name {name!r}")


def check_seed(seed: int | None) -> int | None:
    """Return `seed` if it is None or an integer in [0, 2**64); raise ValueError otherwise."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return seed


def run(scenario: str, *, seed: int | None = None, progress: bool = False, probe: bool = False,
        base_dir: str | os.PathLike[str] | None = None) -> Result:
    """Run a scenario given as TOML text.

    Relative file paths in it (a GOAL trace's ``file``) are read from `base_dir` (default: the
    working directory).

    `seed` overrides the scenario's ``seed``. With `progress`, a progress bar is drawn on stderr
    if it is a terminal and the run lasts more than 2 s. Raises `ScenarioError` (a ValueError with
    ``field`` and ``reason``) if the scenario is invalid.

    A run that did not complete is still returned: check `Result.status`. If a signal handler
    raises during the run (Ctrl-C's ``KeyboardInterrupt``), the run stops within about a second
    and that exception propagates with the partial result, status ``"interrupted"``, as its
    ``result`` attribute.

    With `probe`, the scenario is validated and stopped at simulated time 1 ps (status
    ``"time_limit"``) on the backend it resolves to (``run.backend``): a check that it runs.
    """
    try:
        out = _core.run(scenario, check_seed(seed), progress, probe,
                        None if base_dir is None else os.fspath(base_dir))
    except BaseException as exc:
        partial = getattr(exc, "partial_run", None)
        if isinstance(partial, dict):
            exc.result = _result(partial)  # type: ignore[attr-defined]
        raise
    return _result(out)


def _result(out: Any) -> Result:
    return Result(
        summary_json=out["summary_json"],
        files=dict(out["files"]),
        table=out["table"],
        stats=out["stats"],
    )


def run_file(path: str | os.PathLike[str], *, seed: int | None = None, progress: bool = False) -> Result:
    """Run the scenario in the TOML file at `path` (see `run`); its relative file paths are
    read from the file's directory."""
    p = Path(path)
    return run(p.read_text(encoding="utf-8"), seed=seed, progress=progress, base_dir=p.parent)
