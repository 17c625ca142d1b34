//! `cargo run --release -p reducelab-sim --example run_scenario FILE` — runs a scenario and
//! prints its table, without the Python front end.
fn main() {
    let path = std::env::args().nth(1).expect("usage: run_scenario FILE");
    let text = std::fs::read_to_string(&path).expect("read scenario");
    match reducelab_sim::run_scenario_str(&text, &Default::default()) {
        Ok(out) => println!("{}wall {:.3} s", out.table, out.stats.wall_seconds),
        Err(e) => {
            eprintln!("error: {path}: {e}");
            std::process::exit(2);
        }
    }
}
