//! NDP through the one door (scenario files): a drop-tail permutation that stalls without a
//! transport completes with NDP, every byte delivered exactly once; and a property test over
//! random loss rates, queue sizes, windows, timeouts, topologies, traffic, switch failures, OS
//! noise, endpoint costs and seeds.
//!
//! The property cases are drawn from a fixed seed, so a failure is reproducible: its message
//! prints the scenario. `REDUCELAB_NDP_CASES=N` runs N cases (default 200, about half a second) and
//! `REDUCELAB_NDP_SEED` picks another seed.

use reducelab_des::Rng;
use reducelab_sim::{run_scenario_str, RunOptions, RunOutput};
use serde_json::Value;

mod common;
use common::random_topology_and_traffic;

fn run(text: &str) -> (Value, RunOutput) {
    let out = run_scenario_str(text, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (serde_json::from_str(&out.summary_json).unwrap(), out)
}

fn file<'a>(out: &'a RunOutput, name: &str) -> &'a str {
    &out.files.iter().find(|(n, _)| n == name).unwrap().1
}

/// Sums column `col` of a CSV file.
fn column_sum(csv: &str, col: &str) -> u64 {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let i = header.iter().position(|h| *h == col).unwrap_or_else(|| panic!("no column {col} in {header:?}"));
    lines.map(|l| l.split(',').nth(i).unwrap().parse::<u64>().unwrap()).sum()
}

/// `scenarios/bench/htsim_permutation.toml` scaled down to a k = 8 fat tree (128 hosts) with
/// drop-tail queues: 2 MB from every host to a random permutation peer.
fn permutation(transport: &str) -> String {
    format!(
        r#"name = "ndp-permutation"
seed = 1
[topology]
kind = "fat_tree_3"
k = 8
bandwidth_gbps = 100
latency_ns = 1000
[network]
mtu_bytes = 4000
header_bytes = 64
switch_latency_ns = 0
buffer_bytes = 100000
flow_control = "drop_tail"
routing = "adaptive"
{transport}
[[traffic]]
kind = "permutation"
bytes = 2000000
"#
    )
}

#[test]
fn a_drop_tail_permutation_stalls_without_a_transport_and_completes_with_ndp() {
    let (raw, _) = run(&permutation(""));
    assert_eq!(raw["status"], "stalled", "raw line-rate injection overflows drop-tail queues");
    assert!(raw["drops"]["buffer"].as_u64().unwrap() > 0);
    assert!(raw["status_reason"].as_str().unwrap().contains("no retransmission"));
    assert!(raw.get("transport").is_none(), "no transport, no transport counters");

    let (s, out) =
        run(&permutation("[transport]\nkind = \"ndp\"\ninitial_window_packets = 50\ndata_queue_packets = 8"));
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    let t = &s["traffic"][0];
    assert_eq!(t["messages"], 128);
    assert_eq!(t["verified"], 128, "every message delivered, every packet once (fingerprints)");
    assert_eq!(t["bytes_delivered"], 128 * 2_000_000u64);
    let tr = &s["transport"];
    let n = |k: &str| tr[k].as_u64().unwrap();
    assert!(n("trims") > 0 && n("retransmissions") > 0, "{tr}");
    // Nothing is lost: every trimmed header reaches its receiver and is NACKed once, and every
    // NACK is one retransmission; no timeout fires and no packet arrives twice.
    assert_eq!(n("nacks"), n("trims"), "{tr}");
    assert_eq!(n("retransmissions"), n("nacks"), "{tr}");
    assert_eq!((n("timeouts"), n("duplicates"), n("priority_drops")), (0, 0, 0), "{tr}");
    assert_eq!(s["drops"]["buffer"], 0, "trimmed, not dropped");
    // One ACK per whole data packet that arrived: ceil(2 MB / 3,936 payload bytes) = 509 per
    // message.
    assert_eq!(n("acks"), 128 * 509);
    // Per-message and per-link columns add up to the totals.
    let msgs = file(&out, "messages.csv");
    assert_eq!(column_sum(msgs, "retransmissions"), n("retransmissions"));
    assert_eq!(column_sum(msgs, "trims"), n("trims"));
    assert_eq!(column_sum(msgs, "nacks"), n("nacks"));
    assert_eq!(column_sum(msgs, "pulls"), n("pulls"));
    assert_eq!(column_sum(file(&out, "links.csv"), "trims"), n("trims"));
    assert_eq!(t["transport"]["trims"], tr["trims"]);
    // No message beats its line-rate time (2 MB at 100 Gb/s is 160 µs).
    assert!(s["messages"]["fct_ps"]["min"].as_u64().unwrap() > 160_000_000);
}

/// A random scenario: topology, traffic, loss, queue, window, timeout, MTU and seed.
fn case(rng: &mut Rng) -> String {
    let (topology, traffic) = random_topology_and_traffic(rng);
    let loss = if rng.bernoulli(0.4) { 0.0 } else { rng.unit_f64() * 0.05 };
    // A quarter of the cases are stressed: small packets, one- or two-packet data queues and
    // large windows overflow priority queues too (dropped headers, timeouts).
    let stress = rng.bernoulli(0.25);
    let mtu = if stress { 512 } else { [512, 1500, 4096][rng.below(3) as usize] };
    let queue = if stress { 1 + rng.below(2) } else { 1 + rng.below(16) };
    let window = if stress { 20 + rng.below(40) } else { 1 + rng.below(40) };
    let rto_us = 5 + rng.below(200);
    let routing = ["minimal", "ecmp", "adaptive"][rng.below(3) as usize];
    // On the two-level fat tree (leaf l is node 5l, its hosts 5l+1..5l+4, spines 20 and 21),
    // sometimes a spine fails mid-run: what it held is lost, routing goes round it.
    let fault = if topology.contains("fat_tree_2") && rng.bernoulli(0.4) {
        format!("[[faults]]\nkind = \"node\"\nnode = {}\nat_ns = {}\n", 20 + rng.below(2), rng.below(20_000))
    } else {
        String::new()
    };
    // Host-side costs the NDP injection path shares with raw messages.
    let mut host = String::new();
    if rng.bernoulli(0.3) {
        let mode = ["port_stall", "packet"][rng.below(2) as usize];
        host += &format!(
            "[noise]\nprobability = {:.3}\ndelay_ns = {}\nmode = \"{mode}\"\n",
            rng.unit_f64() * 0.1,
            100 + rng.below(2000)
        );
    }
    if rng.bernoulli(0.3) {
        host += &format!(
            "[endpoint]\ninjection_gbps = {}\nsend_overhead_ns = {}\nrecv_overhead_ns = {}\n",
            20 + rng.below(200),
            rng.below(500),
            rng.below(500)
        );
    }
    format!(
        "name = \"ndp-property\"\nseed = {}\n[topology]\n{topology}\nbandwidth_gbps = 100\nlatency_ns = 500\n[network]\nmtu_bytes = {mtu}\nflow_control = \"drop_tail\"\nrouting = \"{routing}\"\nloss_probability = {loss:.4}\n[transport]\nkind = \"ndp\"\ninitial_window_packets = {window}\ndata_queue_packets = {queue}\nrto_us = {rto_us}\n[[traffic]]\n{traffic}\n{fault}{host}",
        rng.below(1 << 30)
    )
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn random_lossy_runs_deliver_every_byte_exactly_once_and_deterministically() {
    let mut rng = Rng::new(env_u64("REDUCELAB_NDP_SEED", 0x4D9_2017));
    let cases = env_u64("REDUCELAB_NDP_CASES", 200);
    let (mut lossy, mut trimmed, mut timed_out, mut header_drops, mut dups, mut failed) = (0, 0, 0, 0, 0, 0);
    for k in 0..cases {
        let text = case(&mut rng);
        let (s, out) = run(&text);
        let ctx = || format!("case {k}:\n{text}\nsummary: {} {}", s["status_reason"], s["transport"]);
        assert_eq!(s["status"], "completed", "{}", ctx());
        let t = &s["traffic"][0];
        assert_eq!(t["verified"], t["messages"], "{}", ctx());
        let sent: u64 = file(&out, "messages.csv")
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(3).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(t["bytes_delivered"].as_u64().unwrap(), sent, "delivered bytes = sent bytes: {}", ctx());
        let tr = &s["transport"];
        let n = |k: &str| tr[k].as_u64().unwrap();
        assert!(n("nacks") <= n("trims"), "a NACK answers a trimmed header: {}", ctx());
        assert!(n("duplicates") <= n("retransmissions"), "a duplicate needs a second copy: {}", ctx());
        assert_eq!(n("senders_gave_up"), 0, "{}", ctx());
        if s["drops"]["loss"] == 0 && s["drops"]["failure"] == 0 && n("priority_drops") == 0 && n("timeouts") == 0 {
            assert_eq!(
                (n("nacks"), n("retransmissions"), n("duplicates")),
                (n("trims"), n("trims"), 0),
                "nothing lost: {}",
                ctx()
            );
        }
        lossy += (s["drops"]["loss"].as_u64().unwrap() > 0) as u32;
        trimmed += (n("trims") > 0) as u32;
        timed_out += (n("timeouts") > 0) as u32;
        header_drops += (n("priority_drops") > 0) as u32;
        dups += (n("duplicates") > 0) as u32;
        failed += (s["drops"]["failure"].as_u64().unwrap() > 0) as u32;
        // Same scenario and seed, same bytes.
        let again = run_scenario_str(&text, &RunOptions::default()).unwrap();
        assert_eq!(again.summary_json, out.summary_json, "{}", ctx());
        assert_eq!(again.files, out.files, "{}", ctx());
    }
    eprintln!("{cases} cases: {lossy} with link loss, {trimmed} with trims, {timed_out} with timeouts, {header_drops} with header drops, {dups} with duplicates, {failed} losing packets to a failed spine");
    // The cases exercise what they are for.
    if cases >= 200 {
        assert!(lossy >= 4 && trimmed >= 4 && timed_out >= 4 && header_drops >= 1 && failed >= 1, "lossy {lossy}, trimmed {trimmed}, timed out {timed_out}, header drops {header_drops}, failed spine {failed} of {cases}");
    }
}

/// A 15-to-1 incast with 512-byte packets and one-packet data queues: headers arrive at the
/// receiver's port almost twice as fast as it sends them, so its priority queue (1 KiB, 16
/// headers) overflows. Dropped headers are never NACKed; the senders' timeouts resend them,
/// and every byte still arrives exactly once.
#[test]
fn headers_dropped_from_a_full_priority_queue_are_recovered_by_timeouts() {
    let text = r#"name = "ndp-header-drops"
[topology]
kind = "star"
hosts = 16
bandwidth_gbps = 100
latency_ns = 500
[network]
mtu_bytes = 512
flow_control = "drop_tail"
[transport]
kind = "ndp"
initial_window_packets = 40
data_queue_packets = 1
rto_us = 20
[[traffic]]
kind = "incast"
senders = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
receiver = 0
bytes = 100000
"#;
    let (s, _) = run(text);
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    assert_eq!(s["traffic"][0]["verified"], 15);
    assert_eq!(s["traffic"][0]["bytes_delivered"], 15 * 100_000);
    let tr = &s["transport"];
    let n = |k: &str| tr[k].as_u64().unwrap();
    assert!(n("priority_drops") > 0, "{tr}");
    assert!(n("timeouts") > 0, "{tr}");
    assert!(n("nacks") < n("trims"), "dropped headers are not NACKed: {tr}");
    assert_eq!(s["drops"]["buffer"].as_u64().unwrap(), n("priority_drops"), "only headers are dropped");
}

/// When the receiver's only link fails, nothing gets through: every NDP sender times out round
/// after round and gives up, so the run ends (as stalled, saying so) instead of retrying for
/// ever.
#[test]
fn senders_give_up_on_a_dead_path_and_the_run_says_so() {
    let text = r#"name = "ndp-dead-link"
[topology]
kind = "star"
hosts = 4
bandwidth_gbps = 100
latency_ns = 500
[network]
flow_control = "drop_tail"
[transport]
kind = "ndp"
rto_us = 10
[[traffic]]
kind = "incast"
senders = [1, 2]
receiver = 0
bytes = 1000000
[[faults]]
kind = "link"
link = 0
at_ns = 5000
"#;
    let (s, _) = run(text);
    assert_eq!(s["status"], "stalled");
    let why = s["status_reason"].as_str().unwrap();
    assert!(why.contains("2 gave up after more than 32 timeout rounds in a row"), "{why}");
    let tr = &s["transport"];
    assert_eq!(tr["senders_gave_up"], 2, "{tr}");
    // Each sender's rounds are a timeout apart: the run ends after about 33 of them.
    let end = s["sim_time_ps"].as_u64().unwrap();
    assert!(end > 33 * 10_000_000 && end < 40 * 10_000_000, "{end}");
}
