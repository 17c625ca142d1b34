//! Structural minimal routes against the BFS reference ([`MinimalRoutes::bfs`]): for every
//! node and every destination host of many sizes of every topology (odd parameters included),
//! the same candidate ports in the same order, the same deterministic choice and the same
//! deterministic path.

use reducelab_topo::*;

const L: LinkParams = LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: 1_000_000 };

/// Compares `MinimalRoutes::new` with the BFS table on every (node, destination) pair and
/// returns the number of pairs compared.
fn check_same_as_bfs(t: &Topology) -> usize {
    let fast = MinimalRoutes::new(t);
    let reference = MinimalRoutes::bfs(t);
    assert!(fast.is_structural(), "{}: routes fell back to a table", t.name);
    assert!(!reference.is_structural());
    let dim_ordered = fast.is_dimension_ordered();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut pairs = 0;
    for v in 0..t.nodes.len() {
        let node = NodeId(v as u32);
        for d in 0..t.num_hosts() as u32 {
            fast.candidates(node, d, &mut a);
            reference.candidates(node, d, &mut b);
            assert_eq!(a, b, "{}: candidates of node {v} towards host {d}", t.name);
            if let Some((first, n)) = fast.candidate_run(node, d) {
                assert_eq!(a, (first..first + n).collect::<Vec<_>>(), "{}: run of node {v} towards host {d}", t.name);
            }
            if !dim_ordered {
                let fa = fast.deterministic(node, d, &mut a);
                let fb = reference.deterministic(node, d, &mut b);
                assert_eq!(fa, fb, "{}: deterministic port of node {v} towards host {d}", t.name);
            }
            pairs += 1;
        }
    }
    if !dim_ordered {
        for &s in &t.hosts {
            for d in 0..t.num_hosts() as u32 {
                assert_eq!(
                    fast.path(t, s, d).nodes,
                    reference.path(t, s, d).nodes,
                    "{}: path {s:?} to host {d}",
                    t.name
                );
            }
        }
    }
    pairs
}

/// Stars and fat trees give every node's candidates as a run (routers index it without a
/// list); the other topologies do not claim one.
#[test]
fn runs_exist_exactly_for_stars_and_fat_trees() {
    let with =
        [star(5, L).unwrap(), fat_tree_2level(4, 3, 2, 1, None, L, L).unwrap(), fat_tree_3level(4, 2, L, L).unwrap()];
    for t in &with {
        let r = MinimalRoutes::new(t);
        for v in 0..t.nodes.len() as u32 {
            for d in 0..t.num_hosts() as u32 {
                assert!(r.candidate_run(NodeId(v), d).is_some(), "{}: node {v} host {d}", t.name);
            }
        }
    }
    let without =
        [torus(&[4, 4], L).unwrap(), dragonfly(9, 4, 2, 2, L, L, L).unwrap(), hammingmesh(2, 2, 2, 2, L, L).unwrap()];
    for t in &without {
        assert_eq!(MinimalRoutes::new(t).candidate_run(NodeId(0), 1), None, "{}", t.name);
    }
}

#[test]
fn star_routes_match_bfs() {
    let mut pairs = 0;
    for hosts in [1, 2, 3, 9, 64] {
        pairs += check_same_as_bfs(&star(hosts, L).unwrap());
    }
    assert_eq!(pairs, 2 + 6 + 12 + 90 + 64 * 65);
}

#[test]
fn fat_tree_2_routes_match_bfs() {
    let mut pairs = 0;
    let mut topologies = 0;
    for leaves in [1, 2, 3, 5] {
        for hosts_per_leaf in [1, 2, 4, 7] {
            for spines in [1, 2, 3, 4] {
                for links_per_spine in [1, 2, 3] {
                    let t = fat_tree_2level(leaves, hosts_per_leaf, spines, links_per_spine, None, L, L).unwrap();
                    pairs += check_same_as_bfs(&t);
                    topologies += 1;
                }
            }
        }
    }
    // The Canary network (32 leaves of 32 hosts, 32 spines).
    pairs += check_same_as_bfs(&fat_tree_2level(32, 32, 32, 1, Some(64), L, L).unwrap());
    assert_eq!(topologies, 192);
    eprintln!("fat_tree_2: {} topologies, {pairs} (node, host) pairs", topologies + 1);
}

#[test]
fn fat_tree_3_routes_match_bfs() {
    let mut pairs = 0;
    let mut topologies = 0;
    for k in [2, 4, 6, 8] {
        for hosts_per_edge in [1, 2, 3, k / 2, k, k + 1] {
            pairs += check_same_as_bfs(&fat_tree_3level(k, hosts_per_edge, L, L).unwrap());
            topologies += 1;
        }
    }
    // The htsim comparison network (k=16: 1024 hosts).
    pairs += check_same_as_bfs(&fat_tree_3level(16, 8, L, L).unwrap());
    eprintln!("fat_tree_3: {} topologies, {pairs} (node, host) pairs", topologies + 1);
}

#[test]
fn dragonfly_routes_match_bfs() {
    let mut pairs = 0;
    let mut topologies = 0;
    for routers in 1..=5 {
        for globals in 0..=3 {
            for hosts in [1, 2] {
                let max_groups = if globals == 0 { 1 } else { routers * globals + 1 };
                // Every group count from 1 to the maximum: partly used global ports too.
                for groups in 1..=max_groups {
                    let t = dragonfly(groups, routers, hosts, globals, L, L, L).unwrap();
                    pairs += check_same_as_bfs(&t);
                    topologies += 1;
                }
            }
        }
    }
    // Balanced (a = 2p = 2h), as in Kim et al., and the example scenario's network.
    pairs += check_same_as_bfs(&dragonfly(33, 8, 4, 4, L, L, L).unwrap());
    pairs += check_same_as_bfs(&dragonfly(9, 4, 2, 2, L, L, L).unwrap());
    eprintln!("dragonfly: {} topologies, {pairs} (node, host) pairs", topologies + 2);
    assert!(topologies > 150, "{topologies}");
}

#[test]
fn hammingmesh_routes_match_bfs() {
    let mut pairs = 0;
    let mut topologies = 0;
    for board_x in 1..=4 {
        for board_y in 1..=3 {
            for grid_x in 1..=4 {
                for grid_y in 1..=3 {
                    if board_x * board_y * grid_x * grid_y < 2 {
                        continue;
                    }
                    pairs += check_same_as_bfs(&hammingmesh(board_x, board_y, grid_x, grid_y, L, L).unwrap());
                    topologies += 1;
                }
            }
        }
    }
    // Boards larger than the grid's switch detour (a host in a board's middle may route
    // through the switch to the other end of its own board).
    pairs += check_same_as_bfs(&hammingmesh(7, 6, 2, 3, L, L).unwrap());
    eprintln!("hammingmesh: {} topologies, {pairs} (node, host) pairs", topologies + 1);
}

#[test]
fn torus_and_hyperx_routes_match_bfs() {
    for dims in [vec![2], vec![3], vec![8], vec![2, 2], vec![4, 3], vec![5, 4], vec![2, 3, 4]] {
        check_same_as_bfs(&torus(&dims, L).unwrap());
        check_same_as_bfs(&hyperx(&dims, L).unwrap());
    }
}

/// A topology whose nodes do not match its shape (not what its builder made) is not routed
/// by the builder's arithmetic: it falls back to the BFS table.
#[test]
fn mismatched_shape_falls_back_to_a_table() {
    let mut t = fat_tree_3level(4, 2, L, L).unwrap();
    t.shape = Shape::FatTree3 { k: 4, hosts_per_edge: 3 };
    let r = MinimalRoutes::new(&t);
    assert!(!r.is_structural());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let reference = MinimalRoutes::bfs(&t);
    for v in 0..t.nodes.len() as u32 {
        for d in 0..t.num_hosts() as u32 {
            r.candidates(NodeId(v), d, &mut a);
            reference.candidates(NodeId(v), d, &mut b);
            assert_eq!(a, b);
        }
    }
}
