//! One door: a collective run through the scenario path gives the numbers the separate
//! `collective_run` path gave before it became a front end of the scenario path.
//!
//! `data/collective_run_before.txt` holds, for 828 (topology, algorithm, size, backend,
//! bandwidth, latency, per-hop latency, seed) points, what `collective_run::run_collective` with
//! `NetworkParams::swing_paper(bandwidth) { latency_ns, hop_ns }` returned on main b8ea38d (before
//! this change): runtime_ps, messages, verified, the backend that ran and the buffer size, or an
//! error. Each point is run here as a scenario written out in TOML (the Swing network's keys,
//! not `scenarios/swing/network.toml`, so a change to that file cannot hide a difference) and
//! through `run_collective`, and must match bit for bit. (`run_collective` runs
//! `scenarios/swing/network.toml`, whose `[endpoint]` table came later: it is compared with the
//! same scenario plus that table.)

use reducelab_sim::collective_run::{run_collective, Backend, NetworkOverrides};
use reducelab_sim::{run_scenario_str, RunOptions};

struct Point {
    topology: String,
    algorithm: String,
    size: u64,
    backend: String,
    bw: f64,
    lat: f64,
    hop: f64,
    seed: u64,
    /// `runtime messages verified backend buffer`, or `ERR ...`.
    want: String,
}

fn points() -> Vec<Point> {
    include_str!("data/collective_run_before.txt")
        .lines()
        .map(|l| {
            let (args, want) = l.split_once(" => ").expect("args => result");
            let a: Vec<&str> = args.split(' ').collect();
            Point {
                topology: a[0].into(),
                algorithm: a[1].into(),
                size: a[2].parse().unwrap(),
                backend: a[3].into(),
                bw: a[4].parse().unwrap(),
                lat: a[5].parse().unwrap(),
                hop: a[6].parse().unwrap(),
                seed: a[7].parse().unwrap(),
                want: want.to_string(),
            }
        })
        .collect()
}

/// The point as a scenario file: the Swing paper's network with the point's values.
fn scenario(p: &Point) -> String {
    format!(
        r#"name = "one-door"
seed = {seed}
[topology]
shape = "{topology}"
bandwidth_gbps = {bw:?}
latency_ns = {lat:?}
[network]
switch_latency_ns = {hop:?}
routing = "adaptive"
mtu_bytes = 4096
header_bytes = 64
buffer_bytes = "line_rate"
[[traffic]]
kind = "collective"
algorithm = "{algorithm}"
bytes = {size}
hosts = "all"
[run]
backend = "{backend}"
"#,
        seed = p.seed,
        topology = p.topology,
        bw = p.bw,
        lat = p.lat,
        hop = p.hop,
        algorithm = p.algorithm,
        size = p.size,
        backend = p.backend
    )
}

/// The `[endpoint]` table of `scenarios/swing/network.toml` (empty if it has none).
fn swing_endpoint() -> String {
    let net = reducelab_sim::collective_run::SWING_NETWORK;
    let Some(at) = net.find("\n[endpoint]") else { return String::new() };
    let rest = &net[at + 1..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 2);
    rest[..end].to_string()
}

fn via_scenario(p: &Point) -> String {
    via_text(&scenario(p))
}

fn via_text(text: &str) -> String {
    let out = match run_scenario_str(text, &RunOptions::default()) {
        Ok(o) => o,
        Err(e) => return format!("ERR {e}"),
    };
    let s: serde_json::Value = serde_json::from_str(&out.summary_json).unwrap();
    let t = &s["traffic"][0];
    let verified = match t["verified"].as_bool() {
        Some(v) => format!("Some({v})"),
        None => "None".into(),
    };
    format!("{} {} {verified} {} {}", t["runtime_ps"], t["messages"], s["backend"].as_str().unwrap(), t["buffer_bytes"])
}

fn via_run_collective(p: &Point) -> String {
    let net = NetworkOverrides {
        bandwidth_gbps: Some(p.bw),
        latency_ns: Some(p.lat),
        switch_latency_ns: Some(p.hop),
        buffer_bytes: None,
    };
    match run_collective(&p.topology, &p.algorithm, p.size, Backend::parse(&p.backend).unwrap(), &net, p.seed) {
        Ok(o) => format!("{} {} {:?} {} {}", o.runtime_ps, o.messages, o.verified, o.backend, o.buffer_bytes),
        Err(e) => format!("ERR {e}"),
    }
}

#[test]
fn scenarios_give_the_numbers_of_the_former_collective_run() {
    let points = points();
    assert_eq!(points.len(), 828);
    let mut wrong = Vec::new();
    let (mut errors, mut flow, mut packet) = (0, 0, 0);
    let endpoint = swing_endpoint();
    for p in &points {
        for (how, got) in [("scenario", via_scenario(p)), ("run_collective", via_run_collective(p))] {
            // run_collective keeps its error texts (reproduction reports quote them); a scenario
            // names the field first.
            let same = match how {
                "scenario" if p.want.starts_with("ERR ") => {
                    got == format!("ERR traffic[0].algorithm: {}", &p.want[4..])
                }
                "run_collective" if !endpoint.is_empty() && !p.want.starts_with("ERR ") => {
                    got == via_text(&format!("{}{endpoint}", scenario(p)))
                }
                _ => got == p.want,
            };
            if !same {
                wrong.push(format!(
                    "{how}: {} {} {} {} {} {} {}: want {}, got {got}",
                    p.topology, p.algorithm, p.size, p.backend, p.bw, p.lat, p.hop, p.want
                ));
            }
        }
        match p.want.split(' ').nth(3) {
            _ if p.want.starts_with("ERR") => errors += 1,
            Some("flow") => flow += 1,
            _ => packet += 1,
        }
    }
    assert!(wrong.is_empty(), "{} of {} differ:\n{}", wrong.len(), 2 * points.len(), wrong.join("\n"));
    // The grid covers both backends, auto resolving each way, and errors.
    assert!(errors > 0 && flow > 300 && packet > 300, "{errors} {flow} {packet}");
    assert!(points.iter().any(|p| p.backend == "auto" && p.want.ends_with("packet 262144")));
    assert!(points.iter().any(|p| p.backend == "auto" && p.want.contains(" flow ") && p.size >= 8 << 20));
}
