"""`reducelab bench engine` argument handling and result arithmetic (no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli
from reducelab import bench


def test_bench_engine_rejects_unknown_name() -> None:
    proc = cli("bench", "engine", "--name", "no-such-benchmark")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown benchmark 'no-such-benchmark'")


def test_bench_engine_rejects_zero_repeat() -> None:
    proc = cli("bench", "engine", "--repeat", "0")
    assert proc.returncode == 2
    assert "argument --repeat" in proc.stderr


def test_bench_engine_default_skips_the_large_ones(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reducelab import cli as cli_module

    ran: list[str] = []

    def fake(name: str, repeat: int) -> bench.EngineBench:
        ran.append(name)
        return bench.EngineBench(name, repeat, 1.0, 1.0, 1.0, 1, 1, 1, 1, 1)

    monkeypatch.setattr(bench, "names", lambda: ["small", "ndp-permutation-8k", "ndp-permutation-27k"])
    monkeypatch.setattr(bench, "run_engine_bench", fake)
    assert cli_module.main(["bench", "engine", "--repeat", "1"]) == 0
    assert ran == ["small"]
    ran.clear()
    assert cli_module.main(["bench", "engine", "--repeat", "1", "--name", "ndp-permutation-8k"]) == 0
    assert ran == ["ndp-permutation-8k"]


def test_bench_list_matches_core() -> None:
    proc = cli("bench", "engine", "--list")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == bench.names()


def test_rates_use_median_wall_time() -> None:
    row = bench.EngineBench(
        name="x", repeat=3, wall_s_median=2.0, wall_s_min=1.0, wall_s_max=5.0,
        events=10, packets=4, packet_hops=12, sim_time_ps=1, peak_rss_bytes=3 * bench.MIB,
    )
    assert row.events_per_s == 5.0
    assert row.packets_per_s == 2.0
    assert row.packet_hops_per_s == 6.0
    assert row.peak_rss_mib == 3.0
    table = bench.format_table([row])
    assert table.splitlines()[2].split()[:4] == ["x", "2.000", "1.000", "5.000"]
    assert row.to_json()["events_per_s"] == 5.0


def test_run_engine_bench_validates_repeat() -> None:
    with pytest.raises(ValueError):
        bench.run_engine_bench("anything", repeat=0)


def test_bench_collective_lists_and_rejects() -> None:
    proc = cli("bench", "collective", "--list")
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == list(bench.COLLECTIVE_BENCHES)
    proc = cli("bench", "collective", "--name", "nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown benchmark 'nope'")


def test_bench_collective_runs_a_sweep_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        bench.COLLECTIVE_BENCHES, "tiny", ("torus:4x4", ("bucket", "swing-bandwidth"), [64, 4096], "packet", "test")
    )
    row = bench.run_collective_bench("tiny", repeat=2, threads=2)
    assert (row.name, row.repeat, row.threads, row.runs, row.verified) == ("tiny", 2, 2, 4, True)
    assert 0 < row.wall_s_min <= row.wall_s_median <= row.wall_s_max
    assert row.peak_rss_bytes > 1 << 20
    assert bench.format_collective_table([row]).splitlines()[2].split()[:3] == ["tiny", "2", "4"]
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        bench.run_collective_bench("tiny", repeat=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--torus", "3x3", "--ranks", "4"], "--torus 3x3 has 9 positions but --ranks is 4: give as many ranks as "
         "positions (--ranks 9) or a torus of 4 positions"),
        (["--torus", "4x2"], None),  # default ranks: 8, checked below without running
        (["--torus", "4x2", "--ranks", "8", "--ranks", "4"], "--torus 4x2 has 8 positions but --ranks is 4"),
        (["--torus", "4x"], "--torus: '4x' is not a shape like 4x2"),
        (["--torus", "0x4"], "--torus: '0x4' is not a shape like 4x2"),
        (["--torus", "2x2x2x2x2x2x2x2x2"], "is not a shape like 4x2 (1 to 8 sizes"),
    ],
)
def test_bench_mpi_checks_the_torus_before_launching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str | None
) -> None:
    """A torus that does not fit the rank count is refused before mpirun starts (it used to
    abort inside MPI with a raw error)."""
    from reducelab import cli as cli_module, mpibench

    launched: list[int] = []

    def fake_run(ranks: int, *rest: object) -> list[mpibench.Row]:
        launched.append(ranks)
        return [mpibench.Row(ranks, "mpi", 8, 1e-6, 1e-6, 1e-6, 1)]

    monkeypatch.setattr(mpibench, "run", fake_run)
    monkeypatch.setattr(mpibench, "plot", lambda rows, out: None)
    status = cli_module.main(["bench", "mpi", *args, "--out", str(tmp_path)])
    if message is None:
        assert status == 0 and launched == [8]
    else:
        assert status == 2 and launched == []
    if message is not None:
        import subprocess
        import sys

        proc = subprocess.run([sys.executable, "-m", "reducelab", "bench", "mpi", *args, "--out", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: ") and message in proc.stderr
        assert "Traceback" not in proc.stderr


def test_check_torus_in_the_library() -> None:
    from reducelab import mpibench

    assert mpibench.check_torus("4x2", 8) == [4, 2]
    with pytest.raises(ValueError, match="has 9 positions but --ranks is 4"):
        mpibench.run(4, [8], ["mpi"], 1, torus="3x3")
