//! Writes the shipped example's Chakra trace (`reducelab_chakra::example`): `train.<r>.et` for
//! each rank into DIR (default `scenarios/examples/chakra_training`).
//!
//! ```sh
//! cargo run -p reducelab-chakra --example chakra_training -- [DIR] [--ranks N]
//! ```

fn main() {
    let mut dir = std::path::PathBuf::from("scenarios/examples/chakra_training");
    let mut ranks = 8u32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--ranks" {
            ranks = args.next().and_then(|n| n.parse().ok()).unwrap_or_else(|| {
                eprintln!("--ranks takes a number of ranks");
                std::process::exit(2)
            });
        } else {
            dir = a.into();
        }
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        std::process::exit(1);
    }
    for (r, bytes) in reducelab_chakra::example::training_iteration(ranks).iter().enumerate() {
        let path = dir.join(format!("train.{r}.et"));
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
}
