//! What the scenario test files share (each test file is its own crate and declares
//! `mod common;`).

use reducelab_des::Rng;

/// A random 16-host topology (its `[topology]` keys but the links' bandwidth and latency) and
/// one random `[[traffic]]` entry on it (its keys): a permutation, an incast or a list of
/// messages. The property tests of the transports draw their cases from it.
pub fn random_topology_and_traffic(rng: &mut Rng) -> (String, String) {
    let (topology, hosts) = match rng.below(4) {
        0 => ("kind = \"star\"\nhosts = 16".to_string(), 16),
        1 => ("kind = \"fat_tree_3\"\nk = 4".to_string(), 16),
        2 => ("kind = \"fat_tree_2\"\nleaves = 4\nhosts_per_leaf = 4\nspines = 2".to_string(), 16),
        _ => ("kind = \"torus\"\ndims = [4, 4]".to_string(), 16),
    };
    let bytes = [0, 1, 3_000, 20_000, 150_000][rng.below(5) as usize] + rng.below(1_000);
    let traffic = match rng.below(3) {
        0 => format!("kind = \"permutation\"\nbytes = {bytes}"),
        1 => {
            let receiver = rng.below(hosts);
            let senders: Vec<u64> = (0..hosts).filter(|&h| h != receiver && rng.bernoulli(0.8)).collect();
            let senders = if senders.is_empty() { vec![(receiver + 1) % hosts] } else { senders };
            format!("kind = \"incast\"\nsenders = {senders:?}\nreceiver = {receiver}\nbytes = {bytes}")
        }
        _ => {
            let list: Vec<String> = (0..1 + rng.below(12))
                .map(|_| {
                    format!(
                        "[{}, {}, {}, {}]",
                        rng.below(hosts),
                        rng.below(hosts),
                        rng.below(100_000),
                        rng.below(20_000)
                    )
                })
                .collect();
            format!("kind = \"messages\"\nlist = [{}]", list.join(", "))
        }
    };
    (topology, traffic)
}
