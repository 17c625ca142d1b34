"""The MPI runtime (mpi/, docs/mpi.md) against Open MPI's own collectives, driven through mpirun.

Needs `mpirun` and the libraries built by scripts/setup.sh (mpi/build/). Without them these
tests are skipped, unless REDUCELAB_REQUIRE_MPI=1 (scripts/test.sh sets it) makes that a failure.
The reference runs disable Open MPI 4.1.4's AVX reduction component (`--mca op ^avx`), whose
8-bit sums are wrong.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "mpi" / "build"
PRELOAD = BUILD / "libreducelab_pmpi.so"
MPIRUN = shutil.which("mpirun")
REQUIRED = os.environ.get("REDUCELAB_REQUIRE_MPI") == "1"

_missing = None
if MPIRUN is None:
    _missing = "mpirun not found (scripts/setup.sh installs Open MPI)"
elif not (BUILD / "test_mpi").exists() or not PRELOAD.exists():
    _missing = f"{BUILD} not built (run scripts/setup.sh)"
if _missing and REQUIRED:
    raise RuntimeError(f"REDUCELAB_REQUIRE_MPI=1 but {_missing}")
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")


def mpirun(np_: int, argv: list[str], env: dict[str, str] | None = None, preload: bool = False,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [MPIRUN or "mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "op", "^avx", "-np", str(np_)]
    # `auto` hands small allreduces to the library (docs/mpi.md); tests of the schedules turn
    # that off unless they set REDUCELAB_RULES themselves
    env = {"REDUCELAB_RULES": "none", **(env or {})}
    if preload:
        env["LD_PRELOAD"] = str(PRELOAD)
    for key, value in env.items():
        cmd += ["-x", f"{key}={value}"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("REDUCELAB_")}
    return subprocess.run(cmd + argv, capture_output=True, text=True, timeout=timeout, env=base)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 12])
def test_rl_api_matches_mpi(p: int) -> None:
    """Every algorithm x every valid predefined (op, type) x counts x in place, user ops,
    tori, reduce-scatter/allgather, nonblocking, persistent, bad arguments (mpi/tests/test_mpi.c)."""
    out = ok(mpirun(p, [str(BUILD / "test_mpi")]))
    m = re.search(r"test_mpi p=(\d+): (\d+) checks on rank 0 \((\d+) over all ranks\), (\d+) failures", out)
    assert m, out
    assert int(m.group(1)) == p and int(m.group(4)) == 0
    assert int(m.group(2)) > 10_000  # the whole matrix ran, not an early exit


@pytest.mark.parametrize(("p", "segment"), [(3, 24), (8, 40), (5, 0)])
def test_rl_api_matches_mpi_with_segmented_messages(p: int, segment: int) -> None:
    """The same matrix with messages split into REDUCELAB_SEGMENT-byte pieces (applied as they
    arrive) or never split (0)."""
    out = ok(mpirun(p, [str(BUILD / "test_mpi")], {"REDUCELAB_SEGMENT": str(segment)}))
    m = re.search(r"test_mpi p=(\d+): (\d+) checks on rank 0 \((\d+) over all ranks\), (\d+) failures", out)
    assert m and int(m.group(4)) == 0 and int(m.group(2)) > 10_000, out


@pytest.mark.parametrize(
    ("algorithm", "p"),
    [("auto", 2), ("auto", 8), ("ring", 3), ("ring", 8), ("swing", 5), ("swing", 8), ("recursive-doubling", 6),
     ("recursive-doubling", 7), ("rabenseifner", 4), ("rabenseifner", 7), ("bucket", 6), ("bucket", 8),
     ("swing-latency", 3), ("mpi", 4), ("shm", 4)],
)
def test_interposition(algorithm: str, p: int) -> None:
    """An unmodified MPI program (no link to ReduceLab) gets ReduceLab's collectives."""
    out = ok(mpirun(p, [str(BUILD / "test_pmpi")], {"REDUCELAB_ALLREDUCE": algorithm}, preload=True))
    m = re.search(r"(\d+) intercepted-call checks, (\d+) scheduled, (\d+) failures", out)
    assert m, out
    calls, scheduled, failures = map(int, m.groups())
    assert failures == 0
    assert scheduled == (0 if algorithm == "mpi" else calls)


@pytest.mark.parametrize(("torus", "algorithm"), [("4x2", "swing"), ("4x2", "hamiltonian-rings"), ("2x2x2", "bucket"),
                                                  ("3x2", "recursive-doubling-mirrored")])
def test_interposition_on_a_virtual_torus(torus: str, algorithm: str) -> None:
    p = 1
    for d in torus.split("x"):
        p *= int(d)
    out = ok(mpirun(p, [str(BUILD / "test_pmpi")], {"REDUCELAB_ALLREDUCE": algorithm, "REDUCELAB_TORUS": torus},
                    preload=True))
    assert " 0 failures" in out


def _registry_names() -> list[str]:
    import reducelab

    return [a.name for a in reducelab.algorithms() if "allreduce" in a.collectives]


@pytest.mark.parametrize("algorithm", _registry_names())
def test_every_registry_name_runs_through_the_interposition_library(algorithm: str) -> None:
    """Every name of the algorithm registry that runs allreduce as REDUCELAB_ALLREDUCE on an 8-rank 4x2 torus (where
    every variant builds): MPI_Allreduce and the other intercepted calls give MPI's results and
    every call ran a ReduceLab schedule (none fell back to the MPI library)."""
    out = ok(mpirun(8, [str(BUILD / "test_pmpi")], {"REDUCELAB_ALLREDUCE": algorithm, "REDUCELAB_TORUS": "4x2"},
                    preload=True))
    m = re.search(r"(\d+) intercepted-call checks, (\d+) scheduled, (\d+) failures", out)
    assert m, out
    calls, scheduled, failures = map(int, m.groups())
    assert failures == 0 and calls > 0 and scheduled == calls


def test_counters_detect_a_missing_preload() -> None:
    """The interception check is real: without LD_PRELOAD the program notices."""
    proc = mpirun(2, [str(BUILD / "test_pmpi")])
    assert proc.returncode != 0 and "interposition library not loaded" in proc.stderr
    ok(mpirun(2, [str(BUILD / "test_pmpi")], {"EXPECT_INTERCEPT": "0"}))


@pytest.mark.parametrize(("var", "value", "message"), [
    ("REDUCELAB_ALLREDUCE", "fastest-please",
     "unknown ReduceLab algorithm 'fastest-please' (known: ring, ring-bidirectional, hamiltonian-rings"),
    ("REDUCELAB_TORUS", "4xx2", "REDUCELAB_TORUS='4xx2'"),
])
def test_bad_environment_is_a_clear_mpi_error(var: str, value: str, message: str) -> None:
    """A bad setting is reported through MPI's error handler (fatal by default), not ignored."""
    proc = mpirun(2, [str(BUILD / "test_pmpi")], {var: value}, preload=True)
    assert proc.returncode != 0
    assert message in proc.stderr  # (the error class is checked by test_mpi.c with MPI_ERRORS_RETURN)


@pytest.mark.parametrize("program", ["test_fortran", "test_fortran08"])
def test_fortran_bindings_are_intercepted(program: str) -> None:
    """mpif.h/`use mpi` (mpi_allreduce_) and `use mpi_f08` (ompi_allreduce_f), 3 calls each."""
    if not (BUILD / program).exists():
        if REQUIRED and shutil.which("mpifort"):
            pytest.fail(f"{program} not built although mpifort exists")
        pytest.skip("no Fortran compiler (mpifort)")
    proc = mpirun(4, [str(BUILD / program)], {"REDUCELAB_VERBOSE": "1", "REDUCELAB_ALLREDUCE": "swing"},
                  preload=True)
    assert f"{program}: PASS" in ok(proc)
    lines = re.findall(r"reducelab: (\d+) collectives ran ReduceLab schedules, (\d+) went", proc.stderr)
    assert len(lines) == 4 and all(s == "3" and f == "0" for s, f in lines), proc.stderr


mpi4py = pytest.importorskip("mpi4py") if not REQUIRED else __import__("mpi4py")


@pytest.mark.parametrize(("algorithm", "p"), [("auto", 1), ("swing", 4), ("ring", 7), ("rabenseifner", 8)])
def test_mpi4py_with_the_interposition_library(algorithm: str, p: int) -> None:
    script = Path(__file__).parent / "mpi" / "mpi4py_allreduce.py"
    # mpi4py asks for MPI_THREAD_MULTIPLE; this script calls from one thread (docs/mpi.md, Threads)
    out = ok(mpirun(p, [sys.executable, str(script)], {"REDUCELAB_ALLREDUCE": algorithm,
                                                        "REDUCELAB_THREADS": "serialized"}, preload=True))
    m = re.search(r"mpi4py: OK (\d+) (\d+) (\d+)", out)
    assert m, out
    calls, scheduled, total = map(int, m.groups())
    assert scheduled >= calls > 100 and total == calls * p


def test_mpi4py_with_the_progress_thread() -> None:
    """mpi4py asks for MPI_THREAD_MULTIPLE; with REDUCELAB_THREADS=serialized its calls keep the
    schedules, so REDUCELAB_PROGRESS=thread starts the progress thread (the mutex then guards the
    active operations against it) and every result is still exact."""
    script = Path(__file__).parent / "mpi" / "mpi4py_allreduce.py"
    proc = mpirun(4, [sys.executable, str(script)], {"REDUCELAB_ALLREDUCE": "swing", "REDUCELAB_THREADS": "serialized",
                                                     "REDUCELAB_PROGRESS": "thread", "REDUCELAB_VERBOSE": "1"},
                  preload=True)
    m = re.search(r"mpi4py: OK (\d+) (\d+) (\d+)", ok(proc))
    assert m, proc.stdout
    calls, scheduled, total = map(int, m.groups())
    assert scheduled >= calls > 100 and total == calls * 4
    assert proc.stderr.count("reducelab: progress thread started (REDUCELAB_PROGRESS=thread)") == 4, proc.stderr


def test_bench_mpi_cli(tmp_path: Path) -> None:
    """`reducelab bench mpi` end to end on a tiny sweep (no timing assertions): table, CSV, plot."""
    from helpers import cli

    proc = cli("bench", "mpi", "--ranks", "3", "--sizes", "8", "64KiB", "--reps", "2", "--round-bytes", "1MiB",
               "--algorithm", "mpi", "--algorithm", "ring", "--algorithm", "swing-bandwidth", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "3 ranks: median" in proc.stdout and "64 KiB" in proc.stdout
    rows = (tmp_path / "mpi-bench.csv").read_text().splitlines()
    assert rows[0].startswith("ranks,algorithm,bytes,median_s") and len(rows) == 1 + 3 * 2
    assert all(line.split(",")[6] == "2" for line in rows[1:])  # every (algorithm, size) has both rounds
    assert (tmp_path / "mpi-bench.png").stat().st_size > 1000


def test_bench_mpi_cli_rejects_an_unknown_algorithm(tmp_path: Path) -> None:
    from helpers import cli

    proc = cli("bench", "mpi", "--ranks", "2", "--sizes", "8", "--reps", "1", "--algorithm", "warp-drive",
               "--out", tmp_path)
    assert proc.returncode == 1
    assert "unknown ReduceLab algorithm 'warp-drive'" in proc.stderr


HOLES = re.compile(r"test_holes p=(\d+): (\d+) checks, (\d+) scheduled of (\d+) expected, (\d+) failures")


@pytest.mark.parametrize("p", [2, 3, 4])
def test_datatypes_with_holes_rl_api(p: int) -> None:
    """Vector, resized and indexed types (and a contiguous control) through RL_Allreduce (user
    commutative and non-commutative ops, in place), RL_Reduce_scatter_block, RL_Allgather,
    RL_Iallreduce and persistent restarts, six algorithms: every gap byte keeps its sentinel,
    covered ints are exact, send buffers unchanged, and the user-op calls ran schedules
    (mpi/tests/test_holes.c)."""
    out = ok(mpirun(p, [str(BUILD / "test_holes_rl")]))
    m = HOLES.search(out)
    assert m, out
    got_p, checks, scheduled, expected, failures = map(int, m.groups())
    assert got_p == p and failures == 0
    assert expected > 1000 and scheduled >= expected
    assert checks > 5000 * p


@pytest.mark.parametrize(("algorithm", "p"), [("auto", 2), ("ring", 3), ("swing", 4), ("rabenseifner", 3),
                                              ("recursive-doubling", 4), ("shm", 3)])
def test_datatypes_with_holes_interposed(algorithm: str, p: int) -> None:
    """The same program as plain MPI under LD_PRELOAD: MPI_Allreduce, MPI_Reduce_scatter_block,
    MPI_Allgather, MPI_Iallreduce + MPI_Wait and MPIX_Allreduce_init/MPI_Start/MPI_Wait."""
    out = ok(mpirun(p, [str(BUILD / "test_holes")], {"REDUCELAB_ALLREDUCE": algorithm}, preload=True))
    m = HOLES.search(out)
    assert m, out
    got_p, checks, scheduled, expected, failures = map(int, m.groups())
    assert got_p == p and failures == 0
    assert expected >= 300 and scheduled >= expected
    assert checks > 1000 * p


def test_datatypes_with_holes_library_alone() -> None:
    """Without ReduceLab the program passes against the MPI library itself (its checks are MPI's
    semantics, not ReduceLab's)."""
    out = ok(mpirun(3, [str(BUILD / "test_holes")], {"EXPECT_INTERCEPT": "0"}))
    m = HOLES.search(out)
    assert m and int(m.group(5)) == 0, out


@pytest.mark.parametrize(("algorithm", "p"), [("auto", 2), ("auto", 3), ("auto", 4), ("ring", 4), ("swing", 3),
                                              ("rabenseifner", 2)])
def test_mismatched_counts_are_an_error_in_checking_mode(algorithm: str, p: int) -> None:
    """16383 vs 16385 elements (either side of auto's 64 KiB switch) with REDUCELAB_CHECK=1:
    MPI_Allreduce, MPI_Iallreduce + MPI_Wait and MPI_Reduce_scatter_block (5 vs 6) return
    MPI_ERR_TRUNCATE on every rank, and a consistent call afterwards is exact (test_counts.c)."""
    out = ok(mpirun(p, [str(BUILD / "test_counts")], {"REDUCELAB_CHECK": "1", "REDUCELAB_ALLREDUCE": algorithm},
                    preload=True, timeout=60))
    m = re.search(r"test_counts p=(\d+): (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == p and int(m.group(3)) == 0 and int(m.group(2)) == 6 * p, out


def test_checking_mode_keeps_every_result() -> None:
    """With REDUCELAB_CHECK=1 the whole RL_* matrix (consistent counts) still matches the library."""
    out = ok(mpirun(3, [str(BUILD / "test_mpi")], {"REDUCELAB_CHECK": "1"}))
    m = re.search(r"test_mpi p=(\d+): (\d+) checks on rank 0 \((\d+) over all ranks\), (\d+) failures", out)
    assert m and int(m.group(4)) == 0 and int(m.group(2)) > 10_000, out


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_new_kernels_match_the_library(p: int) -> None:
    """MPI_CHAR (10 ops), MPI_CXX_BOOL (logical ops) and eight complex type names (SUM, PROD)
    run ReduceLab schedules (no fall-through) and equal MPI_Allreduce, five algorithms x four
    counts (mpi/tests/test_kernels.c)."""
    proc = mpirun(p, [str(BUILD / "test_kernels")], {"REDUCELAB_VERBOSE": "1"})
    out = ok(proc)
    m = re.search(r"test_kernels p=(\d+): (\d+) pairs, (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == p and int(m.group(4)) == 0, out
    assert int(m.group(2)) >= 23  # CHAR 10 + CXX_BOOL 3 + at least the five C/C++ complex names x 2
    assert int(m.group(3)) >= int(m.group(2)) * 4 * 5 * p
    # the MPI_BYTE/MPI_SUM fall-through is explained once per process, not once per call
    notices = re.findall(r"reducelab: falling back to the MPI library \(said once per reason\): (.*)", proc.stderr)
    assert notices == ["MPI_SUM on MPI_BYTE: no ReduceLab kernel for this (op, datatype) pair"] * p, proc.stderr


@pytest.mark.parametrize("p", [2, 4])
def test_thread_multiple_falls_through_to_the_library(p: int) -> None:
    """Two threads per rank on their own communicators (MPI_Allreduce, MPI_Iallreduce + MPI_Wait)
    at MPI_THREAD_MULTIPLE: exact results, no crash, every call handed to the MPI library and
    said once with REDUCELAB_VERBOSE (mpi/tests/test_threads.c)."""
    proc = mpirun(p, [str(BUILD / "test_threads")], {"REDUCELAB_VERBOSE": "1"}, preload=True, timeout=120)
    out = ok(proc)
    if "skipped" in out:
        pytest.skip(out.strip())
    m = re.search(r"test_threads p=(\d+): (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == p and int(m.group(3)) == 0 and int(m.group(2)) == 501 * p, out
    assert proc.stderr.count("MPI_THREAD_MULTIPLE (ReduceLab's per-process state is not locked") == p


PROGRESS = re.compile(r"test_progress (\w+) p=(\d+) seed=(\d+): (\d+) checks, (\d+) failures")


def _progress(mode: str, p: int, seed: int, env: dict[str, str] | None = None, preload: bool = True,
              alarm: int = 40) -> subprocess.CompletedProcess[str]:
    """mpi/tests/test_progress.c MODE SEED: every allreduce checked element by element against the
    closed-form sum; a hang past `alarm` seconds prints TIMEOUT and fails."""
    return mpirun(p, [str(BUILD / "test_progress"), mode, str(seed), str(alarm)], env, preload=preload,
                  timeout=alarm + 30)


def _progress_ok(proc: subprocess.CompletedProcess[str], mode: str, p: int, min_checks: int) -> None:
    m = PROGRESS.search(ok(proc))
    assert m, proc.stdout
    assert m.group(1) == mode and int(m.group(2)) == p and int(m.group(5)) == 0, proc.stdout
    assert int(m.group(4)) >= min_checks, proc.stdout


@pytest.mark.parametrize(("p", "seed", "progress"), [(2, 1, "none"), (3, 2, "none"), (4, 3, "thread")])
def test_polling_with_request_get_status_completes(p: int, seed: int, progress: str) -> None:
    """MPI_Iallreduce (1, 1000 and 300000 ints, on fresh communicators) and a persistent allreduce
    completed by polling MPI_Request_get_status alone (it never completed before: the call was
    not intercepted); the result is exact as soon as the flag is set."""
    proc = _progress("getstatus", p, seed, {"REDUCELAB_PROGRESS": progress})
    _progress_ok(proc, "getstatus", p, 3 * p * 9)


@pytest.mark.parametrize(("p", "seed"), [(2, 1), (3, 2), (4, 3), (4, 4)])
def test_fresh_communicators_started_in_opposite_orders_complete(p: int, seed: int) -> None:
    """Neighbouring ranks start MPI_Iallreduce on two fresh communicators in opposite orders,
    four rounds (the first call's blocking communicator duplicate deadlocked this)."""
    _progress_ok(_progress("crossorder", p, seed), "crossorder", p, 8 * p)


@pytest.mark.parametrize("seed", [1, 2])
def test_rank_blocked_in_recv_completes_with_the_progress_thread(seed: int) -> None:
    """p = 4: ranks 0 and 2 start MPI_Iallreduce (small and 0.4-0.8 MB) on fresh communicators,
    compute without MPI calls and block in MPI_Recv from ranks 1 and 3, which send only after
    their own allreduces completed: completes with REDUCELAB_PROGRESS=thread."""
    proc = _progress("blocked", 4, seed, {"REDUCELAB_PROGRESS": "thread", "REDUCELAB_VERBOSE": "1"})
    _progress_ok(proc, "blocked", 4, 4 * 6)
    assert proc.stderr.count("reducelab: progress thread started (REDUCELAB_PROGRESS=thread)") == 4, proc.stderr


@pytest.mark.parametrize(("mode", "p", "seed", "progress", "min_checks"), [
    ("getstatus", 4, 1, "none", 3 * 4 * 9), ("crossorder", 3, 3, "none", 8 * 3), ("mixed", 3, 5, "thread", 100),
    ("blocked", 4, 1, "thread", 4 * 6)])
def test_progress_programs_with_the_shared_memory_allreduce(mode: str, p: int, seed: int, progress: str,
                                                            min_checks: int) -> None:
    """The same progress programs with every allreduce named `shm` (MPI_Iallreduce and the
    persistent ones run it as nonblocking operations, their segments made from progress):
    polling MPI_Request_get_status, fresh communicators in opposite orders, shuffled completion
    calls with the progress thread, a rank blocked in MPI_Recv with the progress thread; exact,
    and never declined (REDUCELAB_VERBOSE would say `shm not used`)."""
    proc = _progress(mode, p, seed, {"REDUCELAB_ALLREDUCE": "shm", "REDUCELAB_PROGRESS": progress,
                                     "REDUCELAB_VERBOSE": "1"})
    _progress_ok(proc, mode, p, min_checks)
    assert "shm not used" not in proc.stderr, proc.stderr[-2000:]


def test_rank_blocked_in_recv_hangs_without_the_progress_thread() -> None:
    """The control: the same program without the progress thread deadlocks (and the alarm turns
    the hang into a failure), so the test above can fail."""
    proc = _progress("blocked", 4, 1, alarm=4)
    assert proc.returncode != 0 and "TIMEOUT" in proc.stderr, (proc.stdout, proc.stderr[-2000:])


@pytest.mark.parametrize(("p", "seed", "progress"), [
    (2, 1, "none"), (2, 2, "thread"), (3, 3, "none"), (3, 4, "thread"), (4, 5, "none"), (4, 6, "thread"),
    (4, 7, "none"), (5, 8, "none")])
def test_completion_family_over_mixed_requests(p: int, seed: int, progress: str) -> None:
    """Six rounds of 12 shuffled requests: two MPI_Iallreduce, a started and an inactive
    persistent allreduce (ReduceLab's), MPI_Irecv/MPI_Isend, MPI_Ibarrier, a started and an
    inactive persistent receive (the library's) and MPI_REQUEST_NULL, completed by
    MPI_Waitany / Waitsome / Testsome / Testany / Testall / Waitall / Test as the seed picks, with
    and without MPI_STATUS(ES)_IGNORE: each index returned once for an active request, receive
    statuses (source, tag, count) and collective statuses (0 elements, not cancelled) right,
    handles freed or kept as MPI says, sums exact."""
    proc = _progress("mixed", p, seed, {"REDUCELAB_PROGRESS": progress})
    _progress_ok(proc, "mixed", p, 6 * 12 * p)


@pytest.mark.parametrize("progress", ["none", "thread"])
def test_cancel_and_free_of_a_running_allreduce(progress: str) -> None:
    """MPI_Cancel on a ReduceLab MPI_Iallreduce has no effect (completes, not cancelled);
    MPI_Request_free on a running one sets MPI_REQUEST_NULL and it completes in the background."""
    _progress_ok(_progress("cancel", 3, 1, {"REDUCELAB_PROGRESS": progress}), "cancel", 3, 3 * 6)


@pytest.mark.parametrize("mode", ["getstatus", "crossorder", "blocked", "mixed"])
def test_progress_program_passes_against_the_library_alone(mode: str) -> None:
    """Without ReduceLab the same checks pass against the MPI library (they are MPI's semantics)."""
    proc = _progress(mode, 4, 9, {"EXPECT_INTERCEPT": "0"}, preload=False)
    m = PROGRESS.search(ok(proc))
    assert m and int(m.group(5)) == 0, proc.stdout


def test_progress_thread_is_not_started_for_a_thread_multiple_application() -> None:
    """The thread-level rule stays the application's: at MPI_THREAD_MULTIPLE every call still goes
    to the MPI library (test_threads.c checks 500 fall-throughs), so no progress thread is started
    and REDUCELAB_VERBOSE says why."""
    proc = mpirun(2, [str(BUILD / "test_threads")], {"REDUCELAB_VERBOSE": "1", "REDUCELAB_PROGRESS": "thread"},
                  preload=True, timeout=120)
    out = ok(proc)
    if "skipped" in out:
        pytest.skip(out.strip())
    assert re.search(r"test_threads p=2: 1002 checks, 0 failures", out), out
    assert proc.stderr.count("REDUCELAB_PROGRESS=thread: the application asked for MPI_THREAD_MULTIPLE") == 2
    assert "progress thread started" not in proc.stderr


def test_bad_progress_setting_is_a_clear_error() -> None:
    proc = _progress("getstatus", 2, 1, {"REDUCELAB_PROGRESS": "threads"}, alarm=20)
    assert proc.returncode != 0
    assert "REDUCELAB_PROGRESS='threads' is not 'thread' or 'none'" in proc.stderr


RULES_LINE = re.compile(r"count (\d+) bytes (\d+) decision (\d) blocking (\d+)/(\d+) nonblocking (\d+)/(\d+) "
                        r"persistent (\d+)/(\d+) route (\d) shm (\d) ishm (\d)")


def _rules_run(p: int, algorithm: str, counts: list[int], env: dict[str, str]) -> tuple[list[tuple[int, ...]], int]:
    """mpi/tests/test_rules.c: per count (decision, blocking and nonblocking counter moves), and
    the crossover it reports; every result checked element by element."""
    out = ok(mpirun(p, [str(BUILD / "test_rules"), algorithm, *map(str, counts)], env, timeout=60))
    m = re.search(r"test_rules p=(\d+): (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == p and int(m.group(3)) == 0 and int(m.group(2)) == 4 * p * len(counts), out
    lines = [tuple(map(int, x)) for x in RULES_LINE.findall(out)]
    assert [line[0] for line in lines] == counts, out
    return lines, int(re.search(r"crossover p=\d+: (-?\d+)", out).group(1))


@pytest.mark.parametrize(("p", "rule_bytes"), [(2, 64), (3, 64), (4, 1000), (6, 1000)])
def test_auto_hands_calls_below_the_crossover_to_the_library(tmp_path: Path, p: int, rule_bytes: int) -> None:
    """REDUCELAB_RULES file '2 64' / '4 1000': below the rule of the largest rank count <= p,
    `auto` (RL_Allreduce, RL_Iallreduce, a persistent plan's first start) runs the library's
    allreduce, from it a schedule; results exact either way."""
    rules = tmp_path / "rules.txt"
    rules.write_text("# test rules\n4 1000   # four and more\n2 64\n")
    counts = [0, 1, 15, 16, 249, 250, 251, 5000]
    lines, crossover = _rules_run(p, "auto", counts, {"REDUCELAB_RULES": str(rules)})
    assert crossover == rule_bytes
    for count, nbytes, decision, bs, bf, ns, nf, ps, pf, _route, _shm, _ishm in lines:
        below = nbytes < rule_bytes
        assert decision == below and (bs, bf) == (ns, nf) == (ps, pf) == ((0, 1) if below else (1, 0)), (count, lines)


def test_shipped_default_rules_and_other_algorithms(tmp_path: Path) -> None:
    """Without REDUCELAB_RULES the shipped defaults (mpi/src/rl_rules.h) apply; an explicit
    algorithm other than auto always runs its schedule; REDUCELAB_RULES=none turns the crossover off."""
    text = (ROOT / "mpi" / "src" / "rl_rules.h").read_text()
    pairs = [tuple(map(int, t)) for t in re.findall(r"\{(\d+), (\d+)[,}]", text.split("#define RL_DEFAULT_RULES")[1])]
    four = max((r, b) for r, b in pairs if r <= 4)[1]
    counts = [1, four // 4 - 1, four // 4]
    lines, crossover = _rules_run(4, "-", counts, {"REDUCELAB_RULES": ""})
    assert crossover == four and [line[2] for line in lines] == [1, 1, 0]
    # ranks on one node: every size, blocking and nonblocking, runs the shared-memory allreduce
    assert all(line[9:] == (2, 1, 1) for line in lines), lines
    two = max((r, b) for r, b in pairs if r <= 2)[1]
    lines, crossover = _rules_run(2, "-", [1, 1000, 300000], {"REDUCELAB_RULES": ""})
    assert crossover == two and all(line[9:] == (2, 1, 1) for line in lines), lines
    lines, _ = _rules_run(4, "ring", counts, {"REDUCELAB_RULES": ""})
    assert all(line[3:9] == (1, 0, 1, 0, 1, 0) for line in lines), lines  # (decision: of the environment's auto)
    lines, crossover = _rules_run(4, "auto", counts, {"REDUCELAB_RULES": "none"})
    assert crossover == -1 and all(line[2] == 0 for line in lines)


@pytest.mark.parametrize(("content", "message"), [
    ("4 1000\nfour 10\n", "line 2: want 'RANKS MIN_BYTES'"),
    ("4 1000 7\n", "line 1: want 'RANKS MIN_BYTES'"),
    ("4 1000 500 400\n", "line 1: want 'RANKS MIN_BYTES' or 'RANKS MIN_BYTES SHM_MIN_BYTES SHM_MAX_BYTES'"),
    ("4 1000 inf inf\n", "line 1: want 'RANKS MIN_BYTES'"),
    (None, "cannot open the file"),
])
def test_bad_rules_file_is_a_clear_error(tmp_path: Path, content: str | None, message: str) -> None:
    rules = tmp_path / "rules.txt"
    if content is not None:
        rules.write_text(content)
    proc = mpirun(2, [str(BUILD / "test_rules"), "auto", "100"], {"REDUCELAB_RULES": str(rules)}, timeout=60)
    assert proc.returncode != 0
    assert f"REDUCELAB_RULES='{rules}'" in proc.stderr and message in proc.stderr, proc.stderr


# ---- the shared-memory allreduce (mpi/src/shm.c) ----
# REDUCELAB_SHM_BYTES=8192: 4 KiB slots, so the tests' vectors span many chunks.
SHM_ENV = {"REDUCELAB_SHM_BYTES": "8192", "REDUCELAB_VERBOSE": "1"}


@pytest.mark.parametrize(("case", "p", "sets", "checks"), [
    ("chunks", 2, 2, 74), ("chunks", 3, 4, 74), ("chunks", 5, 2, 74), ("chunks", 8, 4, 74), ("chunks", 8, 3, 74),
    ("holes", 3, 4, 24), ("holes", 5, 2, 24), ("mismatch", 3, 2, 6), ("mismatch", 4, 4, 6),
    ("nonblocking", 4, 2, 32), ("nonblocking", 3, 4, 32), ("progress", 4, 3, 4), ("threads", 2, 2, 303),
])
def test_shm_flags_under_random_delays(case: str, p: int, sets: int, checks: int) -> None:
    """The shared-memory allreduce's flags (no barrier: a rank copies a chunk in when every rank
    has copied out the chunk that last used its set, any rank reduces any claimed slice of a
    chunk every rank has copied in, a rank copies a chunk out when all its slices are reduced)
    with a random pause (a yield, or a sleep of 50-200 us) before one step in three on every
    rank (REDUCELAB_SHM_TEST_DELAY=3), so the steps interleave in many orders: 2-8 ranks on the
    2-core machine (oversubscribed), rings of 2, 3 and 4 sets of 4 KiB slots, many chunks per
    call; results bitwise equal to MPI_Allreduce (chunks), to the rank-order fold with gaps
    intact (holes), MPI_ERR_TRUNCATE on every rank then an exact call (mismatch), the
    nonblocking, progress and thread cases as in test_shm_cases. With the copy-in's wait for its
    set removed (a scratch change), `chunks` at 3 ranks failed 24-27 of 222 checks, with these
    delays and without them."""
    env = {**SHM_ENV, "REDUCELAB_SHM_TEST_DELAY": "3", "REDUCELAB_SHM_SETS": str(sets)}
    out = ok(mpirun(p, [str(BUILD / "test_shm"), case], env, timeout=150))
    m = re.search(rf"test_shm {case} p={p}: (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == checks * p and int(m.group(2)) == 0, out


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_shm_matches_mpi_on_the_whole_matrix(p: int) -> None:
    """test_mpi's matrix (every valid predefined (op, type) pair, counts 0, 1, p-1, p, p+1,
    2p+1, 37, 100, 4099+p, in place or not, user ops incl. the non-commutative one, a
    sub-communicator) with the algorithm `shm` alone: bitwise equal to MPI_Allreduce, and no
    call taken elsewhere (REDUCELAB_VERBOSE would say `shm not used`)."""
    proc = mpirun(p, [str(BUILD / "test_mpi")], {**SHM_ENV, "TEST_MPI_ALGORITHMS": "shm"})
    out = ok(proc)
    m = re.search(r"test_mpi p=(\d+): (\d+) checks on rank 0 \((\d+) over all ranks\), (\d+) failures", out)
    assert m and int(m.group(1)) == p and int(m.group(4)) == 0 and int(m.group(2)) > 1000, out
    assert "shm not used" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(("case", "p", "checks"), [
    ("chunks", 2, 74), ("chunks", 3, 74), ("chunks", 8, 74), ("holes", 2, 24), ("holes", 3, 24), ("holes", 4, 24),
    ("threads", 2, 303), ("threads", 4, 303), ("comms", 2, 121), ("comms", 5, 121), ("mismatch", 2, 6),
    ("mismatch", 3, 6), ("progress", 2, 4), ("progress", 4, 4), ("libprogress", 2, 3), ("libprogress", 4, 3),
    ("nonblocking", 1, 32), ("nonblocking", 2, 32), ("nonblocking", 3, 32), ("nonblocking", 4, 32),
    ("sizes", 2, 6), ("sizes", 3, 6), ("nbfallback", 2, 5), ("nbfallback", 3, 5),
])
def test_shm_cases(case: str, p: int, checks: int) -> None:
    """mpi/tests/test_shm.c: many chunks and odd counts for nine (op, type) samples, a resized
    vector type with holes and user ops (gaps intact, rank order for the non-commutative one),
    two threads on two communicators at MPI_THREAD_MULTIPLE, 60 communicators made and freed
    (segments counted back to 0), mismatched counts (MPI_ERR_TRUNCATE on every rank), progress of
    an active nonblocking allreduce while waiting in the shared-memory barrier, and of the MPI
    library there (a peer's 4 MiB send completes only if the waiting rank's library progresses;
    with the barrier's MPI_Iprobe removed it timed out), and the nonblocking and persistent
    shared-memory allreduce: several in flight on one communicator with a blocking one among
    them (without the per-communicator call order it failed), fresh communicators started in
    opposite orders, a communicator freed under its operation; and a communicator's segment
    growing with its vectors (RL_Shm_bytes: 2p 4 KiB slots after one int); and a segment that
    cannot be made (shm_open fails): the first nonblocking call runs the library's allreduce, the
    later ones auto's path."""
    proc = mpirun(p, [str(BUILD / "test_shm"), case], SHM_ENV, timeout=90)
    out = ok(proc)
    if "skipped" in out:
        pytest.skip(out.strip())
    m = re.search(rf"test_shm {case} p={p}: (\d+) checks, (\d+) failures", out)
    assert m and int(m.group(1)) == checks * p and int(m.group(2)) == 0, out
    if case == "nbfallback":  # said once per process (rank 0 names the cause)
        assert proc.stderr.count("reducelab: shm not used, running auto's path") == p, proc.stderr
        assert "shm: cannot create a" in proc.stderr and "(Permission denied)" in proc.stderr, proc.stderr
    else:
        assert "shm not used" not in proc.stderr, proc.stderr  # (RL_Iallreduce named shm in chunks too)


def test_auto_runs_shm_at_thread_multiple(tmp_path: Path) -> None:
    """`auto` at MPI_THREAD_MULTIPLE runs the shared-memory allreduce in its range (two threads on
    two communicators, every call counted as ReduceLab's), where everything else goes to the
    library (test_threads)."""
    rules = tmp_path / "rules.txt"
    rules.write_text("2 1000000 0 inf\n")
    out = ok(mpirun(2, [str(BUILD / "test_shm"), "threads", "auto"], {**SHM_ENV, "REDUCELAB_RULES": str(rules)}))
    if "skipped" in out:
        pytest.skip(out.strip())
    assert re.search(r"test_shm threads p=2: 606 checks, 0 failures", out), out


def test_auto_runs_shm_nonblocking(tmp_path: Path) -> None:
    """`auto` routes MPI_Iallreduce and persistent starts in a rule's shared-memory range to the
    shared-memory allreduce as nonblocking operations (test_shm nonblocking with `auto`)."""
    rules = tmp_path / "rules.txt"
    rules.write_text("2 1000000 0 inf\n")
    out = ok(mpirun(3, [str(BUILD / "test_shm"), "nonblocking", "auto"], {**SHM_ENV, "REDUCELAB_RULES": str(rules)}))
    assert re.search(r"test_shm nonblocking p=3: 96 checks, 0 failures", out), out


def test_bad_shm_setting_is_said_and_the_call_still_runs() -> None:
    """A malformed REDUCELAB_SHM_* value: a message naming it on every rank, and the calls run
    auto's path with exact results instead."""
    proc = mpirun(2, [str(BUILD / "test_rules"), "shm", "1000"], {"REDUCELAB_SHM_BYTES": "4MB"}, timeout=60)
    out = ok(proc)
    assert re.search(r"test_rules p=2: 8 checks, 0 failures", out), out
    assert [line[10] for line in map(lambda x: tuple(map(int, x)), RULES_LINE.findall(out))] == [0], out
    assert proc.stderr.count("reducelab: REDUCELAB_SHM_BYTES='4MB' is not a whole number from 0 to") == 2, proc.stderr


def test_auto_routes_a_shared_memory_range(tmp_path: Path) -> None:
    """A rules line 'RANKS MIN_BYTES SHM_MIN SHM_MAX': blocking allreduces in [SHM_MIN, SHM_MAX)
    run the shared-memory allreduce (also below MIN_BYTES), the others follow the crossover;
    nonblocking and persistent calls in the range too (as nonblocking operations); 'inf' has no
    upper bound."""
    rules = tmp_path / "rules.txt"
    rules.write_text("4 1000 4000 inf\n2 64 400 800\n2 2000 100 200\n")  # the later line for 2 replaces the earlier
    lines, crossover = _rules_run(2, "auto", [15, 24, 25, 49, 50, 499, 500, 5000], {"REDUCELAB_RULES": str(rules)})
    assert crossover == 2000
    routes = {line[0]: line[9:11] for line in lines}
    assert routes[15] == (1, 0) and routes[24] == (1, 0)  # below SHM_MIN, below MIN_BYTES: the library
    assert routes[25] == (2, 1) and routes[49] == (2, 1)  # 100..199 bytes: shm, though below MIN_BYTES
    assert routes[50] == (1, 0) and routes[499] == (1, 0)
    assert routes[500] == (0, 0) and routes[5000] == (0, 0)  # schedules
    for _count, *rest in lines:
        nbytes, decision, bs, bf, ns, nf, ps, pf, route, shm, ishm = rest
        assert ishm == shm == (route == 2), lines  # the nonblocking call too
        assert (ns, nf) == (ps, pf) == (bs, bf) == ((0, 1) if route == 1 else (1, 0)), lines
    lines, _ = _rules_run(4, "-", [999, 1000, 100000], {"REDUCELAB_RULES": str(rules)})
    assert [line[9:] for line in lines] == [(0, 0, 0), (2, 1, 1), (2, 1, 1)], lines


def test_crossover_rule_on_synthetic_medians() -> None:
    """The crossover is the threshold losing least (sum of log time ratios) against the faster
    of library and auto over the sizes; a single noisy size does not move it far."""
    from reducelab.mpibench import Row, crossover

    def rows(mpi: list[float], auto: list[float]) -> list[Row]:
        sizes = [8 << k for k in range(len(mpi))]
        return [Row(4, "mpi", s, t, t, t, 5) for s, t in zip(sizes, mpi)] + \
            [Row(4, "auto", s, t, t, t, 5) for s, t in zip(sizes, auto)]

    assert crossover(rows([1, 1, 1, 1, 1], [2, 2, 0.9, 0.8, 0.7]), 4) == (32, True)
    assert crossover(rows([1, 1, 1, 1, 1, 1], [2, 2, 0.5, 0.5, 1.5, 0.5]), 4) == (32, True)  # 1.5: noise
    assert crossover(rows([1, 1, 1, 1, 1], [0.9, 2, 0.9, 0.9, 0.9]), 4) == (32, True)  # 0.9 at 8 B: not worth 2
    assert crossover(rows([1, 1, 1], [0.5, 0.5, 0.5]), 4) == (8, True)
    assert crossover(rows([1, 1, 1], [1, 1, 1]), 4) == (8, True)  # ties: schedules
    assert crossover(rows([1, 1, 1], [2, 2, 2]), 4) == (64, False)
    assert crossover(rows([1, 1, 1, 1], [2, 2, 0.9, 3]), 4) == (128, False)


def test_policy_fit_on_synthetic_medians() -> None:
    """The library crossover as before, then the shm range losing least with the crossover's
    choice outside it; a range reaching the largest size has no upper bound; without shm rows
    it is `crossover` alone."""
    from reducelab.mpibench import Policy, Row, fit_policy

    def rows(mpi: list[float], auto: list[float], shm: list[float] | None) -> list[Row]:
        sizes = [8 << k for k in range(len(mpi))]
        out = [Row(4, "mpi", s, t, t, t, 5) for s, t in zip(sizes, mpi)] + \
            [Row(4, "auto", s, t, t, t, 5) for s, t in zip(sizes, auto)]
        return out + ([Row(4, "shm", s, t, t, t, 5) for s, t in zip(sizes, shm)] if shm else [])

    assert fit_policy(rows([1, 1, 1, 1], [2, 2, 2, 2], [2, 0.5, 0.5, 0.5]), 4) == Policy(128, False, 16, None)
    assert fit_policy(rows([1, 1, 1, 1], [2, 2, 2, 0.4], [2, 0.5, 0.5, 0.5]), 4) == Policy(64, True, 16, 64)
    assert fit_policy(rows([1, 1, 1, 1], [2, 2, 0.5, 0.5], [2, 2, 2, 2]), 4) == Policy(32, True)
    assert fit_policy(rows([1, 1, 1], [2, 2, 2], [0.5, 1.5, 0.5]), 4) == Policy(64, False, 0, None)  # 1.5: noise
    assert fit_policy(rows([1, 1, 1], [2, 2, 2], [3, 3, 3]), 4) == Policy(64, False)
    assert fit_policy(rows([1, 1, 1, 1], [2, 2, 0.9, 3], None), 4) == Policy(128, False)
    assert Policy(16, True, 16, None).line(4) == "4 16 16 inf" and Policy(32, True).line(8) == "8 32"


def test_tune_mpi_cli_writes_a_rules_file_auto_reads(tmp_path: Path) -> None:
    """`reducelab tune mpi` end to end on a tiny sweep (no timing assertions): the file has one
    rule per rank count at one of the measured sizes (or past them), and `auto` follows it."""
    from helpers import cli

    out = tmp_path / "rules.txt"
    proc = cli("tune", "mpi", "--ranks", "2", "--sizes", "8", "1KiB", "--reps", "1", "--round-bytes", "64KiB",
               "--out", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "decision cost" in text and "load average" in text
    rule = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(rule) == 1 and rule[0].split()[0] == "2" and int(rule[0].split()[1]) in (8, 1024, 2048), text
    assert len(rule[0].split()) in (2, 4) and "shm µs" in text, text  # shm timed too; its range if it won
    lines, crossover = _rules_run(2, "auto", [1, 256], {"REDUCELAB_RULES": str(out)})
    assert crossover == int(rule[0].split()[1])
    assert [line[2] for line in lines] == [int(4 < crossover), int(1024 < crossover)]


def test_interposition_under_the_shipped_crossover() -> None:
    """test_pmpi (MPI_Allreduce, MPI_Iallreduce with the Wait/Test family, a persistent
    MPIX_Allreduce_init request, reduce-scatter, allgather) with the shipped rules: small
    allreduces go to the library (its own persistent request too), large ones run schedules,
    and every result matches; the program's only complaint is that not every call was scheduled."""
    proc = mpirun(4, [str(BUILD / "test_pmpi")], {"REDUCELAB_RULES": ""}, preload=True)
    m = re.search(r"(\d+) intercepted-call checks, (\d+) scheduled, (\d+) failures", proc.stdout)
    assert m, proc.stdout + proc.stderr
    calls, scheduled, failures = map(int, m.groups())
    assert 0 < scheduled < calls and failures == 4, proc.stdout
    # (the ranks' stderr lines may interleave)
    assert proc.stderr.count("FAIL:") == 4, proc.stderr
    assert proc.stderr.count(f"only {scheduled} of {calls} calls ran ReduceLab schedules") == 4, proc.stderr


# ---- every available MPI library: Open MPI (mpi/build) and MPICH 4 (mpi/build-mpich) ----
# scripts/setup.sh builds the runtime a second time against Debian's MPICH 4.0.2, an MPI-4
# library, so MPI_Allreduce_c and MPI_Allreduce_init are compiled in and exercised there. MPICH
# busy-polls without yielding, so oversubscribed runs (more ranks than cores) are slow: its
# runs use 2 ranks, and 4 only for short programs.

MPIEXEC_MPICH = shutil.which("mpiexec.mpich")
MPICH_BUILD = ROOT / "mpi" / "build-mpich"
_mpich_missing = None
if MPIEXEC_MPICH is None:
    _mpich_missing = "mpiexec.mpich not found (scripts/setup.sh installs MPICH as root)"
elif not (MPICH_BUILD / "test_mpi4").exists() or not (MPICH_BUILD / "libreducelab_pmpi.so").exists():
    _mpich_missing = f"{MPICH_BUILD} not built (run scripts/setup.sh)"
if _mpich_missing and REQUIRED:
    raise RuntimeError(f"REDUCELAB_REQUIRE_MPI=1 but {_mpich_missing}")

LIBRARIES = [
    pytest.param("openmpi", id="openmpi"),
    pytest.param("mpich", id="mpich", marks=pytest.mark.skipif(_mpich_missing is not None, reason=_mpich_missing or "")),
]


def run_on(library: str, np_: int, program: str, args: list[str] | None = None, env: dict[str, str] | None = None,
           preload: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`program` of the library's build directory under its own launcher (Open MPI: mpirun as
    above; MPICH: mpiexec.mpich, variables passed with -genv so only the ranks see them)."""
    if library == "openmpi":
        return mpirun(np_, [str(BUILD / program), *(args or [])], env, preload=preload, timeout=timeout)
    env = {"REDUCELAB_RULES": "none", **(env or {})}
    if preload:
        env["LD_PRELOAD"] = str(MPICH_BUILD / "libreducelab_pmpi.so")
    cmd = [MPIEXEC_MPICH or "mpiexec.mpich", "-n", str(np_)]
    for key, value in env.items():
        cmd += ["-genv", key, value]
    base = {k: v for k, v in os.environ.items() if not k.startswith("REDUCELAB_")}
    return subprocess.run(cmd + [str(MPICH_BUILD / program), *(args or [])], capture_output=True, text=True,
                          timeout=timeout, env=base)


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("library", LIBRARIES)
def test_mpi4_entry_points(library: str, p: int) -> None:
    """MPI_Allreduce_c (MPI_Count counts 0..65539, five (type, op) pairs, in place or not) and
    MPI_Allreduce_init (four starts with new data: Wait, Test loop, Waitall, Startall of two)
    equal the library's PMPI results and every call ran a schedule (mpi/tests/test_mpi4.c).
    Open MPI 4.1 is MPI-3.1: there the entry points are not compiled (make print-mpi4 says no)."""
    if not (BUILD if library == "openmpi" else MPICH_BUILD).joinpath("test_mpi4").exists():
        if library == "mpich":
            pytest.fail("MPICH 4 is MPI-4: test_mpi4 must be built")
        pytest.skip("Open MPI 4.1.4 is MPI-3.1 (no MPI_Allreduce_c / MPI_Allreduce_init)")
    out = ok(run_on(library, p, "test_mpi4", env={"REDUCELAB_ALLREDUCE": "swing" if p == 4 else "ring"}, preload=True))
    m = re.search(r"test_mpi4 p=(\d+): (\d+) checks, (\d+) scheduled of (\d+) calls, (\d+) failures", out)
    assert m, out
    got_p, checks, scheduled, calls, failures = map(int, m.groups())
    assert got_p == p and failures == 0 and calls == 55 and scheduled >= calls and checks >= 115 * p, out  # (over all ranks)


@pytest.mark.parametrize("library", LIBRARIES)
def test_mpi4_program_detects_a_missing_preload(library: str) -> None:
    """The counter check is real: without LD_PRELOAD test_mpi4 fails; with EXPECT_INTERCEPT=0
    its results pass against the library alone."""
    if library == "openmpi":
        pytest.skip("Open MPI 4.1.4 is MPI-3.1")
    proc = run_on(library, 2, "test_mpi4")
    assert proc.returncode != 0 and "interposition library not loaded" in proc.stderr
    out = ok(run_on(library, 2, "test_mpi4", env={"EXPECT_INTERCEPT": "0"}))
    assert re.search(r"test_mpi4 p=2: \d+ checks, 0 scheduled of 55 calls, 0 failures", out), out


# (program, ranks, args, env, preload, regex of the summary, its expected groups)
SUITE = {
    "rl-api-matrix": ("test_mpi", 2, [], {}, False,
                      r"test_mpi p=2: (\d+) checks on rank 0 \(\d+ over all ranks\), 0 failures"),
    "interposition": ("test_pmpi", 2, [], {"REDUCELAB_ALLREDUCE": "swing"}, True,
                      r"(\d+) intercepted-call checks, \1 scheduled, 0 failures"),
    "holes-interposed": ("test_holes", 2, [], {"REDUCELAB_ALLREDUCE": "ring"}, True,
                         r"test_holes p=2: (\d+) checks, (\d+) scheduled of \2 expected, 0 failures"),
    "holes-rl-api": ("test_holes_rl", 2, [], {}, False,
                     r"test_holes p=2: (\d+) checks, (\d+) scheduled of \2 expected, 0 failures"),
    "kernels": ("test_kernels", 2, [], {}, False, r"test_kernels p=2: (\d+) pairs, \d+ checks, 0 failures"),
    "counts-checked": ("test_counts", 2, [], {"REDUCELAB_CHECK": "1", "REDUCELAB_ALLREDUCE": "auto"}, True,
                       r"test_counts p=2: (12) checks, 0 failures"),
    "threads": ("test_threads", 2, [], {}, True, r"test_threads p=2: (1002) checks, 0 failures"),
    "progress-getstatus": ("test_progress", 2, ["getstatus", "1", "40"], {}, True,
                           r"test_progress getstatus p=2 seed=1: (\d+) checks, 0 failures"),
    "progress-crossorder": ("test_progress", 2, ["crossorder", "3", "40"], {}, True,
                            r"test_progress crossorder p=2 seed=3: (\d+) checks, 0 failures"),
    "progress-mixed-thread": ("test_progress", 2, ["mixed", "2", "40"], {"REDUCELAB_PROGRESS": "thread"}, True,
                              r"test_progress mixed p=2 seed=2: (\d+) checks, 0 failures"),
    "progress-cancel": ("test_progress", 2, ["cancel", "1", "40"], {}, True,
                        r"test_progress cancel p=2 seed=1: (\d+) checks, 0 failures"),
    "progress-blocked-thread": ("test_progress", 4, ["blocked", "1", "40"], {"REDUCELAB_PROGRESS": "thread"}, True,
                                r"test_progress blocked p=4 seed=1: (\d+) checks, 0 failures"),
    "rules": ("test_rules", 2, ["auto", "1", "15", "16", "5000"], {}, False, r"test_rules p=2: (32) checks, 0 failures"),
    "shm-chunks": ("test_shm", 2, ["chunks"], {"REDUCELAB_SHM_BYTES": "8192"}, False,
                   r"test_shm chunks p=2: (148) checks, 0 failures"),
    "shm-holes": ("test_shm", 2, ["holes"], {"REDUCELAB_SHM_BYTES": "8192"}, False,
                  r"test_shm holes p=2: (48) checks, 0 failures"),
    "shm-threads": ("test_shm", 2, ["threads"], {"REDUCELAB_SHM_BYTES": "8192"}, False,
                    r"test_shm threads p=2: (606) checks, 0 failures"),
    "shm-nonblocking": ("test_shm", 2, ["nonblocking"], {"REDUCELAB_SHM_BYTES": "8192"}, False,
                        r"test_shm nonblocking p=2: (64) checks, 0 failures"),
    "shm-libprogress": ("test_shm", 2, ["libprogress"], {}, False, r"test_shm libprogress p=2: (6) checks, 0 failures"),
    "shm-nbfallback": ("test_shm", 2, ["nbfallback"], {}, False, r"test_shm nbfallback p=2: (10) checks, 0 failures"),
}


@pytest.mark.parametrize("case", list(SUITE))
@pytest.mark.parametrize("library", LIBRARIES)
def test_suite_on_every_library(library: str, case: str) -> None:
    """The C test programs of mpi/tests on each library, at 2 ranks (4 for the progress thread):
    each summary line must report zero failures and its full count of checks. On MPICH,
    test_mpi's integer MAX/MIN references come from a local fold (MPICH 4.0.2's unsigned
    MAX/MIN are wrong, pmodels/mpich#6083: the line counts them)."""
    program, p, args, env, preload, pattern = SUITE[case]
    out = ok(run_on(library, p, program, args, env, preload=preload))
    m = re.search(pattern, out)
    assert m, out
    assert int(m.group(1)) > 0


@pytest.mark.parametrize("program", ["test_fortran", "test_fortran08"])
def test_fortran_bindings_on_mpich(program: str) -> None:
    """MPICH's Fortran bindings call the C MPI_Allreduce; mpi_allreduce_ is replaced as for Open
    MPI and recognises MPICH's Fortran MPI_IN_PLACE (MPIR_F_MPI_IN_PLACE; without it the
    in-place calls crashed)."""
    if _mpich_missing:
        pytest.skip(_mpich_missing)
    if not (MPICH_BUILD / program).exists():
        pytest.skip("no mpifort.mpich")
    proc = run_on("mpich", 4, program, env={"REDUCELAB_VERBOSE": "1", "REDUCELAB_ALLREDUCE": "swing"}, preload=True)
    assert f"{program}: PASS" in ok(proc)
    lines = re.findall(r"reducelab: (\d+) collectives ran ReduceLab schedules, (\d+) went", proc.stderr)
    assert len(lines) == 4 and all(s == "3" and f == "0" for s, f in lines), proc.stderr


# ---- mpi4py's own collective tests (from its sdist, fetched by scripts/setup.sh) ----

def _mpi4py_tests() -> Path | None:
    try:
        version = mpi4py.__version__
    except AttributeError:
        return None
    path = ROOT / ".cache" / f"mpi4py-{version}" / "test"
    return path if (path / "main.py").exists() else None


@pytest.mark.parametrize(("p", "algorithm", "modules"), [
    (2, "swing", ["test_cco_buf", "test_cco_nb_buf"]),
    (3, "ring", ["test_cco_buf"]),
])
def test_mpi4py_collective_suite_under_the_interposition_library(p: int, algorithm: str, modules: list[str]) -> None:
    """mpi4py's own tests of Allreduce, Reduce_scatter_block and Allgather (blocking and
    nonblocking, every buffer type and op it covers) pass with every call running a ReduceLab
    schedule (REDUCELAB_VERBOSE's closing line: none went to the library)."""
    tests = _mpi4py_tests()
    if tests is None:
        if REQUIRED:
            pytest.fail("mpi4py's test suite is not in .cache (scripts/setup.sh fetches it)")
        pytest.skip("mpi4py's test suite is not in .cache (scripts/setup.sh fetches it)")
    argv = [sys.executable, str(tests / "main.py"), "--thread-level", "serialized", "-k", "testAllreduce",
            "-k", "testReduceScatterBlock", "-k", "testAllgather", *modules]
    proc = mpirun(p, argv, {"REDUCELAB_ALLREDUCE": algorithm, "REDUCELAB_VERBOSE": "1"}, preload=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ran = re.findall(r"Ran (\d+) tests", proc.stderr)
    assert len(ran) >= 1 and all(int(n) >= 8 * len(modules) for n in ran), proc.stderr[-2000:]
    assert "FAILED" not in proc.stderr
    lines = re.findall(r"reducelab: (\d+) collectives ran ReduceLab schedules, (\d+) went", proc.stderr)
    assert len(lines) == p and all(int(s) > 500 and f == "0" for s, f in lines), proc.stderr[-2000:]
