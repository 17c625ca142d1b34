//! `reducelab-switch`: the software switch and its hosts as processes (docs/switch.md).
//!
//! ```text
//! reducelab-switch switch --scenario F --node N [common] [--fault SPEC]... [--exit-after-rx N] [--duration-s S]
//! reducelab-switch hosts  --scenario F [--hosts all|0,1,..] [common] [--timeout-s S] [--max-inflight N]
//! reducelab-switch run    --scenario F [common] [--fault SPEC]... [--crash-after-rx N --restart-delay-ms MS]
//! reducelab-switch bench  [--hosts 4,8] [--bytes B] [--repeats R] [--protocol canary|switchml|atp|dsa|...]
//! common: [--ip-base 127.A.B.C] [--port-base P] [--seed S] [--fault-seed S]
//! ```
//! A switch prints `ready <node>` once its ports are bound and one JSON report line when it
//! stops (SIGTERM/SIGINT or `--duration-s`). Exit status: 0 done and verified, 1 a run that
//! did not finish or verify (the reason on stderr), 2 bad arguments, 3 injected crash.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reducelab_switch::faults::{parse_fault, parse_fault_file, PortFaults};
use reducelab_switch::pool_host::{run_pool_hosts, PoolHostOptions};
use reducelab_switch::pool_plan::{is_training, PoolPlan};
use reducelab_switch::pool_switch::PoolSwitch;
use reducelab_switch::{run_host, EndpointSpec, HostOptions, HostReport, InaPlan, Switch, SwitchOptions};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    rest: Vec<String>,
}

impl Args {
    fn take(&mut self, key: &str) -> Option<String> {
        let i = self.rest.iter().position(|a| a == key)?;
        if i + 1 >= self.rest.len() {
            die(&format!("{key}: needs a value"));
        }
        let v = self.rest.remove(i + 1);
        self.rest.remove(i);
        Some(v)
    }
    fn take_all(&mut self, key: &str) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(x) = self.take(key) {
            v.push(x);
        }
        v
    }
    fn num<T: std::str::FromStr>(&mut self, key: &str) -> Option<T> {
        self.take(key).map(|v| v.parse().unwrap_or_else(|_| die(&format!("{key}: `{v}` is not a valid number"))))
    }
    fn finish(self) {
        if let Some(a) = self.rest.first() {
            die(&format!("{a}: unknown argument"));
        }
    }
}

fn die(msg: &str) -> ! {
    eprintln!("reducelab-switch: {msg}");
    std::process::exit(2)
}

struct Common {
    scenario_path: String,
    text: String,
    seed: Option<u64>,
    endpoints: EndpointSpec,
    fault_seed: u64,
}

fn common(a: &mut Args) -> Common {
    let scenario_path = a
        .take("--scenario")
        .unwrap_or_else(|| die("--scenario: required (a scenario TOML with ina_allreduce traffic)"));
    let text =
        std::fs::read_to_string(&scenario_path).unwrap_or_else(|e| die(&format!("--scenario: {scenario_path}: {e}")));
    let ip_base = a
        .take("--ip-base")
        .map(|v| v.parse().unwrap_or_else(|_| die(&format!("--ip-base: `{v}` is not an IPv4 address"))));
    let port_base: Option<u16> = a.num("--port-base");
    let endpoints = match a.take("--endpoints") {
        Some(path) => {
            if ip_base.is_some() || port_base.is_some() {
                die("--endpoints: give either an endpoints file or --ip-base/--port-base, not both");
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| die(&format!("--endpoints: {path}: {e}")));
            EndpointSpec::Map { path, text }
        }
        None => EndpointSpec::Loopback(ip_base.unwrap_or(Ipv4Addr::new(127, 0, 100, 1)), port_base.unwrap_or(47000)),
    };
    Common { scenario_path, text, seed: a.num("--seed"), endpoints, fault_seed: a.num("--fault-seed").unwrap_or(1) }
}

/// A scenario of training jobs (SwitchML, ATP, DSA) runs on the pool driver.
fn is_pool(c: &Common) -> bool {
    is_training(&c.text, c.seed)
}

fn pool_plan_of(c: &Common) -> PoolPlan {
    PoolPlan::from_scenario(&c.text, c.seed, c.endpoints.clone())
        .unwrap_or_else(|e| die(&format!("{}: {e}", c.scenario_path)))
}

fn plan_of(c: &Common) -> InaPlan {
    InaPlan::from_scenario(&c.text, c.seed, c.endpoints.clone())
        .unwrap_or_else(|e| die(&format!("{}: {e}", c.scenario_path)))
}

/// `--fault-file F` entries first, then `--fault` flags (a later entry for a port wins).
fn faults(a: &mut Args) -> Vec<(Option<u16>, PortFaults)> {
    let mut v = Vec::new();
    if let Some(f) = a.take("--fault-file") {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| die(&format!("--fault-file: {f}: {e}")));
        v = parse_fault_file(&f, &text).unwrap_or_else(|e| die(&format!("--fault-file: {e}")));
    }
    v.extend(a.take_all("--fault").iter().map(|s| parse_fault(s).unwrap_or_else(|e| die(&e))));
    v
}

/// Shaping (`rate_mbps`, with its ECN marks) runs in the pool switch only: the Canary switch
/// has no use for marks (its hosts have no window), so it refuses rather than ignore them.
fn refuse_shaping(f: &[(Option<u16>, PortFaults)]) {
    if f.iter().any(|(_, r)| r.rate_bps > 0) {
        die(reducelab_switch::ports::SHAPING_NEEDS_ECN);
    }
}

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "--help" || argv[0] == "-h" {
        println!("{}", include_str!("usage.txt"));
        return;
    }
    let cmd = argv.remove(0);
    let a = Args { rest: argv };
    match cmd.as_str() {
        "switch" => cmd_switch(a),
        "hosts" => cmd_hosts(a),
        "run" => cmd_run(a),
        "plan" => cmd_plan(a),
        "bench" => {
            let mut rest = a.rest;
            reducelab_switch::bench::cmd_bench(&mut rest)
        }
        other => die(&format!("{other}: unknown command (switch, hosts, run, bench)")),
    }
}

fn cmd_switch(mut a: Args) {
    let c = common(&mut a);
    let node: u32 = a.num("--node").unwrap_or_else(|| die("--node: required (the switch's node id)"));
    let opts = SwitchOptions {
        faults: faults(&mut a),
        seed: c.fault_seed,
        exit_after_rx: a.num("--exit-after-rx"),
        duration: a.num::<f64>("--duration-s").map(Duration::from_secs_f64),
    };
    a.finish();
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    if is_pool(&c) {
        let plan = pool_plan_of(&c);
        let mut sw = PoolSwitch::bind(&plan, node, opts).unwrap_or_else(|e| die(&e));
        println!("ready {node}");
        std::io::stdout().flush().ok();
        let r = sw.run(&STOP);
        println!("{}", serde_json::to_string(&r).expect("json"));
        return;
    }
    refuse_shaping(&opts.faults);
    let plan = plan_of(&c);
    let mut sw = Switch::bind(&plan, node, opts).unwrap_or_else(|e| die(&e));
    println!("ready {node}");
    std::io::stdout().flush().ok();
    let r = sw.run(&STOP);
    println!("{}", serde_json::to_string(&r).expect("json"));
}

/// Prints every node, what it is, and each port's UDP endpoint and peer.
fn cmd_plan(mut a: Args) {
    let c = common(&mut a);
    a.finish();
    if is_pool(&c) {
        let plan = pool_plan_of(&c);
        println!("# {}: node kind port endpoint -> peer_node:peer_port (peer endpoint)", plan.name);
        for (n, node) in plan.fabric.nodes.iter().enumerate() {
            let kind = match plan.fabric.host_nodes.iter().position(|&h| h == n as u32) {
                Some(h) => {
                    format!("host {h} ({})", plan.role(h as u32).map_or("idle".to_string(), |r| format!("{r:?}")))
                }
                None => "switch".to_string(),
            };
            for (p, &(peer, pp)) in node.ports.iter().enumerate() {
                println!(
                    "{n} {kind} {p} {} -> {peer}:{pp} ({})",
                    plan.endpoints.of(n as u32, p as u16),
                    plan.endpoints.of(peer, pp)
                );
            }
        }
        for (j, job) in plan.jobs.iter().enumerate() {
            println!(
                "# job {j}: {} workers {:?}, ps {:?}, aggregates on switch {}, {} PSNs per worker, window {:?}",
                plan.spec.protocol.label(),
                job.workers,
                job.ps,
                job.switch,
                job.psns,
                job.params.control
            );
        }
        println!("# switches: {}", plan.switches().iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "));
        return;
    }
    let plan = plan_of(&c);
    println!("# {}: node kind port endpoint -> peer_node:peer_port (peer endpoint)", plan.name);
    for (n, node) in plan.fabric.nodes.iter().enumerate() {
        let kind = if node.is_host {
            format!("host {}", plan.fabric.host_nodes.iter().position(|&h| h == n as u32).unwrap_or(usize::MAX))
        } else {
            "switch".to_string()
        };
        for (p, &(peer, pp)) in node.ports.iter().enumerate() {
            println!(
                "{n} {kind} {p} {} -> {peer}:{pp} ({})",
                plan.endpoints.of(n as u32, p as u16),
                plan.endpoints.of(peer, pp)
            );
        }
    }
    println!("# switches: {}", plan.switches().iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "));
}

fn host_list(plan: &InaPlan, v: Option<String>) -> Vec<u32> {
    match v.as_deref() {
        None | Some("all") => plan.hosts(),
        Some(s) => s
            .split(',')
            .map(|x| x.trim().parse().unwrap_or_else(|_| die(&format!("--hosts: `{x}` is not a host index"))))
            .collect(),
    }
}

fn host_opts(a: &mut Args) -> HostOptions {
    let d = HostOptions::default();
    HostOptions {
        timeout: a.num::<f64>("--timeout-s").map(Duration::from_secs_f64).unwrap_or(d.timeout),
        max_inflight: a.num("--max-inflight").unwrap_or(d.max_inflight),
        linger: a.num::<f64>("--linger-ms").map(|m| Duration::from_secs_f64(m / 1000.0)).unwrap_or(d.linger),
        ..d
    }
}

/// Runs `hosts` as threads; every host's report or error.
fn run_hosts(plan: &InaPlan, hosts: &[u32], opts: &HostOptions) -> Vec<Result<HostReport, String>> {
    let opts = &opts.for_threads(hosts.len());
    std::thread::scope(|s| {
        let hs: Vec<_> = hosts.iter().map(|&h| s.spawn(move || run_host(plan, h, opts))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("host thread panicked".into()))).collect()
    })
}

fn cmd_hosts(mut a: Args) {
    let c = common(&mut a);
    let hosts = a.take("--hosts");
    let opts = host_opts(&mut a);
    a.finish();
    if is_pool(&c) {
        let plan = pool_plan_of(&c);
        let hosts = pool_host_list(&plan, hosts);
        let rs = run_pool_hosts(&plan, &hosts, &pool_opts(&opts));
        std::process::exit(print_reports(&rs));
    }
    let plan = plan_of(&c);
    let hosts = host_list(&plan, hosts);
    let rs = run_hosts(&plan, &hosts, &opts);
    std::process::exit(print_hosts(&rs));
}

fn pool_host_list(plan: &PoolPlan, v: Option<String>) -> Vec<u32> {
    match v.as_deref() {
        None | Some("all") => plan.hosts(),
        Some(s) => s
            .split(',')
            .map(|x| x.trim().parse().unwrap_or_else(|_| die(&format!("--hosts: `{x}` is not a host index"))))
            .collect(),
    }
}

/// The pool hosts' options from the common host options (`--max-inflight` does not apply: the
/// worker transport's window bounds what is in flight).
fn pool_opts(o: &HostOptions) -> PoolHostOptions {
    PoolHostOptions { timeout: o.timeout, linger: o.linger.max(PoolHostOptions::default().linger) }
}

fn print_reports<T: serde::Serialize>(rs: &[Result<T, String>]) -> i32 {
    let mut code = 0;
    let ok: Vec<&T> = rs.iter().filter_map(|r| r.as_ref().ok()).collect();
    println!("{}", serde_json::to_string(&ok).expect("json"));
    for r in rs {
        if let Err(e) = r {
            eprintln!("{e}");
            code = 1;
        }
    }
    code
}

fn print_hosts(rs: &[Result<HostReport, String>]) -> i32 {
    let mut code = 0;
    let ok: Vec<&HostReport> = rs.iter().filter_map(|r| r.as_ref().ok()).collect();
    println!("{}", serde_json::to_string(&ok).expect("json"));
    for r in rs {
        if let Err(e) = r {
            eprintln!("{e}");
            code = 1;
        }
    }
    code
}

/// A switch process of this binary, started and waited for.
pub struct SwitchProcess {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

fn spawn_switch(c: &Common, node: u32, extra: &[String]) -> SwitchProcess {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(&format!("cannot find this binary: {e}")));
    let mut cmd = Command::new(exe);
    cmd.args([
        "switch",
        "--scenario",
        &c.scenario_path,
        "--node",
        &node.to_string(),
        "--fault-seed",
        &c.fault_seed.to_string(),
    ]);
    cmd.args(c.endpoints.args());
    if let Some(s) = c.seed {
        cmd.args(["--seed", &s.to_string()]);
    }
    cmd.args(extra).stdout(Stdio::piped()).stdin(Stdio::null());
    let mut child = cmd.spawn().unwrap_or_else(|e| die(&format!("cannot start switch {node}: {e}")));
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    if out.read_line(&mut line).unwrap_or(0) == 0 || line.trim() != format!("ready {node}") {
        let _ = child.kill();
        let _ = child.wait();
        die(&format!("switch {node} did not start (see its error above)"));
    }
    SwitchProcess { child, out }
}

impl SwitchProcess {
    /// SIGTERM, then its report (None if it had died).
    fn stop(mut self) -> Option<serde_json::Value> {
        // SAFETY: signalling our own child by its pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let mut line = String::new();
        let _ = self.out.read_line(&mut line);
        let _ = self.child.wait();
        serde_json::from_str(&line).ok()
    }
}

fn cmd_run(mut a: Args) {
    let c = common(&mut a);
    let mut fault_args: Vec<String> = Vec::new();
    if let Some(f) = a.take("--fault-file") {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| die(&format!("--fault-file: {f}: {e}")));
        parse_fault_file(&f, &text).unwrap_or_else(|e| die(&format!("--fault-file: {e}")));
        fault_args.extend(["--fault-file".to_string(), f]);
    }
    for f in a.take_all("--fault") {
        parse_fault(&f).unwrap_or_else(|e| die(&e));
        fault_args.extend(["--fault".to_string(), f]);
    }
    let crash_after: Option<u64> = a.num("--crash-after-rx");
    let restart_delay = Duration::from_millis(a.num("--restart-delay-ms").unwrap_or(50));
    let hosts = a.take("--hosts");
    let opts = host_opts(&mut a);
    a.finish();
    if is_pool(&c) {
        return cmd_run_pool(&c, &fault_args, hosts, &opts, crash_after, restart_delay);
    }
    {
        let mut all = Vec::new();
        let mut it = fault_args.iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            if k == "--fault" {
                all.push(parse_fault(v).unwrap_or_else(|e| die(&e)));
            } else {
                let text = std::fs::read_to_string(v).unwrap_or_else(|e| die(&format!("--fault-file: {v}: {e}")));
                all.extend(parse_fault_file(v, &text).unwrap_or_else(|e| die(&format!("--fault-file: {e}"))));
            }
        }
        refuse_shaping(&all);
    }
    let plan = plan_of(&c);
    let hosts = host_list(&plan, hosts);
    let switches = plan.switches();
    let mut procs: Vec<SwitchProcess> = Vec::new();
    for (i, &s) in switches.iter().enumerate() {
        let mut extra = fault_args.clone();
        // The crash is injected into the first switch (the root of a star or the first leaf).
        if i == 0 {
            if let Some(n) = crash_after {
                extra.extend(["--exit-after-rx".to_string(), n.to_string()]);
            }
        }
        procs.push(spawn_switch(&c, s, &extra));
    }
    let t0 = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let results = std::thread::scope(|s| {
        // Supervisor: restarts the crashed switch once, after `restart_delay`.
        let first = &mut procs[0];
        let done2 = done.clone();
        let sup = crash_after.map(|_| {
            let c = &c;
            let node = switches[0];
            let extra = fault_args.clone();
            s.spawn(move || {
                while !done2.load(Ordering::Relaxed) {
                    if let Ok(Some(st)) = first.child.try_wait() {
                        eprintln!("switch {node} exited ({st}); restarting it in {} ms", restart_delay.as_millis());
                        std::thread::sleep(restart_delay);
                        *first = spawn_switch(c, node, &extra);
                        eprintln!("switch {node} restarted");
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            })
        });
        let rs = run_hosts(&plan, &hosts, &opts);
        done.store(true, Ordering::Relaxed);
        let restarted = sup.map(|h| h.join().unwrap_or(false));
        (rs, restarted)
    });
    let (rs, restarted) = results;
    let wall = t0.elapsed().as_secs_f64();
    let reports: Vec<Option<serde_json::Value>> = procs.into_iter().map(|p| p.stop()).collect();
    let ok: Vec<HostReport> = rs.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let mut out = serde_json::json!({ "scenario": plan.name, "wall_s": wall, "switch_restarted": restarted, "switches": reports, "hosts": ok });
    if !plan.training.is_empty() {
        out["training_jobs"] = serde_json::json!(plan.training_results(&ok));
    }
    println!("{out}");
    let mut code = 0;
    for r in &rs {
        if let Err(e) = r {
            eprintln!("{e}");
            code = 1;
        }
    }
    if crash_after.is_some() && restarted != Some(true) {
        eprintln!("--crash-after-rx: the switch did not crash during the run (it received fewer packets)");
        code = 1;
    }
    std::process::exit(code);
}

/// `run` for training jobs: every switch a process of its own, the hosts (workers and
/// parameter servers) threads of this one; the switches are stopped at the end.
/// `--crash-after-rx N` kills the switch that aggregates job 0 after N packets and restarts it
/// (ATP and DSA: the workers' timeouts and the PS rebuild what its aggregators held). SwitchML
/// has no copy of a slot outside the switch: its workers' timeouts rebuild the slots whose
/// result no worker had yet (so a crash on a loss-free network is survived), but a result the
/// crash took from some workers only (the shadow copy a worker that lost its ACK was to be
/// answered from) is gone, and the run ends with the workers' errors and a line saying so.
fn cmd_run_pool(
    c: &Common,
    fault_args: &[String],
    hosts: Option<String>,
    opts: &HostOptions,
    crash_after: Option<u64>,
    restart_delay: Duration,
) {
    let plan = pool_plan_of(c);
    let hosts = pool_host_list(&plan, hosts);
    let switches = plan.switches();
    let crashed = plan.jobs[0].switch;
    let mut procs: Vec<SwitchProcess> = switches
        .iter()
        .map(|&s| {
            let mut extra = fault_args.to_vec();
            if let (Some(n), true) = (crash_after, s == crashed) {
                extra.extend(["--exit-after-rx".to_string(), n.to_string()]);
            }
            spawn_switch(c, s, &extra)
        })
        .collect();
    let t0 = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let (rs, restarted) = std::thread::scope(|s| {
        let i = switches.iter().position(|&x| x == crashed).expect("a switch");
        let first = &mut procs[i];
        let done2 = done.clone();
        let sup = crash_after.map(|_| {
            s.spawn(move || {
                while !done2.load(Ordering::Relaxed) {
                    if let Ok(Some(st)) = first.child.try_wait() {
                        eprintln!("switch {crashed} exited ({st}); restarting it in {} ms", restart_delay.as_millis());
                        std::thread::sleep(restart_delay);
                        *first = spawn_switch(c, crashed, fault_args);
                        eprintln!("switch {crashed} restarted");
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            })
        });
        let rs = run_pool_hosts(&plan, &hosts, &pool_opts(opts));
        done.store(true, Ordering::Relaxed);
        (rs, sup.map(|h| h.join().unwrap_or(false)))
    });
    let wall = t0.elapsed().as_secs_f64();
    let reports: Vec<Option<serde_json::Value>> = procs.into_iter().map(|p| p.stop()).collect();
    println!(
        "{}",
        serde_json::json!({ "scenario": plan.name, "protocol": plan.spec.protocol.label(), "wall_s": wall, "switch_restarted": restarted, "switches": reports, "hosts": rs.iter().filter_map(|r| r.as_ref().ok()).collect::<Vec<_>>() })
    );
    let mut code = 0;
    for r in &rs {
        if let Err(e) = r {
            eprintln!("{e}");
            code = 1;
        }
    }
    if crash_after.is_some() && restarted != Some(true) {
        eprintln!("--crash-after-rx: the switch did not crash during the run (it received fewer packets)");
        code = 1;
    }
    if code != 0 && restarted == Some(true) && !plan.spec.protocol.uses_ps() {
        eprintln!(
            "switchml: switch {crashed} crashed and restarted with empty slots; SwitchML keeps no copy of a slot outside the switch, so a result that some workers had received before the crash and others had not (they were to get it from the lost shadow copy) cannot be rebuilt: the workers missing it retransmit into a slot their peers never fill again"
        );
    }
    std::process::exit(code);
}
