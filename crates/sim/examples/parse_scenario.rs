//! Parses and validates a scenario file without running it, and prints its traffic entries.
//! Used to measure the parser's memory on large explicit-message scenarios:
//!
//! ```sh
//! cargo build --release -p reducelab-sim --example parse_scenario
//! /usr/bin/time -v target/release/examples/parse_scenario big.toml
//! ```

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: parse_scenario SCENARIO.toml");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {path}: {e}");
            std::process::exit(1);
        }
    };
    match reducelab_sim::load_scenario_str(&text, None) {
        Ok(sc) => {
            for (i, t) in sc.traffic.iter().enumerate() {
                let n = match t {
                    reducelab_sim::Traffic::Messages { list } => format!(", {} messages", list.len()),
                    _ => String::new(),
                };
                println!("traffic[{i}]: {}{n}", t.kind());
            }
        }
        Err(e) => {
            eprintln!("error: {path}: {e}");
            std::process::exit(2);
        }
    }
}
