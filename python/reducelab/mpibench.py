"""`reducelab bench mpi`: OSU-style allreduce sweep of the MPI runtime (mpi/, docs/mpi.md).

Runs `mpi/build/bench_mpi` under `mpirun` for each rank count: float sums from 4 B (one float) to 64 MiB,
every ReduceLab algorithm and the MPI library's default (`mpi`), `reps` rounds in which every
algorithm runs once (interleaved, so machine noise hits all alike). A round's time is the
slowest rank's mean per call; results are medians over rounds. bench_mpi checks that every
algorithm gives the same (exact) result before timing it.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import statistics
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
def default_algorithms(torus: bool = False) -> list[str]:
    """The MPI library's own allreduce, every variant of the algorithm registry that builds on
    the layout (1D, or a virtual torus when `torus`), the runtime's `auto` policy and its
    shared-memory allreduce (`shm`, not a schedule: mpi/src/shm.c)."""
    from .schedule import algorithms

    infos = algorithms()
    variants = [a.name for a in infos if a.kind == "variant" and (torus or (a.min_dims or 1) <= 1)]
    return ["mpi", *variants, *(a.name for a in infos if a.kind == "policy"), "shm"]


DEFAULT_SIZES = tuple(4 << k for k in range(25))  # 4 B (one float) … 64 MiB, powers of two
DEFAULT = "mpi"


def build_dir() -> Path:
    """mpi/build of this checkout (REDUCELAB_MPI_BUILD overrides)."""
    env = os.environ.get("REDUCELAB_MPI_BUILD")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "mpi" / "build"


@dataclass(frozen=True)
class Row:
    ranks: int
    algorithm: str
    bytes: int
    median_s: float
    min_s: float
    max_s: float
    rounds: int

    @property
    def bandwidth(self) -> float:
        """Vector bytes per second (OSU's algorithm bandwidth)."""
        return self.bytes / self.median_s if self.median_s > 0 else float("inf")


def parse_torus(shape: str) -> list[int]:
    """The sizes of a virtual torus shape like ``4x2`` (1 to 8 sizes, each 1..2^20, the grammar
    of REDUCELAB_TORUS in mpi/src/config.c); ValueError naming ``--torus`` otherwise."""
    parts = shape.lower().split("x")
    if not 1 <= len(parts) <= 8 or not all(p.isdigit() and 1 <= int(p) <= 1 << 20 for p in parts):
        raise ValueError(f"--torus: {shape!r} is not a shape like 4x2 (1 to 8 sizes from 1 to 1048576, joined by x)")
    return [int(p) for p in parts]


def check_torus(shape: str, ranks: int) -> list[int]:
    """`parse_torus`, and the torus must have one position per rank (the runtime would otherwise
    ignore the shape and the torus-only algorithms fail inside MPI). ValueError otherwise."""
    dims = parse_torus(shape)
    positions = 1
    for d in dims:
        positions *= d
    if positions != ranks:
        raise ValueError(
            f"--torus {shape} has {positions} positions but --ranks is {ranks}: give as many ranks as "
            f"positions (--ranks {positions}) or a torus of {ranks} positions"
        )
    return dims


def _bench_mpi(ranks: int, args: list[str], extra_env: dict[str, str] | None = None,
               timeout: float = 3600) -> str:
    """stdout of `mpirun -np ranks bench_mpi ARGS` (RuntimeError with our messages first if it fails)."""
    exe = build_dir() / "bench_mpi"
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun not found: install Open MPI (scripts/setup.sh does)")
    if not exe.exists():
        raise RuntimeError(f"{exe} not found: build the MPI runtime (scripts/setup.sh, or make -C mpi)")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]
    for key, value in (extra_env or {}).items():
        cmd += ["-x", f"{key}={value}"]
    cmd += [str(exe), *args]
    env = {k: v for k, v in os.environ.items() if k != "REDUCELAB_ALLREDUCE"}
    env.update(extra_env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        ours = list(dict.fromkeys(line for line in lines if line.startswith("reducelab")))  # our own messages first
        tail = "\n".join(ours + [line for line in lines[-8:] if line not in ours])
        raise RuntimeError(f"bench_mpi on {ranks} ranks failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def run(ranks: int, sizes: list[int], algorithms: list[str], reps: int, round_bytes: int = 16 * MIB,
        torus: str | None = None, timeout: float = 3600, extra_env: dict[str, str] | None = None) -> list[Row]:
    """One bench_mpi run on `ranks` ranks; medians per (algorithm, size). ValueError for a
    `torus` that does not have `ranks` positions (`check_torus`). `auto` uses the crossover
    rules in force (REDUCELAB_RULES of the environment, or the shipped defaults) unless
    `extra_env` sets them."""
    if torus:
        check_torus(torus, ranks)
    env = dict(extra_env or {})
    if torus:
        env["REDUCELAB_TORUS"] = torus
    args = ["--sizes", ",".join(map(str, sizes)), "--algorithms", ",".join(algorithms), "--reps", str(reps),
            "--round-bytes", str(round_bytes)]
    return parse(ranks, _bench_mpi(ranks, args, env, timeout))


def parse(ranks: int, text: str) -> list[Row]:
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for rec in csv.DictReader(io.StringIO(text)):
        times[(rec["algorithm"], int(rec["bytes"]))].append(float(rec["seconds"]))
    return [
        Row(ranks, alg, size, statistics.median(ts), min(ts), max(ts), len(ts))
        for (alg, size), ts in times.items()
    ]


def _size(n: int) -> str:
    for unit, f in (("MiB", MIB), ("KiB", 1024)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def best_vs_default(rows: list[Row]) -> dict[tuple[int, int], tuple[str, float]]:
    """Per (ranks, bytes): the fastest ReduceLab algorithm and its speedup over the default
    (default median time / its median time = bandwidth ratio)."""
    by: dict[tuple[int, int], dict[str, Row]] = defaultdict(dict)
    for r in rows:
        by[(r.ranks, r.bytes)][r.algorithm] = r
    out = {}
    for key, algs in by.items():
        if DEFAULT not in algs:
            continue
        ours = [r for a, r in algs.items() if a != DEFAULT]
        if ours:
            best = min(ours, key=lambda r: r.median_s)
            out[key] = (best.algorithm, algs[DEFAULT].median_s / best.median_s)
    return out


def format_table(rows: list[Row]) -> str:
    """Per rank count: median time per call (µs) per algorithm and size, then the best
    ReduceLab algorithm and its speedup over the MPI default."""
    out = []
    best = best_vs_default(rows)
    for ranks in sorted({r.ranks for r in rows}):
        sub = [r for r in rows if r.ranks == ranks]
        algs = list(dict.fromkeys(r.algorithm for r in sub))
        sizes = sorted({r.bytes for r in sub})
        t = {(r.algorithm, r.bytes): r for r in sub}
        header = ["size", *algs, "best", "speedup"]
        body = []
        for s in sizes:
            cells = [_size(s)] + [f"{t[(a, s)].median_s * 1e6:.1f}" if (a, s) in t else "-" for a in algs]
            b = best.get((ranks, s))
            cells += [b[0], f"{b[1]:.2f}x"] if b else ["-", "-"]
            body.append(cells)
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = [f"{ranks} ranks: median µs per allreduce (float sum); speedup = default time / best ReduceLab time"]
        for row in [header, *body]:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        lines.insert(2, "  ".join("-" * w for w in widths))
        out.append("\n".join(lines))
    return "\n\n".join(out)


def write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["ranks", "algorithm", "bytes", "median_s", "min_s", "max_s", "rounds", "bandwidth_Bps"])
        for r in sorted(rows, key=lambda r: (r.ranks, r.algorithm, r.bytes)):
            w.writerow([r.ranks, r.algorithm, r.bytes, f"{r.median_s:.9g}", f"{r.min_s:.9g}", f"{r.max_s:.9g}",
                        r.rounds, f"{r.bandwidth:.6g}"])


def plot(rows: list[Row], path: Path) -> None:
    """Bandwidth against size, one panel per rank count, the default dashed black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank_counts = sorted({r.ranks for r in rows})
    fig, axes = plt.subplots(1, len(rank_counts), figsize=(6.5 * len(rank_counts), 4.8), squeeze=False)
    for ax, ranks in zip(axes[0], rank_counts):
        sub = [r for r in rows if r.ranks == ranks]
        for alg in dict.fromkeys(r.algorithm for r in sub):
            pts = sorted((r.bytes, r.bandwidth / MIB) for r in sub if r.algorithm == alg)
            style = {"color": "black", "linestyle": "--", "linewidth": 2} if alg == DEFAULT else {}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=f"{alg} (MPI default)"
                    if alg == DEFAULT else alg, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("vector size (bytes)")
        ax.set_ylabel("bandwidth (MiB/s, median)")
        ax.set_title(f"allreduce, {ranks} ranks")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- `reducelab tune mpi`: auto's crossover to the MPI library (docs/mpi.md) ----

TUNE_SIZES = tuple(8 << k for k in range(18))  # 8 B … 1 MiB


def crossover(rows: list[Row], ranks: int) -> tuple[int, bool]:
    """The size from which `auto` (run with REDUCELAB_RULES=none, i.e. always ReduceLab schedules)
    should run, below it the library (`mpi`): the threshold whose policy loses least against the
    faster of the two over every measured size, the loss being the sum of log(policy's median /
    faster median) (a step fit: one noisy size cannot move the crossover far, as it could with
    a rule like "not slower at every larger size"). Ties go to the smaller threshold. Returns
    (bytes, True), or (2 x the largest size, False) when handing every measured size to the
    library loses least."""
    t = {(r.algorithm, r.bytes): r.median_s for r in rows if r.ranks == ranks}
    sizes = sorted(b for (a, b) in t if a == "auto" and ("mpi", b) in t)
    if not sizes:
        raise ValueError(f"no measurements of both auto and mpi on {ranks} ranks")
    best = {b: min(t[("auto", b)], t[("mpi", b)]) for b in sizes}
    loss_auto = [math.log(t[("auto", b)] / best[b]) for b in sizes]
    loss_mpi = [math.log(t[("mpi", b)] / best[b]) for b in sizes]
    choice, choice_loss = None, math.inf
    for i in range(len(sizes) + 1):  # threshold sizes[i]; len(sizes): everything to the library
        loss = sum(loss_mpi[:i]) + sum(loss_auto[i:])
        if loss < choice_loss - 1e-12:
            choice, choice_loss = i, loss
    return (sizes[choice], True) if choice < len(sizes) else (2 * sizes[-1], False)


@dataclass(frozen=True)
class Policy:
    """`auto`'s rule for one rank count: the shared-memory allreduce for `shm_min <= bytes <
    shm_max` (None: no range; shm_max None: no upper bound) where it can run, otherwise the MPI
    library below `min_bytes` and schedules from it. `found`: False when the library alone lost
    least against the schedules at every size."""
    min_bytes: int
    found: bool
    shm_min: int | None = None
    shm_max: int | None = None

    def line(self, ranks: int) -> str:
        """The rules-file line (mpi/src/auto_rules.c, load_rules_once)."""
        if self.shm_min is None:
            return f"{ranks} {self.min_bytes}"
        return f"{ranks} {self.min_bytes} {self.shm_min} {'inf' if self.shm_max is None else self.shm_max}"


def fit_policy(rows: list[Row], ranks: int) -> Policy:
    """`auto`'s rule from the medians of `mpi`, `auto` (schedules only) and `shm`: the library
    crossover as `crossover` finds it (it still decides where the shared-memory allreduce cannot
    run: communicators across nodes, datatypes it declines), then the contiguous range of sizes for
    `shm` that loses least (sum of log(policy's median / fastest median)) with the crossover's
    choice outside it. Ties go to the smaller range; a range from the smallest size measured
    starts at 0 and one reaching the largest has no upper bound (sizes beyond the measured ones
    behave like the nearest measured). Without `shm` measurements: the crossover alone."""
    value, found = crossover(rows, ranks)
    t = {(r.algorithm, r.bytes): r.median_s for r in rows if r.ranks == ranks}
    sizes = sorted(b for (a, b) in t if a == "auto" and ("mpi", b) in t and ("shm", b) in t)
    if not sizes:
        return Policy(value, found)
    best = {b: min(t[("auto", b)], t[("mpi", b)], t[("shm", b)]) for b in sizes}
    outside = [math.log(t[("mpi" if b < value else "auto", b)] / best[b]) for b in sizes]
    inside = [math.log(t[("shm", b)] / best[b]) for b in sizes]
    n = len(sizes)
    choice, choice_loss = (0, 0), sum(outside)
    for i in range(n):
        for j in range(i + 1, n + 1):
            total = sum(outside[:i]) + sum(inside[i:j]) + sum(outside[j:])
            if total < choice_loss - 1e-12 or (abs(total - choice_loss) <= 1e-12 and j - i < choice[1] - choice[0]):
                choice, choice_loss = (i, j), total
    i, j = choice
    if j == i:
        return Policy(value, found)
    return Policy(value, found, sizes[i] if i > 0 else 0, sizes[j] if j < n else None)


def decision_ns(ranks: int = 1) -> float:
    """Mean cost of auto's crossover decision (RL_Auto_uses_library), ns, on `ranks` ranks (one by
    default: with more ranks than cores the mean also counts the time the process was preempted)."""
    out = _bench_mpi(ranks, ["--decision", "20000000"], timeout=600)
    for line in out.splitlines():
        if line.startswith("decision_ns,"):
            return float(line.split(",")[1])
    raise RuntimeError(f"bench_mpi --decision printed no decision_ns line:\n{out}")


def tune(ranks_list: list[int], sizes: list[int], reps: int,
         round_bytes: int) -> tuple[dict[int, Policy], list[Row]]:
    """Times `mpi`, `auto` (always schedules) and `shm` interleaved on each rank count and returns
    the policy per rank count (see `fit_policy`) and the measurements."""
    rows: list[Row] = []
    rules = {}
    for n in ranks_list:
        sub = run(n, sizes, ["mpi", "auto", "shm"], reps, round_bytes, extra_env={"REDUCELAB_RULES": "none"})
        rows += sub
        rules[n] = fit_policy(sub, n)
    return rules, rows


def format_rules(rules: dict[int, Policy], rows: list[Row], header: list[str]) -> str:
    """A rules file for REDUCELAB_RULES: '# ' comments (header, then per rank count the medians),
    and one 'RANKS MIN_BYTES [SHM_MIN_BYTES SHM_MAX_BYTES]' line per rank count."""
    lines = [f"# {h}" for h in header]
    lines.append("# auto hands an allreduce of fewer than MIN_BYTES bytes on a communicator of at least RANKS")
    lines.append("# ranks (the largest such line) to the MPI library, and those of SHM_MIN_BYTES up to")
    lines.append("# (not including) SHM_MAX_BYTES to the shared-memory allreduce; use with REDUCELAB_RULES=<this file>")
    for n in sorted(rules):
        t = {(r.algorithm, r.bytes): r for r in rows if r.ranks == n}
        lines.append(f"# {n} ranks: size, library µs, auto (schedules) µs, shm µs, library time / auto time, "
                     "library time / shm time (median of rounds)")
        for b in sorted(b for (a, b) in t if a == "auto" and ("mpi", b) in t):
            m, a = t[("mpi", b)].median_s, t[("auto", b)].median_s
            sh = t.get(("shm", b))
            shm = f"  {sh.median_s * 1e6:10.1f}" if sh else f"  {'-':>10}"
            ratio = f"  {m / sh.median_s:5.2f}" if sh else ""
            lines.append(f"#   {_size(b):>8}  {m * 1e6:10.1f}  {a * 1e6:10.1f}{shm}  {m / a:5.2f}{ratio}")
        if not rules[n].found:
            lines.append(f"# {n} ranks: the library alone lost least at every size measured")
        lines.append(rules[n].line(n))
    return "\n".join(lines) + "\n"
