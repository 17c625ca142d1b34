"""`reducelab bench switch --mpi`: MPI allreduce through the software switch against the MPI
runtime's host-based allreduces on the same ranks (docs/switch.md, "Benchmark").

For each rank count N and each switch protocol (`canary`; the pool protocols `switchml` and
`atp`, whose session serves one run per switch start): a switch process on loopback (a star of
N hosts running Canary, or of N workers — and ATP's parameter-server host — running one
training job of the pool protocol, with the shipped scenarios' 256 aggregators and 20 ms
timeout floor), then one `bench_mpi` run (mpi/tests/bench_mpi.c) of the MPI library's own
allreduce (`mpi`, first, so every other result is checked against it), ReduceLab's `ring`,
`rabenseifner`, `auto`, `shm` and the protocol (REDUCELAB_ALLREDUCE's switch path: each call
through the switch), float sums, interleaved rounds, medians of the slowest rank's mean per
call. Each protocol is compared with the best host-based allreduce of its own run (same-run
ratios only: the machine's speed drifts between runs). Goodput = vector bytes per second (OSU's
algorithm bandwidth).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from . import mpibench, swswitch

HOST_BASED = ("mpi", "ring", "rabenseifner", "auto", "shm")
PROTOCOLS = ("canary", "switchml", "atp")


def scenario(hosts: int, protocol: str = "canary") -> str:
    """A star of `hosts` hosts running Canary with the timers of scenarios/switch/ (ms, for real
    sockets on a shared machine). The traffic entry's size is irrelevant: the MPI ranks build
    each call's collective themselves. For `switchml` / `atp`: one training job of `hosts`
    workers (ATP: one more host, its parameter server, run by rank 0) as
    scenarios/switch/star4_switchml.toml; the model only fixes the job, the ranks send their
    vectors."""
    if protocol != "canary":
        star = hosts + (protocol != "switchml")
        return (
            f'name = "switch-bench-mpi-{protocol}"\nseed = 1\n[topology]\nkind = "star"\nhosts = {star}\n'
            'bandwidth_gbps = 100\nlatency_ns = 500\n[ina]\nswitch_memory_bytes = 78336\n[[traffic]]\nkind = "training"\n'
            f'protocol = "{protocol}"\njobs = 1\nworkers = {hosts}\nmodels = ["A"]\nmodel_scale = 0.01\n'
            'values = true\nmin_rto_us = 20000\n'
        )
    return (
        f'name = "switch-bench-mpi"\nseed = 1\n[topology]\nkind = "star"\nhosts = {hosts}\n'
        'bandwidth_gbps = 100\nlatency_ns = 500\n[ina]\ntimeout_ns = 50000000\nreclaim_us = 2000000\n'
        '[[traffic]]\nkind = "ina_allreduce"\nhosts = "all"\nbytes = 1024\nprotocol = "canary"\n'
        'retransmit_timeout_us = 200000\n'
    )


def switch_node(hosts: int, protocol: str) -> int:
    """The switch's node id in `scenario(hosts, protocol)` (a star's switch follows its hosts)."""
    return hosts + (protocol not in ("canary", "switchml"))


def run(hosts: list[int], sizes: list[int], reps: int, ip_base: str = "127.66.20.1",
        protocols: tuple[str, ...] = PROTOCOLS) -> tuple[list[tuple[str, mpibench.Row]], list[tuple[int, str, dict]]]:
    """((protocol of the run, bench_mpi row) pairs, (ranks, protocol, the switch's report) per run)."""
    binary = swswitch.find_binary()
    lib = binary.parent / "libreducelab_innet.so"
    if not lib.exists():
        raise RuntimeError(f"{lib} not found: build it with `cargo build --release -p reducelab-innet`")
    rows: list[tuple[str, mpibench.Row]] = []
    reports: list[tuple[int, str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in hosts:
            for protocol in protocols:
                path = Path(tmp) / f"star{n}_{protocol}.toml"
                path.write_text(scenario(n, protocol), encoding="utf-8")
                node = switch_node(n, protocol)
                # A fresh switch per run: a pool switch serves one session per start.
                sw = subprocess.Popen(
                    [str(binary), "switch", "--scenario", str(path), "--node", str(node), "--ip-base", ip_base],
                    stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                )
                try:
                    assert sw.stdout is not None
                    if sw.stdout.readline().strip() != f"ready {node}":
                        raise RuntimeError(f"the {protocol} switch for {n} hosts did not start")
                    env = {"REDUCELAB_INNET_SCENARIO": str(path), "REDUCELAB_INNET_ADDR": f"{ip_base}:47000",
                           "REDUCELAB_INNET_LIB": str(lib), "REDUCELAB_INNET_TIMEOUT_S": "60"}
                    got = mpibench.run(n, sizes, [*HOST_BASED, protocol], reps, 16 * mpibench.MIB, extra_env=env)
                    rows += [(protocol, r) for r in got]
                finally:
                    sw.terminate()
                    out, _ = sw.communicate(timeout=30)
                reports.append((n, protocol, json.loads(out) if out.strip() else {}))
    return rows, reports


def format_table(rows: list[tuple[str, mpibench.Row]]) -> str:
    """One line per (ranks, size, protocol): the protocol's goodput through the switch, the best
    host-based one of the same run and its name."""
    lines = ["| ranks | bytes | protocol | switch Gb/s | best host-based (same run) | its Gb/s | switch / best |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    order = {p: i for i, p in enumerate(PROTOCOLS)}
    keys = sorted({(r.ranks, r.bytes, p) for p, r in rows}, key=lambda k: (k[0], k[1], order.get(k[2], 99)))
    for ranks, size, protocol in keys:
        here = {r.algorithm: r for p, r in rows if (r.ranks, r.bytes, p) == (ranks, size, protocol)}
        if protocol not in here:
            continue
        best = max((here[a] for a in HOST_BASED if a in here), key=lambda r: r.bandwidth)
        c = here[protocol]
        lines.append(f"| {ranks} | {size} | {protocol} | {c.bandwidth * 8 / 1e9:.2f} | {best.algorithm} | "
                     f"{best.bandwidth * 8 / 1e9:.2f} | {c.bandwidth / best.bandwidth:.2f} |")
    return "\n".join(lines)
