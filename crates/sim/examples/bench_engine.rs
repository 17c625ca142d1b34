//! `cargo run --release -p reducelab-sim --example bench_engine [NAME]` — the engine
//! benchmarks without Python (the same code `reducelab bench engine` calls).
fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    let names = if names.is_empty() {
        reducelab_sim::engine_bench_names().iter().map(|s| s.to_string()).collect()
    } else {
        names
    };
    for n in names {
        match reducelab_sim::bench_engine(&n) {
            Ok(r) => {
                let s = r.stats;
                println!(
                    "{:<20} wall {:.3} s  events {} ({:.2} M/s)  packets {} ({:.2} M/s)  hops {} ({:.2} M/s)  sim {:.1} us  peak RSS {:.0} MiB  verified {}",
                    r.name,
                    s.wall_seconds,
                    s.events,
                    s.events as f64 / s.wall_seconds / 1e6,
                    s.packets,
                    s.packets as f64 / s.wall_seconds / 1e6,
                    s.packet_hops,
                    s.packet_hops as f64 / s.wall_seconds / 1e6,
                    s.sim_time_ps as f64 * 1e-6,
                    r.peak_rss_bytes as f64 / 1048576.0,
                    r.verified
                );
            }
            Err(e) => eprintln!("{n}: {e}"),
        }
    }
}
