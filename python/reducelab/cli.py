"""The `reducelab` command line.

Exit codes: 0 success, 1 failure while running, 2 invalid input (bad flags, missing or invalid
scenario or result files), 130 interrupted (143 on SIGTERM). `reducelab run` also exits 3, 4 or 5
for a run that ended unverified, stalled or at its time limit (docs/engine.md, "Run status and exit
codes").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import ScenarioError, __version__

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class _Terminated(BaseException):
    """Raised by the SIGTERM handler `reducelab run` installs (like KeyboardInterrupt for SIGINT)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated()

_MAIN_EPILOG = """\
examples:
  reducelab run scenarios/example.toml             # writes results/example/
  reducelab run scenarios/example.toml --seed 7 --out /tmp/ex7
  reducelab plot links results/example             # writes results/example/link_utilization.png
  reducelab sweep scenarios/sweeps/torus_bandwidth.toml --jobs 2   # grid of runs -> SQLite
  reducelab plot sweep results/torus_bandwidth.sqlite --x 'traffic[0].bytes' --y sim_time_ps \\
      --hue topology.bandwidth_gbps
  reducelab bench engine --repeat 5
  reducelab model --algorithm swing-bandwidth --topology torus:64x64
  reducelab schedule export --algorithm swing --topology torus:8x8 --format goal --out swing.goal
  reducelab reproduce swing-fig9 --scale small     # writes results/swing-fig9-small/

`reducelab COMMAND --help` explains each command. The scenario file format is
described in docs/scenario-format.md, sweep specs in docs/sweeps.md.
"""

_RUN_EPILOG = """\
Writes into DIR:
  summary.json   run summary: status, status_reason, backend, backend_reason, scenario, seed,
                 simulated time, totals
  messages.csv   one row per message: id,src,dst,bytes,start_ps,end_ps,fct_ps,verified
  links.csv      one row per directed link: bytes, packets, utilization (0..1), queues, drops, ECN,
                 kind (host: a host's link to its switch; network: every other link)
(at flow level, [run] backend = "flow" or "auto" resolved to it, only summary.json)
and prints a short summary table. Same scenario and seed give byte-identical files.
Result files of an earlier run in DIR that this run does not produce (ina_*.csv,
link_utilization.png) are removed; other files are left alone.
A progress bar (with an ETA) appears on stderr, if it is a terminal, when a run takes longer
than 2 s. Ctrl-C or SIGTERM stops the run within about a second and writes what was measured
so far, with status "interrupted".

exit status (summary.json's "status"; docs/engine.md, "Run status and exit codes"):
  0    completed    every finite workload finished, every result verified on every host
  3    unverified   everything finished but some result is wrong
  4    stalled      a finite workload could not finish (see status_reason in summary.json)
  5    time_limit   run.time_limit_us came before the finite workloads finished
  130  interrupted  by SIGINT (Ctrl-C); 143 by SIGTERM
  2    invalid input (scenario file, flags); prints `error: FILE: FIELD: REASON`
  1    other failure (e.g. the output directory cannot be written)

examples:
  reducelab run scenarios/example.toml
  reducelab run scenarios/example.toml --seed 42 --out results/example-seed42
"""

_BENCH_ENGINE_EPILOG = """\
Runs built-in benchmark scenarios (defined in the simulator, crates/sim) REPEAT times each
and prints, per benchmark: median/min/max wall time, events per second, simulated packets
per second, packet hops per second and peak memory (resident set size). Without --name it
runs all but the large ones (ndp-permutation-8k and -27k: 8,192 and 27,648 hosts, minutes
each); name them to run them.

examples:
  reducelab bench engine --list
  reducelab bench engine
  reducelab bench engine --name ndp-permutation-8k --repeat 3
  reducelab bench engine --name NAME --repeat 5 --out bench.json
"""

_BENCH_MPI_EPILOG = """\
Prints, per rank count, the median time per call of every algorithm and size, the fastest
ReduceLab algorithm and its speedup over the MPI default (= bandwidth ratio). `auto` follows
the crossover rules in force (REDUCELAB_RULES, or the shipped defaults: small vectors go to the
MPI library; `reducelab tune mpi`). Timings of many ranks on few cores vary by tens of percent:
compare ratios from the same run.

examples:
  reducelab bench mpi                                   # 4 and 8 ranks, 4 B - 64 MiB
  reducelab bench mpi --ranks 8 --sizes 1MiB 16MiB --reps 11
  reducelab bench mpi --ranks 8 --torus 4x2 --algorithm mpi --algorithm swing-bandwidth
"""

_TUNE_MPI_EPILOG = """\
Times the MPI library's allreduce, ReduceLab's `auto` (always running schedules) and its
shared-memory allreduce (`shm`) interleaved, per rank count, and writes the rules (docs/mpi.md):
the crossover below which `auto` hands a call to the MPI library rather than to schedules (the
threshold that loses least against the faster of the two summed over the sizes, as log time
ratios), and the range of sizes whose calls go to the shared-memory allreduce when the
ranks share a node (timed with blocking calls; nonblocking ones in the range use it too) (the contiguous range that loses least with the crossover's choice outside it). Use the file with REDUCELAB_RULES=FILE (pass it to
every rank: mpirun -x REDUCELAB_RULES); without it the shipped defaults apply. Timings of many
ranks on few cores vary by tens of percent: more rounds give steadier crossovers.

examples:
  reducelab tune mpi                                    # 4 and 8 ranks, 8 B - 1 MiB
  reducelab tune mpi --ranks 4 --reps 9 --out rules.txt
"""

_PLOT_LINKS_EPILOG = """\
Reads RESULTS_DIR/links.csv (written by `reducelab run`) and draws the distribution of
per-link utilisation: x = utilisation in percent, y = fraction of links per bin.

examples:
  reducelab run scenarios/example.toml --out results/example
  reducelab plot links results/example        # writes results/example/link_utilization.png
"""

_PLOT_SWEEP_EPILOG = """\
Reads the table of a sweep from its results store (one row per finished point: the grid
parameters, then summary.json fields by dotted path; `reducelab sweep SPEC --export CSV` shows
the columns) and draws METRIC against FIELD, one series per value of the --hue field.
Repetitions (seeds) are averaged and their min-max range shaded. A numeric FIELD gives lines
(log scale over two decades or more), any other gives grouped bars.

examples:
  reducelab plot sweep results/torus_bandwidth.sqlite --x 'traffic[0].bytes' \\
      --y messages.fct_ps.p99 --hue topology.bandwidth_gbps
  reducelab plot sweep results/torus_bandwidth.sqlite --x topology.bandwidth_gbps \\
      --y links.mean_utilization --out util.svg

Writes DB_STEM_METRIC_vs_FIELD.png and .svg next to DB unless --out is given.
"""

_SWEEP_EPILOG = """\
A sweep spec is a TOML file naming a base scenario and a grid of values for any of its fields
by dotted path (docs/sweeps.md):

  [sweep]
  scenario = "../examples/torus_permutation.toml"   # relative to the spec
  repetitions = 2                                    # seeds: the scenario's, +1, ... (or seeds = [...])
  metrics = ["sim_time_ps", "messages.fct_ps.p99"]   # export columns (default: every summary field)

  [grid]
  topology.bandwidth_gbps = [100, 400]
  "traffic[0].bytes" = [65536, 262144]

Every point (base scenario with the point's values and seed) is keyed by the SHA-256 of its
canonical form and stored in one SQLite file with its summary.json, CSV files and metrics.
The sweep states its point count before starting; one of more than 10000 points needs --yes.
Points already stored are not run again: re-running a finished sweep runs nothing, and an
interrupted one (Ctrl-C, a killed job) resumes where it stopped. Points run in a local process
pool (--jobs), or on a Dask cluster with --scheduler; the stored results are the same bytes
either way. A progress bar with ETA appears on stderr if it is a terminal.

examples:
  reducelab sweep scenarios/sweeps/torus_bandwidth.toml
  reducelab sweep scenarios/sweeps/torus_bandwidth.toml --jobs 2 --export results/tb.csv
  reducelab sweep scenarios/sweeps/torus_bandwidth.toml --dry-run
  dask scheduler --port 8786 & dask worker tcp://127.0.0.1:8786 &
  reducelab sweep scenarios/sweeps/torus_bandwidth.toml --scheduler tcp://127.0.0.1:8786

An invalid spec prints `error: FILE: FIELD: REASON` (e.g. `grid.network.bogus: ...`) and exits
with status 2; Ctrl-C exits with status 130, keeping every finished point.
"""

_MODEL_EPILOG = """\
Builds the allreduce schedule of ALGORITHM for the topology (rank r on host r), routes every
message (a message with a torus port goes straight along that port's dimension, then in
dimension order; otherwise the deterministic minimal path) and reports the deficiencies of
the Swing paper (NSDI'24, Eq. 1: T(n) = log2(p)·α·Λ + (n/D)·β·Ψ·Ξ), from per-step loads
b_s = most bytes a rank sends on one port, L_s = bytes on the busiest link / b_s:
  Λ      latency deficiency     steps / log2 p
  Ψ      bandwidth deficiency   Σ b_s / (n/D)
  Ξ      congestion deficiency  Σ L_s·b_s / Σ b_s   (data-weighted; the one the time uses)
  Ξ_sum  congestion, summed     Σ L_s   (Table 2's convention for latency-optimal algorithms)
and the α-β time  steps·α + β·Σ L_s·b_s + hop·Σ (longest path of each step),
next to the paper's Table 2 values where it has a row for the algorithm.

TOPOLOGY: torus:64x64, torus:8x8x8, hyperx:64x64, hammingmesh:2x2,32x32 (board, grid).
SIZE: bytes, or with a suffix KiB, MiB, GiB (4-byte elements).
ALGORITHM: any name of `reducelab model --list`; a family (swing, recursive-doubling) or auto
is resolved to the variant the α-β model (with --latency-ns, --bandwidth-gbps, --switch-latency-ns)
picks for SIZE.

examples:
  reducelab model --algorithm swing-bandwidth --topology torus:64x64
  reducelab model --algorithm recursive-doubling-latency --topology torus:8x8x8 --size 32KiB
  reducelab model --algorithm bucket --topology hyperx:16x16 --latency-ns 500 --bandwidth-gbps 200
  reducelab model --algorithm swing --topology torus:8x8 --size 32KiB   # a family: resolved by size
  reducelab model --list                # the algorithm registry: name, kind, family, size class
  reducelab model canary-memory         # Canary §3.2.2: b·(2d(l+t)+r), the paper's example
  reducelab model flare --size 256KiB   # Flare §4–6: τ, ℬ, Q, 𝒬, ℒ, M, ℛ of each design of one switch
  reducelab model canary-memory --bandwidth-gbps 400 --diameter 3 --timeout-ns 2000

A bad algorithm, topology or size prints `error: ...` and exits with status 2.
"""

_SCHEDULE_EPILOG = """\
Writes the schedule of an algorithm (any name of `reducelab model --list`; a family or auto is
resolved for --size) on the rank layout of a topology, in a format another tool reads:
  json   the schedule IR (docs/schedules.md): per rank, steps of sends and receives of blocks;
         `reducelab schedule check FILE` proves it with the symbolic checker
  msccl  MSCCL's XML algorithm format (NCCL/RCCL's MSCCL executor; one channel, in place)
  goal   LogGOPSim's GOAL text format (num_ranks, rank R { send/recv/calc, requires }); message
         sizes are for a --size vector of 4-byte elements; convert with LogGOPSim's txt2bin

examples:
  reducelab schedule export --algorithm swing-bandwidth --topology torus:4x4 --format json
  reducelab schedule export -a ring -t torus:6 --format goal --size 1MiB --out ring6.goal
  reducelab schedule export -a swing -t torus:8x8 --format msccl --size 32KiB --out swing.xml
  reducelab schedule check swing.json

A bad algorithm, topology, format or size prints `error: ...` and exits with status 2.
"""

_REPRODUCE_EPILOG = """\
Reproduces a paper figure from its two files under scenarios/<paper>/ (figN.toml +
figN.claims.toml; format: docs/reproductions.md). One harness runs every paper's figures: the
figure's kind turns it into points (scenarios), every point runs through the sweep store
DIR/points.sqlite (--store DB to share one): a stored point is not run again, so an interrupted
figure resumes and `reproduce all` runs a point two figures share once; --jobs N worker
processes, or --scheduler tcp://HOST:PORT to run the points on a Dask cluster. One claims engine
judges the paper's claims on the verified runs. Into DIR (default results/FIGURE-SCALE) it
writes the kind's data files, STEM_claims.csv/.md (claim, paper value, rule, measured value,
pass/fail) and STEM.png, and prints the claims table. Same figure, scale and backend give
byte-identical files.

Swing (swing-fig7 ... -fig15; size sweeps: every (network, algorithm variant, vector size) as one
allreduce on the whole topology, the fastest variant per algorithm and size, the subject's gain
over the best other): STEM.csv (variant chosen, runtime, goodput, backend, verified),
STEM_runs.csv (every run), STEM_gain.csv, STEM_backend_check.csv (auto backend: every variant on
both backends at the switch-over size). Backends: packet (data verified on every rank), flow
(pipelined fluid model), auto (the figure's default: packet below its flow_min_bytes, flow from
there on; docs/flow-vs-packet.md); --backend applies to these figures only.
Canary (canary-fig2 ... -fig11; canary-all for every one into DIR/NAME/), DSA (dsa-fig8 ...
-fig12), Flare (flare-fig7 ... -fig15): grids of scenario parameters; STEM.csv (one row per run)
and, for Canary Figs. 7 and 10, STEM_links.csv. A progress bar appears on stderr if it is a
terminal.

examples:
  reducelab reproduce --list
  reducelab reproduce swing-fig9                         # small scale, a few seconds
  reducelab reproduce swing-fig9 --scale full --out results/fig9
  reducelab reproduce swing-fig9 --scale full --backend packet
  reducelab reproduce canary-fig8 --scale full --jobs 1 --out results/canary-fig8
  reducelab reproduce my/figs/fig12.toml --scale tiny   # a figure file from any folder (docs/extending.md)
  reducelab reproduce all --scale small     # every figure of every paper + results/all-small/index.html

`reproduce all` writes every figure into DIR/NAME/, DIR/index.html (one report) and
DIR/claims.csv (the one table of every claim of every figure).

--sensitivity also runs each figure at every value of its [[sensitivity]] settings (settings the
paper does not state, e.g. the static trees' window) and adds each claim's band (range of its
measured values, passes at all/some/none of them) to the claims files. --claims-only runs
nothing: it judges the claims files again on the results in DIR (DIR/NAME/ for all and
canary-all), e.g. after editing a claims file:
  reducelab reproduce all --scale full --claims-only --out docs/results/swing-full

An unknown figure or scale prints `error: ...` and exits with status 2; a run that does not
complete with verified data exits with status 1 (after writing the files).
"""


def _seed(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected an integer") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: must be in [0, 2^64)")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be at least 1")
    return value


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def _size(text: str) -> int:
    """A byte count: an integer with an optional KiB/MiB/GiB/TiB suffix (e.g. `512MiB`)."""
    number = text.strip()
    unit = ""
    while number and number[-1].isalpha():
        unit = number[-1] + unit
        number = number[:-1]
    number = number.strip()
    scale = _SIZE_UNITS.get(unit.lower())
    if scale is None:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: unknown unit {unit!r} (use B, KiB, MiB, GiB or TiB)"
        )
    try:
        value = int(number, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: expected a whole number of bytes, optionally with KiB, MiB or GiB"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be at least 1 byte")
    if value * scale >= 2**64:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be less than 2^64 bytes")
    return value * scale


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a number") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a finite number >= 0")
    return value


class _Renamed(argparse.Action):
    """A flag that was renamed (one name per concept, docs/glossary.md): an error naming the new one."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kw: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, nargs="?", **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is now {self.new} (one name per concept: docs/glossary.md)")


def _positive_float(text: str) -> float:
    value = _nonnegative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="reducelab",
        description="ReduceLab: packet-level network simulator for allreduce research.",
        epilog=_MAIN_EPILOG,
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"reducelab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run",
        help="run a scenario file and write its results",
        description="Run a TOML scenario and write its result files.",
        epilog=_RUN_EPILOG,
        formatter_class=fmt,
    )
    run.add_argument("scenario", metavar="SCENARIO.toml", type=Path, help="scenario file")
    run.add_argument("--seed", type=_seed, metavar="N", help="override the scenario's seed")
    run.add_argument(
        "--out", type=Path, metavar="DIR",
        help="output directory (default: results/<scenario file stem>)",
    )
    run.add_argument(
        "--quiet", "-q", action="store_true",
        help="print nothing but errors (no table, path or progress bar)",
    )
    run.set_defaults(handler=_cmd_run)

    bench = commands.add_parser(
        "bench",
        help="benchmarks",
        description="Benchmarks of the simulator.",
        epilog="examples:\n  reducelab bench engine --repeat 5\n",
        formatter_class=fmt,
    )
    bench_kinds = bench.add_subparsers(dest="bench_kind", metavar="KIND", required=True)
    engine = bench_kinds.add_parser(
        "engine",
        help="time the built-in engine benchmark scenarios",
        description="Time the simulation engine on built-in benchmark scenarios.",
        epilog=_BENCH_ENGINE_EPILOG,
        formatter_class=fmt,
    )
    engine.add_argument(
        "--name", action="append", metavar="NAME",
        help="benchmark to run (repeatable; default: all but the large ones; see --list)",
    )
    engine.add_argument(
        "--repeat", type=_positive_int, default=3, metavar="N",
        help="runs per benchmark (default: 3)",
    )
    engine.add_argument("--out", type=Path, metavar="FILE.json", help="also write results as JSON")
    engine.add_argument("--list", action="store_true", help="list benchmark names and exit")
    engine.set_defaults(handler=_cmd_bench_engine)
    coll = bench_kinds.add_parser(
        "collective",
        help="time allreduce sweeps (flow level at 4k-16k nodes, packet level on 8x8)",
        description="Time whole allreduce sweeps: every algorithm and size of a figure's grid, each "
        "repeat in a fresh process (no schedule cache), with its peak memory.",
        epilog="examples:\n  reducelab bench collective --list\n  reducelab bench collective --name fig7-flow\n"
        "  reducelab bench collective --repeat 3 --out bench-collective.json\n",
        formatter_class=fmt,
    )
    coll.add_argument("--name", action="append", metavar="NAME", help="benchmark to run (repeatable; default: all)")
    coll.add_argument("--repeat", type=_positive_int, default=1, metavar="N", help="runs per benchmark (default: 1)")
    coll.add_argument(
        "--threads", type=_positive_int, default=1, metavar="N",
        help="threads per sweep: an algorithm's sizes run in parallel (default: 1)",
    )
    coll.add_argument("--out", type=Path, metavar="FILE.json", help="also write results as JSON")
    coll.add_argument("--list", action="store_true", help="list benchmarks with what they measure and exit")
    coll.set_defaults(handler=_cmd_bench_collective)
    mpi = bench_kinds.add_parser(
        "mpi",
        help="OSU-style allreduce sweep of the MPI runtime: every algorithm vs the MPI default",
        description="Time RL_Allreduce (float sum) for every ReduceLab algorithm and the MPI library's "
        "default under mpirun: sizes 4 B - 64 MiB, interleaved rounds, medians. Needs the MPI runtime "
        "(mpi/build, built by scripts/setup.sh).",
        epilog=_BENCH_MPI_EPILOG,
        formatter_class=fmt,
    )
    mpi.add_argument(
        "--ranks", type=_positive_int, action="append", metavar="N",
        help="rank count (repeatable; default: 4 and 8)",
    )
    mpi.add_argument(
        "--sizes", type=_size, nargs="+", metavar="SIZE",
        help="vector sizes, e.g. 8 1KiB 16MiB (default: every power of two from 4 B to 64 MiB, the range the benchmark's target covers)",
    )
    mpi.add_argument(
        "--algorithm", action="append", metavar="NAME",
        help="algorithm to time (repeatable; 'mpi' = the MPI library's default; default: all)",
    )
    mpi.add_argument("--reps", type=_positive_int, default=5, metavar="N", help="interleaved rounds (default: 5)")
    mpi.add_argument(
        "--round-bytes", type=_size, default=16 * 1024 * 1024, metavar="SIZE",
        help="bytes reduced per algorithm per round: small sizes repeat calls up to this (default: 16MiB)",
    )
    mpi.add_argument(
        "--torus", metavar="SHAPE",
        help="virtual torus (REDUCELAB_TORUS), e.g. 4x2; needs as many ranks as positions (default --ranks: that many)",
    )
    mpi.add_argument(
        "--out", type=Path, metavar="DIR",
        help="write mpi-bench.csv, mpi-bench.txt and mpi-bench.png into DIR (default: results/bench-mpi)",
    )
    mpi.set_defaults(handler=_cmd_bench_mpi)
    bsw = bench_kinds.add_parser(
        "switch",
        help="software switch on loopback: packets/s per switch core, allreduce goodput of 4 and 8 hosts",
        description="Runs `reducelab-switch bench` (docs/switch.md): one switch and N host threads on "
        "loopback, each run verified; prints CSV with the load average.",
        epilog="examples:\n  reducelab bench switch\n  reducelab bench switch --hosts 4,8 --bytes 4194304 --repeats 5\n"
        "  reducelab bench switch --mpi --hosts 4,8 --bytes 1048576,4194304 --repeats 3\n",
        formatter_class=fmt,
    )
    bsw.add_argument("switch_args", nargs=argparse.REMAINDER, help="arguments of `reducelab-switch bench`")
    bsw.set_defaults(handler=_cmd_bench_switch)

    switch = commands.add_parser(
        "switch",
        help="the software switch: switch processes on loopback running the in-network protocols",
        description="Runs the `reducelab-switch` binary (crates/switch, docs/switch.md) with these "
        "arguments: `switch` (one switch node), `hosts` (the hosts over UDP), `run` (all switches as "
        "processes plus the hosts, verified), `bench`.",
        epilog="examples:\n  reducelab switch run --scenario scenarios/switch/star4_canary.toml\n"
        "  reducelab switch run --scenario scenarios/switch/star4_canary.toml --fault loss=0.05,dup=0.05\n"
        "  reducelab switch switch --scenario scenarios/switch/fat_tree_canary.toml --node 4\n"
        "  reducelab switch --help-binary\n",
        formatter_class=fmt,
    )
    switch.add_argument("switch_args", nargs=argparse.REMAINDER, help="arguments of `reducelab-switch` (see --help-binary)")
    switch.set_defaults(handler=_cmd_switch)

    tune = commands.add_parser(
        "tune",
        help="measure and write tuning rules",
        description="Measure crossovers and write tuning rules.",
        epilog="examples:\n  reducelab tune mpi\n",
        formatter_class=fmt,
    )
    tune_kinds = tune.add_subparsers(dest="tune_kind", metavar="KIND", required=True)
    tmpi = tune_kinds.add_parser(
        "mpi",
        help="auto's crossover to the MPI library's allreduce and its shared-memory range, as a rules file "
        "(REDUCELAB_RULES)",
        description="Measure, per rank count, which vector sizes `auto` should hand to the MPI library's "
        "allreduce, to the shared-memory allreduce or to schedules, and write the rules file `auto` reads.",
        epilog=_TUNE_MPI_EPILOG,
        formatter_class=fmt,
    )
    tmpi.add_argument(
        "--ranks", type=_positive_int, action="append", metavar="N",
        help="rank count (repeatable; default: 4 and 8)",
    )
    tmpi.add_argument(
        "--sizes", type=_size, nargs="+", metavar="SIZE",
        help="vector sizes (default: every power of two from 8 B to 1 MiB)",
    )
    tmpi.add_argument("--reps", type=_positive_int, default=7, metavar="N", help="interleaved rounds (default: 7)")
    tmpi.add_argument(
        "--round-bytes", type=_size, default=4 * 1024 * 1024, metavar="SIZE",
        help="bytes reduced per algorithm per round: small sizes repeat calls up to this (default: 4MiB)",
    )
    tmpi.add_argument(
        "--out", type=Path, metavar="FILE",
        help="rules file to write (default: results/tune-mpi/rules.txt)",
    )
    tmpi.set_defaults(handler=_cmd_tune_mpi)

    sweep = commands.add_parser(
        "sweep",
        help="run a grid of scenarios (locally or on a Dask cluster) into a results store",
        description="Run every point of a sweep spec that is not stored yet and store its results.",
        epilog=_SWEEP_EPILOG,
        formatter_class=fmt,
    )
    sweep.add_argument("spec", metavar="SPEC.toml", type=Path, help="sweep spec file")
    sweep.add_argument(
        "--out", type=Path, metavar="DB",
        help="results store, an SQLite file (default: results/<spec file stem>.sqlite)",
    )
    sweep.add_argument(
        "--jobs", "-j", type=_positive_int, metavar="N",
        help="local worker processes (default: number of CPUs; 1 runs in this process)",
    )
    sweep.add_argument(
        "--scheduler", metavar="tcp://HOST:PORT",
        help="run the points on this Dask distributed scheduler's workers instead",
    )
    sweep.add_argument(
        "--export", type=Path, metavar="CSV",
        help="then write one row per point (parameters + metrics) to this CSV file",
    )
    sweep.add_argument(
        "--dry-run", action="store_true", help="list the points and what is stored; run nothing"
    )
    sweep.add_argument(
        "--include-unverified", action="store_true",
        help="--export also the points whose status is not completed (unverified, stalled, ...)",
    )
    sweep.add_argument(
        "--yes", "-y", action="store_true",
        help="run a sweep of more than 10000 points (without it such a sweep is refused)",
    )
    sweep.add_argument(
        "--quiet", "-q", action="store_true", help="print nothing but errors (no progress bar)"
    )
    sweep.set_defaults(handler=_cmd_sweep)

    plot = commands.add_parser(
        "plot",
        help="plot result files or a sweep",
        description="Plot the result files of a run, or a metric of a sweep.",
        epilog="examples:\n  reducelab plot links results/example\n"
        "  reducelab plot sweep results/torus_bandwidth.sqlite --x 'traffic[0].bytes' --y sim_time_ps\n",
        formatter_class=fmt,
    )
    plot_kinds = plot.add_subparsers(dest="plot_kind", metavar="KIND", required=True)
    links = plot_kinds.add_parser(
        "links",
        help="distribution of per-link utilisation",
        description="Plot the distribution of per-link utilisation of a run.",
        epilog=_PLOT_LINKS_EPILOG,
        formatter_class=fmt,
    )
    links.add_argument(
        "results_dir", metavar="RESULTS_DIR", type=Path, help="directory written by `reducelab run`"
    )
    links.add_argument(
        "--out", type=Path, metavar="FILE.png",
        help="output image, written to exactly this path: PNG, or SVG/PDF for a .svg/.pdf suffix "
        "(default: RESULTS_DIR/link_utilization.png)",
    )
    links.add_argument(
        "--bins", type=_positive_int, default=20, metavar="N",
        help="number of utilisation bins over 0-100%% (default: 20)",
    )
    links.set_defaults(handler=_cmd_plot_links)
    plot_sweep = plot_kinds.add_parser(
        "sweep",
        help="a metric of a sweep against a parameter",
        description="Plot a metric of a sweep against one of its parameters.",
        epilog=_PLOT_SWEEP_EPILOG,
        formatter_class=fmt,
    )
    plot_sweep.add_argument("db", metavar="DB", type=Path, help="results store written by `reducelab sweep`")
    plot_sweep.add_argument("--x", required=True, metavar="FIELD", help="x axis: a parameter (or metric) column")
    plot_sweep.add_argument("--y", required=True, metavar="METRIC", help="y axis: a metric column, e.g. sim_time_ps")
    plot_sweep.add_argument("--hue", metavar="FIELD", help="one series per value of this column")
    plot_sweep.add_argument("--sweep", metavar="NAME", help="which sweep of DB (default: its only one)")
    plot_sweep.add_argument(
        "--include-unverified", action="store_true",
        help="also plot the points whose status is not completed (unverified, stalled, ...)",
    )
    plot_sweep.add_argument(
        "--out", type=Path, action="append", metavar="FILE",
        help="output image, .png or .svg (repeatable; default: a PNG and an SVG next to DB)",
    )
    plot_sweep.set_defaults(handler=_cmd_plot_sweep)

    model = commands.add_parser(
        "model",
        help="analytical deficiency model of an allreduce algorithm on a topology",
        description=(
            "Model an allreduce schedule on a topology: the Swing paper's latency, bandwidth "
            "and congestion deficiencies and the alpha-beta time."
        ),
        epilog=_MODEL_EPILOG,
        formatter_class=fmt,
    )
    model.add_argument(
        "kind", nargs="?", metavar="MODEL",
        help="omit for the schedule deficiency model; `canary-memory` for Canary's descriptor "
        "memory b·(2d(l+t)+r) (§3.2.2); `flare` for Flare's switch model (§4–6, docs/flare.md)",
    )
    model.add_argument("--algorithm", "-a", metavar="A", help="algorithm (see --list)")
    model.add_argument(
        "--collective", default="allreduce", metavar="C",
        help="allreduce (default), reduce_scatter, allgather, broadcast, reduce or alltoall (--size per rank)",
    )
    model.add_argument("--root", type=int, default=0, metavar="R", help="root rank of broadcast and reduce (default: 0)")
    model.add_argument(
        "--topology", "-t", metavar="T",
        help="topology spec, e.g. torus:64x64, hyperx:64x64, hammingmesh:2x2,32x32",
    )
    model.add_argument(
        "--size", type=_size, default=None, metavar="N",
        help="vector size in bytes, suffixes KiB/MiB/GiB accepted (default: 512MiB; flare: 1MiB)",
    )
    model.add_argument(
        "--latency-ns", type=_nonnegative_float, default=1000.0, metavar="X",
        help="alpha: the latency of every step, in ns (default: 1000)",
    )
    model.add_argument(
        "--switch-latency-ns", type=_nonnegative_float, default=0.0, metavar="H",
        help="per-hop latency in ns, charged for the longest path of each step (default: 0)",
    )
    for old, new in (("--alpha-ns", "--latency-ns"), ("--beta-gbps", "--bandwidth-gbps"), ("--hop-ns", "--switch-latency-ns")):
        model.add_argument(old, action=_Renamed, new=new, help=argparse.SUPPRESS)
    model.add_argument(
        "--dimensions", "-D", type=_positive_int, metavar="D",
        help="D of the ideal n/D bandwidth term (default: the topology's dimensions)",
    )
    model.add_argument("--per-step", action="store_true", help="also print the loads of every step")
    model.add_argument(
        "--send-overhead-ns", type=_nonnegative_float, default=0.0, metavar="O",
        help="endpoint: CPU time per message before it leaves, serialised per rank (default: 0)",
    )
    model.add_argument(
        "--recv-overhead-ns", type=_nonnegative_float, default=0.0, metavar="O",
        help="endpoint: CPU time per message after it arrived, serialised per rank (default: 0)",
    )
    model.add_argument(
        "--send-latency-ns", type=_nonnegative_float, default=0.0, metavar="L",
        help="endpoint: delay per message after its send overhead, overlapping the next send (default: 0)",
    )
    model.add_argument(
        "--recv-latency-ns", type=_nonnegative_float, default=0.0, metavar="L",
        help="endpoint: delay per message before its receive overhead, overlapping other receives (default: 0)",
    )
    model.add_argument(
        "--rendezvous-threshold-bytes", type=_size, metavar="N",
        help="endpoint: messages larger than N pay one header round trip first (default: none)",
    )
    model.add_argument(
        "--injection-gbps", type=_positive_float, metavar="G",
        help="endpoint: one rank's injection over all its ports, in Gb/s (default: no ceiling)",
    )
    model.add_argument(
        "--bandwidth-gbps", type=_positive_float, metavar="B",
        help="link bandwidth in Gb/s; beta = 8/B ns per byte (default: 400; canary-memory: b, default 100)",
    )
    model.add_argument(
        "--diameter", type=_positive_int, metavar="D", help="canary-memory: network diameter d (default: 5)"
    )
    model.add_argument(
        "--hop-latency-ns", type=_nonnegative_float, metavar="L",
        help="canary-memory: 1-hop delay l in ns (default: 300)",
    )
    model.add_argument(
        "--timeout-ns", type=_nonnegative_float, metavar="T", help="canary-memory: switch timeout t in ns (default: 1000)"
    )
    model.add_argument(
        "--leader-ns", type=_nonnegative_float, metavar="R",
        help="canary-memory: leader aggregation time r in ns (default: 1000)",
    )
    flare = model.add_argument_group("flare (one PsPIN switch; --bandwidth-gbps is each port's rate, default 100)")
    flare.add_argument("--hosts", type=_positive_int, metavar="P", help="flare: children of the switch (default: 64)")
    flare.add_argument("--subset-cores", type=_positive_int, metavar="S", help="flare: cores per scheduling subset (default: 8)")
    flare.add_argument("--clusters", type=_positive_int, metavar="N", help="flare: clusters of 8 HPUs (default: 64)")
    flare.add_argument("--dtype", metavar="T", help="flare: int32, int16, int8, f32 or f16 (default: int32)")
    flare.add_argument("--no-stagger", action="store_true", help="flare: hosts send blocks in the same order")
    flare.add_argument("--density", type=float, metavar="D",
                       help="flare: also model the sparse allreduce (hash and array storage) at this density, 0 < D <= 1 (Fig. 13)")
    model.add_argument("--list", action="store_true", help="list the algorithm registry and exit")
    model.set_defaults(handler=_cmd_model)

    schedule = commands.add_parser(
        "schedule",
        help="export an algorithm's schedule (JSON IR, MSCCL XML, LogGOPSim GOAL) or check one",
        description="Export an algorithm's schedule for other tools, or check a JSON schedule.",
        epilog=_SCHEDULE_EPILOG,
        formatter_class=fmt,
    )
    schedule_kinds = schedule.add_subparsers(dest="schedule_kind", metavar="ACTION", required=True)
    export = schedule_kinds.add_parser(
        "export", help="write a schedule as json, msccl or goal", epilog=_SCHEDULE_EPILOG, formatter_class=fmt
    )
    export.add_argument("--algorithm", "-a", metavar="A", required=True, help="algorithm (see `model --list`)")
    export.add_argument("--topology", "-t", metavar="T", required=True, help="topology spec, e.g. torus:8x8")
    export.add_argument("--format", "-f", metavar="F", default="json", help="json (default), msccl or goal")
    export.add_argument(
        "--size", type=_size, default=1 << 20, metavar="N",
        help="vector size in bytes, suffixes KiB/MiB/GiB (default: 1MiB): resolves families, sizes GOAL messages",
    )
    export.add_argument(
        "--collective", default="allreduce", metavar="C",
        help="allreduce (default), reduce_scatter, allgather, broadcast, reduce or alltoall",
    )
    export.add_argument("--root", type=int, default=0, metavar="R", help="root rank of broadcast and reduce (default: 0)")
    export.add_argument(
        "--calc-ns-per-byte", type=_nonnegative_float, default=0.0, metavar="X",
        help="goal: local reduction time per reduced byte (default: 0)",
    )
    export.add_argument("--out", "-o", type=Path, metavar="FILE", help="write to FILE instead of standard output")
    export.set_defaults(handler=_cmd_schedule_export)
    check = schedule_kinds.add_parser(
        "check", help="parse a JSON schedule and prove it with the symbolic checker", epilog=_SCHEDULE_EPILOG,
        formatter_class=fmt,
    )
    check.add_argument("file", type=Path, metavar="FILE", help="schedule in the JSON IR")
    check.set_defaults(handler=_cmd_schedule_check)

    reproduce = commands.add_parser(
        "reproduce",
        help="reproduce a paper figure and check the paper's claims about it",
        description="Reproduce a paper figure: run its grid, write data, plot and claims table.",
        epilog=_REPRODUCE_EPILOG,
        formatter_class=fmt,
    )
    reproduce.add_argument(
        "figure", metavar="FIGURE", nargs="?",
        help="figure name (see --list), e.g. swing-fig9, or a figure file figN.toml",
    )
    reproduce.add_argument(
        "--out", type=Path, metavar="DIR", help="output directory (default: results/FIGURE-SCALE)"
    )
    reproduce.add_argument(
        "--scale", default="small", metavar="SCALE",
        help="grid size: small (default, under ~2 minutes) or full (the paper's grid); "
        "specs may define more (tiny: the test suite's)",
    )
    reproduce.add_argument(
        "--backend", choices=("auto", "packet", "flow"), metavar="B",
        help="override a size-sweep (Swing) figure's backend: auto, packet or flow",
    )
    reproduce.add_argument(
        "--jobs", "-j", type=_positive_int, metavar="N",
        help="simulations run in parallel (default: min(2, CPUs))",
    )
    reproduce.add_argument(
        "--quiet", "-q", action="store_true", help="print nothing but errors (no table or progress bar)"
    )
    reproduce.add_argument(
        "--store", type=Path, metavar="DB",
        help="run store of the figures' points (default: OUT/points.sqlite): stored points are not run again",
    )
    reproduce.add_argument(
        "--scheduler", metavar="URL",
        help="run the figures' points on this Dask cluster (tcp://HOST:PORT) instead of locally",
    )
    reproduce.add_argument(
        "--sensitivity", action="store_true",
        help="also run each figure at every value of its [[sensitivity]] settings (what the paper does not "
        "state) and show each claim's band over them",
    )
    reproduce.add_argument(
        "--claims-only", action="store_true",
        help="run nothing: judge the claims again on the results already in DIR (its points.sqlite, else its "
        "CSVs, e.g. docs/results/swing-full/swing-fig7) and rewrite the claims files there",
    )
    reproduce.add_argument("--list", action="store_true", help="list the figures and exit")
    reproduce.set_defaults(handler=_cmd_reproduce)
    return parser


class _Fail(Exception):
    """An error to report as `error: MESSAGE` with an exit status, without a traceback."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def _fail(message: str, status: int = EXIT_USAGE) -> NoReturn:
    raise _Fail(message, status)


def _read_scenario(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(f"{path}: no such file")
    except IsADirectoryError:
        _fail(f"{path}: is a directory, expected a TOML scenario file")
    except UnicodeDecodeError as exc:
        _fail(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}")


def _cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .runs import EXIT_CODES, run

    path: Path = args.scenario
    text = _read_scenario(path)
    out: Path = args.out if args.out is not None else Path("results") / path.stem
    # SIGTERM raises like Ctrl-C does, so the simulator stops and the partial results are kept.
    # (signal.signal only works on the main thread; elsewhere SIGTERM keeps its default.)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        try:
            result = run(text, seed=args.seed, progress=not args.quiet, base_dir=path.parent)
            exit_code = None
        except ScenarioError as exc:
            _fail(f"{path}: {exc}")
        except (KeyboardInterrupt, _Terminated) as exc:
            partial = getattr(exc, "result", None)
            if partial is None:
                raise  # interrupted before the simulation started
            result = partial
            exit_code = EXIT_TERMINATED if isinstance(exc, _Terminated) else EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    try:
        result.write(out)
    except OSError as exc:
        _fail(f"{out}: cannot write results: {exc.strerror or exc}", EXIT_FAILURE)
    if not args.quiet:
        if result.table:
            print(result.table.rstrip("\n"))
        names = ", ".join(["summary.json", *result.files])
        print(f"wrote {out} ({names})")
    status = result.status
    if status != "completed" and not args.quiet:
        print(f"run {status}: {result.status_reason or ''}".rstrip(": "), file=sys.stderr)
    return exit_code if exit_code is not None else EXIT_CODES[status]


def _write_bench_json(out: Path | None, rows: Sequence[Any]) -> None:
    """Writes benchmark rows with the machine description to `out` (if given)."""
    from . import bench

    if out is None:
        return
    doc = {"machine": bench.machine_info(), "benchmarks": [r.to_json() for r in rows]}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        _fail(f"{out}: cannot write: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {out}")


def _switch_exec(argv: list[str]) -> int:
    from . import swswitch

    try:
        return swswitch.exec_binary(argv)
    except FileNotFoundError as exc:
        _fail(str(exc), EXIT_FAILURE)


def _cmd_switch(args: argparse.Namespace) -> int:
    argv = list(args.switch_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv == ["--help-binary"]:
        argv = ["--help"]
    return _switch_exec(argv)


def _cmd_bench_switch(args: argparse.Namespace) -> int:
    argv = list(args.switch_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if "--mpi" in argv:
        return _bench_switch_mpi([a for a in argv if a != "--mpi"])
    return _switch_exec(["bench", *argv])


def _bench_switch_mpi(argv: list[str]) -> int:
    """`bench switch --mpi [--hosts 4,8] [--bytes 1048576,...] [--repeats 3] [--protocols canary,switchml,atp]`."""
    from . import switchbench

    def bench_load() -> str:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())

    opts = {"--hosts": "4,8", "--bytes": "1048576,4194304", "--repeats": "3", "--protocols": ",".join(switchbench.PROTOCOLS)}
    it = iter(argv)
    for a in it:
        if a not in opts:
            _fail(f"bench switch --mpi: unknown argument {a!r} (--hosts, --bytes, --repeats, --protocols)")
        opts[a] = next(it, "")
    try:
        hosts = [int(x) for x in opts["--hosts"].split(",")]
        sizes = [int(x) for x in opts["--bytes"].split(",")]
        reps = int(opts["--repeats"])
    except ValueError:
        _fail("bench switch --mpi: --hosts, --bytes and --repeats take integers (comma-separated lists)")
    if any(h < 1 or h > 32 for h in hosts) or any(b < 4 or b % 4 for b in sizes) or reps < 1:
        _fail("bench switch --mpi: --hosts 1..32, --bytes multiples of 4, --repeats >= 1")
    protocols = tuple(p for p in opts["--protocols"].split(",") if p)
    unknown = [p for p in protocols if p not in switchbench.PROTOCOLS]
    if unknown or not protocols:
        _fail(f"bench switch --mpi: --protocols {opts['--protocols']!r}: give some of {', '.join(switchbench.PROTOCOLS)}")
    print(f"# MPI allreduce through one software switch vs host-based, float sums; load average before: "
          f"{bench_load()}", flush=True)
    try:
        rows, reports = switchbench.run(hosts, sizes, reps, protocols=protocols)
    except RuntimeError as exc:
        _fail(str(exc), EXIT_FAILURE)
    print(switchbench.format_table(rows))
    for n, protocol, r in reports:
        d = r.get("data_plane", {})
        print(f"# {protocol} switch of {n} hosts: rx {d.get('rx_packets')} packets, cpu {r.get('cpu_s', 0):.3f} s, "
              f"send errors {d.get('send_errors')}")
    print(f"# load average after: {bench_load()}")
    return 0


def _cmd_bench_engine(args: argparse.Namespace) -> int:
    from . import bench

    available = bench.names()
    if args.list:
        for name in available:
            print(name)
        return 0
    selected: list[str] = args.name or [n for n in available if n not in bench.LARGE]
    if not selected:
        _fail("no engine benchmarks are built into this simulator", EXIT_FAILURE)
    unknown = [n for n in selected if n not in available]
    if unknown:
        _fail(f"unknown benchmark {unknown[0]!r}; available: {', '.join(available) or '(none)'}")

    rows = []
    for name in selected:
        print(f"running {name} ({args.repeat}x) ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench.run_engine_bench(name, args.repeat))
        except ScenarioError as exc:
            _fail(f"benchmark {name}: {exc}", EXIT_FAILURE)
    print(bench.format_table(rows))
    _write_bench_json(args.out, rows)
    return 0


def _cmd_bench_collective(args: argparse.Namespace) -> int:
    from . import bench

    if args.list:
        for name, spec in bench.COLLECTIVE_BENCHES.items():
            print(f"{name}: {spec[4]}")
        return 0
    selected: list[str] = args.name or list(bench.COLLECTIVE_BENCHES)
    unknown = [n for n in selected if n not in bench.COLLECTIVE_BENCHES]
    if unknown:
        _fail(f"unknown benchmark {unknown[0]!r}; available: {', '.join(bench.COLLECTIVE_BENCHES)}")
    rows = []
    for name in selected:
        print(f"running {name} ({args.repeat}x) ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench.run_collective_bench(name, args.repeat, args.threads))
        except RuntimeError as exc:
            _fail(str(exc), EXIT_FAILURE)
    print(bench.format_collective_table(rows))
    _write_bench_json(args.out, rows)
    return 0


def _cmd_bench_mpi(args: argparse.Namespace) -> int:
    from . import mpibench

    if args.torus:
        try:
            dims = mpibench.parse_torus(args.torus)
        except ValueError as exc:
            _fail(str(exc))
    # With a torus, the default rank count is its size.
    ranks = args.ranks or ([math.prod(dims)] if args.torus else [4, 8])
    if args.torus:
        for n in ranks:
            try:
                mpibench.check_torus(args.torus, n)
            except ValueError as exc:
                _fail(str(exc))
    sizes = args.sizes or list(mpibench.DEFAULT_SIZES)
    algorithms = args.algorithm or mpibench.default_algorithms(torus=bool(args.torus))
    for a in algorithms:
        if not a or "," in a:
            _fail(f"invalid algorithm name {a!r}")
    out = args.out or Path("results") / "bench-mpi"
    rows = []
    for n in ranks:
        print(f"running {len(algorithms)} algorithms x {len(sizes)} sizes x {args.reps} rounds on {n} ranks ...",
              file=sys.stderr, flush=True)
        try:
            rows += mpibench.run(n, sizes, algorithms, args.reps, args.round_bytes, args.torus)
        except RuntimeError as exc:
            _fail(str(exc), EXIT_FAILURE)
    table = mpibench.format_table(rows)
    print(table)
    try:
        out.mkdir(parents=True, exist_ok=True)
        mpibench.write_csv(rows, out / "mpi-bench.csv")
        (out / "mpi-bench.txt").write_text(table + "\n", encoding="utf-8")
        mpibench.plot(rows, out / "mpi-bench.png")
    except OSError as exc:
        _fail(f"{out}: cannot write: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {out}/mpi-bench.csv, mpi-bench.txt, mpi-bench.png")
    return 0


def _cmd_tune_mpi(args: argparse.Namespace) -> int:
    import datetime

    from . import mpibench

    ranks = args.ranks or [4, 8]
    sizes = sorted(set(args.sizes or mpibench.TUNE_SIZES))
    out = args.out or Path("results") / "tune-mpi" / "rules.txt"
    load0 = os.getloadavg()
    print(f"timing mpi, auto and shm x {len(sizes)} sizes x {args.reps} rounds on {', '.join(map(str, ranks))} ranks ...",
          file=sys.stderr, flush=True)
    try:
        rules, rows = mpibench.tune(ranks, sizes, args.reps, args.round_bytes)
        cost = mpibench.decision_ns()
    except (RuntimeError, ValueError) as exc:
        _fail(str(exc), EXIT_FAILURE)
    load1 = os.getloadavg()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        f"written by `reducelab tune mpi` at {now}: {args.reps} interleaved rounds",
        f"load average {load0[0]:.1f} before, {load1[0]:.1f} after; decision cost {cost:.1f} ns (one rank)",
    ]
    text = mpibench.format_rules(rules, rows, header)
    print(text, end="")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{out}: cannot write: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {out} (use: REDUCELAB_RULES={out}, passed to every rank)")
    return 0


def _cmd_plot_links(args: argparse.Namespace) -> int:
    from . import plots

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _fail("plotting needs matplotlib: pip install 'reducelab[plot]'", EXIT_FAILURE)
    try:
        png = plots.link_utilization(args.results_dir, out=args.out, bins=args.bins)
    except (plots.ResultFileError, plots.PlotDataError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{args.out}: cannot write the plot: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {png}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .scenario import FieldError
    from .store import ResultStore, StoreError
    from .sweep import CONFIRM_POINTS, Sweep, SweepRunError, check_scheduler

    try:
        if args.scheduler is not None:
            check_scheduler(args.scheduler)
        sweep = Sweep.load(args.spec)
    except FieldError as exc:
        _fail(str(exc))
    if args.scheduler is not None and args.jobs is not None:
        _fail("--jobs is for the local pool; with --scheduler the cluster's workers run the points")
    db_path: Path = args.out if args.out is not None else Path("results") / f"{args.spec.stem}.sqlite"
    count = sweep.point_count
    if count > CONFIRM_POINTS and not (args.yes or args.dry_run):
        _fail(
            f"{args.spec}: the sweep has {count} points ({sweep.count_formula()}), more than {CONFIRM_POINTS}; "
            "run it with --yes to start them all (or --dry-run to list them)"
        )
    try:
        points = sweep.points()
    except FieldError as exc:
        _fail(f"{args.spec}: {exc}")
    try:
        store = ResultStore(db_path)
    except StoreError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{db_path}: cannot open: {exc.strerror or exc}", EXIT_FAILURE)
    with store:
        if args.dry_run:
            pending = {p.key for p in sweep.pending(store)}
            print(f"sweep {sweep.name}: {len(points)} points, {len(points) - len(pending)} stored in {db_path}, "
                  f"{len(pending)} to run")
            for p in points:
                params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in p.params.items())
                print(f"  {p.index:>5}  {'stored ' if p.key not in pending else 'to run '} {p.key[:12]}  {params}")
            return 0
        if not args.quiet:
            pending = len(sweep.pending(store))
            print(f"sweep {sweep.name}: {len(points)} points, {len(points) - pending} already stored, "
                  f"{pending} to run, into {db_path}", flush=True)
        try:
            report = sweep.run(store, jobs=args.jobs, scheduler=args.scheduler, progress=not args.quiet,
                               confirm=True)
        except FieldError as exc:
            _fail(str(exc))
        except SweepRunError as exc:
            _fail(str(exc), EXIT_FAILURE)
        except KeyboardInterrupt:
            done = len(points) - len(sweep.pending(store))
            print(
                f"interrupted: {done} of {len(points)} points are stored in {db_path}; "
                "run the same command again to resume",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        if not args.quiet:
            print(
                f"sweep {sweep.name}: {report.total} points, {report.executed} run, {report.cached} cached, "
                + (f"{report.by_others} run by another sweep, " if report.by_others else "")
                + f"in {report.wall_seconds:.1f} s; stored in {db_path}"
            )
        statuses = store.statuses(p.key for p in points)
        not_completed = sorted(
            (p.index, statuses[p.key]) for p in points if statuses.get(p.key, "completed") != "completed"
        )
        if not_completed and not args.quiet:
            kinds = ", ".join(f"{n} {s}" for s, n in sorted(Counter(s for _, s in not_completed).items()))
            print(f"{len(not_completed)} points did not complete ({kinds}; first: point {not_completed[0][0]})"
                  + ("" if args.include_unverified else "; tables and plots leave them out "
                     "unless --include-unverified"))
        if args.export is not None:
            try:
                columns, rows = sweep.rows(store, include_unverified=args.include_unverified)
                from .sweep import write_csv

                csv_path = write_csv(args.export, columns, rows)
            except OSError as exc:
                _fail(f"{args.export}: cannot write: {exc.strerror or exc}", EXIT_FAILURE)
            if not args.quiet:
                print(f"wrote {csv_path} ({len(rows)} rows)")
    return 0



def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_") or "x"


def _cmd_plot_sweep(args: argparse.Namespace) -> int:
    from . import plots
    from .store import StoreError
    from .sweep import open_store

    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
    except ImportError:
        _fail("plotting a sweep needs matplotlib and pandas: pip install 'reducelab[plot]'", EXIT_FAILURE)
    try:
        with open_store(args.db) as store:
            _, columns, rows = store.sweep_rows(args.sweep, include_unverified=args.include_unverified)
            _, all_columns, all_rows = store.sweep_rows(args.sweep, include_unverified=True)
    except StoreError as exc:
        _fail(str(exc))
    for flag, name in (("--x", args.x), ("--y", args.y), ("--hue", args.hue)):
        if name is not None and name not in all_columns:
            _fail(f"{args.db}: {flag}: no column {name!r}; columns: {', '.join(all_columns)}")
    if not rows:
        if all_rows:
            _fail(f"{args.db}: none of the sweep's {len(all_rows)} finished points completed (their status is "
                  f"{', '.join(sorted({str(r[all_columns.index('status')]) for r in all_rows}))}); "
                  "plot them anyway with --include-unverified")
        _fail(f"{args.db}: the sweep has no finished points yet (run `reducelab sweep`)")
    for flag, name in (("--x", args.x), ("--y", args.y), ("--hue", args.hue)):
        if name is not None and name not in columns:
            _fail(f"{args.db}: {flag}: column {name!r} exists only in points that did not complete; "
                  "plot them with --include-unverified")
    if len(rows) < len(all_rows):
        print(f"left out {len(all_rows) - len(rows)} points whose status is not completed "
              "(--include-unverified to plot them)", file=sys.stderr)
    stem = args.db.with_suffix("")
    default = stem.parent / f"{stem.name}_{_safe_name(args.y)}_vs_{_safe_name(args.x)}"
    outs: list[Path] = args.out or [default.parent / f"{default.name}.{ext}" for ext in ("png", "svg")]
    import pandas

    try:
        plots.sweep_plot(pandas.DataFrame(rows, columns=columns), args.x, args.y, args.hue, out=outs)
    except plots.PlotDataError as exc:
        _fail(f"{args.db}: {exc}")
    except OSError as exc:
        _fail(f"cannot write the plot: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {', '.join(map(str, outs))}")
    return 0


def _format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{n:g} B"


def _format_seconds(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t * 1e9:.4g} ns"


def _format_model(m: dict) -> str:
    t2 = m["table2"]
    paper = f"paper ({t2['row']}, Table 2)" if t2 else "paper (no Table 2 row)"

    def paper_value(key: str) -> str:
        if not t2 or t2[key] is None:
            return ""
        return f"{t2[key]:.4g}"

    weighted = bool(t2) and t2["congestion_convention"] == "weighted"
    summed = bool(t2) and t2["congestion_convention"] == "sum"
    rows = [
        ("steps", f"{m['steps']}", ""),
        ("Λ       latency deficiency", f"{m['latency_deficiency']:.4f}", paper_value("latency_deficiency")),
        ("Ψ       bandwidth deficiency", f"{m['bandwidth_deficiency']:.4f}", paper_value("bandwidth_deficiency")),
        (
            "Ξ       congestion (weighted)",
            f"{m['congestion_deficiency']:.4f}",
            paper_value("congestion_deficiency") if weighted else "",
        ),
        (
            "Ξ_sum   congestion (summed)",
            f"{m['congestion_sum']:.4g}",
            paper_value("congestion_deficiency") if summed else "",
        ),
    ]
    lines = [
        f"{m['algorithm']} {m['collective']} of {_format_bytes(m['size_bytes'])} on {m['topology']} "
        f"({m['ranks']} ranks, D = {m['d']})",
        "",
        f"{'':30} {'model':>12}   {paper}",
    ]
    lines += [f"{name:30} {value:>12}   {ref}".rstrip() for name, value, ref in rows]
    formula = t2["congestion_formula"] if t2 else None
    if formula is not None and formula != t2["congestion_deficiency"]:
        which = "Ξ" if weighted else "Ξ_sum"
        lines.append(
            f"{'':30} {'':>12}   {which} from the paper's finite-p sum: {formula:.4g}"
        )
    hop = f", switch {m['switch_latency_ns']:g} ns per hop" if m["switch_latency_ns"] else ""
    lines += [
        "",
        f"α-β time  {_format_seconds(m['time_seconds'])}  "
        f"(latency {_format_seconds(m['latency_seconds'])} + bandwidth "
        f"{_format_seconds(m['bandwidth_seconds'])}; alpha {m['latency_ns']:g} ns, "
        f"{m['bandwidth_gbps']:g} Gb/s links{hop})",
    ]
    if m.get("endpoint_seconds"):
        parts = [f"send {m['send_overhead_ns']:g} ns and receive {m['recv_overhead_ns']:g} ns per message"]
        if m["send_latency_ns"] or m["recv_latency_ns"]:
            parts.append(f"send latency {m['send_latency_ns']:g} ns and receive latency {m['recv_latency_ns']:g} ns per step")
        if m["rendezvous_threshold_bytes"] is not None:
            parts.append(f"rendezvous above {_format_bytes(m['rendezvous_threshold_bytes'])}")
        if m["injection_gbps"] is not None:
            parts.append(f"injection ceiling {m['injection_gbps']:g} Gb/s per rank")
        lines.append(f"endpoint  {_format_seconds(m['endpoint_seconds'])} of it ({', '.join(parts)})")
    if t2 and t2["note"]:
        lines.append(f"note: {t2['note']}")
    return "\n".join(lines)


def _format_steps(m: dict) -> str:
    lines = [f"{'step':>5} {'b_s (bytes)':>14} {'busiest link':>14} {'L_s':>8} {'hops':>5} {'messages':>9}"]
    for i, s in enumerate(m["per_step"]):
        lines.append(
            f"{i:>5} {s['port_bytes']:>14} {s['link_bytes']:>14} {s['congestion']:>8.3f} "
            f"{s['hops']:>5} {s['messages']:>9}"
        )
    return "\n".join(lines)


_CANARY_MEMORY_OPTS = ("bandwidth_gbps", "diameter", "hop_latency_ns", "timeout_ns", "leader_ns")
"""Options of `model canary-memory`; `--bandwidth-gbps` is shared with the α-β model."""


def _cmd_canary_memory(args: argparse.Namespace) -> int:
    from .canary import CanaryError, format_canary_memory

    if args.algorithm or args.topology or args.per_step or args.list:
        _fail("model canary-memory takes --bandwidth-gbps, --diameter, --hop-latency-ns, --timeout-ns "
              "and --leader-ns, not --algorithm/--topology/--per-step/--list")
    defaults = {"bandwidth_gbps": 100.0, "diameter": 5, "hop_latency_ns": 300.0, "timeout_ns": 1000.0, "leader_ns": 1000.0}
    vals = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in defaults.items()}
    try:
        print(format_canary_memory(**vals))
    except CanaryError as exc:
        _fail(str(exc))
    return 0


_FLARE_OPTS = ("hosts", "subset_cores", "clusters", "dtype", "no_stagger", "density")
"""Options of `model flare` only (it also reads --size and --bandwidth-gbps)."""


def _cmd_flare_model(args: argparse.Namespace) -> int:
    from . import ScenarioError
    from .flare import format_model, format_sparse_model, model_rows, sparse_model_rows

    if args.algorithm or args.topology or args.per_step or args.list:
        _fail("model flare takes --size, --bandwidth-gbps, --hosts, --subset-cores, --clusters, --dtype, "
              "--no-stagger and --density, not --algorithm/--topology/--per-step/--list")
    params = {
        "bytes": 1 << 20 if args.size is None else args.size,
        "bandwidth_gbps": 100.0 if args.bandwidth_gbps is None else args.bandwidth_gbps,
        "hosts": args.hosts or 64,
        "subset_cores": args.subset_cores or 8,
        "clusters": args.clusters or 64,
        "dtype": args.dtype or "int32",
        "staggered": not args.no_stagger,
    }
    try:
        rows = model_rows(("single", "multi-2", "multi-4", "tree", "flare"), **params)
        if args.density is not None:
            if args.dtype not in (None, "int32"):
                _fail("--density: the sparse allreduce aggregates int32 pairs (drop --dtype)")
            if not 0 < args.density <= 1:
                _fail(f"--density: expected a fraction in (0, 1], got {args.density}")
            sparse = sparse_model_rows(args.density, simulate=False, **params)
    except ScenarioError as exc:
        field = {"pspin.allreduce.hosts": "--hosts", "pspin.subset_cores": "--subset-cores", "pspin.clusters": "--clusters",
                 "pspin.allreduce.dtype": "--dtype", "pspin.allreduce.bytes": "--size",
                 "pspin.allreduce.bandwidth_gbps": "--bandwidth-gbps", "pspin.allreduce.density": "--density"}.get(exc.field, exc.field)
        _fail(f"{field}: {exc.reason}")
    print(format_model(rows, params))
    if args.density is not None:
        print(format_sparse_model(sparse, rows, args.density))
    return 0


def _format_registry() -> str:
    from .schedule import algorithms

    rows = [("name", "kind", "family", "size class", "runs", "summary")]
    for a in algorithms():
        runs = a.name if a.kind == "variant" else " | ".join(a.resolves_to)
        rows.append((a.name, a.kind, a.family, a.size_class or "", runs if a.kind != "variant" else "", a.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows)


def _cmd_schedule_export(args: argparse.Namespace) -> int:
    from . import schedule

    try:
        text = schedule.export(
            args.algorithm, args.topology, args.format, args.size, args.collective, args.calc_ns_per_byte,
            root=args.root,
        )
    except ValueError as exc:
        _fail(str(exc))
    if args.out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    try:
        args.out.write_text(text)
    except OSError as exc:
        _fail(f"{args.out}: cannot write: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {args.out} ({args.format}, {len(text)} bytes)", file=sys.stderr)
    return 0


def _cmd_schedule_check(args: argparse.Namespace) -> int:
    from . import schedule

    try:
        text = args.file.read_text()
    except OSError as exc:
        _fail(f"{args.file}: cannot read: {exc.strerror or exc}")
    try:
        c = schedule.check(text)
    except ValueError as exc:
        _fail(f"{args.file}: {exc}")
    print(f"{args.file}: {c.algorithm}, {c.ranks} ranks, {c.blocks} blocks, {c.steps} steps: checker passed")
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from . import _core

    if args.kind is not None:
        if args.kind == "canary-memory":
            return _cmd_canary_memory(args)
        if args.kind == "flare":
            return _cmd_flare_model(args)
        _fail(f"unknown model {args.kind!r}; known: canary-memory, flare (or omit it for the schedule model)")
    flare_used = [k for k in _FLARE_OPTS if getattr(args, k) not in (None, False)]
    if flare_used:
        _fail(f"--{flare_used[0].replace('_', '-')} belongs to `reducelab model flare`")
    if args.size is None:
        args.size = 512 << 20
    used = [k for k in _CANARY_MEMORY_OPTS if k != "bandwidth_gbps" and getattr(args, k) is not None]
    if used:
        _fail(f"--{used[0].replace('_', '-')} belongs to `reducelab model canary-memory`")
    if args.list:
        print(_format_registry())
        return 0
    if not args.algorithm:
        _fail("model needs --algorithm (see `reducelab model --list`)")
    if not args.topology:
        _fail("model needs --topology, e.g. torus:64x64, hyperx:64x64 or hammingmesh:2x2,32x32")
    try:
        result = _core.model(
            args.algorithm,
            args.topology,
            args.size,
            latency_ns=args.latency_ns,
            bandwidth_gbps=400.0 if args.bandwidth_gbps is None else args.bandwidth_gbps,
            switch_latency_ns=args.switch_latency_ns,
            d=args.dimensions,
            send_overhead_ns=args.send_overhead_ns,
            recv_overhead_ns=args.recv_overhead_ns,
            send_latency_ns=args.send_latency_ns,
            recv_latency_ns=args.recv_latency_ns,
            rendezvous_threshold_bytes=args.rendezvous_threshold_bytes,
            injection_gbps=args.injection_gbps,
            collective=args.collective,
            root=args.root,
        )
    except ValueError as exc:
        _fail(str(exc))
    if result["resolved_from"]:
        print(f"{result['resolved_from']} resolves to {result['algorithm']} for {_format_bytes(args.size)}")
    print(_format_model(result))
    if args.per_step:
        print()
        print(_format_steps(result))
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from . import figures
    from .scenario import FieldError

    try:
        figs = figures.names()
    except figures.FigureError as exc:
        _fail(str(exc))
    known = [*figs, "canary-all", "all"]
    if args.list:
        for name in known:
            print(name)
        return 0
    if not args.figure:
        _fail(f"reproduce needs a FIGURE; known: {', '.join(known)}")
    if args.figure.endswith(".toml"):
        try:
            figures.load(args.figure)
        except figures.FigureError as exc:
            _fail(str(exc))
    elif args.figure not in known:
        _fail(f"unknown figure {args.figure!r}; known: {', '.join(known)} (see `reducelab reproduce --list`)")
    if args.store is not None and args.store.is_dir():
        _fail(f"--store: {args.store} is a directory, expected a results store file (e.g. results/points.sqlite)")
    if args.scheduler is not None:
        from .sweep import check_scheduler

        try:
            check_scheduler(args.scheduler)
        except FieldError as exc:
            _fail(f"{exc.field}: {exc.reason}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _fail("reproduce draws a plot and needs matplotlib: pip install 'reducelab[plot]'", EXIT_FAILURE)
    label = Path(args.figure).stem if args.figure.endswith(".toml") else args.figure
    out: Path = args.out if args.out is not None else Path("results") / f"{label}-{args.scale}"
    if args.claims_only:
        return _cmd_reproduce_claims_only(args, out)
    if args.figure in ("all", "canary-all"):
        return _reproduce_all(args, out)
    return _reproduce_one(args, out)


def _reproduction(out: Path, run: Callable[[], Any]) -> Any:
    """`run()`, a reproduction writing into `out`, its errors turned into the CLI's: a bad figure,
    scale or option exits 2, a point that cannot run or a store or file that cannot be written 1."""
    from . import figures
    from .scenario import FieldError
    from .store import StoreError
    from .sweep import SweepRunError

    try:
        return run()
    except (figures.FigureError, FieldError) as exc:
        _fail(str(exc))
    except (SweepRunError, StoreError) as exc:
        _fail(str(exc), EXIT_FAILURE)
    except OSError as exc:
        _fail(f"{out}: cannot write results: {exc.strerror or exc}", EXIT_FAILURE)


def _reproduce_one(args: argparse.Namespace, out: Path) -> int:
    """One figure into OUT: its files, the claims table."""
    from . import figures

    def run() -> figures.FigureReport:
        fig = figures.figure(args.figure)
        fig.kind_of.with_backend(fig, fig.scale(args.scale), args.backend)
        return figures.reproduce(args.figure, out, scale=args.scale, jobs=args.jobs, store=args.store,
                                 scheduler=args.scheduler, progress=not args.quiet, sensitivity=args.sensitivity,
                                 backend=args.backend)

    rep = _reproduction(out, run)
    if not args.quiet:
        _print_report(rep)
    return _unverified_status([(args.figure, r) for r in rep.unverified])


def _print_report(rep: Any) -> None:
    """A figure's claims table and what it wrote (a `figures.FigureReport`)."""
    p, f, n = rep.counts()
    cached = f", {rep.sweep.cached} stored before" if rep.sweep and rep.sweep.cached else ""
    print(rep.claims_table())
    print(f"wrote {rep.out} ({', '.join(sorted(rep.files))}) in {rep.wall_seconds:.0f} s, "
          f"{len(rep.rows)} runs{cached}; {p} pass, {f} fail, {n} n/a", flush=True)


def _unverified_status(bad: list[tuple[str, dict[str, Any]]]) -> int:
    if not bad:
        return 0
    name, r = bad[0]
    shown = {k: v for k, v in r.items() if k in ("series", "allocation", "algorithm", "topology", "size_bytes")}
    print(f"error: {len(bad)} runs did not complete with verified results, e.g. {name} {shown}: "
          f"{r.get('mismatch') or r.get('end')}", file=sys.stderr)
    return EXIT_FAILURE


def _reproduce_all(args: argparse.Namespace, out: Path) -> int:
    """`reproduce all` (every figure) or `canary-all` (every Canary figure) into OUT/NAME/
    through one store (OUT/points.sqlite), a line per figure, then OUT/index.html and
    OUT/claims.csv. Returns 1 if a run did not complete with verified results."""
    from . import figures

    names = figures.names() if args.figure == "all" else [n for n in figures.names() if n.startswith("canary-")]
    if args.backend is not None and not any(figures.figure(n).kind_of.takes_backend for n in names):
        _fail(f"the figures of {args.figure} run scenarios as they are; --backend does not apply")
    for name in names:
        try:
            figures.figure(name).scale(args.scale)
        except figures.FigureError as exc:
            _fail(str(exc))

    def done(r: figures.FigureReport) -> None:
        if not args.quiet and args.figure == "canary-all":  # a few figures: each one's claims table
            print(f"{r.figure.name} ({args.scale})")
            _print_report(r)
        elif not args.quiet:
            p, f, n = r.counts()
            cached = f", {r.sweep.cached} stored before" if r.sweep and r.sweep.cached else ""
            print(f"{r.figure.name:<12} {p:>2} pass {f:>2} fail {n:>2} n/a  {len(r.rows):>5} runs  "
                  f"{r.wall_seconds:6.1f} s{cached}", flush=True)

    cmd = f"reducelab reproduce {args.figure} --scale {args.scale}" + (f" --backend {args.backend}" if args.backend else "") + f" --out {out}"
    reports = _reproduction(out, lambda: figures.reproduce_all(
        out, args.scale, names_=names, backend=args.backend, jobs=args.jobs, store=args.store,
        scheduler=args.scheduler, progress=not args.quiet, sensitivity=args.sensitivity, on_done=done, command=cmd))
    if not args.quiet:
        n = sum(len(r.verdicts) for r in reports)
        print(f"wrote {out / 'index.html'} ({len(reports)} figures) and {out / 'claims.csv'} ({n} claims)")
    return _unverified_status([(r.figure.name, row) for r in reports for row in r.unverified])


def _cmd_reproduce_claims_only(args: argparse.Namespace, out: Path) -> int:
    """`reproduce FIG --claims-only`: judge the claims again on the results in OUT (OUT/NAME/ for
    `all` and `canary-all`), rewrite the claims files, print the table (one line per figure for
    several, and OUT/claims.csv for `all`)."""
    from . import figures
    from .claims import ClaimError, all_claims_csv, claims_table_text
    from .store import StoreError

    if args.sensitivity:
        _fail("--claims-only runs nothing: it cannot run the --sensitivity sweeps")
    if args.figure == "all":
        todo = figures.names()
    elif args.figure == "canary-all":
        todo = [n for n in figures.names() if n.startswith("canary-")]
    else:
        todo = [args.figure]
    many = args.figure in ("all", "canary-all")
    rows = []
    skipped = []
    for name in todo:
        d = out / name if many else out
        if many and not d.is_dir():
            skipped.append(name)  # e.g. docs/results/swing-full holds no Canary figure
            continue
        try:
            vs = figures.reevaluate(name, d, args.scale)
        except (figures.FigureError, StoreError, ClaimError) as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{d}: cannot write the claims files: {exc.strerror or exc}", EXIT_FAILURE)
        rows += [(name, v.id, v.source, v.claim, v.paper_value, v.measured, v.verdict) for v in vs]
        if not args.quiet:
            p, f, n = (sum(v.verdict == x for v in vs) for x in ("pass", "fail", "n/a"))
            if many:
                print(f"{name:<12} {p:>2} pass {f:>2} fail {n:>2} n/a", flush=True)
            else:
                print(claims_table_text([(v.id, v.verdict.upper(), v.paper_value, v.measured) for v in vs]))
                print(f"rewrote the claims files in {d}: {p} pass, {f} fail, {n} n/a")
    if len(skipped) == len(todo):
        _fail(f"{out}: no results of {', '.join(skipped)} (expected {out}/NAME/ directories)")
    if skipped and not args.quiet:
        print(f"skipped (no {out}/NAME/): {', '.join(skipped)}")
    if args.figure == "all":
        (out / "claims.csv").write_text(all_claims_csv(rows), encoding="utf-8", newline="")
        if not args.quiet:
            p = sum(r[6] == "pass" for r in rows)
            f = sum(r[6] == "fail" for r in rows)
            print(f"{len(rows)} claims: {p} pass, {f} fail, {len(rows) - p - f} n/a; wrote {out / 'claims.csv'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `reducelab` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # `switch` and `bench switch` pass their arguments through to the reducelab-switch binary
    # (argparse would take its options, e.g. `--fault`, for its own).
    passthrough = {1: ["switch"], 2: ["bench", "switch"]}
    for n, prefix in passthrough.items():
        if argv[:n] == prefix and len(argv) > n and argv[n] not in ("-h", "--help"):
            args = argparse.Namespace(switch_args=argv[n:], handler=_cmd_switch if n == 1 else _cmd_bench_switch)
            break
    else:
        args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except _Fail as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated:
        print("terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:
        # Output piped into e.g. `head`; not an error of ours. Point stdout at /dev/null so the
        # interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
