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


def test_endpoint_costs_add_per_step_overheads_and_cli_flags_pass_them() -> None:
    base = _core.model("bucket", "torus:8x8", 1 << 20)
    m = _core.model("bucket", "torus:8x8", 1 << 20, send_overhead_ns=400.0, recv_overhead_ns=300.0)
    # Bucket on a 2-D torus: every step, each rank sends 4 messages (serialised send
    # overheads) and receives 4 (arriving 400 ns apart, so 300 ns receives never queue).
    per_step = 4 * 400e-9 + 300e-9
    assert abs(m["endpoint_seconds"] - m["steps"] * per_step) <= 1e-15
    assert abs(m["time_seconds"] - base["time_seconds"] - m["steps"] * per_step) <= 1e-12
    assert base["endpoint_seconds"] == 0.0 and base["send_overhead_ns"] == 0.0
    # 4 ports x 100 Gb/s under a 200 Gb/s ceiling: the bandwidth term doubles.
    slow = _core.model("bucket", "torus:8x8", 1 << 20, bandwidth_gbps=100.0)
    capped = _core.model("bucket", "torus:8x8", 1 << 20, bandwidth_gbps=100.0, injection_gbps=200.0)
    assert abs(capped["time_seconds"] - slow["latency_seconds"] - 2 * slow["bandwidth_seconds"]) <= 1e-12
    proc = cli(
        "model", "-a", "bucket", "-t", "torus:8x8", "--size", "1MiB", "--send-overhead-ns", "400",
        "--recv-overhead-ns", "300", "--rendezvous-threshold-bytes", "64KiB", "--injection-gbps", "200",
    )
    assert proc.returncode == 0, proc.stderr
    assert "endpoint" in proc.stdout and "rendezvous above 64 KiB" in proc.stdout, proc.stdout
    bad = cli("model", "-a", "bucket", "-t", "torus:8x8", "--injection-gbps", "0")
    assert bad.returncode == 2 and "--injection-gbps" in bad.stderr, bad.stderr
    # The latencies overlap the next message: a step pays each once, whatever it sends.
    lat = _core.model("bucket", "torus:8x8", 1 << 20, send_overhead_ns=400.0, recv_overhead_ns=300.0,
                      send_latency_ns=170.0, recv_latency_ns=250.0)
    assert abs(lat["endpoint_seconds"] - m["steps"] * (per_step + 420e-9)) <= 1e-15
    assert (lat["send_latency_ns"], lat["recv_latency_ns"]) == (170.0, 250.0)
    proc = cli("model", "-a", "bucket", "-t", "torus:8x8", "--size", "1MiB", "--send-latency-ns", "170",
               "--recv-latency-ns", "250")
    assert proc.returncode == 0 and "send latency 170 ns and receive latency 250 ns per step" in proc.stdout, proc.stdout
    bad = cli("model", "-a", "bucket", "-t", "torus:8x8", "--recv-latency-ns", "-1")
    assert bad.returncode == 2 and "--recv-latency-ns" in bad.stderr, bad.stderr
