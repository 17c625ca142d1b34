"""`reducelab.Scenario` (load, change by field path, TOML out, run) and the Result DataFrames."""

from __future__ import annotations

import csv
import io
import tomllib
from pathlib import Path

import pytest

import reducelab
from helpers import EXAMPLE, LINKS_HEADER, MESSAGES_HEADER, REPO
from reducelab.scenario import FieldError, Scenario, parse_path, to_toml

TINY = Path(__file__).parent / "data" / "tiny_star.toml"
EXAMPLES = sorted((REPO / "scenarios" / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", [EXAMPLE, TINY, *EXAMPLES], ids=lambda p: p.stem)
def test_toml_round_trip(path: Path) -> None:
    doc = tomllib.loads(path.read_text())
    assert tomllib.loads(Scenario.from_file(path).to_toml()) == doc


def test_toml_writer_escapes_and_special_values() -> None:
    doc = {
        "name": 'a "quoted"\\ name\twith\x01control\x7f and ünïcode',
        "x": {"odd key": 1.5e-300, "neg": -0.0, "big": 2**63 - 1, "inf": float("inf"), "t": True},
        "list": [[1, 2], ["a"], {"inline": 1}],
        "tables": [{"a": 1, "sub": {"b": 2}}, {"a": 3}],
    }
    back = tomllib.loads(to_toml(doc))
    assert back == doc
    with pytest.raises(FieldError, match="64-bit"):
        to_toml({"x": 2**64})


def test_generated_toml_runs_like_the_file() -> None:
    from_file = reducelab.run_file(TINY)
    from_scenario = Scenario.from_file(TINY).run()
    assert from_scenario.summary_json == from_file.summary_json
    assert from_scenario.files == from_file.files


def test_with_values_and_get() -> None:
    base = Scenario.from_file(TINY)
    changed = base.with_values({"topology.bandwidth_gbps": 400, "traffic[0].bytes": 1024, "run.time_limit_us": 5})
    assert changed.get("topology.bandwidth_gbps") == 400
    assert changed.get("traffic[0].bytes") == 1024
    assert changed.get("run") == {"time_limit_us": 5}
    assert base.get("traffic[0].bytes") == 16384, "the original is unchanged"
    result = changed.with_values({"run.time_limit_us": 1000}).run()
    assert result.summary["traffic"][0]["bytes_delivered"] == 8 * 1024


@pytest.mark.parametrize(
    ("path", "value", "field", "reason"),
    [
        ("topology.bandwidth_gbps", "fast", "topology.bandwidth_gbps", "expected a number"),
        ("traffic[2].bytes", 1, "traffic[2]", "index out of range (the scenario has 1 entry)"),
        ("name.first", 1, "name.first", "name is a string, not a table"),
        ("topology[0]", 1, "topology[0]", "topology is a table, not an array"),
        ("traffic..bytes", 1, "traffic..bytes", "not a field path"),
        ("traffic[0]", 3, "traffic[0]", "expected a table"),
        ("", 1, "", "empty field path"),
        (7, 1, "7", 'a field path is a string like "traffic[0].bytes", got int 7'),
        ("topology.bandwidth_gbps", object(), "topology.bandwidth_gbps", "a object cannot be written"),
        ("topology.bandwidth_gbps", 2**70, "topology.bandwidth_gbps", "does not fit in TOML's 64-bit integers"),
        ("network.ecn_threshold_bytes", None, "network.ecn_threshold_bytes", "a NoneType cannot be written"),
        ("topology", {1: 2}, "topology", "table key 1 is not a string"),
        ("seed", True, "seed", "expected a number like the scenario's 5, got boolean true"),
    ],
)
def test_with_values_rejects(path: str, value: object, field: str, reason: str) -> None:
    # A ScenarioError like the simulator's own errors, so one `except reducelab.ScenarioError`
    # handles a bad value given in Python and a bad scenario file alike.
    with pytest.raises(reducelab.ScenarioError) as info:
        Scenario.from_file(TINY).with_values({path: value})
    assert isinstance(info.value, FieldError) and isinstance(info.value, ValueError)
    assert info.value.field == field
    assert reason in info.value.reason
    assert str(info.value) == (f"{field}: {info.value.reason}" if field else info.value.reason)


def test_with_values_wants_a_mapping() -> None:
    with pytest.raises(TypeError, match="with_values takes a mapping of field path -> value, got list"):
        Scenario.from_file(TINY).with_values([("seed", 1)])  # type: ignore[arg-type]


def test_parse_path() -> None:
    assert parse_path("traffic[0].list[2][1]") == ["traffic", 0, "list", 2, 1]
    with pytest.raises(FieldError):
        parse_path("a[-1]")


def test_key_is_canonical() -> None:
    a = Scenario.from_dict({"name": "x", "seed": 1, "topology": {"kind": "star", "hosts": 8}})
    b = Scenario.from_dict({"topology": {"hosts": 8, "kind": "star"}, "seed": 1, "name": "x"})
    assert a.key() == b.key()
    assert a.with_seed(2).key() != a.key()
    assert a.with_values({"topology.hosts": 8.0}).key() != a.key(), "100 and 100.0 parse differently"
    assert len(a.key()) == 64


def test_check_names_the_field_without_simulating() -> None:
    base = Scenario.from_file(TINY)
    probe = base.check()
    assert probe.summary["status"] == "time_limit"
    assert probe.summary["sim_time_ps"] <= 1
    with pytest.raises(reducelab.ScenarioError) as info:
        base.with_values({"network.bogus": 1}).check()
    assert info.value.field == "network.bogus"
    assert "(line" not in info.value.reason


def test_result_dataframes_match_csv() -> None:
    result = reducelab.run_file(TINY)
    for name, df, header in (
        ("messages.csv", result.messages_df(), MESSAGES_HEADER),
        ("links.csv", result.links_df(), LINKS_HEADER),
    ):
        rows = list(csv.reader(io.StringIO(result.files[name])))
        assert list(df.columns) == rows[0] == header.split(",")
        assert len(df) == len(rows) - 1 > 0
        for i, row in enumerate(rows[1:]):
            # links.csv's `kind` (host | network) is the one text column.
            def number(c: str) -> str | float:
                return c if c in ("host", "network") else float(c == "true") if c in ("true", "false") else float(c)

            assert [v if isinstance(v, str) else float(v) for v in df.iloc[i]] == [number(c) for c in row]
    msgs = result.messages_df()
    assert str(msgs["fct_ps"].dtype) == "Int64"
    assert (msgs["fct_ps"] == msgs["end_ps"] - msgs["start_ps"]).all()
    links = result.links_df()
    assert links["utilization"].between(0, 1).all()
    assert int(links["bytes"].sum()) == result.summary["links"]["total_bytes"]


def test_messages_df_undelivered_is_na() -> None:
    result = Scenario.from_file(TINY).with_values({"run.time_limit_us": 0.5}).run()
    df = result.messages_df()
    assert df["end_ps"].isna().all() and df["fct_ps"].isna().all()
    assert len(df) == result.summary["messages"]["count"]
