"""Typed stubs for the compiled module `reducelab._core` (crates/py).

Use the wrappers in `reducelab` (`run`, `run_file`, `Result`) rather than this module directly.
"""

from typing import TypedDict

__version__: str

class ScenarioError(ValueError):
    """A scenario (or benchmark name) was rejected.

    `str(err)` is ``"FIELD: REASON"`` (just ``"REASON"`` when `field` is empty).
    """

    field: str
    """Dotted path of the offending field, e.g. ``"network.bogus"`` or ``"topology.dims[1]"``."""
    reason: str
    """Why the field is wrong."""

class EngineStats(TypedDict):
    """Engine counters of one run (never written to result files)."""

    wall_seconds: float
    events: int
    packets: int
    packet_hops: int
    sim_time_ps: int

class RunOutput(TypedDict):
    summary_json: str
    """Contents of ``summary.json``."""
    files: list[tuple[str, str]]
    """Other result files as ``(file name, contents)``, e.g. ``messages.csv``, ``links.csv``."""
    table: str
    """Short human-readable summary for a terminal."""
    stats: EngineStats

class BenchResult(EngineStats):
    name: str
    peak_rss_bytes: int

def run(text: str, seed: int | None = None, progress: bool = False, probe: bool = False) -> RunOutput:
    """Parse, validate and run a TOML scenario given as text (GIL released), on the backend its
    ``run.backend`` resolves to (summary.json's ``backend`` and ``backend_reason``).

    `seed` (0 <= seed < 2**64) overrides the scenario's seed. With `progress`, a progress bar is
    drawn on stderr when it is a terminal and the run lasts more than 2 s. With `probe`, the
    scenario is validated and stopped at simulated time 1 ps (status ``"time_limit"``).

    Raises `ScenarioError` if the scenario is invalid. Python's signal handlers run about every
    65k events; if one raises (e.g. Ctrl-C's ``KeyboardInterrupt``), the run stops and that
    exception propagates with the partial output (status ``"interrupted"``) as ``partial_run``.
    """

def innet_allreduce(
    text: str,
    host: int,
    data: bytes,
    tenant: int = 0,
    ip_base: str = "127.0.100.1",
    port_base: int = 47000,
    timeout_s: float = 10.0,
    start_at: float | None = None,
) -> tuple[bytes, str]:
    """One rank's in-network allreduce of int32 `data` through running software switches:
    (the wrapping sum as bytes, the host's report as JSON). ValueError for bad input,
    RuntimeError when the run cannot finish."""

def bench_names() -> list[str]:
    """Names of the built-in engine benchmark scenarios."""

def bench_engine(name: str) -> BenchResult:
    """Run one built-in engine benchmark (GIL released). Raises `ScenarioError` for an unknown name."""

class ModelStep(TypedDict):
    """Loads of one lockstep step of a modelled schedule."""

    port_bytes: int
    """b_s: most bytes any rank sends on any one port."""
    link_bytes: int
    """Most bytes on any directed link (L_s * b_s)."""
    congestion: float
    """L_s = link_bytes / port_bytes (0 in a step that moves no data)."""
    hops: int
    """Longest path (links) of any message of the step."""
    messages: int
    bytes: int

class Table2Row(TypedDict):
    """The Swing paper's Table 2 deficiencies for the modelled algorithm."""

    row: str
    latency_deficiency: float
    bandwidth_deficiency: float
    congestion_deficiency: float | None
    """Table 2's Xi (a bound or the p -> infinity value), if the table gives one for this D."""
    congestion_formula: float | None
    """The finite-p expression the table entry comes from."""
    congestion_convention: str
    """``"weighted"`` (compare with ``congestion_deficiency``) or ``"sum"`` (compare with
    ``congestion_sum``)."""
    note: str

class ModelResult(TypedDict):
    algorithm: str
    resolved_from: str | None
    """The name asked for when it is a family, alias or policy resolved to `algorithm`."""
    collective: str
    topology: str
    """Canonical topology spec."""
    ranks: int
    d: int
    """D of the ideal n/D bandwidth term."""
    size_bytes: int
    steps: int
    latency_deficiency: float
    """Lambda = steps / log2 p."""
    bandwidth_deficiency: float
    """Psi = sum of b_s / (n/D)."""
    congestion_deficiency: float
    """Xi, data-weighted: sum of L_s*b_s / sum of b_s (the one the time uses)."""
    congestion_sum: float
    """Congestion summed over the steps: sum of L_s (Table 2's convention for latency-optimal)."""
    latency_ns: float
    """alpha: the latency of every step."""
    bandwidth_gbps: float
    switch_latency_ns: float
    """Charged per hop of each step's longest path."""
    send_overhead_ns: float
    recv_overhead_ns: float
    send_latency_ns: float
    recv_latency_ns: float
    rendezvous_threshold_bytes: int | None
    injection_gbps: float | None
    """Endpoint costs (a scenario's [endpoint] table)."""
    time_seconds: float
    """steps*alpha + beta*sum(L_s*b_s) + hop*sum(hops_s), plus the endpoint costs."""
    endpoint_seconds: float
    """The endpoint costs' share of time_seconds (0 without them)."""
    latency_seconds: float
    bandwidth_seconds: float
    per_step: list[ModelStep]
    table2: Table2Row | None

def algorithms() -> list[str]:
    """Names of the algorithm registry's variants (the names that build schedules)."""

class AlgorithmEntry(TypedDict):
    name: str
    family: str
    kind: str
    summary: str
    size_class: str | None
    resolves_to: list[str]
    direct_plan: bool
    model_row: bool
    max_ranks: int | None
    min_dims: int | None
    substitute: str | None
    collectives: list[str]

def algorithm_registry() -> list[AlgorithmEntry]:
    """Every entry of the algorithm registry, in registry order."""

def schedule_export(
    algorithm: str,
    topology: str,
    format: str = "json",
    size_bytes: int = 1 << 20,
    collective: str = "allreduce",
    calc_ns_per_byte: float = 0.0,
    root: int = 0,
) -> str:
    """The schedule of any registry name on a topology's layout as json, msccl or goal text."""

def schedule_check(text: str) -> tuple[str, int, int, int]:
    """Parses the JSON IR and runs the checker: (algorithm, ranks, blocks, steps) or ValueError."""

def model(
    algorithm: str,
    topology: str,
    size_bytes: int = 512 * 1024 * 1024,
    latency_ns: float = 1000.0,
    bandwidth_gbps: float = 400.0,
    switch_latency_ns: float = 0.0,
    d: int | None = None,
    send_overhead_ns: float = 0.0,
    recv_overhead_ns: float = 0.0,
    rendezvous_threshold_bytes: int | None = None,
    injection_gbps: float | None = None,
    send_latency_ns: float = 0.0,
    recv_latency_ns: float = 0.0,
    collective: str = "allreduce",
    root: int = 0,
) -> ModelResult:
    """Analytical model of a collective's schedule on a topology (GIL released).

    `topology` is ``torus:64x64``, ``hyperx:64x64`` or ``hammingmesh:2x2,32x32`` (board, grid).
    Builds the schedule, routes every message on the topology and measures the Swing paper's
    deficiencies. Raises `ValueError` naming the problem for a bad algorithm, topology or
    parameter.
    """

AUTO_FLOW_MIN_BYTES: int
"""`backend="auto"` runs sizes of at least this many bytes (8 MiB) at flow level."""

class CollectiveOutcome(TypedDict):
    """One allreduce on a whole topology (`run_collective`)."""

    topology: str
    """Canonical topology spec."""
    algorithm: str
    ranks: int
    size_bytes: int
    backend: str
    """The backend that ran it: ``"packet"`` or ``"flow"`` (``"auto"`` resolved)."""
    backend_reason: str
    """Why (summary.json's `backend_reason`, e.g. ``"auto: below flow_min_bytes (...)"``)."""
    runtime_ps: int
    goodput_gbps: float
    """size_bytes * 8 / runtime, Gb/s."""
    verified: bool | None
    """Packet level: every rank's result matched the reference; flow level: None (no data)."""
    mismatch: str | None
    """First data mismatch (packet level), if any."""
    messages: int
    bandwidth_gbps: float
    latency_ns: float
    switch_latency_ns: float
    buffer_bytes: int
    """Ingress buffer per port and VC the packet engine used."""
    seed: int
    wall_seconds: float
    """Wall-clock time of the run (never written to result files)."""

def run_collective(
    topology: str,
    algorithm: str,
    size_bytes: int,
    backend: str = "auto",
    bandwidth_gbps: float = 400.0,
    latency_ns: float = 100.0,
    switch_latency_ns: float = 300.0,
    seed: int = 1,
    buffer_bytes: int | None = None,
) -> CollectiveOutcome:
    """One allreduce of `size_bytes` (4-byte elements) with `algorithm` on a whole topology,
    run as the scenario ``scenarios/swing/network.toml`` with these values set (the one door:
    new code writes that scenario and calls `run`; this function stays for the reproduction
    harness).

    Rank r runs on host r of `topology` (``torus:8x8``, ``hyperx:16x16``,
    ``hammingmesh:2x2,32x32``). The network is the Swing paper's (§5): links of `bandwidth_gbps`
    and `latency_ns`, `switch_latency_ns` per forwarding node, 4 KiB packets with 64 B headers, minimal
    adaptive routing, lossless credit flow control with line-rate buffers (at least 256 KiB per
    port and VC; `buffer_bytes` overrides). `backend`: ``"packet"`` (data verified per rank),
    ``"flow"`` (max-min fluid, not verified) or ``"auto"`` (packet below `AUTO_FLOW_MIN_BYTES`,
    flow from there on). The built schedule is cached per (algorithm, layout) in the process.
    GIL released. Raises `ValueError` naming the scenario field (``topology.shape: ...``,
    ``traffic[0].algorithm: ...``) for a bad topology, algorithm, backend or parameter, or for a
    packet-level run that does not finish.
    """

def run_collective_sizes(
    topology: str,
    algorithm: str,
    sizes: list[int],
    backend: str = "auto",
    bandwidth_gbps: float = 400.0,
    latency_ns: float = 100.0,
    switch_latency_ns: float = 300.0,
    seed: int = 1,
    buffer_bytes: int | None = None,
    threads: int = 1,
) -> list[CollectiveOutcome]:
    """`run_collective` for several sizes (the schedule or plan is built once, from the
    process-wide cache); the sizes run on up to `threads` threads (same results as one)."""

class TopologySpecInfo(TypedDict):
    """A topology spec parsed by `topology_spec`."""

    canonical: str
    """Canonical text, e.g. ``"torus:8x8"``, ``"hammingmesh:2x2,32x32"``."""
    kind: str
    """``"torus"``, ``"hyperx"`` or ``"hammingmesh"`` (a scenario's `topology.kind`)."""
    hosts: int
    """Number of hosts (= ranks of a collective on all of them)."""
    dims: list[int]
    """Rank layout: the torus/HyperX dimensions, or a HammingMesh's global grid
    (board x grid per dimension)."""
    board: list[int] | None
    """HammingMesh board size [x, y]; None for the other kinds."""
    grid: list[int] | None
    """HammingMesh grid size [x, y]; None for the other kinds."""

def topology_spec(spec: str) -> TopologySpecInfo:
    """Parses a topology spec (``torus:64x64``, ``hyperx:16x16``, ``hammingmesh:2x2,32x32``) with
    the one parser that a scenario's ``topology.shape`` and ``reducelab model`` use. Raises
    `ValueError` naming the problem."""
