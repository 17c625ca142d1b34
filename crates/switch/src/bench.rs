//! `reducelab-switch bench`: one software switch on loopback under an allreduce of 4 and 8
//! hosts (a star, everything in one process: the switch's event loop on one thread, each host
//! on its own). Reports the switch's packets per second of its own CPU time (packets received
//! and processed / CPU seconds of its thread) and the allreduce goodput (vector bytes over the
//! slowest host's time to its last block), with the machine's load average: the figures are
//! wall-clock measurements on a shared machine, not a model.

use std::net::Ipv4Addr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::{run_host, HostOptions, Plan, Switch, SwitchOptions};

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

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_else(|_| "unknown".into())
}

/// One measured run: (switch packets, switch CPU s, slowest host's time to its last block s).
pub fn measure(hosts: u32, bytes: u64, protocol: &str, ip: Ipv4Addr, port_base: u16) -> Result<(u64, f64, f64), String> {
    let plan = Plan::from_scenario(&scenario(hosts, bytes, protocol), None, (ip, port_base))?;
    let node = plan.switches()[0];
    let stop = Arc::new(AtomicBool::new(false));
    let opts = HostOptions { timeout: Duration::from_secs(60), linger: Duration::from_millis(20), max_inflight: 64, ..HostOptions::default() }.for_threads(plan.hosts().len());
    let (sw, rs) = std::thread::scope(|s| {
        // Bound before the hosts start (they would send into a closed port otherwise).
        let (tx, rx) = std::sync::mpsc::channel();
        let (st, p) = (stop.clone(), &plan);
        // Named, so a profile can tell the switch's thread from the hosts'.
        let swh = std::thread::Builder::new().name("rl-switch".into()).spawn_scoped(s, move || {
            let mut sw = Switch::bind(p, node, SwitchOptions::default())?;
            tx.send(()).ok();
            Ok::<_, String>(sw.run(&st))
        }).map_err(|e| format!("spawn: {e}"))?;
        if rx.recv().is_err() {
            return Err(swh.join().map_err(|_| "switch panicked".to_string())?.err().unwrap_or_default());
        }
        let hs: Vec<_> = plan.hosts().into_iter().map(|h| {
            let (p, o) = (&plan, &opts);
            s.spawn(move || run_host(p, h, o))
        }).collect();
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
    Ok((sw.data_plane.rx_packets, sw.cpu_s, slowest))
}

pub fn cmd_bench(rest: &mut Vec<String>) {
    let hosts: Vec<u32> = take(rest, "--hosts").unwrap_or_else(|| "4,8".into()).split(',').map(|x| x.parse().unwrap_or_else(|_| die(&format!("--hosts: `{x}` is not a number")))).collect();
    let bytes: u64 = take(rest, "--bytes").map(|v| v.parse().unwrap_or_else(|_| die("--bytes: not a number"))).unwrap_or(1 << 20);
    let repeats: u32 = take(rest, "--repeats").map(|v| v.parse().unwrap_or_else(|_| die("--repeats: not a number"))).unwrap_or(3);
    let protocol = take(rest, "--protocol").unwrap_or_else(|| "canary".into());
    let port_base: u16 = take(rest, "--port-base").map(|v| v.parse().unwrap_or_else(|_| die("--port-base: not a port"))).unwrap_or(48000);
    if let Some(a) = rest.first() {
        die(&format!("{a}: unknown argument"));
    }
    if reducelab_ina::protocol(&protocol).is_none() {
        die(&format!("--protocol: `{protocol}` is not registered ({})", reducelab_ina::protocol_names()));
    }
    println!("# software switch on loopback, {protocol}, {bytes} B per host, 256 elements (1 KiB) per packet, 64 blocks in flight per host; load average before: {}", load_average());
    println!("hosts,repeat,switch_packets,switch_cpu_s,packets_per_s_per_core,slowest_host_s,goodput_gbps,load_average");
    for &n in &hosts {
        for r in 0..repeats {
            let ip = Ipv4Addr::new(127, 88, (n % 250) as u8, 1);
            match measure(n, bytes, &protocol, ip, port_base + (r as u16) * 64) {
                Ok((pk, cpu, t)) => println!("{n},{r},{pk},{cpu:.4},{:.0},{t:.4},{:.3},{}", pk as f64 / cpu, bytes as f64 * 8.0 / t / 1e9, load_average()),
                Err(e) => {
                    eprintln!("hosts {n}, repeat {r}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
