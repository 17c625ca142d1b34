//! `loggp FILE [--L n] [--o n] [--g n] [--G n] [--O n] [--S n] [--ops]`: parses and checks a GOAL
//! file, runs it in LogGP mode and prints what LogGOPSim prints (its parameter line, `Host i: t` for
//! every rank and `Maximum finishing time at host h: t`), then the critical path's length; with
//! `--ops`, every operation's start and end. `--parse-only` stops after parsing and prints the
//! trace's size (operations, dependencies, heap bytes per operation). `--timing` prints the phase times
//! (parse, check, simulate) to stderr. `--write-binary OUT` writes the trace in LogGOPSim's binary
//! form (what `txt2bin` writes) and stops. FILE may be text or binary. Errors go to stderr with exit
//! status 1.

use reducelab_goal::{check, parse_file, simulate, LogGpParams, OpId, Rank};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loggp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut p = LogGpParams::default();
    let (mut file, mut ops, mut parse_only, mut timing) = (None, false, false, false);
    let mut write_binary: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        let field = match a.as_str() {
            "--write-binary" => {
                write_binary = Some(PathBuf::from(args.next().ok_or("--write-binary needs a file")?));
                continue;
            }
            "--ops" => {
                ops = true;
                continue;
            }
            "--parse-only" => {
                parse_only = true;
                continue;
            }
            "--timing" => {
                timing = true;
                continue;
            }
            "--L" => &mut p.latency_ns,
            "--o" => &mut p.overhead_ns,
            "--g" => &mut p.gap_ns,
            "--G" => &mut p.gap_per_byte_ns,
            "--O" => &mut p.overhead_per_byte_ns,
            "--S" => &mut p.eager_limit_bytes,
            _ if !a.starts_with("--") && file.is_none() => {
                file = Some(PathBuf::from(a));
                continue;
            }
            _ => {
                return Err(format!(
                    "unknown argument {a}\nusage: loggp FILE [--L n --o n --g n --G n --O n --S n] [--ops]"
                ))
            }
        };
        let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
        *field = v.parse().map_err(|e| format!("{a} {v}: {e}"))?;
    }
    let file = file.ok_or("usage: loggp FILE [--L n --o n --g n --G n --O n --S n] [--ops]")?;
    let clock = Instant::now();
    let trace = parse_file(&file).map_err(|e| e.to_string())?;
    let parsed = clock.elapsed();
    if let Some(out) = write_binary {
        let bytes = reducelab_goal::write_binary(&trace);
        return std::fs::write(&out, bytes).map_err(|e| format!("{}: {e}", out.display()));
    }
    if parse_only {
        println!(
            "{} ranks, {} operations, {} dependencies, {} heap bytes ({:.1} bytes per operation); parsed in {:.3} s",
            trace.num_ranks(),
            trace.num_ops(),
            trace.num_deps(),
            trace.heap_bytes(),
            trace.bytes_per_op(),
            parsed.as_secs_f64()
        );
        return Ok(());
    }
    let name = file.display().to_string();
    let checked = check(&trace).map_err(|e| e.in_file(name.clone()).to_string())?;
    let checked_at = clock.elapsed();
    let r = simulate(&checked, &p, ops).map_err(|e| e.in_file(name).to_string())?;
    let simulated = clock.elapsed();
    if timing {
        eprintln!(
            "parse {:.3} s, check {:.3} s, simulate {:.3} s",
            parsed.as_secs_f64(),
            (checked_at - parsed).as_secs_f64(),
            (simulated - checked_at).as_secs_f64()
        );
    }
    let out = std::io::stdout();
    let mut w = std::io::BufWriter::new(out.lock());
    let _ = writeln!(
        w,
        "size: {} ({} CPUs, {} NICs); L={}, o={} g={}, G={}, O={}, P={}, S={}",
        trace.num_ranks(),
        trace.cpus(),
        trace.nics(),
        p.latency_ns,
        p.overhead_ns,
        p.gap_ns,
        p.gap_per_byte_ns,
        p.overhead_per_byte_ns,
        trace.num_ranks(),
        p.eager_limit_bytes
    );
    for (h, t) in r.rank_end_ns.iter().enumerate() {
        let _ = writeln!(w, "Host {h}: {t}");
    }
    let (h, max) = r.max_end();
    let _ = writeln!(w, "Maximum finishing time at host {}: {max} ({} s)", h.0, max as f64 / 1e9);
    let _ =
        writeln!(w, "Critical path: {} ns; {} operations, {} events", r.critical_path_ns, trace.num_ops(), r.events);
    if let Some(tm) = &r.op_times {
        for rank in 0..trace.num_ranks() {
            for o in trace.ops_of(Rank(rank)).map(OpId) {
                let _ = writeln!(
                    w,
                    "op rank {rank} {} line {}: start {} end {}",
                    trace.label(o),
                    trace.line(o),
                    tm.start_ns[o.index()],
                    tm.end_ns[o.index()]
                );
            }
        }
    }
    Ok(())
}
