"""Scenarios as Python values: load, change fields by dotted path, write TOML, run.

A `Scenario` holds the parsed TOML document of a scenario file (plain dicts, lists and scalars) and
changes fields by the same dotted paths the simulator names in its errors (``network.mtu_bytes``,
``traffic[0].bytes``, ``topology.dims[1]``). It does not know the scenario schema: the simulator
validates a scenario when it runs (`ScenarioError`), and `check` asks it to do so without
simulating.

Two scenarios are the same point of an experiment exactly when their canonical forms
(`canonical_json`) are equal; `key` is the SHA-256 of that form and names stored results
(see `reducelab.sweep`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._core import ScenarioError
from .runs import Result, check_seed, run

KEY_FORMAT = "reducelab-point-v1"
"""Prefix of the hashed canonical form; bumped if the form ever changes meaning."""

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SEGMENT = re.compile(r"([A-Za-z0-9_-]+)((?:\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")
_LINE_SUFFIX = re.compile(r" \(line \d+(?:, column \d+)?\)$")
_I64 = 2**63

PathPart = str | int


class FieldError(ScenarioError):
    """A field path or value was rejected before the simulator saw it: a `ScenarioError` (so a
    ValueError) whose `str(err)` is ``"FIELD: REASON"``. Every error of `Scenario.with_values`
    and `set_field` is one."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        """Dotted path of the offending field."""
        self.reason = reason
        """Why it is wrong."""


def parse_path(path: str) -> list[PathPart]:
    """Split a dotted field path into keys (str) and list indices (int).

    ``"traffic[0].bytes"`` gives ``["traffic", 0, "bytes"]``. Raises `FieldError` for a path that
    is not a dot-separated list of bare TOML keys, each optionally followed by ``[N]`` indices.
    """
    if not isinstance(path, str):
        raise FieldError(str(path), f"a field path is a string like \"traffic[0].bytes\", got {type(path).__name__} {path!r}")
    if not path:
        raise FieldError("", "empty field path")
    parts: list[PathPart] = []
    for segment in path.split("."):
        m = _SEGMENT.fullmatch(segment)
        if m is None:
            raise FieldError(
                path,
                f"not a field path: {segment!r} is not a key (letters, digits, _ and -) "
                "optionally followed by [INDEX]",
            )
        parts.append(m.group(1))
        parts.extend(int(i) for i in _INDEX.findall(m.group(2)))
    return parts


def format_path(parts: list[PathPart]) -> str:
    """Inverse of `parse_path`."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else p
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def _check_value(value: Any, where: str) -> None:
    """Raise FieldError unless `value` is representable in TOML (and JSON)."""
    if isinstance(value, bool) or isinstance(value, str):
        return
    if isinstance(value, int):
        if not -_I64 <= value < _I64:
            raise FieldError(where, f"integer {value} does not fit in TOML's 64-bit integers")
        return
    if isinstance(value, float):
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_value(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise FieldError(where, f"table key {k!r} is not a string")
            _check_value(v, f"{where}.{k}" if where else k)
        return
    raise FieldError(where, f"a {type(value).__name__} cannot be written to a scenario file")


def _array_index(cur: Any, parts: list[PathPart], i: int, here: str) -> int:
    """`parts[i]` (an index) checked against `cur`: FieldError `here` unless `cur` is an array
    that long."""
    part = parts[i]
    assert isinstance(part, int)
    if not isinstance(cur, list):
        raise FieldError(here, f"{format_path(parts[:i])} is a {_kind(cur)}, not an array")
    if part >= len(cur):
        raise FieldError(here, _out_of_range(cur))
    return part


def get_field(doc: Mapping[str, Any], path: str) -> Any:
    """The value at dotted `path` of a scenario document; FieldError if it is not there."""
    cur: Any = doc
    parts = parse_path(path)
    for i, part in enumerate(parts):
        here = format_path(parts[: i + 1])
        if isinstance(part, int):
            cur = cur[_array_index(cur, parts, i, here)]
        else:
            if not isinstance(cur, dict):
                raise FieldError(here, f"{format_path(parts[:i])} is a {_kind(cur)}, not a table")
            if part not in cur:
                raise FieldError(here, "not in the scenario")
            cur = cur[part]
    return cur


def set_field(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set dotted `path` of a scenario document to `value`, in place.

    Missing tables on the way and a missing last key are created (the simulator then decides
    whether the key exists); array indices must exist. Replacing an existing value by one of
    another kind (number, string, boolean, array, table) is a `FieldError`: a sweep over
    ``network.mtu_bytes = ["9000"]`` is a typo, not an experiment.
    """
    parts = parse_path(path)
    _check_value(value, path)
    cur: Any = doc
    for i, part in enumerate(parts[:-1]):
        here = format_path(parts[: i + 1])
        nxt = parts[i + 1]
        if isinstance(part, int):
            cur = cur[_array_index(cur, parts, i, here)]
            continue
        if not isinstance(cur, dict):
            raise FieldError(here, f"{format_path(parts[:i])} is a {_kind(cur)}, not a table")
        if part not in cur:
            if isinstance(nxt, int):
                raise FieldError(here, "not in the scenario, so it has no entry to index")
            cur[part] = {}
        cur = cur[part]
    last = parts[-1]
    if isinstance(last, int):
        old = cur[_array_index(cur, parts, len(parts) - 1, path)]
    else:
        if not isinstance(cur, dict):
            raise FieldError(path, f"{format_path(parts[:-1])} is a {_kind(cur)}, not a table")
        if last not in cur:
            cur[last] = copy.deepcopy(value)
            return
        old = cur[last]
    if _kind(old) != _kind(value):
        raise FieldError(
            path,
            f"expected a {_kind(old)} like the scenario's {_show(old)}, got {_kind(value)} {_show(value)}",
        )
    cur[last] = copy.deepcopy(value)


def _out_of_range(items: list[Any]) -> str:
    n = len(items)
    return f"index out of range (the scenario has {n} {'entry' if n == 1 else 'entries'})"


def _show(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# TOML writing (tomllib only reads).


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_string(s: str) -> str:
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # shortest round-trip form, always with '.' or an exponent
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _emit_table(table: Mapping[str, Any], prefix: str, lines: list[str]) -> None:
    for k, v in table.items():
        if not isinstance(v, dict) and not _is_table_array(v):
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in table.items():
        name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
        if isinstance(v, dict):
            lines.append("")
            lines.append(f"[{name}]")
            _emit_table(v, name, lines)
        elif _is_table_array(v):
            for entry in v:
                lines.append("")
                lines.append(f"[[{name}]]")
                _emit_table(entry, name, lines)


def to_toml(doc: Mapping[str, Any]) -> str:
    """A TOML document for `doc` (dicts, lists, str, int, float, bool) that `tomllib` reads back
    equal to `doc`."""
    _check_value(dict(doc), "")
    lines: list[str] = []
    _emit_table(doc, "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------


class Scenario:
    """A scenario document that can be changed by field path, written as TOML and run.

    Example::

        base = Scenario.from_file("scenarios/examples/torus_permutation.toml")
        fast = base.with_values({"topology.bandwidth_gbps": 800, "traffic[0].bytes": 1 << 20})
        result = fast.run(seed=2)
        result.messages_df()
    """

    __slots__ = ("_doc",)

    def __init__(self, doc: Mapping[str, Any]) -> None:
        if not isinstance(doc, Mapping):
            raise TypeError(f"a scenario is a mapping (TOML table), not {type(doc).__name__}")
        plain = copy.deepcopy(dict(doc))
        _check_value(plain, "")
        self._doc: dict[str, Any] = plain

    @classmethod
    def from_toml(cls, text: str) -> Scenario:
        """Parse TOML text. Raises `FieldError` (field empty) for text that is not TOML."""
        try:
            return cls(tomllib.loads(text))
        except tomllib.TOMLDecodeError as exc:
            raise FieldError("", f"not valid TOML: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Scenario:
        """Read a TOML scenario file."""
        return cls.from_toml(Path(path).read_text(encoding="utf-8"))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Scenario:
        """A scenario from a dict shaped like the TOML file (deep-copied)."""
        return cls(doc)

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the document."""
        return copy.deepcopy(self._doc)

    def to_toml(self) -> str:
        """The scenario as TOML text."""
        return to_toml(self._doc)

    @property
    def name(self) -> str:
        """The scenario's ``name`` (empty if missing)."""
        name = self._doc.get("name")
        return name if isinstance(name, str) else ""

    def get(self, path: str) -> Any:
        """The value at a dotted field path (a copy). Raises `FieldError` if it is not set."""
        return copy.deepcopy(get_field(self._doc, path))

    def with_values(self, values: Mapping[str, Any]) -> Scenario:
        """A copy with each dotted field path of `values` set (see `set_field`).

        Raises `FieldError` (a `ScenarioError`) naming the path for a bad path or value, and
        TypeError if `values` is not a mapping."""
        if not isinstance(values, Mapping):
            raise TypeError(f"with_values takes a mapping of field path -> value, got {type(values).__name__}")
        doc = copy.deepcopy(self._doc)
        for path, value in values.items():
            set_field(doc, path, value)
        new = Scenario.__new__(Scenario)
        new._doc = doc
        return new

    def with_seed(self, seed: int) -> Scenario:
        """A copy whose ``seed`` field is `seed`."""
        check_seed(seed)
        return self.with_values({"seed": seed})

    def canonical_json(self) -> str:
        """The canonical form: compact JSON with sorted keys (TOML key order does not matter).

        An integer and a float stay different (``100`` vs ``100.0``) because the scenario parser
        treats them differently.
        """
        return json.dumps(self._doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def key(self) -> str:
        """SHA-256 (hex) of `KEY_FORMAT` and `canonical_json`: the name of this exact point."""
        h = hashlib.sha256()
        h.update(KEY_FORMAT.encode())
        h.update(b"\n")
        h.update(self.canonical_json().encode("utf-8"))
        return h.hexdigest()

    def run(self, *, seed: int | None = None, progress: bool = False) -> Result:
        """Run the scenario (see `reducelab.run`); raises `ScenarioError` if it is invalid."""
        return run(self.to_toml(), seed=seed, progress=progress)

    def check(self) -> Result:
        """Validate the scenario in the simulator without simulating it.

        Builds the topology, routes and traffic (the schedule or timing plan of the backend that
        ``run.backend`` resolves to) and stops at simulated time 1 ps (`reducelab.run`'s
        `probe`; status ``"time_limit"``). Raises `ScenarioError` as `run` would; the reason has
        no TOML line number, since the text is generated. Returns the probe's result, whose
        summary has every key a full run's on the same backend has.
        """
        from . import ScenarioError

        try:
            return run(self.to_toml(), probe=True)
        except ScenarioError as exc:
            reason = _LINE_SUFFIX.sub("", exc.reason)
            err = ScenarioError(f"{exc.field}: {reason}" if exc.field else reason)
            err.field, err.reason = exc.field, reason
            raise err from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scenario) and self._doc == other._doc

    def __hash__(self) -> int:
        return hash(self.canonical_json())

    def __repr__(self) -> str:
        return f"Scenario(name={self.name!r}, key={self.key()[:12]})"
