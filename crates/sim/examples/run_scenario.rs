//! `cargo run --release -p reducelab-sim --example run_scenario -- FILE [OUT_DIR]`: runs a
//! scenario without the Python front end (for profiling and quick checks).
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: run_scenario FILE [OUT_DIR]");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("error: {path}: {e}");
        std::process::exit(2)
    });
    let base_dir = std::path::Path::new(path).parent().map(|d| d.to_path_buf());
    match reducelab_sim::run_scenario_str(&text, &reducelab_sim::RunOptions { base_dir, ..Default::default() }) {
        Ok(out) => {
            print!("{}", out.table);
            eprintln!("wall {:.2} s, {} events", out.stats.wall_seconds, out.stats.events);
            if let Some(dir) = args.get(2) {
                std::fs::create_dir_all(dir).expect("out dir");
                std::fs::write(format!("{dir}/summary.json"), &out.summary_json).expect("write");
                for (n, c) in &out.files {
                    std::fs::write(format!("{dir}/{n}"), c).expect("write");
                }
            }
        }
        Err(e) => {
            eprintln!("error: {path}: {e}");
            std::process::exit(2);
        }
    }
}
