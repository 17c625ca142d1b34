use reducelab_sched::algos::{build, Layout};
use reducelab_sched::*;

#[test]
fn ring_is_correct_for_many_sizes() {
    for p in 1..=64u32 {
        for c in [Collective::Allreduce, Collective::ReduceScatter, Collective::Allgather] {
            let s = build("ring", c, &Layout::line(p)).unwrap();
            let rep = check(&s).unwrap_or_else(|e| panic!("ring p={p} {c:?}: {e}"));
            let phases = if c == Collective::Allreduce { 2 } else { 1 };
            assert_eq!(rep.steps, (phases * (p.max(1) - 1)) as usize);
        }
    }
}

fn ring4() -> Schedule {
    build("ring", Collective::Allreduce, &Layout::line(4)).unwrap()
}

#[test]
fn checker_catches_a_missing_receive() {
    let mut s = ring4();
    s.programs[2].steps[1].recvs.clear();
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("receives"), "{e}");
}

#[test]
fn checker_catches_double_counting() {
    let mut s = ring4();
    // Rank 1 sends its block 0 partial twice by also sending it in step 1.
    let extra = s.programs[0].steps[0].sends[0].clone();
    s.programs[0].steps[1].sends.push(extra.clone());
    let mut recv = extra.clone();
    recv.peer = 0;
    recv.op = Some(RecvOp::ReduceIncomingFirst);
    s.programs[1].steps[1].recvs.push(recv);
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("twice"), "{e}");
}

#[test]
fn checker_catches_sending_data_not_held() {
    let mut s = build("ring", Collective::Allgather, &Layout::line(4)).unwrap();
    // In the first allgather step rank 0 may only send block 0; make it send block 2 too.
    s.programs[0].steps[0].sends[0].blocks = Blocks::from_ids([0, 2]);
    s.programs[1].steps[0].recvs[0].blocks = Blocks::from_ids([0, 2]);
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("does not hold"), "{e}");
}

#[test]
fn checker_catches_deadlock() {
    // Two ranks that each wait for the other's step-1 message before sending theirs.
    let mut s = Schedule::new(Collective::Allreduce, "bad", 2, 1);
    let b = Blocks::range(0, 1);
    s.step_mut(0, 0).recvs.push(Transfer {
        peer: 1,
        port: None,
        blocks: b.clone(),
        op: Some(RecvOp::ReduceIncomingFirst),
    });
    s.step_mut(0, 1).sends.push(Transfer { peer: 1, port: None, blocks: b.clone(), op: None });
    s.step_mut(1, 0).recvs.push(Transfer {
        peer: 0,
        port: None,
        blocks: b.clone(),
        op: Some(RecvOp::ReduceIncomingFirst),
    });
    s.step_mut(1, 1).sends.push(Transfer { peer: 0, port: None, blocks: b, op: None });
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("deadlock"), "{e}");
}

#[test]
fn checker_catches_incomplete_result_and_false_noncommutative_claims() {
    let mut s = ring4();
    s.programs.iter_mut().for_each(|p| {
        p.steps.truncate(5);
    });
    // Truncating every program consistently keeps sends/receives matched but loses data.
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("without block") || e.message.contains("missing"), "{e}");
    let mut s = ring4();
    s.noncommutative_safe = true; // the ring reduces cyclically, not in rank order
    let e = check(&s).unwrap_err();
    assert!(e.message.contains("rank order"), "{e}");
}

#[test]
fn json_round_trip_and_version_check() {
    let s = ring4();
    let j = s.to_json();
    assert_eq!(Schedule::from_json(&j).unwrap(), s);
    let bad = j.replacen("\"version\":1", "\"version\":99", 1);
    assert!(Schedule::from_json(&bad).unwrap_err().contains("version 99"));
}
