//! The rooted and all-to-all algorithms (`binomial`, `pairwise`, `bruck`): proved by the
//! symbolic checker for every rank count 1..=40 and every root, with their step counts and
//! bytes per rank; and the checker refuses the ways an all-to-all can go wrong.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::*;

fn sent_blocks(s: &Schedule, r: u32) -> u32 {
    s.programs[r as usize].steps.iter().flat_map(|st| &st.sends).map(|t| t.blocks.len()).sum()
}

fn ceil_log2(p: u32) -> usize {
    (u32::BITS - p.saturating_sub(1).leading_zeros()) as usize
}

#[test]
fn binomial_broadcast_reduce_and_allreduce_are_proved_for_every_size_and_root() {
    for p in 1..=40u32 {
        let l = Layout::line(p);
        for root in 0..p {
            for c in [Collective::Broadcast { root }, Collective::Reduce { root }] {
                let s = build("binomial", c, &l).unwrap();
                check(&s).unwrap_or_else(|e| panic!("p={p} {c:?}: {e}"));
                assert_eq!(s.num_steps(), ceil_log2(p), "p={p} {c:?}");
                // A tree: p − 1 messages, every rank but the root receives (broadcast) or
                // sends (reduce) exactly once.
                let msgs: usize = s.programs.iter().flat_map(|pr| &pr.steps).map(|st| st.sends.len()).sum();
                assert_eq!(msgs, p as usize - 1, "p={p} {c:?}");
            }
        }
        let s = build("binomial", Collective::Allreduce, &l).unwrap();
        check(&s).unwrap_or_else(|e| panic!("p={p} allreduce: {e}"));
        assert_eq!(s.num_steps(), 2 * ceil_log2(p));
    }
}

#[test]
fn all_to_all_algorithms_are_proved_for_every_size() {
    for p in 1..=40u32 {
        let l = Layout::line(p);
        let pw = build("pairwise", Collective::Alltoall, &l).unwrap();
        check(&pw).unwrap_or_else(|e| panic!("pairwise p={p}: {e}"));
        assert_eq!(pw.num_steps(), p as usize - 1);
        let br = build("bruck", Collective::Alltoall, &l).unwrap();
        check(&br).unwrap_or_else(|e| panic!("bruck p={p}: {e}"));
        assert_eq!(br.num_steps(), ceil_log2(p), "bruck p={p}");
        for r in 0..p {
            // Pairwise sends each of its p − 1 blocks once; Bruck sends each block once per
            // set bit of its distance: Σ_{δ<p} popcount(δ) blocks.
            assert_eq!(sent_blocks(&pw, r), p - 1);
            assert_eq!(sent_blocks(&br, r), (1..p).map(u32::count_ones).sum::<u32>(), "bruck p={p} r={r}");
        }
    }
}

#[test]
fn the_checker_refuses_broken_all_to_alls() {
    let l = Layout::line(4);
    let good = build("pairwise", Collective::Alltoall, &l).unwrap();
    // A block that never reaches its receiver.
    let mut s = good.clone();
    let st = &mut s.programs[0].steps[0];
    st.sends.clear();
    s.programs[1].steps[0].recvs.clear();
    let e = check(&s).unwrap_err().to_string();
    assert!(e.contains("rank 1: ends without block 1"), "{e}");
    // A block sent by a rank that does not hold it (rank 0 forwards rank 1's data for 2).
    let mut s = good.clone();
    s.programs[0].steps[1].sends[0].blocks = Blocks::range(6, 7);
    s.programs[2].steps[1].recvs[0].blocks = Blocks::range(6, 7);
    let e = check(&s).unwrap_err().to_string();
    assert!(e.contains("rank 0, step 1: sends block 6 to rank 2 but does not hold it"), "{e}");
    // A reduction where an all-to-all copies: the receiver's own block 2·4+3 is no longer its.
    let mut s = good.clone();
    s.programs[3].steps[0].recvs[0].op = Some(RecvOp::ReduceLocalFirst);
    assert!(check(&s).is_err());
    // Not p² blocks.
    let mut s = good;
    s.blocks = 15;
    let e = check(&s).unwrap_err().to_string();
    assert!(e.contains("needs a multiple of 4² blocks, not 15"), "{e}");
}

#[test]
fn all_to_all_blocks_are_a_ranks_buffer_per_receiver() {
    let s = build("pairwise", Collective::Alltoall, &Layout::line(4)).unwrap();
    assert_eq!(s.alltoall_pair(0), (0, 0));
    assert_eq!(s.alltoall_pair(6), (1, 2));
    assert_eq!(s.alltoall_pair(15), (3, 3));
    // 400 bytes per rank: 100 bytes to each receiver.
    let v = Collective::Alltoall.vector_bytes(400, 4);
    assert_eq!(v, 1600);
    assert_eq!(s.block_bytes(6, v, 4), 100);
    assert_eq!(Collective::Allreduce.vector_bytes(400, 4), 400);
    for name in Collective::NAMES {
        assert_eq!(Collective::parse(name, 3).unwrap().name(), *name);
    }
    assert_eq!(Collective::parse("broadcast", 3).unwrap(), Collective::Broadcast { root: 3 });
    assert!(Collective::parse("gather", 0).unwrap_err().contains("allreduce, reduce_scatter, allgather"));
}
