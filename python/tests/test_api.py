"""The Python API: `reducelab.run`, `Result`, `ScenarioError`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reducelab
from helpers import EXAMPLE, with_key_in_table


def test_scenario_error_is_a_value_error() -> None:
    assert issubclass(reducelab.ScenarioError, ValueError)


def test_scenario_error_fields(example_text: str) -> None:
    with pytest.raises(reducelab.ScenarioError) as info:
        reducelab.run(with_key_in_table(example_text, "network", "bogus = 1"))
    err = info.value
    assert err.field == "network.bogus"
    assert err.reason
    assert str(err) == f"{err.field}: {err.reason}"


def test_bad_seed_is_rejected_before_running() -> None:
    with pytest.raises(ValueError, match="seed must be in"):
        reducelab.run("", seed=-1)
    with pytest.raises(ValueError, match="seed must be in"):
        reducelab.run("", seed=2**64)
    with pytest.raises(TypeError):
        reducelab.run("", seed="1")  # type: ignore[arg-type]


def test_run_result_and_write(tmp_path: Path) -> None:
    result = reducelab.run_file(EXAMPLE, seed=3)
    assert result.summary["seed"] == 3
    assert {"messages.csv", "links.csv"} <= set(result.files)
    assert result.stats["events"] > 0
    out = result.write(tmp_path / "out")
    assert (out / "summary.json").read_text() == result.summary_json
    for name, contents in result.files.items():
        assert (out / name).read_bytes() == contents.encode()


def test_write_keeps_bytes_exactly(tmp_path: Path) -> None:
    result = reducelab.Result(
        summary_json=json.dumps({"seed": 1}), files={"a.csv": "x,y\r\n1,2\n"}, table="", stats={}
    )
    result.write(tmp_path)
    assert (tmp_path / "a.csv").read_bytes() == b"x,y\r\n1,2\n"
    assert result.summary == {"seed": 1}


@pytest.mark.parametrize("name", ["../escape.csv", "sub/file.csv", "", "summary.json"])
def test_write_refuses_unsafe_names(tmp_path: Path, name: str) -> None:
    result = reducelab.Result(summary_json="{}", files={name: "x"})
    with pytest.raises(ValueError):
        result.write(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "escape.csv").exists()
