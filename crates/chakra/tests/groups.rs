//! Process groups (`pg_name` and the scenario's `comm_groups`, ASTRA-sim's communicator groups)
//! and barriers: a group's collective spans its ranks only, and times as the same collective on
//! a job of that many ranks; a barrier holds every rank until the last one enters.

mod common;

use common::{job_files, Xs};
use reducelab_chakra::lower::{dissemination_rounds, BARRIER_ALGORITHM};
use reducelab_chakra::{lower, lower_grouped, Algorithms, AttrValue, CommEngine, CommGroups, CommType, Node, NodeType};
use reducelab_goal::{check, simulate, LogGpParams, OpId, OpKind, Rank};
use std::collections::BTreeMap;

fn comp(id: u64, us: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, "c", NodeType::Comp);
    n.duration_micros = us;
    n.data_deps = deps.to_vec();
    n
}

fn coll(id: u64, c: CommType, bytes: i64, pg: Option<&str>, deps: &[u64]) -> Node {
    let mut n = Node::new(id, "k", NodeType::CommColl)
        .with_attr("comm_type", AttrValue::Int64(c as i64))
        .with_attr("comm_size", AttrValue::Int64(bytes));
    if let Some(g) = pg {
        n = n.with_attr("pg_name", AttrValue::Str(g.into()));
    }
    n.data_deps = deps.to_vec();
    n
}

fn groups(list: &[(&str, &[u32])], ranks: u32) -> CommGroups {
    let map: BTreeMap<String, Vec<u32>> = list.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect();
    CommGroups::new(map, ranks).unwrap()
}

fn loggp_ends(l: &reducelab_chakra::Lowered) -> Vec<u64> {
    simulate(&check(&l.trace).unwrap(), &LogGpParams::default(), false).unwrap().rank_end_ns
}

/// Data parallelism in two groups ({0, 2} and {1, 3}) after a world allgather: each group's
/// allreduce moves messages between its members only, and a group's ranks end when a 2-rank job
/// running the same allgather-free allreduce would (LogGP has no contention between groups).
#[test]
fn a_groups_collective_spans_its_ranks_and_times_as_a_job_of_that_size() {
    let g = groups(&[("1", &[0, 2]), ("2", &[1, 3])], 4);
    let rank = |r: u32| {
        let pg = if r % 2 == 0 { "1" } else { "2" };
        vec![comp(1, 10, &[]), coll(2, CommType::AllReduce, 1 << 20, Some(pg), &[1])]
    };
    let files = job_files(&(0..4).map(rank).collect::<Vec<_>>());
    for engine in [CommEngine::Own, CommEngine::SharedWithCompute] {
        let l = lower_grouped(&files, &Algorithms::default(), engine, &g).unwrap();
        let c = &l.job.collectives;
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].group.as_deref(), c[0].ranks.clone()), (Some("1"), vec![0, 2]));
        assert_eq!((c[1].group.as_deref(), c[1].ranks.clone()), (Some("2"), vec![1, 3]));
        // Every message of rank r goes to, or comes from, its group's other member.
        for r in 0..4u32 {
            for o in l.trace.ops_of(Rank(r)).map(OpId) {
                if l.trace.kind(o) != OpKind::Calc {
                    assert_eq!(l.trace.op(o).peer, r ^ 2, "rank {r}: {}", l.trace.describe(o));
                }
            }
        }
        let two = job_files(&[
            vec![comp(1, 10, &[]), coll(2, CommType::AllReduce, 1 << 20, None, &[1])],
            vec![comp(1, 10, &[]), coll(2, CommType::AllReduce, 1 << 20, None, &[1])],
        ]);
        let alone = loggp_ends(&lower(&two, &Algorithms::default(), engine).unwrap());
        assert_eq!(loggp_ends(&l), vec![alone[0]; 4], "{engine:?}");
    }
}

/// A group's members in the file's order: a rooted collective's root is the group's first rank
/// (here rank 3 broadcasts to 1), and instances of different groups interleave freely.
#[test]
fn a_rooted_collective_is_rooted_at_the_groups_first_rank() {
    let g = groups(&[("7", &[3, 1])], 4);
    let bc = |id| coll(id, CommType::Broadcast, 4096, Some("7"), &[]);
    let files = job_files(&[vec![], vec![bc(5)], vec![], vec![bc(9)]]);
    let l = lower_grouped(&files, &Algorithms::default(), CommEngine::Own, &g).unwrap();
    let sends: Vec<(u32, u32)> = (0..4)
        .flat_map(|r| l.trace.ops_of(Rank(r)).map(move |o| (r, OpId(o))))
        .filter(|&(_, o)| l.trace.kind(o) == OpKind::Send)
        .map(|(r, o)| (r, l.trace.op(o).peer))
        .collect();
    assert_eq!(sends, vec![(3, 1)]);
    assert_eq!(l.job.collectives[0].ranks, vec![1, 3]);
}

/// A barrier holds every rank of its group until the last one enters: a rank computing 100 µs
/// before it delays the others' ends past 100 µs, in ⌈log₂ n⌉ rounds of 0-byte messages.
#[test]
fn a_barrier_holds_every_rank_until_the_last_enters() {
    for n in 1..=9u32 {
        let rank = |r: u32| {
            let us = if r == n / 2 { 100 } else { 1 };
            vec![comp(1, us, &[]), coll(2, CommType::Barrier, 0, None, &[1])]
        };
        let files = job_files(&(0..n).map(rank).collect::<Vec<_>>());
        // LogGP runs communication on the compute CPU (reducelab_chakra::lower's docs).
        let l = lower(&files, &Algorithms::default(), CommEngine::SharedWithCompute).unwrap();
        let rounds = dissemination_rounds(n);
        assert_eq!(rounds as f64, (n as f64).log2().ceil(), "n {n}");
        let c = &l.job.collectives[0];
        assert_eq!((c.comm, c.algorithm.as_str()), (CommType::Barrier, if n > 1 { BARRIER_ALGORITHM } else { "" }));
        let sends = (0..l.trace.num_ops() as u32).filter(|&o| l.trace.kind(OpId(o)) == OpKind::Send).count();
        assert_eq!(sends, n as usize * rounds, "n {n}");
        let ends = loggp_ends(&l);
        assert!(ends.iter().all(|&e| e >= 100_000), "n {n}: {ends:?}");
        // Without the late rank nobody waits that long.
        let early = job_files(
            &(0..n).map(|_| vec![comp(1, 1, &[]), coll(2, CommType::Barrier, 0, None, &[1])]).collect::<Vec<_>>(),
        );
        let e2 = loggp_ends(&lower(&early, &Algorithms::default(), CommEngine::SharedWithCompute).unwrap());
        assert!(e2.iter().all(|&e| e < 100_000), "n {n}: {e2:?}");
    }
}

/// Random jobs: random partitions of 2–8 ranks into groups, each rank a random sequence of its
/// group's collectives and world collectives (the same sequence per group): the lowering succeeds,
/// every instance lists exactly its group's ranks, and the LogGP run completes (no cross-group
/// deadlock: tags keep instances apart).
#[test]
fn random_groupings_lower_and_complete() {
    let mut rng = Xs(0x9A0_0F5);
    let types =
        [CommType::AllReduce, CommType::AllGather, CommType::ReduceScatter, CommType::Broadcast, CommType::Barrier];
    for case in 0..60 {
        let p = 2 + rng.below(7) as u32;
        let k = 1 + rng.below(p as u64) as u32;
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); k as usize];
        for r in 0..p {
            parts[rng.below(k as u64) as usize].push(r);
        }
        parts.retain(|g| !g.is_empty());
        let list: Vec<(String, Vec<u32>)> =
            parts.iter().enumerate().map(|(i, g)| ((i + 1).to_string(), g.clone())).collect();
        let g = CommGroups::new(list.iter().cloned().collect(), p).unwrap();
        // One sequence of (group or world, type, size) shared by everyone concerned.
        let seq: Vec<(Option<usize>, CommType, i64)> = (0..1 + rng.below(6))
            .map(|_| {
                let grp = if rng.below(3) == 0 { None } else { Some(rng.below(list.len() as u64) as usize) };
                (grp, types[rng.below(types.len() as u64) as usize], 4 * (1 + rng.below(4096)) as i64)
            })
            .collect();
        let files = job_files(
            &(0..p)
                .map(|r| {
                    let mut nodes = Vec::new();
                    let mut id = 1;
                    for &(grp, c, b) in &seq {
                        let mine = grp.is_none_or(|i| list[i].1.contains(&r));
                        if mine {
                            let deps: Vec<u64> = if id > 1 { vec![id - 1] } else { vec![] };
                            nodes.push(coll(id, c, b, grp.map(|i| list[i].0.as_str()), &deps));
                            id += 1;
                        }
                    }
                    nodes
                })
                .collect::<Vec<_>>(),
        );
        let l = lower_grouped(&files, &Algorithms::default(), CommEngine::SharedWithCompute, &g)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        for c in &l.job.collectives {
            let want: Vec<u32> = match &c.group {
                None => (0..p).collect(),
                Some(name) => {
                    let mut m = list.iter().find(|(n, _)| n == name).unwrap().1.clone();
                    m.sort_unstable();
                    m
                }
            };
            assert_eq!(c.ranks, want, "case {case}");
        }
        assert_eq!(loggp_ends(&l).len(), p as usize, "case {case}");
    }
}

#[test]
fn bad_groups_are_named() {
    let map = |l: &[(&str, &[u32])]| -> BTreeMap<String, Vec<u32>> {
        l.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect()
    };
    assert!(CommGroups::new(map(&[("0", &[0])]), 2).unwrap_err().contains("\"0\" name the default group"));
    assert!(CommGroups::new(map(&[("1", &[])]), 2).unwrap_err().contains("group \"1\": no ranks"));
    assert!(CommGroups::new(map(&[("1", &[0, 5])]), 2).unwrap_err().contains("rank 5 is not one of the job's 2 ranks"));
    assert!(CommGroups::new(map(&[("1", &[1, 1])]), 2).unwrap_err().contains("rank 1 is listed twice"));
    let g = groups(&[("1", &[0, 1])], 3);
    let err = |ranks: &[Vec<Node>]| {
        lower_grouped(&job_files(ranks), &Algorithms::default(), CommEngine::Own, &g).unwrap_err().to_string()
    };
    let ar = |id, pg| coll(id, CommType::AllReduce, 64, pg, &[]);
    assert_eq!(
        err(&[vec![ar(1, Some("9"))], vec![], vec![]]),
        "job.0.et: node 1: pg_name \"9\": no such process group (the groups: \"1\")"
    );
    assert_eq!(
        err(&[vec![], vec![], vec![ar(4, Some("1"))]]),
        "job.2.et: node 4: ALL_REDUCE of 64 B in process group \"1\" is in process group \"1\", whose ranks are [0, 1], and this file is rank 2"
    );
    let e = err(&[vec![ar(1, Some("1")), ar(2, Some("1"))], vec![ar(1, Some("1"))], vec![]]);
    assert!(e.starts_with("job.0.et: node 2: 2 collective nodes in process group \"1\", and job.1.et has 1"), "{e}");
    let e =
        lower(&job_files(&[vec![ar(1, Some("1"))], vec![ar(1, Some("1"))]]), &Algorithms::default(), CommEngine::Own)
            .unwrap_err()
            .to_string();
    assert!(e.contains("no such process group (the scenario gives no comm_groups)"), "{e}");
    // An in-network protocol serves allreduces of every rank only.
    let mut innet = Algorithms::default();
    innet.set_in_network(CommType::AllReduce, "canary");
    let e = lower_grouped(
        &job_files(&[vec![ar(1, Some("1"))], vec![ar(1, Some("1"))], vec![]]),
        &innet,
        CommEngine::Own,
        &g,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("canary serves collectives of every rank only"), "{e}");
    assert!(lower(&job_files(&[vec![ar(1, None)], vec![ar(1, None)]]), &innet, CommEngine::Own).is_ok());
    // Group "1" on a job of 3 ranks given groups made for 4.
    let wide = groups(&[("1", &[0, 3])], 4);
    let e = lower_grouped(&job_files(&[vec![], vec![], vec![]]), &Algorithms::default(), CommEngine::Own, &wide)
        .unwrap_err()
        .to_string();
    assert!(e.contains("process group \"1\": rank 3 is not one of the job's 3 rank files"), "{e}");
}

/// An all-to-all without a named algorithm follows MPICH's rule: Bruck (⌈log₂ n⌉ steps) when
/// each destination's part is at most 256 B on 8 or more ranks, pairwise (n − 1 steps)
/// otherwise; a named algorithm is kept whatever the size. Instances of one trace may differ.
#[test]
fn a_small_all_to_all_on_eight_or_more_ranks_runs_bruck() {
    let a2a = |id, b| coll(id, CommType::AllToAll, b, None, &[]);
    let steps = |l: &reducelab_chakra::Lowered, r: u32| {
        (0..l.trace.num_ops() as u32)
            .map(OpId)
            .filter(|&o| l.trace.rank_of(o) == Rank(r) && l.trace.kind(o) == OpKind::Send)
            .count()
    };
    for (n, bytes, want) in
        [(8u32, 8 * 256, "bruck"), (8, 8 * 256 + 8, "pairwise"), (7, 7 * 4, "pairwise"), (16, 16 * 4, "bruck")]
    {
        let files = job_files(&(0..n).map(|_| vec![a2a(1, bytes as i64)]).collect::<Vec<_>>());
        let l = lower(&files, &Algorithms::default(), CommEngine::Own).unwrap();
        assert_eq!(l.job.collectives[0].algorithm, want, "{n} ranks, {bytes} B");
        let rounds = if want == "bruck" { dissemination_rounds(n) } else { n as usize - 1 };
        assert_eq!(steps(&l, 0), rounds, "{n} ranks, {bytes} B: rank 0's sends");
        let mut named = Algorithms::default();
        named.set(CommType::AllToAll, "pairwise");
        let l = lower(&files, &named, CommEngine::Own).unwrap();
        assert_eq!(l.job.collectives[0].algorithm, "pairwise");
    }
    // Two sizes in one trace: each instance its own.
    let files = job_files(&(0..8).map(|_| vec![a2a(1, 64), a2a(2, 1 << 20)]).collect::<Vec<_>>());
    let l = lower(&files, &Algorithms::default(), CommEngine::SharedWithCompute).unwrap();
    let algs: Vec<&str> = l.job.collectives.iter().map(|c| c.algorithm.as_str()).collect();
    assert_eq!(algs, ["bruck", "pairwise"]);
    assert_eq!(loggp_ends(&l).len(), 8);
}
