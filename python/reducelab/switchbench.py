"""`reducelab bench switch --mpi`: MPI allreduce through the software switch against the MPI
runtime's host-based allreduces on the same ranks (docs/switch.md, "Benchmark").

For each rank count N: a switch process on loopback (a star of N hosts running Canary), then
one `bench_mpi` run (mpi/tests/bench_mpi.c) of the MPI library's own allreduce (`mpi`, first,
so every other result is checked against it), ReduceLab's `ring`, `rabenseifner`, `auto`,
`shm` and `canary` (REDUCELAB_ALLREDUCE's switch path: each call through the switch), float
sums, interleaved rounds, medians of the slowest rank's mean per call. Goodput = vector bytes
per second (OSU's algorithm bandwidth).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from . import mpibench, swswitch

HOST_BASED = ("mpi", "ring", "rabenseifner", "auto", "shm")


def scenario(hosts: int) -> str:
    """A star of `hosts` hosts running Canary with the timers of scenarios/switch/ (ms, for real
    sockets on a shared machine). The traffic entry's size is irrelevant: the MPI ranks build
    each call's collective themselves."""
    return (
        f'name = "switch-bench-mpi"\nseed = 1\n[topology]\nkind = "star"\nhosts = {hosts}\n'
        'bandwidth_gbps = 100\nlatency_ns = 500\n[ina]\ntimeout_ns = 50000000\nreclaim_us = 2000000\n'
        '[[traffic]]\nkind = "ina_allreduce"\nhosts = "all"\nbytes = 1024\nprotocol = "canary"\n'
        'retransmit_timeout_us = 200000\n'
    )


def run(hosts: list[int], sizes: list[int], reps: int, ip_base: str = "127.66.20.1") -> tuple[list[mpibench.Row], list[dict]]:
    """(bench_mpi rows, the switch's report per rank count)."""
    binary = swswitch.find_binary()
    lib = binary.parent / "libreducelab_innet.so"
    if not lib.exists():
        raise RuntimeError(f"{lib} not found: build it with `cargo build --release -p reducelab-innet`")
    rows: list[mpibench.Row] = []
    reports: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in hosts:
            path = Path(tmp) / f"star{n}.toml"
            path.write_text(scenario(n), encoding="utf-8")
            sw = subprocess.Popen(
                [str(binary), "switch", "--scenario", str(path), "--node", str(n), "--ip-base", ip_base],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            )
            try:
                assert sw.stdout is not None
                if sw.stdout.readline().strip() != f"ready {n}":
                    raise RuntimeError(f"the switch for {n} hosts did not start")
                env = {"REDUCELAB_INNET_SCENARIO": str(path), "REDUCELAB_INNET_ADDR": f"{ip_base}:47000",
                       "REDUCELAB_INNET_LIB": str(lib), "REDUCELAB_INNET_TIMEOUT_S": "60"}
                rows += mpibench.run(n, sizes, [*HOST_BASED, "canary"], reps, 16 * mpibench.MIB, extra_env=env)
            finally:
                sw.terminate()
                out, _ = sw.communicate(timeout=30)
            reports.append(json.loads(out) if out.strip() else {})
    return rows, reports


def format_table(rows: list[mpibench.Row]) -> str:
    """One line per (ranks, size): canary's goodput, the best host-based one and its name."""
    lines = ["| ranks | bytes | canary (switch) Gb/s | best host-based | its Gb/s | canary / best |",
             "| --- | --- | --- | --- | --- | --- |"]
    keys = sorted({(r.ranks, r.bytes) for r in rows})
    for ranks, size in keys:
        here = {r.algorithm: r for r in rows if (r.ranks, r.bytes) == (ranks, size)}
        if "canary" not in here:
            continue
        best = max((here[a] for a in HOST_BASED if a in here), key=lambda r: r.bandwidth)
        c = here["canary"]
        lines.append(f"| {ranks} | {size} | {c.bandwidth * 8 / 1e9:.2f} | {best.algorithm} | "
                     f"{best.bandwidth * 8 / 1e9:.2f} | {c.bandwidth / best.bandwidth:.2f} |")
    return "\n".join(lines)
