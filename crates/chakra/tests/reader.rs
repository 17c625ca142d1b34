//! The reader on hand-encoded protobuf, and every kind of bad input: each error names the file,
//! the node id or byte offset, and the reason.

mod common;

use common::job_files;
use reducelab_chakra::{
    lower, read_et, Algorithms, AttrValue, ChakraError, CommEngine, CommType, EtFile, EtWriter, Node, NodeType,
};

/// `body` with its one-byte varint length in front (bodies here are shorter than 128 bytes).
fn frame(body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    let mut v = vec![body.len() as u8];
    v.extend_from_slice(body);
    v
}

/// An `AttributeProto` field (10) of a node: `name` and the already-keyed value bytes.
fn attr(name: &str, value: &[u8]) -> Vec<u8> {
    let mut a = vec![0x0A, name.len() as u8];
    a.extend_from_slice(name.as_bytes());
    a.extend_from_slice(value);
    let mut f = vec![0x52, a.len() as u8];
    f.extend(a);
    f
}

fn metadata() -> Vec<u8> {
    // GlobalMetadata { version (1) = "1.0.0" }
    frame(&[0x0A, 5, b'1', b'.', b'0', b'.', b'0'])
}

#[test]
fn hand_encoded_nodes_read_field_by_field() {
    let mut file = metadata();
    // Node { id 1, name "c", type COMP_NODE (4), duration_micros 300, data_deps [7] unpacked,
    //        attr is_cpu_op bool_val (27) false, an unknown field 99 (varint) }
    let mut comp = vec![0x08, 1, 0x12, 1, b'c', 0x18, 4, 0x38, 0xAC, 0x02, 0x28, 7];
    comp.extend(attr("is_cpu_op", &[0xD8, 0x01, 0]));
    comp.extend([0x98, 0x06, 5]);
    file.extend(frame(&comp));
    // Node { attr comm_size int64_val (9) 1 MiB, type COMM_COLL_NODE (7), ctrl_deps packed [1, 300],
    //        attr comm_type int64_val ALL_GATHER (2), id 2 } (fields in any order)
    let mut coll = attr("comm_size", &[0x48, 0x80, 0x80, 0x40]);
    coll.extend([0x18, 7, 0x22, 3, 1, 0xAC, 0x02]);
    coll.extend(attr("comm_type", &[0x48, 2]));
    coll.extend([0x08, 2]);
    file.extend(frame(&coll));
    // Node { id 3, type COMM_SEND_NODE, attr comm_dst int32_val (7) 1, comm_tag sint32_val (15) -3,
    //        pg_name string_val (29) "dp" }
    let mut send = vec![0x08, 3, 0x18, 5];
    send.extend(attr("comm_dst", &[0x38, 1]));
    send.extend(attr("comm_tag", &[0x78, 5]));
    send.extend(attr("pg_name", &[0xEA, 0x01, 2, b'd', b'p']));
    file.extend(frame(&send));

    let f = read_et(&file).unwrap();
    assert_eq!(f.version, "1.0.0");
    assert_eq!(f.nodes.len(), 3);
    let (c, k, s) = (&f.nodes[0], &f.nodes[1], &f.nodes[2]);
    assert_eq!((c.id, c.name.as_str(), c.kind(), c.duration_micros), (1, "c", Some(NodeType::Comp), 300));
    assert_eq!(c.data_deps, vec![7]);
    assert_eq!(c.attr("is_cpu_op"), Some(&AttrValue::Bool(false)));
    assert_eq!(c.offset, metadata().len() as u64);
    assert_eq!((k.id, k.kind()), (2, Some(NodeType::CommColl)));
    assert_eq!(k.ctrl_deps, vec![1, 300]);
    assert_eq!(k.attr("comm_size"), Some(&AttrValue::Int64(1 << 20)));
    assert_eq!(k.attr("comm_type").and_then(|v| v.as_int()), Some(CommType::AllGather as i128));
    assert_eq!(s.attr("comm_dst"), Some(&AttrValue::Int32(1)));
    assert_eq!(s.attr("comm_tag"), Some(&AttrValue::Sint32(-3)));
    assert_eq!(s.attr("pg_name"), Some(&AttrValue::Str("dp".into())));
    // The writer writes what was read, and reads back the same.
    let mut w = EtWriter::new(&f.version);
    f.nodes.iter().for_each(|n| _ = w.node(n));
    let again = read_et(&w.finish()).unwrap();
    let strip = |f: &EtFile| f.nodes.iter().map(|n| Node { offset: 0, ..n.clone() }).collect::<Vec<_>>();
    assert_eq!(strip(&again), strip(&f));
}

#[test]
fn every_attribute_type_round_trips_through_the_writer() {
    let values = [
        AttrValue::Int32(-5),
        AttrValue::Int64(-(1 << 40)),
        AttrValue::Uint32(u32::MAX),
        AttrValue::Uint64(u64::MAX),
        AttrValue::Sint32(i32::MIN),
        AttrValue::Sint64(i64::MIN),
        AttrValue::Fixed32(7),
        AttrValue::Fixed64(1 << 50),
        AttrValue::Sfixed32(-7),
        AttrValue::Sfixed64(-(1 << 50)),
        AttrValue::Bool(true),
        AttrValue::Str("x".into()),
    ];
    let mut n = Node::new(9, "all", NodeType::Metadata);
    for (i, v) in values.iter().enumerate() {
        n = n.with_attr(&format!("a{i}"), v.clone());
    }
    let mut w = EtWriter::new("v");
    w.node(&n);
    let f = read_et(&w.finish()).unwrap();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(f.nodes[0].attr(&format!("a{i}")), Some(v), "a{i}");
    }
}

fn decode_err(data: &[u8]) -> ChakraError {
    ChakraError::from(read_et(data).unwrap_err()).in_file("x.0.et")
}

#[test]
fn malformed_protobuf_is_an_error_with_its_byte_offset() {
    let e = decode_err(&[]);
    assert_eq!(e.to_string(), "x.0.et: byte 0: empty file: no GlobalMetadata message");
    assert!(decode_err(&[0x1F, 0x8B, 8, 0]).to_string().contains("gzip"));
    // A node announcing 20 bytes with 2 left.
    let mut f = metadata();
    f.extend([20, 0x08, 1]);
    let e = decode_err(&f);
    assert_eq!(e.offset, Some(8));
    assert!(e.to_string().contains("byte 8: truncated message: 20 bytes announced, 2 left"), "{e}");
    // The file ends inside a length prefix.
    let mut f = metadata();
    f.push(0x80);
    assert!(decode_err(&f).to_string().contains("byte 8: truncated varint"));
    // A length prefix beyond 32 bits.
    let mut f = metadata();
    f.extend([0x80, 0x80, 0x80, 0x80, 0x10]);
    assert!(decode_err(&f).to_string().contains("does not fit in the 32-bit length prefix"));
    // Node.id as a string: the wrong wire type.
    let mut f = metadata();
    f.extend(frame(&[0x0A, 1, b'x']));
    let e = decode_err(&f);
    assert!(
        e.to_string().contains("byte 9: field Node.id (1) has wire type length-delimited, the schema's is varint"),
        "{e}"
    );
    // A group; a node id read before the error is named.
    let mut f = metadata();
    f.extend(frame(&[0x08, 42, 0x1B]));
    let e = decode_err(&f);
    assert_eq!(e.node, Some(42));
    assert!(e.to_string().contains("node 42 (byte 11): field 3: groups"), "{e}");
    // A truncated attribute inside a node.
    let mut f = metadata();
    f.extend(frame(&[0x08, 4, 0x52, 9, 0x0A, 20, b'a']));
    let e = decode_err(&f);
    assert!(e.to_string().contains("node 4") && e.to_string().contains("truncated"), "{e}");
    // Packed deps with a truncated varint.
    let mut f = metadata();
    f.extend(frame(&[0x08, 4, 0x2A, 1, 0x80]));
    assert!(decode_err(&f).to_string().contains("truncated varint"));
}

// ---------------------------------------------------------------------------------------------
// Lowering errors: node types, dependencies, attributes, collectives across ranks, messages.

fn comp(id: u64, us: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, "c", NodeType::Comp);
    n.duration_micros = us;
    n.data_deps = deps.to_vec();
    n
}

fn coll(id: u64, c: CommType, bytes: i64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, "k", NodeType::CommColl)
        .with_attr("comm_type", AttrValue::Int64(c as i64))
        .with_attr("comm_size", AttrValue::Int64(bytes));
    n.data_deps = deps.to_vec();
    n
}

fn p2p(id: u64, send: bool, peer: i32, bytes: i64) -> Node {
    let (t, key) = if send { (NodeType::CommSend, "comm_dst") } else { (NodeType::CommRecv, "comm_src") };
    Node::new(id, "p", t).with_attr(key, AttrValue::Int32(peer)).with_attr("comm_size", AttrValue::Int64(bytes))
}

fn lower_err(ranks: &[Vec<Node>]) -> String {
    lower(&job_files(ranks), &Algorithms::default(), CommEngine::Own).unwrap_err().to_string()
}

#[test]
fn bad_nodes_and_dependencies_are_named() {
    let mut bad = comp(5, 1, &[]);
    bad.node_type = 12;
    assert_eq!(
        lower_err(&[vec![comp(1, 1, &[]), bad]]),
        "job.0.et: node 5: type 12 is not a NodeType of the schema (1 … 7)"
    );
    let mut invalid = comp(6, 1, &[]);
    invalid.node_type = 0;
    assert!(lower_err(&[vec![invalid]]).starts_with("job.0.et: node 6: type 0 (INVALID_NODE)"));
    assert_eq!(
        lower_err(&[vec![comp(1, 1, &[]), comp(2, 1, &[1, 77])]]),
        "job.0.et: node 2: depends on node 77, which this file does not have"
    );
    let e = lower_err(&[vec![comp(1, 1, &[]), comp(2, 1, &[1, 4]), comp(3, 1, &[2]), comp(4, 1, &[3])]]);
    assert!(e.contains("dependency cycle: node") && e.contains("(each depends on the next)"), "{e}");
    for id in ["2", "3", "4"] {
        assert!(e.contains(id), "{e}");
    }
    assert!(lower_err(&[vec![comp(1, 1, &[1])]]).contains("dependency cycle: node 1 → 1"));
    assert!(lower_err(&[vec![comp(1, 1, &[]), comp(1, 2, &[])]]).contains("node 1: a second node with id 1"));
    assert!(lower_err(&[vec![comp(1, u64::MAX / 10, &[])]]).contains("does not fit in 64-bit nanoseconds"));
}

#[test]
fn bad_attributes_are_named() {
    let two = |n: Node| lower_err(&[vec![n.clone()], vec![n]]);
    assert!(two(coll(3, CommType::AllReduce, -1, &[])).contains("node 3: comm_size = -1: a size must be 0 …"));
    assert!(two(coll(3, CommType::AllReduce, 1 << 41, &[])).contains("a size must be 0 … 1099511627776 bytes"));
    let no_type = Node::new(3, "k", NodeType::CommColl).with_attr("comm_size", AttrValue::Int64(8));
    assert!(two(no_type).contains("COMM_COLL_NODE has no comm_type attribute"));
    let odd_type = Node::new(3, "k", NodeType::CommColl)
        .with_attr("comm_type", AttrValue::Int64(42))
        .with_attr("comm_size", AttrValue::Int64(8));
    assert!(two(odd_type).contains("comm_type = 42 is not a CollectiveCommType"));
    let text_size = Node::new(3, "k", NodeType::CommColl)
        .with_attr("comm_type", AttrValue::Int64(0))
        .with_attr("comm_size", AttrValue::Str("big".into()));
    assert!(two(text_size).contains("attribute comm_size is string_val, not an integer"));
    let e = lower_err(&[vec![p2p(4, true, 5, 8)], vec![]]);
    assert_eq!(e, "job.0.et: node 4: comm_dst = 5: no such rank (2 rank files)");
    assert!(lower_err(&[vec![p2p(4, true, 0, 8)], vec![]]).contains("comm_dst = 0 is this file's own rank"));
    let no_dst = Node::new(4, "p", NodeType::CommSend).with_attr("comm_size", AttrValue::Int64(8));
    assert!(lower_err(&[vec![no_dst], vec![]]).contains("COMM_SEND_NODE has no comm_dst attribute"));
}

#[test]
fn collectives_must_match_across_ranks_and_messages_must_match() {
    let ar = |id, b| coll(id, CommType::AllReduce, b, &[]);
    let e = lower_err(&[vec![ar(1, 64), ar(2, 64)], vec![ar(1, 64), coll(2, CommType::AllGather, 64, &[])]]);
    assert_eq!(
        e,
        "job.1.et: node 2: collective 1 (COMM_COLL_NODE number 2 of the file) is ALL_GATHER of 64 B, and on rank 0 (job.0.et, node 2) ALL_REDUCE of 64 B: collectives are matched by their order on each rank"
    );
    assert!(lower_err(&[vec![ar(1, 64)], vec![ar(7, 128)]]).contains("job.1.et: node 7: collective 0"));
    let e = lower_err(&[vec![ar(1, 64), ar(2, 64)], vec![ar(1, 64)]]);
    assert!(e.starts_with("job.0.et: node 2: 2 collective nodes, and job.1.et has 1"), "{e}");
    let e = lower_err(&[vec![coll(3, CommType::Gather, 64, &[])], vec![coll(3, CommType::Gather, 64, &[])]]);
    assert!(e.starts_with("job.0.et: node 3: GATHER: not run yet (the collectives run: ALL_REDUCE, REDUCE, ALL_GATHER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, BARRIER)"), "{e}");
    let e = lower_err(&[vec![p2p(1, true, 1, 8), p2p(2, true, 1, 8)], vec![p2p(1, false, 0, 8)]]);
    assert_eq!(e, "job.0.et: node 2: COMM_SEND_NODE from rank 0 to rank 1 with tag 0: no matching COMM_RECV_NODE (2 sends, 1 receives on that channel)");
    let mut algos = Algorithms::default();
    algos.set(CommType::AllReduce, "warp-drive");
    let e = lower(&job_files(&[vec![ar(1, 64)], vec![ar(1, 64)]]), &algos, CommEngine::Own).unwrap_err().to_string();
    assert!(e.starts_with("job.0.et: node 1: ALL_REDUCE with algorithm \"warp-drive\":"), "{e}");
}

#[test]
fn rank_files_are_found_by_prefix_and_missing_ones_named() {
    let d = std::env::temp_dir().join(format!("reducelab-chakra-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let bytes = |n: u64| {
        let mut w = EtWriter::new("1");
        w.node(&comp(n, 1, &[]));
        w.finish()
    };
    let prefix = d.join("t");
    let e = reducelab_chakra::read_files(&prefix, None).unwrap_err().to_string();
    assert!(e.ends_with("t.0.et: no such file: a trace set starts with rank 0's file"), "{e}");
    for r in [0, 1, 3] {
        std::fs::write(d.join(format!("t.{r}.et")), bytes(r)).unwrap();
    }
    let e = reducelab_chakra::read_files(&prefix, None).unwrap_err().to_string();
    assert!(e.contains("t.2.et: no such file, but") && e.contains("rank 2 is missing"), "{e}");
    assert_eq!(reducelab_chakra::read_files(&prefix, Some(2)).unwrap().len(), 2);
    let e = reducelab_chakra::read_files(&prefix, Some(3)).unwrap_err().to_string();
    assert!(e.ends_with("t.2.et: no such file: rank 2 of 3 is missing"), "{e}");
    std::fs::write(d.join("t.2.et"), [5u8, 1, 2]).unwrap();
    let e = reducelab_chakra::read_files(&prefix, None).unwrap_err().to_string();
    assert!(e.contains("t.2.et: byte 0: truncated message"), "{e}");
    std::fs::write(d.join("t.2.et"), bytes(2)).unwrap();
    let files = reducelab_chakra::read_files(&prefix, None).unwrap();
    assert_eq!(files.len(), 4);
    assert_eq!(files[3].1.nodes[0].id, 3);
    let _ = std::fs::remove_dir_all(&d);
}
