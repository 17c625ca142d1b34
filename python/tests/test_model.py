"""`reducelab model`: the analytical deficiency model (crates/sched/src/model.rs)."""

from __future__ import annotations

from helpers import cli

from reducelab import _core


def test_swing_bandwidth_congestion_on_64x64_torus_matches_table2() -> None:
    m = _core.model("swing-bandwidth", "torus:64x64", 512 << 20)
    assert m["ranks"] == 4096 and m["d"] == 2 and m["steps"] == 24
    assert abs(m["congestion_deficiency"] - 1.19) <= 0.01, m["congestion_deficiency"]
    assert m["latency_deficiency"] == 2.0
    assert abs(m["bandwidth_deficiency"] - 1.0) < 0.001
    assert m["table2"] is not None and m["table2"]["congestion_deficiency"] == 1.19
    # The time is Eq. 1 with the measured deficiencies.
    n_over_d = m["size_bytes"] / m["d"]
    beta = 8 / (m["bandwidth_gbps"] * 1e9)
    eq1 = m["steps"] * m["latency_ns"] * 1e-9 + n_over_d * beta * m["bandwidth_deficiency"] * m[
        "congestion_deficiency"
    ]
    assert abs(m["time_seconds"] - eq1) <= 1e-9 * eq1


def test_cli_prints_the_model_and_table2() -> None:
    proc = cli("model", "--algorithm", "swing-bandwidth", "--topology", "torus:16x16", "--size", "64MiB")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "swing-bandwidth allreduce of 64 MiB on torus:16x16 (256 ranks, D = 2)" in out
    assert "Swing (B), Table 2" in out
    assert "1.1412" in out and "1.19" in out
    assert "α-β time" in out


def test_cli_bad_topology_exits_2_naming_the_problem() -> None:
    proc = cli("model", "--algorithm", "swing-bandwidth", "--topology", "torus:64xq")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: topology 'torus:64xq'"), proc.stderr
    assert "'q'" in proc.stderr

    proc = cli("model", "--algorithm", "swing-bandwidth", "--topology", "donut:4x4")
    assert proc.returncode == 2
    assert "unknown kind 'donut'" in proc.stderr


def test_cli_bad_algorithm_and_size_exit_2() -> None:
    proc = cli("model", "--algorithm", "nope", "--topology", "torus:4x4")
    assert proc.returncode == 2
    assert "unknown algorithm 'nope'" in proc.stderr
    proc = cli("model", "--algorithm", "ring", "--topology", "torus:4x4", "--size", "3MB")
    assert proc.returncode == 2
    assert "unknown unit 'MB'" in proc.stderr
