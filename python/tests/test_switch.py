"""`reducelab switch` and `reducelab bench switch`: the CLI runs the software switch binary
(crates/switch, docs/switch.md). The binary is built by `cargo test --workspace --release`,
which scripts/test.sh runs before this suite; without it these tests fail, naming the build
command, rather than skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import REPO, cli


def test_switch_run_reduces_exactly_on_loopback() -> None:
    proc = cli(
        "switch", "run", "--scenario", REPO / "scenarios/switch/star4_canary.toml",
        "--ip-base", "127.66.0.1", "--fault", "dup=0.05", "--timeout-s", "20", timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [h["host"] for h in out["hosts"]] == [0, 1, 2, 3]
    assert all(c["verified"] and c["stats"]["bad_blocks"] == 0 for h in out["hosts"] for c in h["collectives"])
    (sw,) = out["switches"]
    assert sw["program"]["aggregated"] > 0 and sw["program"]["descriptors_left"] == 0
    assert sw["data_plane"]["fault_duplicated"] > 0


def test_switch_errors_name_the_argument() -> None:
    proc = cli("switch", "run", "--scenario", REPO / "scenarios/switch/star4_canary.toml", "--fault", "loss=2")
    assert proc.returncode == 2
    assert "--fault loss: probability 2 is not within 0..=1" in proc.stderr
    proc = cli("switch", "switch", "--scenario", REPO / "scenarios/switch/star4_canary.toml", "--node", "0")
    assert proc.returncode == 2
    assert "node: 0 is a host, not a switch" in proc.stderr


def test_missing_binary_says_how_to_build_it() -> None:
    env = dict(os.environ, REDUCELAB_SWITCH_BIN="/nonexistent/reducelab-switch")
    proc = subprocess.run(
        [sys.executable, "-m", "reducelab", "switch", "--help-binary"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 1
    assert "REDUCELAB_SWITCH_BIN: /nonexistent/reducelab-switch is not a file" in proc.stderr


def test_switch_help_has_examples() -> None:
    proc = cli("switch", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "reducelab switch run --scenario scenarios/switch/star4_canary.toml" in proc.stdout
    proc = cli("bench", "switch", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "reducelab bench switch" in proc.stdout
