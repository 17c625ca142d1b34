//! `reducelab-switch bench`: one software switch on loopback under an allreduce of 4 and 8
//! hosts (a star, everything in one process: the switch's event loop on one thread, each host
//! on its own). Reports the switch's packets per second of its own CPU time (packets received
//! and processed / CPU seconds of its thread) and the allreduce goodput (vector bytes over the
//! slowest host's time to its last block), with the machine's load average: the figures are
//! wall-clock measurements on a shared machine, not a model.
//!
//! `--protocol switchml|atp|dsa` (the pool protocols) measures the same two figures for one
//! training job of N workers (and, for ATP and DSA, its parameter server on a host of its own)
//! through one switch: the switch thread runs [`PoolSwitch`], the workers and the PS are
//! [`run_pool_hosts`]'s threads, all built from a generated scenario by [`PoolPlan`] (the
//! simulator's programs, parameter servers and worker windows; no second copy of protocol
//! logic). Every worker checks every result against the exact sum; a run that does not verify
//! ends the bench with the reason.

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use reducelab_ina::pool_jobs::ELEMS_PER_PACKET;

use crate::pool_host::{run_pool_hosts, PoolHostOptions};
use crate::pool_plan::PoolPlan;
use crate::pool_switch::PoolSwitch;
use crate::{run_host, HostOptions, InaPlan, Switch, SwitchOptions};

fn die(msg: &str) -> ! {
    eprintln!("reducelab-switch bench: {msg}");
    std::process::exit(2)
}

fn take(rest: &mut Vec<String>, key: &str) -> Option<String> {
    let i = rest.iter().position(|a| a == key)?;
    if i + 1 >= rest.len() {
        die(&format!("{key}: needs a value"));
    }
    let v = rest.remove(i + 1);
    rest.remove(i);
    Some(v)
}

/// The bench scenario: `hosts` hosts on a star, one allreduce of `bytes`.
pub fn scenario(hosts: u32, bytes: u64, protocol: &str) -> String {
    // Real-time timers: a switch timeout and a retransmission timeout well above the scheduling
    // noise of a loaded machine (at 20 ms / 50 ms, a load of 15 on 2 cores set off timeout
    // storms that measure the recovery, not the switch).
    let rto = if protocol == "canary" { "retransmit_timeout_us = 200000\n" } else { "" };
    format!(
        "name = \"switch-bench\"\nseed = 1\n[topology]\nkind = \"star\"\nhosts = {hosts}\nbandwidth_gbps = 100\nlatency_ns = 500\n[ina]\ntimeout_ns = 50000000\nreclaim_us = 2000000\n\
         [[traffic]]\nkind = \"ina_allreduce\"\nhosts = \"all\"\nbytes = {bytes}\nprotocol = \"{protocol}\"\nelements_per_packet = 256\n{rto}"
    )
}

/// Payload bytes of one pool packet (62 int32 values; 306 B on the simulator's wire).
pub const POOL_PAYLOAD_BYTES: u64 = ELEMS_PER_PACKET as u64 * 4;
/// DNN A's epoch at `model_scale = 1`: 4 partitions of 4 MB.
const MODEL_A_EPOCH_BYTES: u64 = 16_000_000;
/// The pool bench's switch memory: 1024 aggregators of 306 B.
pub const POOL_BENCH_AGGREGATORS: u64 = 1024;

/// The pool bench scenario: one training job of `workers` workers (and a PS host for ATP and
/// DSA) on a star, DNN A scaled so that each worker's epoch is `bytes` of gradients (4
/// partitions of `bytes / 4`, each rounded up to whole packets of 62 values), every job and
/// partition ready at the start (no start offset or jitter: the bench measures communication,
/// not the model's schedule; the scaled computation, 2 layers of 0.32 ms × scale, stays).
/// Errors name `--bytes` or `--protocol`.
pub fn pool_scenario(workers: u32, bytes: u64, protocol: &str) -> Result<String, String> {
    let info = reducelab_ina::pool::pool_protocol(protocol)
        .ok_or_else(|| format!("--protocol: `{protocol}` is not a pool protocol"))?;
    if !(4 * POOL_PAYLOAD_BYTES..=MODEL_A_EPOCH_BYTES).contains(&bytes) {
        return Err(format!(
            "--bytes: a pool protocol's epoch per worker must be within {}..={MODEL_A_EPOCH_BYTES} (4 partitions of at least one {POOL_PAYLOAD_BYTES} B packet, at most DNN A's 4 MB), got {bytes}",
            4 * POOL_PAYLOAD_BYTES
        ));
    }
    let scale = bytes as f64 / MODEL_A_EPOCH_BYTES as f64;
    let hosts = workers + u32::from(info.uses_ps);
    Ok(format!(
        "name = \"switch-bench-{protocol}\"\nseed = 1\n[topology]\nkind = \"star\"\nhosts = {hosts}\nbandwidth_gbps = 100\nlatency_ns = 500\n\
         [ina]\nswitch_memory_bytes = {}\n\
         [[traffic]]\nkind = \"training\"\nprotocol = \"{protocol}\"\njobs = 1\nworkers = {workers}\nmodels = [\"A\"]\nmodel_scale = {scale:?}\n\
         values = true\nmin_rto_us = 20000\nstart_max_us = 0\njitter_max_us = 0\n",
        POOL_BENCH_AGGREGATORS * 306
    ))
}

/// One measured pool run.
#[derive(Clone, Debug)]
pub struct PoolMeasure {
    /// Datagrams the switch received (workers' and the PS's) and processed.
    pub switch_packets: u64,
    /// CPU seconds of the switch's thread.
    pub switch_cpu_s: f64,
    /// The slowest worker's time to its last result.
    pub slowest_s: f64,
    /// PSNs (packets of 62 values) of each worker's epoch.
    pub psns: u32,
    /// Payload bytes of each worker's epoch (`psns` × 248).
    pub payload_bytes: u64,
    /// Workers that finished with every result checked against the exact sum.
    pub verified_workers: u32,
    /// Packets the hosts sent (workers' and PS's), retransmissions included.
    pub host_tx_packets: u64,
    pub retransmissions: u64,
}

/// One pool run of `workers` workers, `bytes` per worker, through one switch thread; an error
/// if any host failed or did not verify.
pub fn measure_pool(
    workers: u32,
    bytes: u64,
    protocol: &str,
    ip: Ipv4Addr,
    port_base: u16,
) -> Result<PoolMeasure, String> {
    let plan = PoolPlan::from_scenario(&pool_scenario(workers, bytes, protocol)?, None, (ip, port_base))?;
    let node = plan.switches()[0];
    let stop = Arc::new(AtomicBool::new(false));
    let opts = PoolHostOptions { timeout: Duration::from_secs(60), ..PoolHostOptions::default() };
    let hosts = plan.hosts();
    let (sw, rs) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (st, p) = (stop.clone(), &plan);
        let swh = std::thread::Builder::new()
            .name("rl-switch".into())
            .spawn_scoped(s, move || {
                let mut sw = PoolSwitch::bind(p, node, SwitchOptions::default())?;
                tx.send(()).ok();
                Ok::<_, String>(sw.run(&st))
            })
            .map_err(|e| format!("spawn: {e}"))?;
        if rx.recv().is_err() {
            return Err(swh.join().map_err(|_| "switch panicked".to_string())?.err().unwrap_or_default());
        }
        let rs = run_pool_hosts(&plan, &hosts, &opts);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok::<_, String>((swh.join().map_err(|_| "switch panicked".to_string())??, rs))
    })?;
    let job = &plan.jobs[0];
    let mut m = PoolMeasure {
        switch_packets: sw.ports.data_plane.rx_packets,
        switch_cpu_s: sw.ports.cpu_s,
        slowest_s: 0.0,
        psns: job.psns,
        payload_bytes: job.psns as u64 * POOL_PAYLOAD_BYTES,
        verified_workers: 0,
        host_tx_packets: 0,
        retransmissions: 0,
    };
    for r in rs {
        let r = r?;
        if !r.verified {
            return Err(format!("host {} ({}): not verified", r.host, r.role));
        }
        m.host_tx_packets += r.tx_packets;
        if let Some(w) = &r.worker {
            m.verified_workers += 1;
            m.retransmissions += w.retransmissions;
            m.slowest_s = m.slowest_s.max(r.finished_s.unwrap_or(f64::INFINITY));
        }
    }
    if m.verified_workers != workers {
        return Err(format!("{} of {workers} workers reported", m.verified_workers));
    }
    Ok(m)
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// One measured run: (switch packets, switch CPU s, slowest host's time to its last block s).
pub fn measure(
    hosts: u32,
    bytes: u64,
    protocol: &str,
    ip: Ipv4Addr,
    port_base: u16,
) -> Result<(u64, f64, f64), String> {
    let plan = InaPlan::from_scenario(&scenario(hosts, bytes, protocol), None, (ip, port_base))?;
    let node = plan.switches()[0];
    let stop = Arc::new(AtomicBool::new(false));
    let opts = HostOptions {
        timeout: Duration::from_secs(60),
        linger: Duration::from_millis(20),
        max_inflight: 64,
        ..HostOptions::default()
    }
    .for_threads(plan.hosts().len());
    let (sw, rs) = std::thread::scope(|s| {
        // Bound before the hosts start (they would send into a closed port otherwise).
        let (tx, rx) = std::sync::mpsc::channel();
        let (st, p) = (stop.clone(), &plan);
        // Named, so a profile can tell the switch's thread from the hosts'.
        let swh = std::thread::Builder::new()
            .name("rl-switch".into())
            .spawn_scoped(s, move || {
                let mut sw = Switch::bind(p, node, SwitchOptions::default())?;
                tx.send(()).ok();
                Ok::<_, String>(sw.run(&st))
            })
            .map_err(|e| format!("spawn: {e}"))?;
        if rx.recv().is_err() {
            return Err(swh.join().map_err(|_| "switch panicked".to_string())?.err().unwrap_or_default());
        }
        let hs: Vec<_> = plan
            .hosts()
            .into_iter()
            .map(|h| {
                let (p, o) = (&plan, &opts);
                s.spawn(move || run_host(p, h, o))
            })
            .collect();
        let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("host panicked".into()))).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok::<_, String>((swh.join().map_err(|_| "switch panicked".to_string())??, rs))
    })?;
    let mut slowest = 0f64;
    for r in rs {
        let r = r?;
        for c in &r.collectives {
            if !c.verified {
                return Err(format!("host {}: not verified", r.host));
            }
            slowest = slowest.max(c.finished_s.unwrap_or(f64::INFINITY));
        }
    }
    Ok((sw.ports.data_plane.rx_packets, sw.ports.cpu_s, slowest))
}

pub fn cmd_bench(rest: &mut Vec<String>) {
    let hosts: Vec<u32> = take(rest, "--hosts")
        .unwrap_or_else(|| "4,8".into())
        .split(',')
        .map(|x| x.parse().unwrap_or_else(|_| die(&format!("--hosts: `{x}` is not a number"))))
        .collect();
    let bytes: u64 =
        take(rest, "--bytes").map(|v| v.parse().unwrap_or_else(|_| die("--bytes: not a number"))).unwrap_or(1 << 20);
    let repeats: u32 =
        take(rest, "--repeats").map(|v| v.parse().unwrap_or_else(|_| die("--repeats: not a number"))).unwrap_or(3);
    let protocol = take(rest, "--protocol").unwrap_or_else(|| "canary".into());
    let port_base: u16 = take(rest, "--port-base")
        .map(|v| v.parse().unwrap_or_else(|_| die("--port-base: not a port")))
        .unwrap_or(48000);
    if let Some(a) = rest.first() {
        die(&format!("{a}: unknown argument"));
    }
    if reducelab_ina::pool::pool_protocol(&protocol).is_some() {
        return bench_pool(&hosts, bytes, repeats, &protocol, port_base);
    }
    if reducelab_ina::protocol(&protocol).is_none() {
        let pools: Vec<&str> = reducelab_ina::pool::POOL_PROTOCOLS.iter().map(|p| p.name).collect();
        die(&format!(
            "--protocol: `{protocol}` is not registered ({}; pool: {})",
            reducelab_ina::protocol_names(),
            pools.join(", ")
        ));
    }
    println!("# software switch on loopback, {protocol}, {bytes} B per host, 256 elements (1 KiB) per packet, 64 blocks in flight per host; load average before: {}", load_average());
    println!(
        "hosts,repeat,switch_packets,switch_cpu_s,packets_per_s_per_core,slowest_host_s,goodput_gbps,load_average"
    );
    for &n in &hosts {
        for r in 0..repeats {
            let ip = Ipv4Addr::new(127, 88, (n % 250) as u8, 1);
            match measure(n, bytes, &protocol, ip, port_base + (r as u16) * 64) {
                Ok((pk, cpu, t)) => println!(
                    "{n},{r},{pk},{cpu:.4},{:.0},{t:.4},{:.3},{}",
                    pk as f64 / cpu,
                    bytes as f64 * 8.0 / t / 1e9,
                    load_average()
                ),
                Err(e) => {
                    eprintln!("hosts {n}, repeat {r}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}

fn bench_pool(workers: &[u32], bytes: u64, repeats: u32, protocol: &str, port_base: u16) {
    if let Err(e) = pool_scenario(1, bytes, protocol) {
        die(&e);
    }
    let ps = if reducelab_ina::pool::pool_protocol(protocol).is_some_and(|p| p.uses_ps) {
        ", its PS on a host of its own"
    } else {
        ""
    };
    println!(
        "# software switch on loopback, {protocol}: one training job{ps}, {bytes} B per worker requested, 62 int32 values ({POOL_PAYLOAD_BYTES} B) per packet, {POOL_BENCH_AGGREGATORS} aggregators; load average before: {}",
        load_average()
    );
    println!("workers,repeat,payload_bytes_per_worker,switch_packets,switch_cpu_s,packets_per_s_per_core,slowest_worker_s,goodput_gbps,retransmissions,load_average");
    for &n in workers {
        for r in 0..repeats {
            let ip = Ipv4Addr::new(127, 89, (n % 250) as u8, 1);
            match measure_pool(n, bytes, protocol, ip, port_base + (r as u16) * 64) {
                Ok(m) => println!(
                    "{n},{r},{},{},{:.4},{:.0},{:.4},{:.3},{},{}",
                    m.payload_bytes,
                    m.switch_packets,
                    m.switch_cpu_s,
                    m.switch_packets as f64 / m.switch_cpu_s,
                    m.slowest_s,
                    m.payload_bytes as f64 * 8.0 / m.slowest_s / 1e9,
                    m.retransmissions,
                    load_average()
                ),
                Err(e) => {
                    eprintln!("workers {n}, repeat {r}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
