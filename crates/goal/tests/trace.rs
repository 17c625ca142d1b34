//! The trace's layout: ranks, labels, successor order, and its size in bytes.

use reducelab_goal::{parse_reader, parse_str, DepKind, OpId, OpKind, Rank};

const TEXT: &str = "// header\nnum_ranks 4\n\nrank 1 {\na: send 8b to 3 tag 2 cpu 1 nic 2\nb: recv 16b from -1 tag -1\n\
calc 7\nd: calc 9 cpu 3\nd requires a\nd irequires b\nb requires a\nd requires b\n}\nrank 3 {\nx: recv 8b from 1 tag 2\n}\n";

#[test]
fn ranks_labels_and_successors() {
    let t = parse_str(TEXT).unwrap();
    assert_eq!((t.num_ranks(), t.num_ops(), t.num_deps()), (4, 5, 4));
    assert_eq!([t.ops_of(Rank(0)), t.ops_of(Rank(1)), t.ops_of(Rank(2)), t.ops_of(Rank(3))], [0..0, 0..4, 4..4, 4..5]);
    assert_eq!(t.rank_of(OpId(3)), Rank(1));
    assert_eq!(t.rank_of(OpId(4)), Rank(3));
    let a = t.op(OpId(0));
    assert_eq!((a.kind, a.size, a.peer, a.tag, a.cpu, a.nic), (OpKind::Send, 8, 3, 2, 1, 2));
    let b = t.op(OpId(1));
    assert_eq!((b.kind, b.peer, b.tag), (OpKind::Recv, u32::MAX, u32::MAX));
    assert_eq!((t.label(OpId(2)), t.line(OpId(2))), ("", 7));
    assert_eq!(t.find_label(Rank(1), "d"), Some(OpId(3)));
    assert_eq!(t.find_label(Rank(3), "d"), None);
    assert_eq!((t.cpus(), t.nics()), (4, 3));
    // `requires` successors first, each kind in file order: LogGOPSim's freeing order.
    let succ: Vec<(OpId, DepKind)> = t.successors(OpId(0)).collect();
    assert_eq!(succ, vec![(OpId(3), DepKind::Requires), (OpId(1), DepKind::Requires)]);
    let succ: Vec<(OpId, DepKind)> = t.successors(OpId(1)).collect();
    assert_eq!(succ, vec![(OpId(3), DepKind::Requires), (OpId(3), DepKind::Irequires)]);
    assert_eq!(t.describe(OpId(1)), "rank 1: recv b");
}

#[test]
fn heap_bytes_is_31_per_operation_plus_labels_plus_4_per_dependency() {
    let t = parse_str(TEXT).unwrap();
    let labels = "abdx".len();
    // + rank starts (5 × 4) + the label and successor rows' end sentinels (2 × 4).
    assert_eq!(t.heap_bytes(), 31 * 5 + labels + 4 * 4 + 5 * 4 + 2 * 4);
}

#[test]
fn reading_in_small_pieces_gives_the_same_trace() {
    // A reader that hands out 3 bytes at a time: lines are reassembled across reads.
    let slow = std::io::BufReader::with_capacity(3, TEXT.as_bytes());
    assert_eq!(parse_reader(slow).unwrap(), parse_str(TEXT).unwrap());
    let crlf = TEXT.replace('\n', "\r\n");
    let t = parse_str(&crlf).unwrap();
    assert_eq!((t.num_ops(), t.label(OpId(3))), (5, "d"));
}
