//! `cargo run --release -p reducelab-sim --example run_scenario -- FILE [OUT_DIR]`: runs a
//! scenario without the Python front end (for profiling and quick checks).
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: run_scenario FILE [OUT_DIR]");
        std::process::exit(2);
    };
    // Read as a file: relative file names in it (`msccl`) resolve against its directory.
    let run = reducelab_sim::load_scenario_file(std::path::Path::new(path), None)
        .and_then(|sc| reducelab_sim::run_scenario(sc, &Default::default()));
    match run {
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
