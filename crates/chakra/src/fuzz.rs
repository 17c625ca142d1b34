//! Body of the cargo-fuzz target `chakra_et` (`fuzz/fuzz_targets/chakra_et.rs`), also run by
//! `tests/fuzz_corpus.rs` over the committed corpus and seeded mutants of it. Panics on a broken
//! property.

use crate::{lower, read_et, Algorithms, CommEngine, EtWriter};

/// Arbitrary bytes as one rank's Chakra file: reading never panics and every error has a byte
/// offset and a reason; a file that reads writes back to bytes that read to the same nodes; as a
/// one-rank job and as two ranks running the same file it lowers or fails with a reason, and
/// what lowers passes the GOAL checker and, if small, runs in the LogGP mode to completion
/// (a one-rank job has no messages to wait for; two identical ranks may, and then the run names
/// a stuck operation).
pub fn chakra_et(data: &[u8]) {
    let file = match read_et(data) {
        Ok(f) => f,
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(e.offset <= data.len() as u64, "{e:?}");
            return;
        }
    };
    let mut w = EtWriter::new(&file.version);
    for n in &file.nodes {
        w.node(n);
    }
    let again = read_et(&w.finish()).expect("what was read writes back readable");
    assert_eq!(again.nodes.len(), file.nodes.len());
    for (a, b) in again.nodes.iter().zip(&file.nodes) {
        assert_eq!(
            (a.id, a.node_type, &a.data_deps, &a.ctrl_deps, a.duration_micros),
            (b.id, b.node_type, &b.data_deps, &b.ctrl_deps, b.duration_micros)
        );
    }
    if file.nodes.len() > 2000 {
        return;
    }
    for ranks in [1usize, 2] {
        let files: Vec<(String, crate::EtFile)> = (0..ranks).map(|r| (format!("t.{r}.et"), file.clone())).collect();
        match lower(&files, &Algorithms::default(), CommEngine::SharedWithCompute) {
            Ok(l) => {
                let checked = match reducelab_goal::check(&l.trace) {
                    Ok(c) => c,
                    Err(e) => panic!("a lowered trace fails the GOAL checker: {e}"),
                };
                if l.trace.num_ops() > 100_000 || l.trace.num_ops() == 0 {
                    continue;
                }
                match reducelab_goal::simulate(&checked, &reducelab_goal::LogGpParams::default(), false) {
                    Ok(r) => assert_eq!(r.rank_end_ns.len(), ranks),
                    Err(e) => assert!(ranks > 1 && !e.message.is_empty(), "{e}"),
                }
            }
            Err(e) => assert!(!e.message.is_empty() && e.file.is_some()),
        }
    }
}
