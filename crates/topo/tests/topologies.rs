use reducelab_topo::*;

const L100: LinkParams = LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: 1_000_000 };

fn check_links_consistent(t: &Topology) {
    t.validate().unwrap();
    let port_total: usize = t.nodes.iter().map(|n| n.ports.len()).sum();
    assert_eq!(port_total, 2 * t.links.len(), "every link has exactly two ports");
}

/// Every host pair: minimal-route candidates only ever step one hop closer, and following any
/// candidate reaches the destination in exactly the BFS distance.
fn check_routes_minimal(t: &Topology, sample_stride: usize) {
    let r = MinimalRoutes::new(t);
    let mut buf = Vec::new();
    for (di, &dn) in t.hosts.iter().enumerate().step_by(sample_stride) {
        let dist = t.bfs_from(dn);
        for &s in t.hosts.iter().step_by(sample_stride.max(1)) {
            let mut cur = s;
            let mut hops = 0;
            while cur != dn {
                r.candidates(cur, di as u32, &mut buf);
                assert!(!buf.is_empty(), "no route from {cur:?} to host {di}");
                for &p in &buf {
                    let peer = t.nodes[cur.idx()].ports[p as usize].peer;
                    assert_eq!(dist[peer.idx()] + 1, dist[cur.idx()], "candidate not minimal");
                }
                // Walk a rotating candidate to cover different paths.
                let p = buf[hops % buf.len()];
                cur = t.nodes[cur.idx()].ports[p as usize].peer;
                hops += 1;
            }
            assert_eq!(hops as u32, dist[s.idx()]);
        }
    }
}

#[test]
fn star_counts() {
    let t = star(64, L100).unwrap();
    assert_eq!((t.num_hosts(), t.num_switches(), t.links.len()), (64, 1, 64));
    assert_eq!(t.host_diameter(), 2);
    check_links_consistent(&t);
    check_routes_minimal(&t, 1);
}

#[test]
fn canary_fat_tree() {
    let t = fat_tree_2level(32, 32, 32, 1, Some(64), L100, L100).unwrap();
    assert_eq!(t.num_hosts(), 1024);
    assert_eq!(t.num_switches(), 64);
    assert_eq!(t.links.len(), 1024 + 32 * 32);
    let leaf_ports: Vec<usize> = t.nodes.iter().filter(|n| n.kind == NodeKind::Switch).map(|n| n.ports.len()).collect();
    assert_eq!(leaf_ports.iter().filter(|&&p| p == 64).count(), 32);
    assert_eq!(leaf_ports.iter().filter(|&&p| p == 32).count(), 32);
    assert_eq!(t.host_diameter(), 4);
    check_links_consistent(&t);
    check_routes_minimal(&t, 37);
    // Up/down: from a host's leaf towards a host on another leaf, all 32 up ports are minimal.
    let r = MinimalRoutes::new(&t);
    let leaf = t.nodes[t.hosts[0].idx()].ports[0].peer;
    let mut buf = Vec::new();
    r.candidates(leaf, 1000, &mut buf);
    assert_eq!(buf, (32..64).collect::<Vec<u16>>());
    r.candidates(leaf, 5, &mut buf);
    assert_eq!(buf, vec![5]);
}

#[test]
fn fat_tree_radix_is_enforced() {
    let e = fat_tree_2level(32, 48, 32, 1, Some(64), L100, L100).unwrap_err();
    assert_eq!(e.param, "radix");
}

#[test]
fn htsim_k16_fat_tree() {
    let t = fat_tree_3level(16, 8, L100, L100).unwrap();
    assert_eq!(t.num_hosts(), 1024);
    assert_eq!(t.num_switches(), 16 * 16 + 64);
    assert_eq!(t.links.len(), 1024 + 16 * 8 * 8 + 16 * 8 * 8);
    assert!(t.nodes.iter().filter(|n| n.kind == NodeKind::Switch).all(|n| n.ports.len() == 16));
    assert_eq!(t.host_diameter(), 6);
    check_links_consistent(&t);
    check_routes_minimal(&t, 61);
    assert!(fat_tree_3level(15, 8, L100, L100).is_err());
}

#[test]
fn torus_shapes() {
    for dims in [vec![2u32, 2], vec![4, 4], vec![5, 3], vec![8, 8, 8], vec![3, 4, 2, 2], vec![7]] {
        let t = torus(&dims, L100).unwrap();
        let n: u32 = dims.iter().product();
        assert_eq!(t.num_hosts() as u32, n);
        assert_eq!(t.num_switches(), 0);
        assert!(t.nodes.iter().all(|nd| nd.ports.len() == 2 * dims.len() && nd.forwards));
        assert_eq!(t.links.len() as u32, n * dims.len() as u32);
        let diam: u32 = dims.iter().map(|d| d / 2).sum();
        assert_eq!(t.host_diameter(), diam, "{dims:?}");
        check_links_consistent(&t);
        check_routes_minimal(&t, 1);
    }
    let e = torus(&[4, 1], L100).unwrap_err();
    assert_eq!(e.param, "dims[1]");
}

#[test]
fn torus_ports_follow_convention() {
    let t = torus(&[4, 3], L100).unwrap();
    // Node 0 = (0,0): port 0 → (1,0) = 1, port 1 → (3,0) = 3, port 2 → (0,1) = 4, port 3 → (0,2) = 8.
    let peers: Vec<u32> = t.nodes[0].ports.iter().map(|p| p.peer.0).collect();
    assert_eq!(peers, vec![1, 3, 4, 8]);
}

#[test]
fn hyperx_shapes() {
    let t = hyperx(&[4, 3], L100).unwrap();
    assert_eq!(t.num_hosts(), 12);
    assert!(t.nodes.iter().all(|n| n.ports.len() == 3 + 2));
    assert_eq!(t.host_diameter(), 2);
    check_links_consistent(&t);
    check_routes_minimal(&t, 1);
    let t = hyperx(&[8, 8, 4], L100).unwrap();
    assert_eq!(t.host_diameter(), 3);
    check_routes_minimal(&t, 7);
}

#[test]
fn hammingmesh_shapes() {
    // Hx2Mesh 4096 nodes (2x2 boards in 32x32).
    let t = hammingmesh(2, 2, 32, 32, L100, L100).unwrap();
    assert_eq!(t.num_hosts(), 4096);
    assert_eq!(t.num_switches(), 64 + 64);
    assert!(t.hosts.iter().all(|h| t.nodes[h.idx()].ports.len() == 4));
    check_links_consistent(&t);
    check_routes_minimal(&t, 257);
    // Hx4Mesh 4096 nodes (4x4 boards in 16x16): inner nodes use only board links.
    let t = hammingmesh(4, 4, 16, 16, L100, L100).unwrap();
    assert_eq!(t.num_hosts(), 4096);
    let board_links = t.links.iter().filter(|l| l.class == LinkClass::Board).count();
    assert_eq!(board_links, 256 * 2 * 4 * 3);
    check_links_consistent(&t);
    check_routes_minimal(&t, 263);
    // Small one: exact diameter. 2x2 boards, 2x2 grid: any host reaches any other in ≤ 4 hops.
    let t = hammingmesh(2, 2, 2, 2, L100, L100).unwrap();
    assert_eq!(t.host_diameter(), 4);
    check_routes_minimal(&t, 1);
}

#[test]
fn dragonfly_shapes() {
    // Balanced dragonfly a=4, p=2, h=2: g = a·h+1 = 9 groups, 72 hosts, diameter 5 (host-router-router-router-router-host).
    let t = dragonfly(9, 4, 2, 2, L100, L100, L100).unwrap();
    assert_eq!(t.num_hosts(), 72);
    assert_eq!(t.num_switches(), 36);
    let global = 9 * 8 / 2;
    let local = 9 * 4 * 3 / 2;
    assert_eq!(t.links.len(), 72 + local + global);
    assert_eq!(t.host_diameter(), 5);
    check_links_consistent(&t);
    check_routes_minimal(&t, 1);
    let e = dragonfly(10, 4, 2, 2, L100, L100, L100).unwrap_err();
    assert_eq!(e.param, "groups");
}
