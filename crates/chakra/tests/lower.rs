//! Random jobs (dependency graphs of compute, collective and point-to-point nodes across ranks),
//! written as Chakra files, read back, lowered and run in the LogGP mode: every run completes,
//! every collective instance is there, every dependency holds in the times, the results add up,
//! and the same files give the same trace and times.

mod common;

use common::{job_files, Xs};
use reducelab_chakra::{lower, read_et, Algorithms, AttrValue, CommEngine, CommType, EtFile, Node, NodeType};
use reducelab_goal::{check, simulate, LogGpParams, OpId, Rank};

struct Job {
    ranks: Vec<Vec<Node>>,
    collectives: usize,
    compute_us: Vec<u64>,
}

/// A job built in one global order (every node depends only on earlier nodes of its rank, and a
/// message's send and receive, a collective's nodes, sit at one place of that order), each
/// message with a tag of its own (two messages on one channel and tag match in the order their
/// receives are posted, which a graph may reorder into a deadlock), so it cannot deadlock. Node
/// ids are drawn, not positions.
fn random_job(rng: &mut Xs) -> Job {
    let p = 2 + rng.below(5) as usize;
    let mut ranks: Vec<Vec<Node>> = vec![Vec::new(); p];
    let mut next_id: Vec<u64> = (0..p).map(|_| 1 + rng.below(1000)).collect();
    let mut collectives = 0;
    let mut compute_us = vec![0u64; p];
    let mut tags = 0;
    let events = 5 + rng.below(30);
    let mut node = |rng: &mut Xs, ranks: &mut Vec<Vec<Node>>, r: usize, mut n: Node| {
        n.id = next_id[r];
        next_id[r] += 1 + rng.below(3);
        for _ in 0..rng.below(3) {
            let k = ranks[r].len() as u64;
            if k > 0 {
                let d = ranks[r][rng.below(k) as usize].id;
                if rng.below(2) == 0 {
                    n.data_deps.push(d)
                } else {
                    n.ctrl_deps.push(d)
                }
            }
        }
        ranks[r].push(n);
    };
    for _ in 0..events {
        match rng.below(3) {
            0 => {
                let r = rng.below(p as u64) as usize;
                let mut n = Node::new(0, "comp", if rng.below(5) == 0 { NodeType::MemLoad } else { NodeType::Comp });
                n.duration_micros = rng.below(50);
                compute_us[r] += n.duration_micros;
                node(rng, &mut ranks, r, n);
            }
            1 => {
                let every = [
                    CommType::AllReduce,
                    CommType::AllGather,
                    CommType::ReduceScatter,
                    CommType::Broadcast,
                    CommType::Reduce,
                    CommType::AllToAll,
                ];
                let c = every[rng.below(every.len() as u64) as usize];
                let bytes = rng.below(64 << 10) as i64;
                for r in 0..p {
                    let n = Node::new(0, "coll", NodeType::CommColl)
                        .with_attr("comm_type", AttrValue::Int64(c as i64))
                        .with_attr("comm_size", AttrValue::Int64(bytes));
                    node(rng, &mut ranks, r, n);
                }
                collectives += 1;
            }
            _ => {
                let a = rng.below(p as u64) as usize;
                let b = (a + 1 + rng.below(p as u64 - 1) as usize) % p;
                tags += 1 + rng.below(3) as i32;
                let tag = AttrValue::Int32(tags);
                let bytes = AttrValue::Int64(rng.below(32 << 10) as i64);
                let s = Node::new(0, "send", NodeType::CommSend)
                    .with_attr("comm_dst", AttrValue::Int32(b as i32))
                    .with_attr("comm_tag", tag.clone())
                    .with_attr("comm_size", bytes.clone());
                node(rng, &mut ranks, a, s);
                let r = Node::new(0, "recv", NodeType::CommRecv)
                    .with_attr("comm_src", AttrValue::Int32(a as i32))
                    .with_attr("comm_tag", tag)
                    .with_attr("comm_size", bytes);
                node(rng, &mut ranks, b, r);
            }
        }
    }
    Job { ranks, collectives, compute_us }
}

#[test]
fn random_jobs_lower_and_run_to_completion_deterministically() {
    let mut rng = Xs(0xC4A7_0001);
    let mut algorithms = Algorithms::default();
    algorithms.set(CommType::AllGather, "recursive-doubling-bandwidth");
    let (mut runs, mut colls, mut p2p) = (0, 0, 0);
    for case in 0..150 {
        let job = random_job(&mut rng);
        let f = job_files(&job.ranks);
        let lowered =
            lower(&f, &algorithms, CommEngine::SharedWithCompute).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let again = lower(&job_files(&job.ranks), &algorithms, CommEngine::SharedWithCompute).unwrap();
        assert_eq!(lowered.trace, again.trace, "case {case}: lowering is deterministic");
        let t = &lowered.trace;
        let ct = check(t).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let r = simulate(&ct, &LogGpParams::default(), true).unwrap_or_else(|e| panic!("case {case}: {e}"));
        let r2 = simulate(&check(&again.trace).unwrap(), &LogGpParams::default(), true).unwrap();
        assert_eq!(r.rank_end_ns, r2.rank_end_ns);
        let ops = r.op_times.as_ref().unwrap();
        let ps = |v: &[u64]| -> Vec<u64> { v.iter().map(|x| x * 1000).collect() };
        let ends: Vec<u64> = ps(&r.rank_end_ns);
        let res = lowered.job.results(&ends, &ps(&ops.start_ns), &ps(&ops.end_ns));

        // Every instance, with each rank's node.
        assert_eq!(lowered.job.collectives.len(), job.collectives, "case {case}");
        assert_eq!(res.collectives.len(), job.collectives);
        for (k, c) in lowered.job.collectives.iter().enumerate() {
            let ids: Vec<u64> = job
                .ranks
                .iter()
                .map(|nodes| nodes.iter().filter(|n| n.kind() == Some(NodeType::CommColl)).nth(k).unwrap().id)
                .collect();
            assert_eq!(c.node, ids, "case {case} instance {k}");
            assert!(res.collectives[k].0 <= res.collectives[k].1);
        }
        // The results add up.
        assert_eq!(res.iteration_ps, *ends.iter().max().unwrap());
        for (rk, us) in job.compute_us.iter().enumerate() {
            assert_eq!(res.rank_compute_ps[rk], us * 1_000_000);
            assert_eq!(res.rank_exposed_comm_ps[rk], ends[rk].saturating_sub(us * 1_000_000));
            assert!(ends[rk] >= us * 1_000_000, "case {case}: a rank ends before its compute");
        }
        // Every dependency holds: a node starts after each node it depends on has ended.
        for (rk, nodes) in job.ranks.iter().enumerate() {
            let rank = Rank(rk as u32);
            let first = |id: u64| -> OpId {
                t.find_label(rank, &format!("n{id}")).or_else(|| t.find_label(rank, &format!("n{id}_begin"))).unwrap()
            };
            let last = |id: u64| -> OpId {
                match lowered.job.collectives.iter().find(|c| c.node[rk] == id) {
                    Some(c) => c.end[rk],
                    None => first(id),
                }
            };
            for n in nodes {
                p2p += matches!(n.kind(), Some(NodeType::CommSend)) as usize;
                for &d in n.data_deps.iter().chain(&n.ctrl_deps) {
                    let (s, e) = (ops.start_ns[first(n.id).index()], ops.end_ns[last(d).index()]);
                    assert!(s >= e, "case {case}: rank {rk} node {} starts at {s} before node {d} ends at {e}", n.id);
                }
            }
        }
        runs += 1;
        colls += job.collectives;
    }
    assert_eq!(runs, 150);
    // The draws reach collectives and messages, not only compute.
    assert!(colls > 300 && p2p > 300, "{colls} collectives, {p2p} messages");
}

/// The shipped example lowers to what its module documents: 5 collectives (an allgather, then
/// the gradient allreduces from the last layer to the first), 500 µs of compute per rank.
#[test]
fn the_example_lowers_as_documented() {
    use reducelab_chakra::example::*;
    let f: Vec<(String, EtFile)> =
        training_iteration(8).iter().enumerate().map(|(r, b)| (format!("train.{r}.et"), read_et(b).unwrap())).collect();
    let l = lower(&f, &Algorithms::default(), CommEngine::Own).unwrap();
    let kinds: Vec<(CommType, u64)> = l.job.collectives.iter().map(|c| (c.comm, c.bytes)).collect();
    let mut want = vec![(CommType::AllGather, EMBEDDING_BYTES)];
    want.extend((0..LAYERS).rev().map(|l| (CommType::AllReduce, GRADIENT_BYTES[l])));
    assert_eq!(kinds, want);
    let compute_ns = (LAYERS as u64 * (FORWARD_US + BACKWARD_US) + OPTIMIZER_US) * 1000;
    assert!(l.job.rank_compute_ns.iter().all(|&c| c == compute_ns));
    assert_eq!(l.job.nodes, 8 * (2 + 3 * LAYERS + 1));
}
