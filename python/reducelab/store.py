"""The results store of sweeps: one SQLite file (stdlib `sqlite3`).

Results are content-addressed: a run is stored under the key of its resolved scenario
(`Scenario.key`, a SHA-256 of the canonical form including the seed), so any sweep that reaches
the same point, in this or another spec, finds it done. Sweeps are recorded by name with the
points they consist of, which is what `reducelab plot sweep DB` and `dataframe` read.

Only the processes that drive sweeps write; each finished run is committed in its own
transaction, so an interrupted sweep loses at most the runs in flight. Several sweeps may write
into one store at once: a point is leased (`lease`) before it runs, so each point runs once.
The schema is in docs/sweeps.md.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .runs import STATUSES, STATUS_COMPLETED, Result

if TYPE_CHECKING:
    import pandas

SCHEMA_VERSION = 2
"""2: `results.status` and the `leases` table (a version-1 store is upgraded when opened)."""

# The values of summary.json's `status` are `runs.STATUSES` (docs/engine.md); only "completed"
# means every result was computed and verified.
COMPLETED = STATUS_COMPLETED

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    key               TEXT PRIMARY KEY,   -- SHA-256 of the canonical resolved scenario
    scenario_json     TEXT NOT NULL,      -- that canonical form (seed included)
    seed              INTEGER NOT NULL,
    summary_json      TEXT NOT NULL,      -- summary.json, byte for byte
    status            TEXT NOT NULL,      -- summary.json's status: completed, unverified, stalled, ...
    metrics_json      TEXT NOT NULL,      -- scalar leaves of the summary by dotted path
    simulator_version TEXT NOT NULL,
    wall_seconds      REAL NOT NULL,      -- varies between runs; not a result
    finished_at       TEXT NOT NULL       -- UTC, ISO 8601; varies between runs; not a result
);
CREATE TABLE IF NOT EXISTS result_files (
    key      TEXT NOT NULL REFERENCES results(key),
    name     TEXT NOT NULL,               -- messages.csv, links.csv, ...
    position INTEGER NOT NULL,            -- order the simulator produced them in
    contents TEXT NOT NULL,               -- byte for byte
    PRIMARY KEY (key, name)
);
CREATE TABLE IF NOT EXISTS leases (
    key        TEXT PRIMARY KEY,          -- a point some sweep process is running
    owner      TEXT NOT NULL,             -- that process: "HOST:PID:RANDOM"
    expires_at REAL NOT NULL              -- Unix time; the owner renews it while it lives
);
CREATE TABLE IF NOT EXISTS sweeps (
    name          TEXT PRIMARY KEY,
    spec_path     TEXT NOT NULL,
    spec_json     TEXT NOT NULL,          -- the spec as parsed, for the record
    scenario_path TEXT NOT NULL,
    axes_json     TEXT NOT NULL,          -- ["topology.bandwidth_gbps", "traffic[0].bytes", "seed"]
    metrics_json  TEXT,                   -- selected metric paths, or null for all
    updated_at    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sweep_points (
    sweep       TEXT NOT NULL REFERENCES sweeps(name),
    idx         INTEGER NOT NULL,         -- position in the grid (last axis fastest, seeds last)
    key         TEXT NOT NULL,            -- results.key once it has run
    params_json TEXT NOT NULL,            -- {"axis path": value, ..., "seed": n}
    PRIMARY KEY (sweep, idx)
);
"""


class StoreError(ValueError):
    """The store file is not a ReduceLab results store or lacks what was asked for."""


def _status_of_old_summary(summary: Mapping[str, Any]) -> str | None:
    """The status of a summary written before summary.json had one (the results of a schema-1
    store, upgraded when opened), from the fields `status` replaced; None if it has neither."""
    end = summary.get("end")
    if end == "completed":
        messages = summary.get("messages")
        verified = isinstance(messages, dict) and messages.get("all_verified") is True
        return "completed" if verified else "unverified"
    if end in ("stalled", "time_limit"):
        return str(end)
    return None


def point_status(summary: Mapping[str, Any]) -> str:
    """summary.json's `status`; StoreError if it has none or an unknown one (a summary without
    a status is never taken for a completed run)."""
    status = summary.get("status")
    if status is None:
        raise StoreError("summary.json has no `status` (written by an older simulator?)")
    if status not in STATUSES:
        raise StoreError(f"summary.json: status {status!r} is not one of {', '.join(STATUSES)}")
    return str(status)


@dataclass(frozen=True)
class StoredRun:
    """One stored result row."""

    key: str
    seed: int
    summary_json: str
    metrics: dict[str, Any]
    files: dict[str, str]
    simulator_version: str
    wall_seconds: float

    def result(self) -> Result:
        """As a `Result` (engine `stats` are not stored)."""
        return Result(summary_json=self.summary_json, files=dict(self.files))


@dataclass(frozen=True)
class SweepRecord:
    """What the store knows about one sweep."""

    name: str
    spec_path: str
    scenario_path: str
    axes: list[str]
    metrics: list[str] | None
    points: list[tuple[int, str, dict[str, Any]]]
    """``(index, key, params)`` of every point of the sweep, in grid order."""


def flatten_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Scalar leaves (numbers, booleans, strings, null) of a summary by dotted path.

    ``{"messages": {"fct_ps": {"p99": 5}}, "traffic": [{"runtime_ps": 7}]}`` gives
    ``{"messages.fct_ps.p99": 5, "traffic[0].runtime_ps": 7}``.
    """
    out: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")
        else:
            out[path] = value

    walk(dict(summary), "")
    return out


def sweep_table(
    axes: Sequence[str],
    selected: Sequence[str] | None,
    points: Iterable[tuple[int, str, Mapping[str, Any]]],
    metrics: Mapping[str, Mapping[str, Any]],
    statuses: Mapping[str, str],
    include_unverified: bool = False,
) -> tuple[list[str], list[list[Any]]]:
    """The table of a sweep: one row per finished point (one whose key is in `metrics`) whose
    status is "completed", or per finished point whatever its status with `include_unverified`.

    Columns: ``point`` (grid index), ``key``, the parameters (`axes`, i.e. scenario field paths
    and ``seed``), ``status``, then the metrics: the `selected` summary paths, or all of them
    (but ``status``) in the order they first appear. A metric whose path equals a parameter's
    (``seed``, or e.g. ``traffic[0].bytes`` of a collective) or ``status`` is named
    ``summary.PATH``.
    """
    points = [
        p for p in points
        if p[1] in metrics and (include_unverified or statuses.get(p[1]) == COMPLETED)
    ]
    if selected is not None:
        paths = list(selected)
    else:
        paths = [k for k in dict.fromkeys(k for _, key, _ in points for k in metrics[key]) if k != "status"]
    params = {*axes, "status"}
    names = [f"summary.{m}" if m in params else m for m in paths]
    columns = ["point", "key", *axes, "status", *names]
    rows = [
        [idx, key, *(p.get(a) for a in axes), statuses.get(key), *(metrics[key].get(m) for m in paths)]
        for idx, key, p in points
    ]
    return columns, rows


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_lease_owner() -> str:
    """A lease owner id for this process: ``HOST:PID:RANDOM``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _owner_is_dead(owner: str) -> bool:
    """Whether `owner` is a process of this host that no longer exists (its leases need not
    wait to expire). Owners on other hosts are judged by their lease expiry only."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, another user's
        return False
    return False


_BUSY_SECONDS = 30.0
"""How long opening or writing a store waits for another process's lock before failing."""


def _split_statements(script: str) -> list[str]:
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        raise ValueError(f"incomplete SQL statement in the schema: {current.strip()[:60]!r}")
    return statements


_SCHEMA_STATEMENTS = _split_statements(_SCHEMA)


def _retry_while_busy(step: Any) -> Any:
    """Runs `step`, retrying for up to `_BUSY_SECONDS` while SQLite reports the file locked or busy
    (for the few operations SQLite's own busy timeout does not cover)."""
    deadline = time.monotonic() + _BUSY_SECONDS
    delay = 0.001
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            message = str(exc)
            if ("locked" not in message and "busy" not in message) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


LEASED = "leased"
"""`ResultStore.lease`: the point is now leased to the caller."""
DONE = "done"
"""`ResultStore.lease`: the point has a stored result."""
BUSY = "busy"
"""`ResultStore.lease`: another live sweep holds the point's lease."""


class ResultStore:
    """A results store file, opened (and created with its schema) on construction.

    Use as a context manager or call `close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, expected a results store file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None)
            # WAL lets readers (plot, export, a test watching progress) see committed runs
            # while a sweep keeps writing. Switching a new file to WAL can fail with "database is
            # locked" without waiting while another process creates the same store, so it retries.
            _retry_while_busy(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
            self._db.execute("PRAGMA foreign_keys=ON")
            # The schema goes in the same write transaction as the version check: BEGIN IMMEDIATE
            # waits for the write lock, whereas autocommit CREATE statements racing another
            # process's could fail at once (a read snapshot cannot be upgraded).
            with self._transaction():
                for statement in _SCHEMA_STATEMENTS:  # idempotent (IF NOT EXISTS)
                    self._db.execute(statement)
                row = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
                if row is None:
                    self._db.execute(
                        "INSERT INTO meta (name, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                    )
                elif row[0] == "1":
                    self._upgrade_from_1()
                elif row[0] != str(SCHEMA_VERSION):
                    raise StoreError(
                        f"{self.path}: store schema version {row[0]}, this reducelab reads {SCHEMA_VERSION}"
                    )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a results store ({exc})") from None

    def _upgrade_from_1(self) -> None:
        # Inside the opening transaction: add the status column, filled from the stored summaries.
        self._db.execute("ALTER TABLE results ADD COLUMN status TEXT NOT NULL DEFAULT ''")
        rows = self._db.execute("SELECT key, summary_json FROM results WHERE status = ''").fetchall()
        for key, summary in rows:
            try:
                doc = json.loads(summary)
                old = _status_of_old_summary(doc) if doc.get("status") is None else None
                status = old if old is not None else point_status(doc)
            except StoreError as exc:
                raise StoreError(f"{self.path}: cannot upgrade the store: point {key}: {exc}") from None
            self._db.execute("UPDATE results SET status = ? WHERE key = ?", (status, key))
        self._db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> None:
            self.db.execute("BEGIN IMMEDIATE")

        def __exit__(self, exc_type: object, *rest: object) -> None:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")

    def _transaction(self) -> ResultStore._Tx:
        return ResultStore._Tx(self._db)

    # -- results ---------------------------------------------------------------------------

    def done_keys(self, keys: Iterable[str]) -> set[str]:
        """The subset of `keys` that have a stored result."""
        wanted = list(dict.fromkeys(keys))
        found: set[str] = set()
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(r[0] for r in self._db.execute(f"SELECT key FROM results WHERE key IN ({marks})", chunk))
        return found

    def put(
        self,
        key: str,
        scenario_json: str,
        seed: int,
        summary_json: str,
        files: Sequence[tuple[str, str]],
        simulator_version: str,
        wall_seconds: float,
    ) -> None:
        """Store one finished run atomically (a second put of the same key is ignored).

        StoreError if the summary has no valid `status` (`point_status`)."""
        summary = json.loads(summary_json)
        status = point_status(summary)
        metrics = json.dumps(flatten_summary(summary), ensure_ascii=False)
        with self._transaction():
            cur = self._db.execute(
                "INSERT OR IGNORE INTO results (key, scenario_json, seed, summary_json, status, metrics_json,"
                " simulator_version, wall_seconds, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, scenario_json, seed, summary_json, status, metrics, simulator_version, wall_seconds, _now()),
            )
            self._db.execute("DELETE FROM leases WHERE key = ?", (key,))
            if cur.rowcount:
                self._db.executemany(
                    "INSERT INTO result_files (key, name, position, contents) VALUES (?, ?, ?, ?)",
                    [(key, name, i, text) for i, (name, text) in enumerate(files)],
                )

    # -- leases ----------------------------------------------------------------------------

    def lease(self, key: str, owner: str, seconds: float) -> str:
        """Lease point `key` to `owner` for `seconds` before running it: `LEASED`, or `DONE` if
        it has a result, or `BUSY` if another owner's lease on it has not expired and that
        owner is not a dead process of this host. Atomic across processes."""
        now = time.time()
        with self._transaction():
            if self._db.execute("SELECT 1 FROM results WHERE key = ?", (key,)).fetchone():
                return DONE
            row = self._db.execute("SELECT owner, expires_at FROM leases WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now and not _owner_is_dead(row[0]):
                return BUSY
            self._db.execute(
                "INSERT OR REPLACE INTO leases (key, owner, expires_at) VALUES (?, ?, ?)", (key, owner, now + seconds)
            )
            return LEASED

    def renew_leases(self, owner: str, seconds: float) -> int:
        """Extend every lease of `owner` to `seconds` from now; returns how many it holds."""
        with self._transaction():
            cur = self._db.execute(
                "UPDATE leases SET expires_at = ? WHERE owner = ?", (time.time() + seconds, owner)
            )
            return int(cur.rowcount)

    def release_leases(self, owner: str) -> None:
        """Drop every lease of `owner` (its sweep ended; unfinished points are free again)."""
        with self._transaction():
            self._db.execute("DELETE FROM leases WHERE owner = ?", (owner,))

    def leases(self) -> dict[str, tuple[str, float]]:
        """Current leases: key -> (owner, expires_at)."""
        return {k: (o, e) for k, o, e in self._db.execute("SELECT key, owner, expires_at FROM leases")}

    def get(self, key: str) -> StoredRun:
        """The stored run of `key`; StoreError if there is none."""
        row = self._db.execute(
            "SELECT seed, summary_json, metrics_json, simulator_version, wall_seconds FROM results WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no result for point {key}")
        files = {
            name: text
            for name, text in self._db.execute(
                "SELECT name, contents FROM result_files WHERE key = ? ORDER BY position", (key,)
            )
        }
        return StoredRun(key, row[0], row[1], json.loads(row[2]), files, row[3], row[4])

    def metrics(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Stored metrics of those `keys` that have run."""
        return {k: m for k, (_, m) in self.statuses_and_metrics(keys).items()}

    def statuses(self, keys: Iterable[str]) -> dict[str, str]:
        """Stored status (summary.json's `status`) of those `keys` that have run."""
        wanted = list(dict.fromkeys(keys))
        out: dict[str, str] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out.update(self._db.execute(f"SELECT key, status FROM results WHERE key IN ({marks})", chunk))
        return out

    def statuses_and_metrics(self, keys: Iterable[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """``(status, metrics)`` of those `keys` that have run."""
        wanted = list(dict.fromkeys(keys))
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for key, status, metrics in self._db.execute(
                f"SELECT key, status, metrics_json FROM results WHERE key IN ({marks})", chunk
            ):
                out[key] = (status, json.loads(metrics))
        return out

    def count(self) -> int:
        """Number of stored runs."""
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def dump(self) -> Iterator[tuple[str, str, str, list[tuple[str, str]]]]:
        """``(key, summary_json, metrics_json, [(file name, contents), ...])`` of every stored run,
        by key: the result part of the store, which is the same wherever the runs were made."""
        for key, summary, metrics in self._db.execute(
            "SELECT key, summary_json, metrics_json FROM results ORDER BY key"
        ).fetchall():
            files = self._db.execute(
                "SELECT name, contents FROM result_files WHERE key = ? ORDER BY position", (key,)
            ).fetchall()
            yield key, summary, metrics, [(n, c) for n, c in files]

    # -- sweeps ----------------------------------------------------------------------------

    def record_sweep(
        self,
        name: str,
        spec_path: str,
        spec: Mapping[str, Any],
        scenario_path: str,
        axes: Sequence[str],
        metrics: Sequence[str] | None,
        points: Sequence[tuple[int, str, Mapping[str, Any]]],
    ) -> None:
        """Record (or replace) sweep `name` and its points."""
        with self._transaction():
            self._db.execute("DELETE FROM sweep_points WHERE sweep = ?", (name,))
            self._db.execute(
                "INSERT OR REPLACE INTO sweeps (name, spec_path, spec_json, scenario_path, axes_json,"
                " metrics_json, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    name, spec_path, json.dumps(spec, ensure_ascii=False, default=str), scenario_path,
                    json.dumps(list(axes)), None if metrics is None else json.dumps(list(metrics)), _now(),
                ),
            )
            self._db.executemany(
                "INSERT INTO sweep_points (sweep, idx, key, params_json) VALUES (?, ?, ?, ?)",
                [(name, idx, key, json.dumps(dict(params), ensure_ascii=False)) for idx, key, params in points],
            )

    def sweep_names(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM sweeps ORDER BY name")]

    def sweep(self, name: str | None = None) -> SweepRecord:
        """The recorded sweep `name`; without a name, the only sweep in the store."""
        names = self.sweep_names()
        if name is None:
            if len(names) != 1:
                raise StoreError(
                    f"{self.path}: " + ("holds no sweep" if not names else f"holds {len(names)} sweeps "
                    f"({', '.join(names)}); choose one with --sweep NAME")
                )
            name = names[0]
        row = self._db.execute(
            "SELECT spec_path, scenario_path, axes_json, metrics_json FROM sweeps WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no sweep named {name!r} (has: {', '.join(names) or 'none'})")
        points = [
            (idx, key, json.loads(params))
            for idx, key, params in self._db.execute(
                "SELECT idx, key, params_json FROM sweep_points WHERE sweep = ? ORDER BY idx", (name,)
            )
        ]
        return SweepRecord(
            name, row[0], row[1], json.loads(row[2]), None if row[3] is None else json.loads(row[3]), points
        )

    def sweep_rows(
        self, name: str | None = None, *, include_unverified: bool = False
    ) -> tuple[SweepRecord, list[str], list[list[Any]]]:
        """The recorded sweep `name` (default: the only one) and its table: column names and
        one row per completed point, or per finished point with `include_unverified` (see
        `sweep_table`)."""
        record = self.sweep(name)
        both = self.statuses_and_metrics(k for _, k, _ in record.points)
        columns, rows = sweep_table(
            record.axes, record.metrics, record.points, {k: m for k, (_, m) in both.items()},
            {k: s for k, (s, _) in both.items()}, include_unverified,
        )
        return record, columns, rows

    def dataframe(self, name: str | None = None, *, include_unverified: bool = False) -> pandas.DataFrame:
        """`sweep_rows` as a DataFrame (needs pandas)."""
        import pandas

        _, columns, rows = self.sweep_rows(name, include_unverified=include_unverified)
        return pandas.DataFrame(rows, columns=columns)
