//! MSCCL XML from the command line:
//! - `msccl allpairs P`: prints the all-pairs allreduce XML (`scenarios/examples/msccl_allpairs_8.xml`
//!   is `allpairs 8`);
//! - `msccl import FILE...`: imports and checks each file, one tab-separated line per file:
//!   file, ngpus, `accepted` with IR steps and messages, or `rejected` and the reason.

use reducelab_sched::msccl::allpairs_allreduce_xml;
use reducelab_sched::{check, from_msccl_xml};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("allpairs") => {
            let p = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(8);
            match allpairs_allreduce_xml(p) {
                Ok(x) => print!("{x}"),
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            }
        }
        Some("import") => {
            let mut failed = false;
            for f in &args[1..] {
                let line = match std::fs::read_to_string(f) {
                    Err(e) => format!("{f}\t-\trejected\tcannot read: {e}"),
                    Ok(text) => match from_msccl_xml(&text) {
                        Ok(s) => {
                            let r = check(&s).expect("checked");
                            format!("{f}\t{}\taccepted\t{} IR steps, {} messages", s.ranks, s.num_steps(), r.messages)
                        }
                        Err(e) => {
                            failed = true;
                            let ngpus = text
                                .split("ngpus=\"")
                                .nth(1)
                                .and_then(|t| t.split('"').next())
                                .unwrap_or("?")
                                .to_string();
                            format!("{f}\t{ngpus}\trejected\t{e}")
                        }
                    },
                };
                println!("{line}");
            }
            std::process::exit(i32::from(failed));
        }
        _ => {
            eprintln!("usage: msccl allpairs P | msccl import FILE...");
            std::process::exit(2);
        }
    }
}
