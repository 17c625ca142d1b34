//! The shipped example's trace (`scenarios/examples/chakra_training/`): one iteration of
//! data-parallel training, written by [`crate::EtWriter`]
//! (`cargo run -p reducelab-chakra --example chakra_training -- DIR`; a test keeps the committed
//! files equal to [`training_iteration`]'s output).
//!
//! Every rank runs the same graph:
//!
//! 1. a `METADATA_NODE` (no time), then an `ALL_GATHER` of the sharded embedding table
//!    ([`EMBEDDING_BYTES`]) that the first layer's forward pass waits for;
//! 2. forward passes of [`LAYERS`] layers, each [`FORWARD_US`] µs, in order;
//! 3. backward passes from the last layer to the first, each [`BACKWARD_US`] µs; layer `l`'s
//!    gradient `ALL_REDUCE` ([`GRADIENT_BYTES`]`[l]`) waits for its backward pass only, so it
//!    overlaps the backward passes of the layers below;
//! 4. the optimizer step ([`OPTIMIZER_US`] µs), after every allreduce (`ctrl_deps`) and the
//!    first layer's backward pass (`data_deps`).

use crate::{AttrValue, CommType, EtWriter, Node, NodeType};

pub const LAYERS: usize = 4;
pub const FORWARD_US: u64 = 40;
pub const BACKWARD_US: u64 = 80;
pub const OPTIMIZER_US: u64 = 20;
pub const EMBEDDING_BYTES: u64 = 256 << 10;
pub const GRADIENT_BYTES: [u64; LAYERS] = [512 << 10, 1 << 20, 1 << 20, 256 << 10];

fn coll(id: u64, name: &str, c: CommType, bytes: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, name, NodeType::CommColl)
        .with_attr("is_cpu_op", AttrValue::Bool(false))
        .with_attr("comm_type", AttrValue::Int64(c as i64))
        .with_attr("comm_size", AttrValue::Int64(bytes as i64));
    n.data_deps = deps.to_vec();
    n
}

fn comp(id: u64, name: &str, us: u64, deps: &[u64]) -> Node {
    let mut n = Node::new(id, name, NodeType::Comp).with_attr("is_cpu_op", AttrValue::Bool(false));
    n.duration_micros = us;
    n.data_deps = deps.to_vec();
    n
}

/// Rank `r`'s file of the example, for `ranks` ranks (every rank's is the same graph).
pub fn training_iteration(ranks: u32) -> Vec<Vec<u8>> {
    (0..ranks)
        .map(|_| {
            let mut w = EtWriter::new("0.0.4");
            let mut id = 0u64;
            let mut next = || {
                id += 1;
                id
            };
            let meta = next();
            w.node(&Node::new(meta, "iteration_start", NodeType::Metadata));
            let gather = next();
            w.node(&coll(gather, "embedding_all_gather", CommType::AllGather, EMBEDDING_BYTES, &[meta]));
            let mut prev = gather;
            for l in 0..LAYERS {
                let f = next();
                w.node(&comp(f, &format!("forward_{l}"), FORWARD_US, &[prev]));
                prev = f;
            }
            let mut reduces = Vec::new();
            for l in (0..LAYERS).rev() {
                let b = next();
                w.node(&comp(b, &format!("backward_{l}"), BACKWARD_US, &[prev]));
                let a = next();
                w.node(&coll(a, &format!("gradient_all_reduce_{l}"), CommType::AllReduce, GRADIENT_BYTES[l], &[b]));
                reduces.push(a);
                prev = b;
            }
            let mut opt = comp(next(), "optimizer_step", OPTIMIZER_US, &[prev]);
            opt.ctrl_deps = reduces;
            w.node(&opt);
            w.finish()
        })
        .collect()
}
