//! Deterministic mutation fuzzing of the scenario parser and validator, in the normal suite.
//!
//! Starts from the shipped scenarios plus a few small inline ones, applies seeded random
//! mutations (byte flips, deletions, line duplications and swaps, numbers swapped for strings,
//! negatives, huge values, NaN and inf, unknown keys, other enum variants, truncation) and
//! checks that `load_scenario_str` never panics and that every error says why. Mutants that
//! still load and are small are also run for a short, capped simulated time.
//!
//! The coverage-guided counterpart is the cargo-fuzz target in `fuzz/` (see fuzz/README.md);
//! inputs it (or this test) found are kept below as regression cases. Its committed corpus and
//! seeded mutants of it also go through the target's own body,
//! `reducelab_sim::fuzz::scenario_parser`, here.

use reducelab_des::{Rng, SimTime};
use reducelab_sim::fuzz::scenario_parser;
use reducelab_sim::scenario::{FlowControlSpec, RoutingSpec, TopologyKind};
use reducelab_sim::{
    load_scenario_str, parse, run_scenario, RunOptions, Scenario, ScenarioError, ScenarioFile, Traffic,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

const SMALL: &[&str] = &[
    r#"name = "small-ft2"
seed = 7
[topology]
kind = "fat_tree_2"
leaves = 2
hosts_per_leaf = 4
spines = 2
links_per_spine = 2
radix = 8
bandwidth_gbps = 100
latency_ns = 500
host_bandwidth_gbps = 50
host_latency_ns = 100
[network]
mtu_bytes = 1024
header_bytes = 32
buffer_bytes = 8192
flow_control = "drop_tail"
routing = "ecmp"
loss_probability = 0.001
ecn_threshold_bytes = 4096
[noise]
probability = 0.01
delay_ns = 200
[[traffic]]
kind = "messages"
list = [[0, 1, 4096, 0], [2, 3, 100, 1]]
[[traffic]]
kind = "incast"
receiver = 3
senders = [0, 1, 2]
bytes = 2048
start_ns = 50.5
[[traffic]]
kind = "random_uniform"
hosts = "all"
bytes = 512
inflight = 2
[[faults]]
kind = "node"
node = 9
at_ns = 100
[[faults]]
kind = "link"
link = 3
at_ns = 2000
[run]
time_limit_us = 20
"#,
    r#"name = "small-torus"
[topology]
kind = "torus"
dims = [4, 2, 2]
bandwidth_gbps = 400
latency_ns = 100
[network]
routing = "minimal"
[[traffic]]
kind = "permutation"
hosts = [0, 1, 2, 3, 4, 5]
bytes = 8192
"#,
    r#"name = "small-ft3"
[topology]
kind = "fat_tree_3"
k = 4
hosts_per_edge = 1
bandwidth_gbps = 25.5
latency_ns = 0
[network]
routing = "canary"
[[traffic]]
kind = "incast"
receiver = 0
bytes = 10000
"#,
    r#"name = "small-dragonfly"
[topology]
kind = "dragonfly"
groups = 3
routers_per_group = 2
hosts_per_router = 2
global_per_router = 1
bandwidth_gbps = 100
latency_ns = 100
global_latency_ns = 1000
host_latency_ns = 10
[[traffic]]
kind = "permutation"
bytes = 4096
"#,
    r#"name = "small-hx"
[topology]
kind = "hammingmesh"
board = [2, 2]
grid = [2, 2]
bandwidth_gbps = 100
latency_ns = 100
board_latency_ns = 10
board_bandwidth_gbps = 200
[[traffic]]
kind = "random_uniform"
bytes = 4096
[[traffic]]
kind = "random_permutation"
hosts = [0, 3, 5, 9]
bytes = 1000
inflight = 2
redraw = "epoch"
epoch_ns = 300
rate_gbps = 40
[noise]
probability = 0.1
delay_ns = 100
mode = "packet"
hosts = "foreground"
[run]
time_limit_us = 5
"#,
    r#"name = "small-star"
[topology]
kind = "star"
hosts = 8
bandwidth_gbps = 10
latency_ns = 1000
[network]
flow_control = "drop_tail"
buffer_bytes = 4096
mtu_bytes = 1500
[[traffic]]
kind = "incast"
receiver = 7
bytes = 3000
"#,
    r#"name = "small-hyperx"
[topology]
kind = "hyperx"
dims = [3, 3]
bandwidth_gbps = 100
latency_ns = 100
[[traffic]]
kind = "permutation"
hosts = "all"
bytes = 1000
"#,
    r#"name = "small-door"
topology = "torus:2x2"
[network]
buffer_bytes = "line_rate"
switch_latency_ns = 300
[[traffic]]
kind = "collective"
algorithm = "swing-latency"
bytes = 4096
hosts = "all"
[run]
backend = "auto"
flow_min_bytes = 1024
"#,
    r#"name = "small-dctcp"
[topology]
kind = "star"
hosts = 6
bandwidth_gbps = 100
latency_ns = 500
[network]
flow_control = "drop_tail"
buffer_bytes = 16384
ecn_threshold_bytes = 8192
[transport]
kind = "dctcp"
initial_window_packets = 4
g = 0.0625
min_rto_us = 20
[[traffic]]
kind = "incast"
receiver = 0
bytes = 30000
[[traffic]]
kind = "messages"
list = [[1, 2, 5000, 0]]
transport = "none"
"#,
    r#"name = "small-dcqcn"
[topology]
kind = "star"
hosts = 6
bandwidth_gbps = 100
latency_ns = 500
[network]
flow_control = "credit"
ecn_threshold_bytes = 5000
ecn_kmax_bytes = 20000
ecn_pmax = 0.1
[transport]
kind = "dcqcn"
alpha_interval_us = 10
increase_interval_us = 10
byte_counter_bytes = 100000
fast_recovery_steps = 2
rai_gbps = 1
rhai_gbps = 5
min_rate_gbps = 0.5
cnp_interval_us = 5
[[traffic]]
kind = "incast"
receiver = 0
bytes = 30000
"#,
    r#"name = "small-training"
seed = 3
[topology]
kind = "star"
hosts = 6
bandwidth_gbps = 100
latency_ns = 2500
[network]
mtu_bytes = 306
buffer_bytes = 1048576
ecn_threshold_bytes = 65536
[ina]
switch_memory_bytes = 30600
[[traffic]]
kind = "training"
protocol = "dsa"
preemption = "coin"
jobs = 2
workers = 2
models = ["A", "B"]
start_max_us = 100
jitter_max_us = 30
window_bytes = 6120
min_rto_us = 200
ps_restart_us = 50
values = true
"#,
    // Training jobs aggregating on both levels of a leaf/spine tree.
    r#"name = "fuzz-training-tree"
seed = 4
[topology]
kind = "fat_tree_2"
leaves = 2
hosts_per_leaf = 3
spines = 1
bandwidth_gbps = 100
latency_ns = 2500
[network]
mtu_bytes = 306
[ina]
switch_memory_bytes = 3060
[[traffic]]
kind = "training"
protocol = "atp"
jobs = 1
workers = 4
model_scale = 0.01
start_max_us = 10
jitter_max_us = 3
min_rto_us = 50
aggregation = "tree"
values = true
"#,
];

/// Inputs that made the parser or a topology builder panic (u32/u64 overflow on absurd
/// sizes) or run out of memory, and other sharp edges: (kind, topology keys, field). Each must
/// give an error naming the field, never a panic or an abort.
const REGRESSIONS: &[(&str, &str, &str)] = &[
    // u32 overflow of the router port count in the dragonfly builder.
    (
        "dragonfly",
        "groups = 3\nrouters_per_group = 1\nhosts_per_router = 1\nglobal_per_router = 4294967295",
        "topology.global_per_router",
    ),
    // u64 overflow of the node count; in release the wrapped count passed the limit and a
    // port index ran off the router's port table.
    (
        "dragonfly",
        "groups = 65536\nrouters_per_group = 65536\nhosts_per_router = 4294967295\nglobal_per_router = 1",
        "topology.groups",
    ),
    // u64 overflow of the host count of a three-tier fat tree.
    ("fat_tree_3", "k = 4294967294\nhosts_per_edge = 4294967295", "topology.k"),
    // u64 overflow of the node count of a HammingMesh.
    ("hammingmesh", "board = [65536, 65536]\ngrid = [131072, 131072]", "topology.grid"),
    // Within the node limit but billions of links: out-of-memory abort.
    ("hyperx", "dims = [2048, 2048]", "topology.dims"),
    ("fat_tree_3", "k = 1500\nhosts_per_edge = 1", "topology.k"),
    ("fat_tree_2", "leaves = 65535\nhosts_per_leaf = 1\nspines = 65534", "topology.spines"),
    (
        "dragonfly",
        "groups = 65536\nrouters_per_group = 1\nhosts_per_router = 1\nglobal_per_router = 65535",
        "topology.groups",
    ),
    // Builder parameter names (board_x, ...) must map to the file's keys.
    ("hammingmesh", "board = [0, 2]\ngrid = [2, 2]", "topology.board[0]"),
    ("hammingmesh", "board = [2, 2]\ngrid = [2, 0]", "topology.grid[1]"),
    // Degenerate values next to the new size checks.
    ("dragonfly", "groups = 0\nrouters_per_group = 0\nhosts_per_router = 0\nglobal_per_router = 0", "topology.groups"),
    ("dragonfly", "groups = 4\nrouters_per_group = 1\nhosts_per_router = 1\nglobal_per_router = 0", "topology.groups"),
    ("fat_tree_3", "k = 0", "topology.k"),
];

fn regression_text(kind: &str, topology_body: &str) -> String {
    format!(
        "name = \"r\"\n[topology]\nkind = \"{kind}\"\nbandwidth_gbps = 1\nlatency_ns = 1\n{topology_body}\n[[traffic]]\nkind = \"permutation\"\nbytes = 1\n"
    )
}

/// Replacement values for numbers and strings.
const VALUES: &[&str] = &[
    "\"str\"",
    "\"\"",
    "-1",
    "-0",
    "0",
    "1",
    "2",
    "3",
    "7",
    "64",
    "0.5",
    "-0.0",
    "1e-300",
    "1e308",
    "-1e308",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "[]",
    "[0]",
    "[1, 2]",
    "[4, 4]",
    "[2, 2, 2]",
    "[0, 0]",
    "[-1]",
    "[[0, 1, 2, 3]]",
    "true",
    "{}",
    "{ a = 1 }",
    "\"all\"",
    "1979-05-27",
    "0x10",
    "1_000",
];

/// Keys, known and unknown, for inserted lines.
const KEYS: &[&str] = &[
    "bogus",
    "kind",
    "name",
    "seed",
    "hosts",
    "leaves",
    "hosts_per_leaf",
    "spines",
    "links_per_spine",
    "radix",
    "k",
    "hosts_per_edge",
    "dims",
    "board",
    "grid",
    "board_latency_ns",
    "groups",
    "routers_per_group",
    "hosts_per_router",
    "global_per_router",
    "global_latency_ns",
    "host_bandwidth_gbps",
    "host_latency_ns",
    "bandwidth_gbps",
    "latency_ns",
    "mtu_bytes",
    "header_bytes",
    "buffer_bytes",
    "flow_control",
    "routing",
    "loss_probability",
    "ecn_threshold_bytes",
    "probability",
    "delay_ns",
    "bytes",
    "receiver",
    "senders",
    "inflight",
    "list",
    "start_ns",
    "link",
    "node",
    "at_ns",
    "time_limit_us",
    "description",
    "shape",
    "backend",
    "flow_min_bytes",
    "algorithm",
    "topology",
    "board_bandwidth_gbps",
    "redraw",
    "epoch_ns",
    "rate_gbps",
    "mode",
    "router",
    "input_buffer_bytes",
    "output_buffer_bytes",
    "crossbar_speedup",
    "arbitration",
    "pfc_xoff_bytes",
    "pfc_xon_bytes",
    "pfc_headroom_bytes",
    "transport",
    "initial_window_packets",
    "data_queue_packets",
    "rto_us",
    "g",
    "min_rto_us",
    "ecn_kmax_bytes",
    "ecn_pmax",
    "alpha_interval_us",
    "increase_interval_us",
    "byte_counter_bytes",
    "fast_recovery_steps",
    "rai_gbps",
    "rhai_gbps",
    "min_rate_gbps",
    "cnp_interval_us",
];

const VARIANTS: &[&str] = &[
    "\"star\"",
    "\"fat_tree_2\"",
    "\"fat_tree_3\"",
    "\"torus\"",
    "\"hyperx\"",
    "\"hammingmesh\"",
    "\"dragonfly\"",
    "\"credit\"",
    "\"drop_tail\"",
    "\"minimal\"",
    "\"ecmp\"",
    "\"adaptive\"",
    "\"canary\"",
    "\"messages\"",
    "\"permutation\"",
    "\"incast\"",
    "\"random_uniform\"",
    "\"link\"",
    "\"node\"",
    "\"all\"",
    "\"packet\"",
    "\"flow\"",
    "\"auto\"",
    "\"line_rate\"",
    "\"collective\"",
    "\"torus:2x2\"",
    "\"hyperx:3x3\"",
    "\"hammingmesh:2x2,2x2\"",
    "\"torus:0x4\"",
    "\"random_permutation\"",
    "\"message\"",
    "\"epoch\"",
    "\"port_stall\"",
    "\"foreground\"",
    "\"torus:4294967295x4294967295\"",
    "\"swing\"",
    "\"bucket\"",
    "\"input_buffered\"",
    "\"output_queued\"",
    "\"input_round_robin\"",
    "\"fifo\"",
    "\"lru\"",
    "\"pfc\"",
    "\"none\"",
    "\"ndp\"",
    "\"dctcp\"",
    "\"dcqcn\"",
];

const HEADERS: &[&str] =
    &["[topology]", "[network]", "[noise]", "[run]", "[[traffic]]", "[[faults]]", "[bogus]", "[[topology]]", "["];

fn pick<'a>(rng: &mut Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.below(xs.len() as u64) as usize]
}

/// Byte ranges of numeric tokens (digits with sign, dot, exponent).
fn number_spans(s: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let starts = s[i].is_ascii_digit() && (i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_'));
        if starts {
            let mut j = i;
            while j < s.len() && (s[j].is_ascii_digit() || matches!(s[j], b'.' | b'e' | b'E' | b'_')) {
                j += 1;
            }
            let a = if i > 0 && matches!(s[i - 1], b'-' | b'+') { i - 1 } else { i };
            out.push((a, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Byte ranges of `"..."` strings on one line.
fn string_spans(s: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut open = None;
    for (i, &b) in s.iter().enumerate() {
        match (b, open) {
            (b'"', None) => open = Some(i),
            (b'"', Some(a)) => {
                out.push((a, i + 1));
                open = None;
            }
            (b'\n', _) => open = None,
            _ => {}
        }
    }
    out
}

fn lines(s: &[u8]) -> Vec<Vec<u8>> {
    s.split(|&b| b == b'\n').map(|l| l.to_vec()).collect()
}

fn join(ls: &[Vec<u8>]) -> Vec<u8> {
    ls.join(&b'\n')
}

fn splice(s: &mut Vec<u8>, (a, b): (usize, usize), with: &[u8]) {
    s.splice(a..b, with.iter().copied());
}

fn mutate(rng: &mut Rng, s: &mut Vec<u8>, donors: &[String]) {
    let len = s.len() as u64;
    match rng.below(16) {
        // Flip one byte to a random printable or structural byte.
        0 if len > 0 => {
            let i = rng.below(len) as usize;
            let bytes = b"0123456789-+.e_\"'[]{}=,#\n \tabcxyz\\";
            s[i] = if rng.below(4) == 0 { rng.below(128) as u8 } else { bytes[rng.below(bytes.len() as u64) as usize] };
        }
        // Flip one bit.
        1 if len > 0 => {
            let i = rng.below(len) as usize;
            s[i] ^= 1 << rng.below(7);
        }
        // Delete a byte range.
        2 if len > 0 => {
            let a = rng.below(len) as usize;
            let b = (a + 1 + rng.below(16) as usize).min(s.len());
            s.drain(a..b);
        }
        // Duplicate a line.
        3 => {
            let mut ls = lines(s);
            let i = rng.below(ls.len() as u64) as usize;
            let l = ls[i].clone();
            let j = rng.below(ls.len() as u64 + 1) as usize;
            ls.insert(j, l);
            *s = join(&ls);
        }
        // Delete a line.
        4 => {
            let mut ls = lines(s);
            let i = rng.below(ls.len() as u64) as usize;
            ls.remove(i);
            *s = join(&ls);
        }
        // Swap two lines.
        5 => {
            let mut ls = lines(s);
            let (i, j) = (rng.below(ls.len() as u64) as usize, rng.below(ls.len() as u64) as usize);
            ls.swap(i, j);
            *s = join(&ls);
        }
        // A number becomes a string, a negative, a huge value, NaN, inf, a list...
        6..=8 => {
            let spans = number_spans(s);
            if !spans.is_empty() {
                let sp = spans[rng.below(spans.len() as u64) as usize];
                let v = match rng.below(3) {
                    0 => pick(rng, VALUES).to_string(),
                    1 => {
                        let bits = rng.below(34);
                        rng.below(1 << bits).to_string()
                    }
                    _ => format!("-{}", &String::from_utf8_lossy(&s[sp.0..sp.1])),
                };
                splice(s, sp, v.as_bytes());
            }
        }
        // A string becomes another enum variant or a value.
        9 | 10 => {
            let spans = string_spans(s);
            if !spans.is_empty() {
                let sp = spans[rng.below(spans.len() as u64) as usize];
                let v = if rng.below(4) == 0 { pick(rng, VALUES) } else { pick(rng, VARIANTS) };
                splice(s, sp, v.as_bytes());
            }
        }
        // Insert a key (known or not) with some value.
        11 | 12 => {
            let mut ls = lines(s);
            let i = rng.below(ls.len() as u64 + 1) as usize;
            let v = if rng.below(3) == 0 { pick(rng, VARIANTS) } else { pick(rng, VALUES) };
            ls.insert(i, format!("{} = {}", pick(rng, KEYS), v).into_bytes());
            *s = join(&ls);
        }
        // Insert a table header.
        13 => {
            let mut ls = lines(s);
            let i = rng.below(ls.len() as u64 + 1) as usize;
            ls.insert(i, pick(rng, HEADERS).as_bytes().to_vec());
            *s = join(&ls);
        }
        // Splice in a line of another scenario.
        14 => {
            let d = lines(donors[rng.below(donors.len() as u64) as usize].as_bytes());
            let l = d[rng.below(d.len() as u64) as usize].clone();
            let mut ls = lines(s);
            let i = rng.below(ls.len() as u64 + 1) as usize;
            ls.insert(i, l);
            *s = join(&ls);
        }
        // Truncate.
        _ => {
            let cut = rng.below(len + 1) as usize;
            s.truncate(cut);
        }
    }
}

/// Loads `text`, turning a panic into an `Err` that carries the panic message.
fn load_no_panic(text: &str) -> Result<Result<Scenario, ScenarioError>, String> {
    catch_unwind(AssertUnwindSafe(|| load_scenario_str(text, None))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Rough size of what resolving `f` would build: (hosts, links). Saturating, never panics.
fn rough_size(f: &ScenarioFile) -> (u128, u128) {
    let Some(t) = &f.topology else { return (0, 0) }; // a [pspin] scenario: one switch
    let u = |v: Option<u32>| v.unwrap_or(1) as u128;
    let prod = |v: &Option<Vec<u32>>| v.iter().flatten().fold(1u128, |n, &x| n.saturating_mul(x as u128));
    match t.kind {
        Some(TopologyKind::Star) | None => (u(t.hosts), u(t.hosts)),
        Some(TopologyKind::FatTree2) => {
            let hosts = u(t.leaves) * u(t.hosts_per_leaf);
            (hosts, hosts + u(t.leaves) * u(t.spines) * u(t.links_per_spine))
        }
        Some(TopologyKind::FatTree3) => {
            let k = u(t.k);
            let hosts = k * (k / 2) * t.hosts_per_edge.map_or(k / 2, |h| h as u128);
            (hosts, hosts + k * k * k / 2)
        }
        Some(TopologyKind::Torus) => {
            let n = prod(&t.dims);
            (n, n.saturating_mul(t.dims.as_ref().map_or(0, |d| d.len() as u128)))
        }
        Some(TopologyKind::Hyperx) => {
            let n = prod(&t.dims);
            let ports: u128 = t.dims.iter().flatten().map(|&x| (x as u128).saturating_sub(1)).sum();
            (n, n.saturating_mul(ports) / 2)
        }
        Some(TopologyKind::Hammingmesh) => {
            let n = prod(&t.board).saturating_mul(prod(&t.grid));
            (n, n.saturating_mul(2))
        }
        Some(TopologyKind::Dragonfly) => {
            let (g, a) = (u(t.groups), u(t.routers_per_group));
            let hosts = g * a * u(t.hosts_per_router);
            (hosts, hosts + g * a * a / 2 + g * g / 2)
        }
    }
}

/// Would resolving take more than a moment? Topologies the limits accept can still have
/// millions of links, and the hop-index VC check computes the host diameter with one BFS per
/// host (O(hosts × links)) for adaptive/canary/ecmp routing on HyperX, HammingMesh and
/// dragonfly. Such mutants are only parsed. Absurd sizes (past the limits) are still
/// resolved: they must be rejected before anything is built.
fn too_slow_to_resolve(f: &ScenarioFile) -> bool {
    let (hosts, links) = rough_size(f);
    if links > 1 << 25 || hosts > 1 << 22 {
        return false;
    }
    let kind = f.topology.as_ref().and_then(|t| t.kind);
    let diameter_bfs = f.network.flow_control != FlowControlSpec::DropTail
        && matches!(kind, Some(TopologyKind::Hyperx | TopologyKind::Hammingmesh | TopologyKind::Dragonfly))
        && !(kind == Some(TopologyKind::Hyperx) && f.network.routing == RoutingSpec::Minimal);
    links > 1 << 18 || (diameter_bfs && hosts * links > 1 << 26)
}

/// Small enough to simulate inside the test budget.
fn small_enough(sc: &Scenario) -> bool {
    if sc.topology.num_hosts() > 64 {
        return false;
    }
    let mut fg_bytes: u64 = 0;
    for t in &sc.traffic {
        let add = match t {
            Traffic::Messages { list } => list.iter().map(|m| m.2).sum::<u64>(),
            Traffic::Permutation { hosts, bytes, .. } => hosts.len() as u64 * bytes,
            Traffic::Incast { senders, bytes, .. } => senders.len() as u64 * bytes,
            // Closed-loop background: bounded by the time cap below.
            Traffic::RandomUniform { .. } | Traffic::RandomPermutation(_) => 0,
            Traffic::Collective { hosts, bytes, .. } => 2 * hosts.len() as u64 * bytes,
            Traffic::Ina(s) => 2 * s.hosts.len() as u64 * s.bytes,
            Traffic::Training(s) => s.jobs.iter().map(|j| 2 * j.workers.len() as u64 * j.model.epoch_bytes()).sum(),
            Traffic::InaTraining(t) => t.specs.iter().map(|s| 2 * s.hosts.len() as u64 * s.bytes).sum(),
            Traffic::Goal(g) => (0..g.trace.num_ops() as u32)
                .map(|i| g.trace.op(reducelab_goal::OpId(i)))
                .filter(|o| o.kind == reducelab_goal::OpKind::Send)
                .map(|o| o.size)
                .sum(),
        };
        fg_bytes = fg_bytes.saturating_add(add);
    }
    fg_bytes <= 1 << 20
}

fn shipped_scenarios() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out)
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p)
            }
        }
    }
    let mut files = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios"), &mut files);
    files.sort();
    files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect()
}

/// The cargo-fuzz target's committed corpus (fuzz/corpus/scenario_parser/), by file name.
fn fuzz_corpus() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/scenario_parser");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_fuzz_corpus_passes_the_fuzz_target() {
    let files = fuzz_corpus();
    assert!(files.len() >= 4);
    for (name, text) in &files {
        // The seeds are valid scenarios: they reach the checks of a loaded scenario.
        if let Err(e) = load_scenario_str(text, None) {
            panic!("{name}: {e}");
        }
        scenario_parser(text.as_bytes());
    }
}

/// A short fuzzing run of the cargo-fuzz target's body on every test run: seeded mutants of its
/// corpus (the edits of [`mutate`]), except those too large to resolve quickly.
#[test]
fn seeded_mutants_of_the_fuzz_corpus_pass_the_fuzz_target() {
    const MUTANTS: u64 = 3_000;
    let donors: Vec<String> = fuzz_corpus().into_iter().map(|(_, t)| t).collect();
    let mut rng = Rng::new(0xF022_C0A5);
    let (mut skipped, mut failures) = (0u64, Vec::new());
    for it in 0..MUTANTS {
        let mut bytes = donors[rng.below(donors.len() as u64) as usize].as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut bytes, &donors);
        }
        if let Ok(text) = std::str::from_utf8(&bytes) {
            if let Ok(Ok(f)) = catch_unwind(|| parse(text)) {
                if too_slow_to_resolve(&f) {
                    skipped += 1;
                    continue;
                }
            }
        }
        if catch_unwind(|| scenario_parser(&bytes)).is_err() && failures.len() < 5 {
            failures.push(format!("mutant {it}:\n---\n{}\n---", String::from_utf8_lossy(&bytes)));
        }
    }
    assert!(failures.is_empty(), "the fuzz target failed on\n{}", failures.join("\n"));
    assert!(skipped < MUTANTS / 10, "{skipped} of {MUTANTS} mutants too large to resolve");
}

#[test]
fn regressions_are_errors_not_panics() {
    for (kind, body, field) in REGRESSIONS {
        let text = regression_text(kind, body);
        match load_no_panic(&text) {
            Err(p) => panic!("panicked on\n{text}\n{p}"),
            Ok(Ok(_)) => panic!("loaded\n{text}"),
            Ok(Err(e)) => {
                assert_eq!(e.field, *field, "{text}\n{e}");
                assert!(!e.reason.trim().is_empty());
            }
        }
    }
}

#[test]
fn random_mutations_never_panic() {
    let mut seeds: Vec<String> = shipped_scenarios();
    assert!(seeds.len() >= 4);
    seeds.extend(SMALL.iter().map(|s| s.to_string()));
    seeds.extend(REGRESSIONS.iter().map(|(k, b, _)| regression_text(k, b)));
    for s in SMALL {
        if let Err(e) = load_scenario_str(s, None) {
            panic!("inline seed does not load: {e}\n{s}");
        }
    }

    const ITERATIONS: u64 = 60_000;
    const MAX_RUNS: usize = 400;
    let trace = std::env::var_os("REDUCELAB_FUZZ_TRACE");
    let mut rng = Rng::new(0x5CE7A110);
    let (mut ok, mut err, mut ran, mut skipped) = (0u64, 0u64, 0usize, 0u64);
    let mut panics: Vec<String> = Vec::new();
    let mut empty_reasons: Vec<String> = Vec::new();
    for it in 0..ITERATIONS {
        let base = &seeds[rng.below(seeds.len() as u64) as usize];
        let mut bytes = base.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut bytes, &seeds);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(path) = &trace {
            // For hangs and crashes that no assertion catches: the input last attempted.
            std::fs::write(path, format!("# iteration {it}\n{text}")).unwrap();
        }
        match catch_unwind(|| parse(&text)) {
            Err(_) => {
                panics.push(format!("iteration {it}: parse panicked\n---\n{text}\n---"));
                continue;
            }
            Ok(Ok(f)) if too_slow_to_resolve(&f) => {
                skipped += 1;
                continue;
            }
            Ok(_) => {}
        }
        match load_no_panic(&text) {
            Err(p) => {
                if panics.len() < 5 {
                    panics.push(format!("iteration {it}: {p}\n---\n{text}\n---"));
                }
            }
            Ok(Err(e)) => {
                err += 1;
                if e.reason.trim().is_empty() && empty_reasons.len() < 5 {
                    empty_reasons.push(format!("iteration {it}: field {:?}\n---\n{text}\n---", e.field));
                }
            }
            Ok(Ok(mut sc)) => {
                ok += 1;
                assert!(sc.topology.num_hosts() >= 1 && !sc.traffic.is_empty());
                if ran < MAX_RUNS && small_enough(&sc) {
                    // Cap simulated time so closed-loop background and lossy runs end quickly.
                    let cap = SimTime(20_000_000); // 20 us
                    sc.time_limit = Some(sc.time_limit.map_or(cap, |t| t.min(cap)));
                    ran += 1;
                    if let Some(path) = &trace {
                        std::fs::write(path, format!("# iteration {it} (simulating)\n{text}")).unwrap();
                    }
                    let r = catch_unwind(AssertUnwindSafe(move || run_scenario(sc, &RunOptions::default())));
                    match r {
                        Err(_) => {
                            if panics.len() < 5 {
                                panics.push(format!("iteration {it}: run panicked\n---\n{text}\n---"))
                            }
                        }
                        Ok(Err(e)) => assert!(!e.reason.trim().is_empty(), "run error without reason: {e:?}"),
                        Ok(Ok(out)) => assert!(out.summary_json.starts_with('{')),
                    }
                }
            }
        }
    }
    eprintln!("{ITERATIONS} mutants: {ok} loaded ({ran} of them simulated), {err} rejected, {skipped} too large to resolve quickly");
    assert!(panics.is_empty(), "{} panic(s):\n{}", panics.len(), panics.join("\n"));
    assert!(empty_reasons.is_empty(), "errors without a reason:\n{}", empty_reasons.join("\n"));
    // The mutations must not be so destructive that nothing gets past the TOML parser.
    assert!(ok > ITERATIONS / 50, "only {ok} of {ITERATIONS} mutants loaded");
}
