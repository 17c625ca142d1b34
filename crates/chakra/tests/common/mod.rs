//! What the Chakra tests share: the seeded stream and a job's files written then read back.
#![allow(dead_code)]

use reducelab_chakra::{read_et, EtFile, EtWriter, Node};

#[path = "../../../../fuzz/corpus_replay.rs"]
mod corpus_replay;
#[allow(unused_imports)] // reader.rs draws nothing
pub use corpus_replay::Xs;

/// Each rank's nodes written as a Chakra file (`job.<rank>.et`) and read back.
pub fn job_files(ranks: &[Vec<Node>]) -> Vec<(String, EtFile)> {
    ranks
        .iter()
        .enumerate()
        .map(|(r, nodes)| {
            let mut w = EtWriter::new("1.0.0");
            nodes.iter().for_each(|n| _ = w.node(n));
            (format!("job.{r}.et"), read_et(&w.finish()).unwrap())
        })
        .collect()
}
