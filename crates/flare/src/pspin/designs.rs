//! Flare's dense aggregation designs (seed 004 §6) as sPIN handler sets, and its size policy.
//!
//! - [`SingleBuffer`] (§6.1): every packet of a block is aggregated into one buffer inside a
//!   critical section; the completion handler reads the result back.
//! - [`MultiBuffer`] (§6.2): B buffers per block; a handler takes whichever buffer is free
//!   (waiting only if none is) and the last handler merges the B − 1 others into the first.
//! - [`Tree`] (§6.3): the packet from port i is copied (DMA) into its own buffer i; a handler
//!   that finds the sibling subtree's result ready combines the two (left ⊕ right, left = the
//!   lower ports) and climbs; one that does not, leaves its result and returns. The tree's shape
//!   is fixed by the port→buffer mapping, so the result does not depend on arrival order.
//!
//! Buffers live in the L1 of the cluster whose core allocated them; a core of another cluster
//! pays the remote-L1 factor on them. Buffers are accounted in L1 while they exist (M of §4.3).

use super::dtype::{DataType, Operator};
use super::handler::{HandlerCx, HandlerSet, LockKey, RunState, Step};

/// A dense aggregation design of §6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    SingleBuffer,
    MultiBuffer(u32),
    Tree,
}

impl Design {
    /// Flare's choice (§6.4): "single buffer aggregation if the size of the data to be reduced is
    /// larger than 512KiB, multi buffers with 4 buffers if larger than 256KiB, with 2 buffers if
    /// larger than 128KiB, and tree aggregation otherwise. When reproducibility of floating-point
    /// summation is required, Flare always uses tree aggregation."
    pub fn flare_policy(bytes: u64, reproducible: bool) -> Design {
        if reproducible {
            Design::Tree
        } else if bytes > 512 << 10 {
            Design::SingleBuffer
        } else if bytes > 256 << 10 {
            Design::MultiBuffer(4)
        } else if bytes > 128 << 10 {
            Design::MultiBuffer(2)
        } else {
            Design::Tree
        }
    }

    /// `single`, `multi-B` (B ≥ 2) or `tree`.
    pub fn name(&self) -> String {
        match self {
            Design::SingleBuffer => "single".into(),
            Design::MultiBuffer(b) => format!("multi-{b}"),
            Design::Tree => "tree".into(),
        }
    }

    pub fn from_name(s: &str) -> Option<Design> {
        match s {
            "single" => Some(Design::SingleBuffer),
            "tree" => Some(Design::Tree),
            _ => {
                let b: u32 = s.strip_prefix("multi-")?.parse().ok()?;
                (2..=64).contains(&b).then_some(Design::MultiBuffer(b))
            }
        }
    }

    /// The design's handlers for `dtype` and `op`.
    pub fn handlers(&self, dtype: DataType, op: Operator) -> DesignHandlers {
        match *self {
            Design::SingleBuffer => DesignHandlers::Multi(MultiBuffer::new(1, dtype, op)),
            Design::MultiBuffer(b) => DesignHandlers::Multi(MultiBuffer::new(b, dtype, op)),
            Design::Tree => DesignHandlers::Tree(Tree::new(dtype, op)),
        }
    }
}

/// One aggregation buffer: where it lives and, in runs carrying data, its elements.
#[derive(Clone, Debug, Default)]
struct Buf {
    present: bool,
    cluster: u32,
    data: Option<Vec<u8>>,
}

fn lock_key(block: u32, buffer: u32) -> LockKey {
    ((block as u64) << 16) | buffer as u64
}

/// Combines `src` into `dst` (data runs) and returns nothing; costs are charged by the caller.
fn combine(op: &Operator, dtype: DataType, dst: &mut Buf, src: Option<Vec<u8>>) {
    if let (Some(d), Some(s)) = (dst.data.as_mut(), src) {
        op.combine(dtype, d, &s);
    }
}

/// Single buffer (B = 1) and multiple buffers (B ≥ 2), §6.1–6.2.
pub struct MultiBuffer {
    buffers: u32,
    dtype: DataType,
    op: Operator,
    blocks: Vec<MBlock>,
}

#[derive(Clone, Debug, Default)]
struct MBlock {
    bufs: Vec<Buf>,
    waits: u32,
}

/// Single-buffer aggregation is multi-buffer aggregation with one buffer.
pub type SingleBuffer = MultiBuffer;

impl MultiBuffer {
    pub fn new(buffers: u32, dtype: DataType, op: Operator) -> Self {
        assert!(buffers >= 1);
        MultiBuffer { buffers, dtype, op, blocks: Vec::new() }
    }

    fn block(&mut self, b: u32) -> &mut MBlock {
        if self.blocks.len() <= b as usize {
            self.blocks.resize(b as usize + 1, MBlock::default());
        }
        &mut self.blocks[b as usize]
    }
}

impl HandlerSet for MultiBuffer {
    fn name(&self) -> String {
        if self.buffers == 1 {
            "single".into()
        } else {
            format!("multi-{}", self.buffers)
        }
    }

    fn buffers_per_block(&self) -> Option<f64> {
        Some(self.buffers as f64)
    }

    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let (b, bytes, cluster, n) = (cx.packet().block, cx.packet().payload_bytes, cx.cluster(), self.buffers);
        cx.alloc_l1(cluster, bytes as u64 * n as u64);
        *self.block(b) = MBlock { bufs: vec![Buf { present: false, cluster, data: None }; n as usize], waits: 0 };
        Step::Compute(cx.costs().lock_cycles as u64)
    }

    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        let b = cx.packet().block;
        loop {
            match run.pc {
                0 => {
                    run.pc = 1;
                    return Step::Compute(cx.costs().handler_overhead_cycles as u64);
                }
                1 => {
                    // Take whichever buffer is free; wait for one only if none is.
                    let lock = cx.costs().lock_cycles as u64;
                    let mut tried = 0;
                    for i in 0..self.buffers {
                        tried += 1;
                        if self.buffers > 1 && cx.try_acquire(lock_key(b, i)) {
                            run.regs[0] = i as u64;
                            run.regs[1] = tried * lock;
                            run.pc = 2;
                            break;
                        }
                    }
                    if run.pc == 2 {
                        continue;
                    }
                    let n = self.buffers;
                    let blk = self.block(b);
                    let i = blk.waits % n;
                    blk.waits += 1;
                    run.regs[0] = i as u64;
                    run.regs[1] = if self.buffers > 1 { tried * lock } else { 0 };
                    run.pc = 2;
                    return Step::Acquire(lock_key(b, i));
                }
                2 => {
                    // In the critical section of buffer regs[0].
                    let i = run.regs[0] as usize;
                    let bytes = cx.packet().payload_bytes;
                    let data = cx.take_packet_data();
                    let (dtype, op) = (self.dtype, self.op);
                    let buf = &mut self.blocks[b as usize].bufs[i];
                    let cost = if buf.present {
                        let c = cx.combine_cycles(bytes, dtype, &op, buf.cluster);
                        combine(&op, dtype, buf, data);
                        c
                    } else {
                        buf.present = true;
                        buf.data = data;
                        cx.dma_cycles(bytes, buf.cluster)
                    };
                    run.pc = 3;
                    return Step::Compute(run.regs[1] + 2 * cx.costs().lock_cycles as u64 + cost);
                }
                3 => {
                    run.pc = 4;
                    return Step::Release(lock_key(b, run.regs[0] as u32));
                }
                _ => return Step::Done,
            }
        }
    }

    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let (b, bytes) = (cx.packet().block, cx.packet().payload_bytes);
        let (dtype, op) = (self.dtype, self.op);
        let mut bufs = std::mem::take(&mut self.blocks[b as usize].bufs);
        // The last handler merges the other buffers into the first, (B − 1)·L cycles (§6.2).
        let mut cost = 0;
        let (first, rest) = bufs.split_first_mut().expect("at least one buffer");
        for other in rest.iter_mut().filter(|o| o.present) {
            if first.present {
                cost += cx.combine_cycles(bytes, dtype, &op, other.cluster);
                combine(&op, dtype, first, other.data.take());
            } else {
                std::mem::swap(first, other);
            }
        }
        cost += cx.dma_cycles(bytes, first.cluster);
        cx.emit(bytes, 0, first.data.take());
        cx.free_l1(first.cluster, bytes as u64 * self.buffers as u64);
        Step::Compute(cost)
    }
}

/// Tree aggregation with a fixed port→buffer mapping (§6.3).
pub struct Tree {
    dtype: DataType,
    op: Operator,
    blocks: Vec<Vec<Vec<Option<Buf>>>>,
    /// The subtree result each core is carrying up (its level and node).
    carry: Vec<Option<(Buf, u32, u32)>>,
}

impl Tree {
    pub fn new(dtype: DataType, op: Operator) -> Self {
        Tree { dtype, op, blocks: Vec::new(), carry: Vec::new() }
    }
}

/// Nodes of a tree over `p` leaves at `level` (level 0 = leaves).
fn width(p: u32, level: u32) -> u32 {
    p.div_ceil(1 << level)
}

fn levels(p: u32) -> u32 {
    32 - (p.max(1) - 1).leading_zeros() + 1
}

const TREE_LOCK: u32 = 0xffff;

impl HandlerSet for Tree {
    fn name(&self) -> String {
        "tree".into()
    }

    fn buffers_per_block(&self) -> Option<f64> {
        None
    }

    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let (b, p) = (cx.packet().block as usize, cx.children());
        if self.blocks.len() <= b {
            self.blocks.resize(b + 1, Vec::new());
        }
        self.blocks[b] = (0..levels(p)).map(|l| vec![None; width(p, l) as usize]).collect();
        Step::Compute(cx.costs().lock_cycles as u64)
    }

    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        let (b, bytes, core, p) = (cx.packet().block, cx.packet().payload_bytes, cx.core() as usize, cx.children());
        let lock = cx.costs().lock_cycles as u64;
        match run.pc {
            0 => {
                // Copy the packet into its own buffer (DMA), chosen by its port.
                let cluster = cx.cluster();
                cx.alloc_l1(cluster, bytes as u64);
                let data = cx.take_packet_data();
                if self.carry.len() <= core {
                    self.carry.resize(core + 1, None);
                }
                self.carry[core] = Some((Buf { present: true, cluster, data }, 0, cx.packet().port));
                run.pc = 1;
                Step::Compute(cx.costs().handler_overhead_cycles as u64 + cx.dma_cycles(bytes, cluster))
            }
            1 => {
                run.pc = 2;
                Step::Acquire(lock_key(b, TREE_LOCK))
            }
            2 => {
                let (mut mine, mut level, mut node) =
                    self.carry[core].take().expect("a climbing handler carries a buffer");
                let slots = &mut self.blocks[b as usize];
                loop {
                    if width(p, level) == 1 {
                        slots[level as usize][0] = Some(mine);
                        run.pc = 3;
                        return Step::Compute(2 * lock);
                    }
                    let sib = node ^ 1;
                    if sib >= width(p, level) {
                        level += 1; // no sibling at this level: the node moves up as it is
                        node >>= 1;
                        continue;
                    }
                    match slots[level as usize][sib as usize].take() {
                        Some(other) => {
                            let (mut left, right) = if node < sib { (mine, other) } else { (other, mine) };
                            let cost = cx
                                .combine_cycles(bytes, self.dtype, &self.op, left.cluster)
                                .max(cx.combine_cycles(bytes, self.dtype, &self.op, right.cluster));
                            combine(&self.op, self.dtype, &mut left, right.data);
                            cx.free_l1(right.cluster, bytes as u64);
                            mine = left;
                            self.carry[core] = Some((mine, level + 1, node >> 1));
                            run.regs[0] = cost;
                            run.pc = 4;
                            return Step::Compute(2 * lock);
                        }
                        None => {
                            slots[level as usize][node as usize] = Some(mine);
                            run.pc = 3;
                            return Step::Compute(2 * lock);
                        }
                    }
                }
            }
            3 => {
                run.pc = 6;
                Step::Release(lock_key(b, TREE_LOCK))
            }
            4 => {
                run.pc = 5;
                Step::Release(lock_key(b, TREE_LOCK))
            }
            5 => {
                // Combine outside the lock: the two buffers are this handler's alone.
                run.pc = 1;
                Step::Compute(run.regs[0])
            }
            _ => Step::Done,
        }
    }

    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let (b, bytes) = (cx.packet().block as usize, cx.packet().payload_bytes);
        let mut slots = std::mem::take(&mut self.blocks[b]);
        let root =
            slots.last_mut().and_then(|l| l[0].take()).expect("every payload handler returned, so the root is ready");
        let cost = cx.dma_cycles(bytes, root.cluster);
        cx.emit(bytes, 0, root.data);
        cx.free_l1(root.cluster, bytes as u64);
        Step::Compute(cost)
    }
}

/// The handlers of a [`Design`], as one type the switch model can run.
pub enum DesignHandlers {
    Multi(MultiBuffer),
    Tree(Tree),
}

impl HandlerSet for DesignHandlers {
    fn name(&self) -> String {
        match self {
            DesignHandlers::Multi(h) => h.name(),
            DesignHandlers::Tree(h) => h.name(),
        }
    }
    fn buffers_per_block(&self) -> Option<f64> {
        match self {
            DesignHandlers::Multi(h) => h.buffers_per_block(),
            DesignHandlers::Tree(h) => h.buffers_per_block(),
        }
    }
    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        match self {
            DesignHandlers::Multi(h) => h.header(cx, run),
            DesignHandlers::Tree(h) => h.header(cx, run),
        }
    }
    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        match self {
            DesignHandlers::Multi(h) => h.payload(cx, run),
            DesignHandlers::Tree(h) => h.payload(cx, run),
        }
    }
    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        match self {
            DesignHandlers::Multi(h) => h.completion(cx, run),
            DesignHandlers::Tree(h) => h.completion(cx, run),
        }
    }
}
