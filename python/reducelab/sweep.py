"""Parameter sweeps: a base scenario, a grid over its fields, seeds; results in a SQLite store.

A sweep spec (TOML, docs/sweeps.md) names a base scenario file and a grid of values for any of
its fields by dotted path, plus seeds::

    [sweep]
    scenario = "../examples/torus_permutation.toml"   # relative to the spec file
    repetitions = 2                                    # or seeds = [1, 2, 3]

    [grid]
    "topology.bandwidth_gbps" = [100, 400]
    "traffic[0].bytes" = [65536, 262144]

Every point of the grid (the base scenario with the point's values set, plus its seed) is keyed
by the SHA-256 of its canonical form (`Scenario.key`). `Sweep.run` skips points whose key is in
the store and stores each finished run at once, so re-running a finished sweep runs nothing and
an interrupted one resumes. Points run in a local process pool, or on a Dask distributed cluster
given its scheduler address; a run's result files depend only on its scenario and seed, so the
store holds the same bytes either way.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _core
from .runs import check_seed
from .scenario import FieldError, Scenario, parse_path, set_field
from .store import BUSY, DONE, ResultStore, StoreError, flatten_summary, new_lease_owner, sweep_table

if TYPE_CHECKING:
    import pandas

DEFAULT_SEED = 1
"""The seed of a scenario file without ``seed`` (docs/scenario-format.md)."""

MAX_POINTS = 1_000_000
"""Most points a sweep may have (grid size x seeds): more is refused when the sweep is built,
before any point exists (each point holds its resolved scenario)."""

CONFIRM_POINTS = 10_000
"""`Sweep.run` refuses a sweep of more points than this unless ``confirm=True`` (CLI: ``--yes``)."""

LEASE_SECONDS = 60.0
"""How long a point's lease lasts unless renewed (renewed every quarter of it while its sweep
lives); a sweep that died on another host frees its points after this long."""

WORKER_TIMEOUT_SECONDS = 120.0
"""How long a sweep waits for a Dask cluster without workers before giving up."""

_SCHEDULER = re.compile(r"(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


class SweepSpecError(FieldError):
    """A sweep spec was rejected: ``str(err)`` is ``"FILE: FIELD: REASON"``."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.file = file
        """The spec file (or the base scenario file, for an error in the scenario itself)."""
        self.args = (": ".join(p for p in (file, field, reason) if p),)

    def __str__(self) -> str:
        return str(self.args[0])


class SweepRunError(RuntimeError):
    """A sweep could not run (e.g. the Dask scheduler is unreachable)."""


class SweepSizeError(FieldError):
    """A sweep has more points than `Sweep.run` was allowed to start without ``confirm=True``."""


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid: a field path and the values it takes."""

    path: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One resolved point: the base scenario with `params` set (seed included)."""

    index: int
    """Position in the grid: the last axis varies fastest, the seed fastest of all."""
    params: dict[str, Any]
    """Axis path -> value, and ``"seed"``."""
    scenario: Scenario
    key: str

    @property
    def seed(self) -> int:
        return int(self.params["seed"])


@dataclass(frozen=True)
class SweepReport:
    """What `Sweep.run` did."""

    total: int
    cached: int
    """Points already in the store (not run again)."""
    executed: int
    """Points run and stored by this call."""
    store: Path
    wall_seconds: float
    by_others: int = 0
    """Points another sweep process stored while this one ran (leased by it, not run here)."""


def run_point(toml_text: str) -> dict[str, Any]:
    """Run one point (in a pool process or on a Dask worker) and return plain data.

    A rejected scenario comes back as ``{"error": [field, reason]}`` rather than as an exception,
    which would have to survive pickling across processes.
    """
    from . import ScenarioError

    try:
        out = _core.run(toml_text, None, False)
    except ScenarioError as exc:
        return {"error": [exc.field, exc.reason]}
    return {
        "summary_json": out["summary_json"],
        "files": [list(f) for f in out["files"]],
        "wall_seconds": out["stats"]["wall_seconds"],
        "version": _core.__version__,
    }


def check_scheduler(url: str) -> str:
    """`url` if it is a Dask scheduler address ``tcp://HOST:PORT`` (or ``tls://``); FieldError
    naming ``--scheduler`` otherwise."""
    m = _SCHEDULER.fullmatch(url.strip()) if isinstance(url, str) else None
    if m is None:
        raise FieldError("--scheduler", f"expected a Dask scheduler address tcp://HOST:PORT, got {url!r}")
    port = int(m.group(3))
    if not 1 <= port <= 65535:
        raise FieldError("--scheduler", f"port {port} is not in 1..65535")
    return url.strip()


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _concerns(fld: str, path: str) -> bool:
    """Whether an error about field `fld` is about axis `path` (the field or inside it)."""
    return fld == path or fld.startswith((path + ".", path + "["))


def _flatten_grid(table: Mapping[str, Any], prefix: str, out: list[tuple[str, Any]]) -> None:
    # `topology.bandwidth_gbps = [...]` in [grid] is a TOML dotted key, i.e. nested tables;
    # `"traffic[0].bytes" = [...]` is one quoted key. Both name the same kind of path.
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            _flatten_grid(value, path, out)
        else:
            out.append((path, value))


class Sweep:
    """A sweep: base scenario, grid axes, seeds and selected metrics.

    Build one from a spec file (`load`), a spec dict (`from_spec`) or directly::

        sweep = Sweep(Scenario.from_file("scenarios/example.toml"),
                      {"topology.bandwidth_gbps": [100, 400]}, repetitions=2, name="bw")
        sweep.run("results/bw.sqlite", jobs=2)
        df = sweep.dataframe("results/bw.sqlite")

    Invalid input raises `FieldError` (`SweepSpecError`, which also names the file, when the
    sweep comes from a spec).
    """

    keep_files: tuple[str, ...] | None = None
    """Result files stored per point: None = every file the simulator wrote (a `ScenarioSet`
    may keep fewer)."""

    def __init__(
        self,
        scenario: Scenario,
        grid: Mapping[str, Sequence[Any]],
        *,
        repetitions: int | None = None,
        seeds: Sequence[int] | None = None,
        metrics: Sequence[str] | None = None,
        name: str = "sweep",
        spec_path: str = "",
        scenario_path: str = "",
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.scenario = scenario
        self.name = name
        self.spec_path = spec_path
        self.scenario_path = scenario_path
        self.spec = dict(spec) if spec is not None else {"grid": {k: list(v) for k, v in grid.items()}}
        self.axes = self._axes(grid)
        self.seeds = self._seeds(repetitions, seeds)
        if self.point_count > MAX_POINTS:
            fld = "sweep.repetitions" if repetitions is not None else "sweep.seeds" if seeds is not None else "grid"
            raise FieldError(
                fld, f"{self.point_count} points ({self.count_formula()}) is more than the {MAX_POINTS} a "
                "sweep may have; split it into several sweeps (they can share one store)"
            )
        if metrics is not None:
            if isinstance(metrics, str) or not all(isinstance(m, str) and m for m in metrics):
                raise FieldError("sweep.metrics", "expected an array of summary field paths (strings)")
            for i, m in enumerate(metrics):
                try:
                    parse_path(m)
                except FieldError as exc:
                    raise FieldError(f"sweep.metrics[{i}]", exc.reason) from None
        self.metrics: tuple[str, ...] | None = None if metrics is None else tuple(metrics)
        self._points: list[Point] | None = None

    # -- construction --------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Sweep:
        """Read a sweep spec file. Raises `SweepSpecError` (``FILE: FIELD: REASON``)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SweepSpecError(str(path), "", "no such file") from None
        except IsADirectoryError:
            raise SweepSpecError(str(path), "", "is a directory, expected a TOML sweep spec") from None
        except UnicodeDecodeError as exc:
            raise SweepSpecError(str(path), "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise SweepSpecError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
        try:
            spec = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SweepSpecError(str(path), "", f"not valid TOML: {exc}") from None
        return cls.from_spec(spec, spec_path=path)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], spec_path: str | os.PathLike[str] = "") -> Sweep:
        """A sweep from a parsed spec; the base scenario path is relative to `spec_path`'s folder."""
        file = str(spec_path)
        base_dir = Path(spec_path).parent if file else Path.cwd()

        def err(fld: str, reason: str) -> SweepSpecError:
            return SweepSpecError(file, fld, reason)

        for key in spec:
            if key not in ("sweep", "grid"):
                raise err(key, "unknown field, expected `sweep` or `grid`")
        table = spec.get("sweep")
        if not isinstance(table, dict):
            raise err("sweep", "missing [sweep] table (with at least `scenario = \"FILE.toml\"`)")
        known = ("name", "scenario", "repetitions", "seeds", "metrics")
        for key in table:
            if key not in known:
                raise err(f"sweep.{key}", f"unknown field, expected one of {', '.join(known)}")
        scenario_ref = table.get("scenario")
        if not isinstance(scenario_ref, str) or not scenario_ref:
            raise err("sweep.scenario", "required: the base scenario file, relative to this spec")
        name = table.get("name", Path(file).stem if file else "sweep")
        if not isinstance(name, str) or not name:
            raise err("sweep.name", "expected a non-empty string")
        scenario_path = base_dir / scenario_ref
        try:
            scenario = Scenario.from_file(scenario_path)
        except FileNotFoundError:
            raise err("sweep.scenario", f"{scenario_path}: no such file") from None
        except (IsADirectoryError, UnicodeDecodeError) as exc:
            raise err("sweep.scenario", f"{scenario_path}: cannot read a scenario: {exc}") from None
        except FieldError as exc:
            raise SweepSpecError(str(scenario_path), exc.field, exc.reason) from None
        grid = spec.get("grid")
        if grid is None:
            grid = {}
        if not isinstance(grid, dict):
            raise err("grid", "expected a table of FIELD = [values]")
        flat: list[tuple[str, Any]] = []
        _flatten_grid(grid, "", flat)
        try:
            return cls(
                scenario,
                dict(flat),
                repetitions=table.get("repetitions"),
                seeds=table.get("seeds"),
                metrics=table.get("metrics"),
                name=name,
                spec_path=file,
                scenario_path=str(scenario_path),
                spec=spec,
            )
        except SweepSpecError:
            raise
        except FieldError as exc:
            raise err(exc.field, exc.reason) from None

    def _axes(self, grid: Mapping[str, Any]) -> tuple[Axis, ...]:
        if not grid:
            raise FieldError(
                "grid", "is empty: give at least one FIELD = [values] (to repeat one scenario, "
                "sweep its seed: seed = [1, 2, 3])"
            )
        axes: list[Axis] = []
        parsed: list[list[str | int]] = []
        # Count before checking each value (which copies the scenario per value).
        grid_points = 1
        for values in grid.values():
            if isinstance(values, (list, tuple)):
                grid_points *= max(1, len(values))
        if grid_points > MAX_POINTS:
            sizes = " x ".join(str(len(v)) for v in grid.values() if isinstance(v, (list, tuple)))
            raise FieldError(
                "grid", f"{grid_points} points ({sizes}) is more than the {MAX_POINTS} a sweep may have; "
                "split it into several sweeps (they can share one store)"
            )
        for path, values in grid.items():
            where = f"grid.{path}"
            try:
                parts = parse_path(path)
            except FieldError as exc:
                raise FieldError(where, exc.reason) from None
            if not isinstance(values, (list, tuple)):
                raise FieldError(
                    where, f"expected an array of values, got {_show(values)} (write [{_show(values)}] for one value)"
                )
            if not values:
                raise FieldError(where, "empty array: give at least one value")
            for other_path, other in zip(grid, parsed):
                shorter = min(len(parts), len(other))
                if parts[:shorter] == other[:shorter]:
                    raise FieldError(where, f"overlaps grid.{other_path} (one is inside the other)")
            seen: dict[str, int] = {}
            for i, v in enumerate(values):
                canon = json.dumps(v, sort_keys=True)
                if canon in seen:
                    raise FieldError(f"{where}[{i}]", f"value {_show(v)} already given at [{seen[canon]}]")
                seen[canon] = i
                if path == "seed":
                    try:
                        check_seed(v)
                    except (TypeError, ValueError) as exc:
                        raise FieldError(f"{where}[{i}]", str(exc)) from None
                try:
                    set_field(self.scenario.to_dict(), path, v)
                except FieldError as exc:
                    if exc.field != path:  # the path itself is wrong, whatever the value
                        raise FieldError(where, f"{exc.field}: {exc.reason}") from None
                    raise FieldError(f"{where}[{i}]" if len(values) > 1 else where, exc.reason) from None
            axes.append(Axis(path, tuple(values)))
            parsed.append(parts)
        return tuple(axes)

    def _seeds(self, repetitions: Any, seeds: Any) -> Sequence[int] | None:
        seed_axis = any(a.path == "seed" for a in self.axes)
        if repetitions is not None and seeds is not None:
            raise FieldError("sweep.seeds", "give either `repetitions` or `seeds`, not both")
        if seed_axis and (repetitions is not None or seeds is not None):
            which = "sweep.repetitions" if repetitions is not None else "sweep.seeds"
            raise FieldError(which, "the grid already sweeps `seed`; drop one of the two")
        if repetitions is not None:
            if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
                raise FieldError("sweep.repetitions", f"expected an integer >= 1, got {_show(repetitions)}")
            if repetitions > MAX_POINTS:
                raise FieldError(
                    "sweep.repetitions", f"{repetitions} repetitions is more than the {MAX_POINTS} points a sweep may have"
                )
            first = self.scenario.to_dict().get("seed", DEFAULT_SEED)
            if isinstance(first, bool) or not isinstance(first, int):
                raise FieldError("sweep.repetitions", f"the base scenario's seed {_show(first)} is not an integer")
            out = range(first, first + repetitions)  # lazy: validated for size above
            try:
                check_seed(out[-1])
            except ValueError as exc:
                raise FieldError("sweep.repetitions", str(exc)) from None
            return out
        if seeds is not None:
            if not isinstance(seeds, (list, tuple)) or not seeds:
                raise FieldError("sweep.seeds", "expected a non-empty array of integer seeds")
            if len(seeds) > MAX_POINTS:
                raise FieldError("sweep.seeds", f"{len(seeds)} seeds is more than the {MAX_POINTS} points a sweep may have")
            for i, s in enumerate(seeds):
                try:
                    check_seed(s)
                except (TypeError, ValueError) as exc:
                    raise FieldError(f"sweep.seeds[{i}]", str(exc)) from None
            if len(set(seeds)) != len(seeds):
                raise FieldError("sweep.seeds", "a seed appears twice")
            return tuple(seeds)
        return None

    # -- points --------------------------------------------------------------------------

    @property
    def point_count(self) -> int:
        """How many points the sweep has, computed without building them."""
        n = 1
        for a in self.axes:
            n *= len(a.values)
        return n * (len(self.seeds) if self.seeds is not None else 1)

    def count_formula(self) -> str:
        """How `point_count` comes about, e.g. ``2 x 3 x 2 seeds``."""
        sizes = [str(len(a.values)) for a in self.axes]
        if self.seeds is not None:
            sizes.append(f"{len(self.seeds)} seeds")
        return " x ".join(sizes)

    def check_size(self, *, confirm: bool = False, confirm_above: int = CONFIRM_POINTS) -> int:
        """The point count; `SweepSizeError` (field ``grid``) if it is above `confirm_above`
        and not `confirm`."""
        n = self.point_count
        if n > confirm_above and not confirm:
            raise SweepSizeError(
                "grid", f"{n} points ({self.count_formula()}) is more than {confirm_above}; "
                "confirm to run them all (CLI: --yes, API: Sweep.run(..., confirm=True))"
            )
        return n

    def points(self) -> list[Point]:
        """Every point of the sweep in grid order (last axis fastest, then the seed)."""
        if self._points is not None:
            return self._points
        out: list[Point] = []
        keys: dict[str, int] = {}
        for combo in itertools.product(*(a.values for a in self.axes)):
            params = {a.path: v for a, v in zip(self.axes, combo)}
            resolved = self.scenario.with_values(params)
            seeds = self.seeds
            if seeds is None:
                seed = resolved.to_dict().get("seed", DEFAULT_SEED)
                seeds = (seed,)
            for seed in seeds:
                point_scenario = resolved.with_seed(seed)
                key = point_scenario.key()
                if key in keys:
                    raise FieldError("grid", f"points {keys[key]} and {len(out)} are the same scenario")
                keys[key] = len(out)
                out.append(Point(len(out), {**params, "seed": seed}, point_scenario, key))
        self._points = out
        return out

    @property
    def axis_names(self) -> list[str]:
        """Parameter columns: the axis paths and ``seed``."""
        names = [a.path for a in self.axes]
        return names if "seed" in names else [*names, "seed"]

    def check(self) -> dict[str, Any]:
        """Validate the sweep in the simulator without simulating (`Scenario.check`).

        Probes the first point (every axis at its first value), then each further value of each
        axis with the other axes at their first value; then checks that the selected metrics
        exist in summary.json. An error that concerns an axis names it (``grid.PATH[i]``); one in
        the first point that concerns no axis names the base scenario file. Returns the summary
        fields (dotted paths) the probes saw. Raises `FieldError`/`SweepSpecError`.
        """
        from . import ScenarioError

        first = {a.path: a.values[0] for a in self.axes}
        probes = [(self.axes[0], 0)] + [(a, i) for a in self.axes for i in range(1, len(a.values))]
        known: dict[str, Any] = {}
        for axis, i in probes:
            try:
                result = self.scenario.with_values({**first, axis.path: axis.values[i]}).check()
            except ScenarioError as exc:
                if i == 0:
                    related = [a for a in self.axes if _concerns(exc.field, a.path)]
                    if not related:
                        raise SweepSpecError(self.scenario_path or "scenario", exc.field, exc.reason) from None
                    axis = related[0]
                raise self._axis_error(axis, i, exc.field, exc.reason) from None
            known.update(flatten_summary(result.summary))
        for i, m in enumerate(self.metrics or ()):
            if m not in known:
                close = [k for k in known if k.split(".")[-1] == m.split(".")[-1]][:3]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise self._error(f"sweep.metrics[{i}]", f"{m!r} is not a field of summary.json{hint}")
        return known

    def _axis_error(self, axis: Axis, i: int, fld: str, reason: str) -> FieldError:
        where = f"grid.{axis.path}" + (f"[{i}]" if len(axis.values) > 1 else "")
        value = _show(axis.values[i])
        if fld == axis.path and reason.startswith("unknown field"):
            return self._error(f"grid.{axis.path}", reason)
        if _concerns(fld, axis.path):
            inner = "" if fld == axis.path else f"{fld}: "
            return self._error(where, f"value {value}: {inner}{reason}")
        return self._error(where, f"value {value} makes {fld or 'the scenario'} invalid: {reason}")

    def _error(self, fld: str, reason: str) -> FieldError:
        return SweepSpecError(self.spec_path, fld, reason) if self.spec_path else FieldError(fld, reason)

    # -- running -------------------------------------------------------------------------

    def pending(self, store: ResultStore) -> list[Point]:
        """Points without a stored result."""
        points = self.points()
        done = store.done_keys(p.key for p in points)
        return [p for p in points if p.key not in done]

    def record(self, store: ResultStore) -> None:
        """Record this sweep and its points in `store` (replacing an older sweep of that name)."""
        store.record_sweep(
            self.name, self.spec_path, self.spec, self.scenario_path, self.axis_names,
            None if self.metrics is None else list(self.metrics),
            [(p.index, p.key, p.params) for p in self.points()],
        )

    def run(
        self,
        store: ResultStore | str | os.PathLike[str],
        *,
        jobs: int | None = None,
        scheduler: Any = None,
        progress: bool = False,
        check: bool = True,
        on_point: Callable[[Point], None] | None = None,
        confirm: bool = False,
        confirm_above: int = CONFIRM_POINTS,
        lease_seconds: float = LEASE_SECONDS,
        worker_timeout: float = WORKER_TIMEOUT_SECONDS,
    ) -> SweepReport:
        """Run every point not yet in `store` and store each result as it finishes.

        `jobs`: local worker processes (default: CPUs; 1 runs in this process). `scheduler`: a
        Dask scheduler address (``tcp://HOST:PORT``) or a `distributed.Client`; points then run
        on that cluster instead, whose workers need this `reducelab` installed. `progress` draws a
        bar with ETA on stderr if it is a terminal. `check` first validates the spec in the
        simulator (`check`), if anything is left to run. `on_point` is called after each point
        is stored (an exception from it stops the sweep; stored points stay). A sweep of more
        than `confirm_above` points (default `CONFIRM_POINTS`) runs only with `confirm`.

        Each point is leased in the store before it runs (for `lease_seconds`, renewed while
        this process lives), so several sweeps into one store share the work: a point leased by
        another live sweep is skipped and taken up later if that sweep does not store it. On a
        Dask cluster, a lost worker's points are resubmitted by the scheduler to the others; a
        cluster without any worker for `worker_timeout` seconds ends the sweep with
        `SweepRunError`.

        Raises `SweepSizeError` (before building the points) for a sweep too large to run
        unconfirmed; `FieldError`/`SweepSpecError` for an invalid spec or a point the simulator
        rejects (points stored before stay stored).
        """
        t0 = time.monotonic()
        self.check_size(confirm=confirm, confirm_above=confirm_above)
        own_store = not isinstance(store, ResultStore)
        db = ResultStore(store) if own_store else store
        try:
            points = self.points()
            todo = self.pending(db)
            if check and todo:
                self.check()
            elif self.metrics and not todo and points:
                stored = db.metrics([points[0].key]).get(points[0].key, {})
                for i, m in enumerate(self.metrics):
                    if m not in stored:
                        raise self._error(f"sweep.metrics[{i}]", f"{m!r} is not a field of summary.json")
            self.record(db)
            if not todo:
                return SweepReport(len(points), len(points), 0, db.path, time.monotonic() - t0)
            bar = ProgressBar(len(points), len(points) - len(todo), enabled=progress)
            owner = new_lease_owner()
            keeper = _LeaseKeeper(db.path, owner, lease_seconds)
            executor: _Inline | _Local | _Dask | None = None
            try:
                if scheduler is not None:
                    executor = _Dask(scheduler, worker_timeout)
                elif (jobs or os.cpu_count() or 1) <= 1 or len(todo) <= 1:
                    executor = _Inline()
                else:
                    executor = _Local(min(jobs or os.cpu_count() or 1, len(todo)))
                executed, by_others = self._drive(db, executor, todo, owner, lease_seconds, bar, on_point)
            finally:
                if executor is not None:
                    executor.close()
                keeper.stop()
                db.release_leases(owner)
                bar.close()
            return SweepReport(
                len(points), len(points) - len(todo), executed, db.path, time.monotonic() - t0, by_others
            )
        finally:
            if own_store:
                db.close()

    def _drive(
        self, db: ResultStore, executor: _Inline | _Local | _Dask, todo: list[Point], owner: str,
        lease_seconds: float, bar: ProgressBar, on_point: Callable[[Point], None] | None,
    ) -> tuple[int, int]:
        """Lease points as the executor has room, store what it returns. A point leased by
        another live sweep is skipped and tried again later (it is done once that sweep stores
        it, or free once its lease expires). Returns (executed here, stored by others)."""
        waiting = list(reversed(todo))  # pop() takes them in grid order
        busy: list[Point] = []  # leased by another sweep when last tried
        inflight = 0
        executed = by_others = 0
        retry_at = 0.0
        poll = min(1.0, lease_seconds / 4)
        while waiting or busy or inflight:
            if not waiting and busy and time.monotonic() >= retry_at:
                waiting, busy = list(reversed(busy)), []
                retry_at = time.monotonic() + poll
            while waiting and inflight < executor.capacity:
                point = waiting.pop()
                state = db.lease(point.key, owner, lease_seconds)
                if state == DONE:
                    by_others += 1
                    bar.step()
                elif state == BUSY:
                    busy.append(point)
                else:
                    executor.submit(point)
                    inflight += 1
            if not inflight:
                if busy:
                    time.sleep(max(0.0, retry_at - time.monotonic()))
                continue
            got = executor.next(timeout=poll)
            if got is None:
                continue
            inflight -= 1
            point, out = got
            if "error" in out:
                fld, reason = out["error"]
                where = ", ".join(f"{k} = {_show(v)}" for k, v in point.params.items())
                raise self._error("grid", f"point {point.index} ({where}): {fld}: {reason}")
            keep = self.keep_files
            try:
                db.put(
                    point.key, point.scenario.canonical_json(), point.seed, out["summary_json"],
                    [(n, c) for n, c in out["files"] if keep is None or n in keep], out["version"], out["wall_seconds"],
                )
            except StoreError as exc:
                where = ", ".join(f"{k} = {_show(v)}" for k, v in point.params.items())
                raise SweepRunError(f"point {point.index} ({where}): {exc}") from None
            executed += 1
            bar.step()
            if on_point is not None:
                on_point(point)
        return executed, by_others

    # -- results -------------------------------------------------------------------------

    def dataframe(
        self, store: ResultStore | str | os.PathLike[str], *, include_unverified: bool = False
    ) -> pandas.DataFrame:
        """One row per completed point: ``point``, ``key``, the parameters, ``status``, then the
        metrics (the selected ones, or every scalar of summary.json by dotted path). Points whose
        status is not "completed" (unverified, stalled, time_limit, interrupted) are left out
        unless `include_unverified`."""
        import pandas

        columns, rows = self.rows(store, include_unverified=include_unverified)
        return pandas.DataFrame(rows, columns=columns)

    def rows(
        self, store: ResultStore | str | os.PathLike[str], *, include_unverified: bool = False
    ) -> tuple[list[str], list[list[Any]]]:
        """Column names and one row per completed point, or per finished point with
        `include_unverified` (`reducelab.store.sweep_table`). `store` must exist."""
        own = not isinstance(store, ResultStore)
        db = open_store(store) if own else store
        try:
            points = self.points()
            both = db.statuses_and_metrics(p.key for p in points)
        finally:
            if own:
                db.close()
        return sweep_table(
            self.axis_names, self.metrics, [(p.index, p.key, p.params) for p in points],
            {k: m for k, (_, m) in both.items()}, {k: s for k, (s, _) in both.items()}, include_unverified,
        )

    def export_csv(
        self, store: ResultStore | str | os.PathLike[str], out: str | os.PathLike[str], *,
        include_unverified: bool = False,
    ) -> Path:
        """Write `rows` as CSV (lists and tables as JSON, null as empty). Returns the path."""
        columns, rows = self.rows(store, include_unverified=include_unverified)
        return write_csv(out, columns, rows)


class ScenarioSet(Sweep):
    """A sweep of explicitly listed points instead of a grid product: each point is a resolved
    scenario with its parameters (any names, e.g. a paper figure's ``series``/``fraction``).

    It runs through the same store, leases, local pool or Dask cluster as a grid sweep
    (`Sweep.run`): stored points are not run again, so an interrupted set resumes, and a point
    shared with another set (same scenario and seed) runs once. Two entries may be the same
    scenario (they share one stored result). `reducelab.figures` builds paper figures as sets.
    """

    def __init__(
        self,
        name: str,
        entries: Sequence[tuple[Mapping[str, Any], Scenario]],
        *,
        axes: Sequence[str] | None = None,
        spec: Mapping[str, Any] | None = None,
        spec_path: str = "",
        scenario_path: str = "",
        keep_files: Sequence[str] | None = None,
    ) -> None:
        if not entries:
            raise FieldError("grid", "a scenario set needs at least one point")
        self.keep_files = None if keep_files is None else tuple(keep_files)
        """Result files stored per point (None: all); summary.json is always stored. The
        reproductions keep only what they read (a 4096-node packet run's messages.csv is tens
        of MB)."""
        self.scenario = entries[0][1]
        self.name = name
        self.spec_path = spec_path
        self.scenario_path = scenario_path
        self.spec = dict(spec) if spec is not None else {}
        self.axes = ()
        self.seeds = None
        self.metrics = None
        names = list(axes) if axes is not None else list(dict.fromkeys(k for p, _ in entries for k in p))
        self._axis_names = names if "seed" in names else [*names, "seed"]
        out: list[Point] = []
        for params, scenario in entries:
            seed = scenario.to_dict().get("seed", DEFAULT_SEED)
            out.append(Point(len(out), {**params, "seed": seed}, scenario, scenario.key()))
        self._points = out

    @property
    def point_count(self) -> int:
        return len(self._points or ())

    def count_formula(self) -> str:
        return f"{self.point_count} listed points"

    def points(self) -> list[Point]:
        assert self._points is not None
        return self._points

    @property
    def axis_names(self) -> list[str]:
        return list(self._axis_names)

    def pending(self, store: ResultStore) -> list[Point]:
        """Points without a stored result, each scenario once."""
        points = self.points()
        done = store.done_keys(p.key for p in points)
        seen: set[str] = set()
        out = []
        for p in points:
            if p.key not in done and p.key not in seen:
                seen.add(p.key)
                out.append(p)
        return out

    def check(self) -> dict[str, Any]:
        """Validate the first point in the simulator without simulating (the others are
        checked when they run: an invalid one stops the set with an error naming it)."""
        from . import ScenarioError

        try:
            return flatten_summary(self.points()[0].scenario.check().summary)
        except ScenarioError as exc:
            raise self._error(exc.field, exc.reason) from None

    def _error(self, fld: str, reason: str) -> FieldError:
        return SweepSpecError(self.spec_path, fld, reason) if self.spec_path else FieldError(fld, reason)


def write_csv(out: str | os.PathLike[str], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
    """Deterministic CSV: floats in shortest round-trip form, booleans as true/false."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(v) for v in row])
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")
    return path


def _csv_cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return repr(v) if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------------------------------
# Executors: `submit` a leased point, `next` returns (point, output of run_point) as points
# finish, `capacity` is how many points may be in flight (only that many are leased at a time,
# so that concurrent sweeps share the rest).

Outcome = tuple[Point, dict[str, Any]]


class _Inline:
    """Runs each point in the calling process when asked for its result."""

    capacity = 1

    def __init__(self) -> None:
        self._queue: list[Point] = []

    def submit(self, point: Point) -> None:
        self._queue.append(point)

    def next(self, timeout: float) -> Outcome | None:
        p = self._queue.pop(0)
        return p, run_point(p.scenario.to_toml())

    def close(self) -> None:
        pass


# Local workers are `python -c _WORKER_COMMAND` processes, not a multiprocessing pool: a
# multiprocessing child (spawn or forkserver) re-imports the caller's `__main__` script, so a
# script calling `Sweep.run` without an `if __name__ == "__main__":` guard would start the sweep
# again in every worker, and a pool respawns the failing workers forever; and fork is unsafe in a
# process with threads (a Dask client, a test's LocalCluster). A worker imports only reducelab.
_WORKER_COMMAND = "from reducelab.sweep import serve_points; serve_points()"


def serve_points() -> None:
    """The loop of a local sweep worker process: one request per line on stdin
    (``{"toml": TEXT}``), one answer per line (`run_point`'s output as JSON) on the original
    stdout; anything else printed goes to stderr. Ends at end of input."""
    import signal

    # Ctrl-C reaches the whole process group; the driving process handles it and ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    for line in sys.stdin:
        request = json.loads(line)
        answers.write(json.dumps(run_point(request["toml"]), ensure_ascii=False) + "\n")
        answers.flush()


class _LocalWorker:
    """One worker process and the thread that feeds it points from a shared queue."""

    def __init__(self, tasks: queue.SimpleQueue[Point | None],
                 answers: queue.SimpleQueue[tuple[Point, dict[str, Any] | int]]) -> None:
        # This very reducelab: its folder goes first on the worker's path unless it is there
        # already (an installed package, or a checkout on PYTHONPATH).
        package_parent = json.dumps(str(Path(__file__).resolve().parent.parent))
        command = f"import sys; {package_parent} in sys.path or sys.path.insert(0, {package_parent}); {_WORKER_COMMAND}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, encoding="utf-8",
        )
        self.thread = threading.Thread(target=self._feed, args=(tasks, answers), daemon=True)
        self.thread.start()

    def _feed(self, tasks: queue.SimpleQueue[Point | None],
              answers: queue.SimpleQueue[tuple[Point, dict[str, Any] | int]]) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        while (point := tasks.get()) is not None:
            try:
                self.proc.stdin.write(json.dumps({"toml": point.scenario.to_toml()}) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (OSError, ValueError):  # the worker is gone, or we closed it
                line = ""
            if not line:
                answers.put((point, self.proc.wait()))
                return
            answers.put((point, json.loads(line)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class _Local:
    """`jobs` worker processes, started at once, fed one point at a time each."""

    def __init__(self, jobs: int) -> None:
        self._tasks: queue.SimpleQueue[Point | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[Point, dict[str, Any] | int]] = queue.SimpleQueue()
        self._workers: list[_LocalWorker] = []
        self.capacity = jobs
        for _ in range(jobs):
            self._workers.append(_LocalWorker(self._tasks, self._answers))

    def submit(self, point: Point) -> None:
        self._tasks.put(point)

    def next(self, timeout: float) -> Outcome | None:
        try:
            point, out = self._answers.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(out, int):
            raise SweepRunError(
                f"a local worker process ended with status {out} while running point {point.index} "
                "(its error output is above); stored points stay stored"
            )
        return point, out

    def close(self) -> None:
        # An error, Ctrl-C or a consumer that stops early: runs in flight are abandoned (they
        # were not stored, so the next run of the sweep does them).
        for _ in self._workers:
            self._tasks.put(None)
        for w in self._workers:
            w.stop()


class _Dask:
    """Points as tasks on a Dask distributed cluster.

    A worker that dies takes its running tasks with it; the scheduler resubmits them to the
    other workers (and reports `KilledWorker` for a task that killed several). If the cluster
    has no worker at all for `worker_timeout` seconds while points are in flight, the sweep ends
    with an error instead of waiting for a worker forever.
    """

    def __init__(self, scheduler: Any, worker_timeout: float) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise FieldError(
                "--scheduler", "running on a Dask cluster needs dask.distributed: pip install 'reducelab[sweep]'"
            ) from None
        self._own = not isinstance(scheduler, Client)
        if self._own:
            self.address = check_scheduler(scheduler)
            try:
                self.client = Client(self.address, timeout="10s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise SweepRunError(f"cannot connect to the Dask scheduler at {self.address}: {exc}") from None
        else:
            self.client = scheduler
            self.address = str(getattr(getattr(scheduler, "scheduler", None), "address", "of the given client"))
        self.worker_timeout = worker_timeout
        self._done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._points: dict[Any, Point] = {}
        self._futures: dict[Any, Any] = {}  # held: a future nobody holds is released by Dask
        self._no_workers_since: float | None = None
        self._last_check = 0.0
        self._threads = 1
        self._workers()  # the first points go to every worker thread at once

    @property
    def capacity(self) -> int:
        # Lease about as many points as the cluster can run at once (at least one, so that an
        # empty cluster is noticed by the worker timeout).
        return max(1, self._threads)

    def _workers(self) -> int:
        try:
            nthreads = self.client.nthreads()
        except Exception:  # noqa: BLE001 - a lost scheduler connection is handled by the timeout
            return 0
        self._threads = sum(nthreads.values())
        return len(nthreads)

    def submit(self, point: Point) -> None:
        # The key is the point's: a cluster shared by two sweeps runs a common point once.
        f = self.client.submit(run_point, point.scenario.to_toml(), key=f"reducelab-run-{point.key}", pure=False)
        self._points[f.key] = point
        self._futures[f.key] = f
        f.add_done_callback(self._done.put)

    def next(self, timeout: float) -> Outcome | None:
        now = time.monotonic()
        if now - self._last_check >= min(1.0, self.worker_timeout / 4) or self._last_check == 0.0:
            self._last_check = now
            if self._workers() == 0:
                if self._no_workers_since is None:
                    self._no_workers_since = now
                elif now - self._no_workers_since > self.worker_timeout:
                    raise SweepRunError(
                        f"the Dask cluster at {self.address} has had no worker for {self.worker_timeout:g} s "
                        f"with {len(self._points)} points in flight; start workers and run the sweep again "
                        "(stored points stay stored)"
                    )
            else:
                self._no_workers_since = None
        try:
            f = self._done.get(timeout=min(timeout, 0.5))
        except queue.Empty:
            return None
        point = self._points.pop(f.key, None)
        self._futures.pop(f.key, None)
        if point is None:  # cancelled by close
            return None
        try:
            return point, f.result()
        except Exception as exc:  # noqa: BLE001 - reported with the point
            kind = type(exc).__name__
            raise SweepRunError(
                f"point {point.index} failed on the Dask cluster: {kind}: {exc}"
                + (" (the workers running it died; the point may crash the simulator)" if kind == "KilledWorker" else "")
            ) from None

    def close(self) -> None:
        try:
            self.client.cancel(list(self._futures.values()), force=True)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        self._points.clear()
        self._futures.clear()
        if self._own:
            self.client.close()


class _LeaseKeeper:
    """Renews the leases of one owner every `seconds`/4 from its own thread and connection, so
    that leases outlive points that run longer than a lease (and die with the process)."""

    def __init__(self, path: Path, owner: str, seconds: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(path, owner, seconds), daemon=True)
        self._thread.start()

    def _loop(self, path: Path, owner: str, seconds: float) -> None:
        with ResultStore(path) as store:
            while not self._stop.wait(seconds / 4):
                store.renew_leases(owner, seconds)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class ProgressBar:
    """``[#####-----] 12/40 points (3 cached)  0:12 elapsed, ETA 0:35`` on stderr, redrawn in
    place, only if stderr is a terminal. The ETA extrapolates the mean time per point run so
    far (cached points cost nothing)."""

    total: int
    cached: int
    enabled: bool = True
    width: int = 30
    done: int = field(default=0, init=False)
    _t0: float = field(default_factory=time.monotonic, init=False)
    _last: float = field(default=0.0, init=False)
    _drawn: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.enabled = self.enabled and sys.stderr.isatty() and self.total > self.cached
        self.done = self.cached
        self._draw(force=True)

    def line(self, now: float) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        elapsed = now - self._t0
        ran = self.done - self.cached
        left = self.total - self.done
        eta = f"ETA {_clock(elapsed / ran * left)}" if ran and left else ("done" if not left else "ETA -")
        cached = f" ({self.cached} cached)" if self.cached else ""
        return (
            f"[{'#' * filled}{'-' * (self.width - filled)}] {self.done}/{self.total} points{cached}  "
            f"{_clock(elapsed)} elapsed, {eta}"
        )

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.enabled and (force or now - self._last > 0.2 or self.done == self.total):
            self._last = now
            sys.stderr.write("\r" + self.line(now) + "\x1b[K")
            sys.stderr.flush()
            self._drawn = True

    def step(self) -> None:
        self.done += 1
        self._draw()

    def close(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def open_store(path: str | os.PathLike[str]) -> ResultStore:
    """Open an existing store (not creating one); StoreError if there is no file."""
    if not Path(path).is_file():
        raise StoreError(f"{path}: no such file (write it with `reducelab sweep`)")
    return ResultStore(path)
