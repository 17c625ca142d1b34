//! Flare's protocols on the engine (`flare`, `flare_sparse`, `sparcml`; docs/flare-sparse.md):
//! exact sums on a fat tree, the traffic they put on the links, and what the switches hold.

use reducelab_sim::run_scenario_str;
use serde_json::Value;

/// A 2-level fat tree of `leaves` × 4 hosts (8-port leaves: 4 hosts, 4 uplinks) and 4 spines.
fn scenario(leaves: u32, protocol: &str, bytes: u64, extra: &str) -> String {
    let hosts = leaves * 4;
    format!(
        "name = \"flare\"\nseed = 3\n[topology]\nkind = \"fat_tree_2\"\nleaves = {leaves}\nhosts_per_leaf = 4\nspines = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n\
         [network]\nmtu_bytes = 4096\n\
         [[traffic]]\nkind = \"ina_allreduce\"\nprotocol = \"{protocol}\"\nhosts = \"all\"\nbytes = {bytes}\nelements_per_packet = 256\n{extra}\n# {hosts} hosts\n"
    )
}

fn run(text: &str) -> (Value, u64) {
    let out = run_scenario_str(text, &Default::default()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let s: Value = serde_json::from_str(&out.summary_json).unwrap();
    let links = out.files.iter().find(|(n, _)| n == "links.csv").map(|(_, c)| c.clone()).expect("links.csv");
    let mut lines = links.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = head.iter().position(|&h| h == "bytes").expect("bytes column");
    let bytes = lines.map(|l| l.split(',').nth(col).unwrap().parse::<u64>().unwrap()).sum();
    (s, bytes)
}

fn verified(s: &Value, hosts: u64) {
    assert_eq!(s["status"], "completed", "{}", s["status_reason"]);
    let t = &s["traffic"][0];
    assert_eq!(t["bad_blocks"], 0, "{t}");
    assert_eq!(t["verified"].as_u64(), Some(hosts), "{t}");
    assert_eq!(t["hosts_finished"].as_u64(), Some(hosts), "{t}");
    assert_eq!(s["ina"]["descriptors_left"], 0);
}

#[test]
fn every_protocol_gives_the_exact_sum_on_full_and_partial_trees() {
    for p in ["flare", "flare_sparse", "sparcml", "sparcml_split"] {
        // 16 hosts on 4 leaves; then 12 hosts (not a power of two, SparCML folds 4 of them)
        // spread unevenly over the leaves.
        let (s, _) = run(&scenario(4, p, 1 << 20, ""));
        verified(&s, 16);
        let partial =
            scenario(4, p, 300_000, "").replace("hosts = \"all\"", "hosts = [0, 1, 2, 4, 5, 8, 9, 10, 11, 13, 14, 15]");
        let (s, _) = run(&partial);
        verified(&s, 12);
    }
}

#[test]
fn dense_flare_traffic_is_each_tree_link_twice() {
    // 1 MiB = 1024 packets of 256 elements (1024 B + 57 B of headers and framing) up every
    // link of the tree and down again: 16 host links and 4 leaf-spine links.
    let (s, bytes) = run(&scenario(4, "flare", 1 << 20, ""));
    verified(&s, 16);
    assert_eq!(bytes, (16 + 4) * 2 * 1024 * (1024 + 57));
}

#[test]
fn sparse_flare_sends_less_than_sparcml_and_dense_flare() {
    // 64 hosts, one value per bucket of 512: 0.2% density per host.
    let sparse = "bucket_elements = 512\nindex_overlap = 0.0\n";
    let (d, dense_bytes) = run(&scenario(16, "flare", 8 << 20, ""));
    let (f, flare_bytes) = run(&scenario(16, "flare_sparse", 8 << 20, sparse));
    let (c, sparcml_bytes) = run(&scenario(16, "sparcml", 8 << 20, sparse));
    let (g, split_bytes) = run(&scenario(16, "sparcml_split", 8 << 20, sparse));
    for s in [&d, &f, &c, &g] {
        verified(s, 64);
    }
    assert!(flare_bytes * 3 < dense_bytes, "{flare_bytes} vs dense {dense_bytes}");
    assert!(flare_bytes * 3 < sparcml_bytes, "{flare_bytes} vs SparCML {sparcml_bytes}");
    assert!(flare_bytes < split_bytes, "{flare_bytes} vs SparCML split allgather {split_bytes}");
    let rt = |s: &Value| s["traffic"][0]["runtime_ps"].as_u64().unwrap();
    assert!(rt(&f) < rt(&d) && rt(&f) < rt(&c), "runtimes {} {} {}", rt(&f), rt(&d), rt(&c));
}

#[test]
fn overlapping_indices_shrink_the_sum_and_its_traffic() {
    let with =
        |q: f64| run(&scenario(4, "flare_sparse", 4 << 20, &format!("bucket_elements = 512\nindex_overlap = {q}\n")));
    let (a, low) = with(0.0);
    let (b, high) = with(0.9);
    verified(&a, 16);
    verified(&b, 16);
    assert!(high * 2 < low, "overlap 0.9: {high} B, overlap 0: {low} B");
}

#[test]
fn tiny_hash_tables_spill_and_still_sum_exactly() {
    let sparse = "bucket_elements = 64\nindex_overlap = 0.0\n";
    let (roomy, roomy_bytes) = run(&scenario(4, "flare_sparse", 1 << 20, &format!("{sparse}hash_slots = 4096\n")));
    let (tiny, tiny_bytes) = run(&scenario(4, "flare_sparse", 1 << 20, &format!("{sparse}hash_slots = 1\n")));
    verified(&roomy, 16);
    verified(&tiny, 16);
    // With one slot per block nearly every pair spills: the leaves send more packets.
    assert!(tiny_bytes > roomy_bytes, "{tiny_bytes} vs {roomy_bytes}");
}

#[test]
fn same_seed_same_bytes() {
    for p in ["flare_sparse", "sparcml", "sparcml_split"] {
        let t = scenario(4, p, 1 << 20, "index_overlap = 0.3\n");
        let a = run_scenario_str(&t, &Default::default()).unwrap();
        let b = run_scenario_str(&t, &Default::default()).unwrap();
        assert!(a.summary_json == b.summary_json && a.files == b.files, "{p}");
    }
}

#[test]
fn bad_keys_name_the_field() {
    let err = |extra: &str, p: &str| {
        run_scenario_str(&scenario(4, p, 1 << 20, extra), &Default::default()).expect_err("refused")
    };
    let e = err("index_overlap = 1.5\n", "flare_sparse");
    assert_eq!(e.field, "traffic[0].index_overlap", "{e}");
    let e = err("hash_slots = 8\n", "sparcml");
    assert_eq!(e.field, "traffic[0].hash_slots", "{e}");
    assert!(e.reason.contains("not used"), "{e}");
    let e = err("bucket_elements = 0\n", "flare_sparse");
    assert_eq!(e.field, "traffic[0].bucket_elements", "{e}");
    let e = run_scenario_str(
        &scenario(4, "flare_sparse", 1 << 20, "").replace("elements_per_packet = 256", "elements_per_packet = 1"),
        &Default::default(),
    )
    .expect_err("refused");
    assert!(e.reason.contains("elements_per_packet"), "{e}");
}
