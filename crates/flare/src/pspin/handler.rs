//! The sPIN programming interface of the PsPIN model (seed 003 §3.4, seed 004 §3).
//!
//! An operator or aggregation design is a [`HandlerSet`]: three handlers, run on the switch's
//! HPUs, for the packets of one *reduction block* (the switch's "message": one packet from each
//! of its P children):
//!
//! - **header** runs once per block, on the core that got the block's first packet, before that
//!   packet's payload handler (allocating the block's buffers);
//! - **payload** runs once per packet (aggregating it);
//! - **completion** runs once per block, on the core whose payload handler finished last, after
//!   it (reading the result back and sending it on).
//!
//! Handlers are never suspended (§6.1: "PsPIN handlers are never suspended and terminate only
//! after the packet has been processed"), so each is written as a small state machine that the
//! switch model steps: every call performs the handler's effects on its state at the current
//! time and returns the next [`Step`] — cycles of work, a lock to enter (the core *spins*,
//! burning cycles, until it is granted, as §6.1 says a waiting handler does), a lock to leave, or
//! done. `run.pc` is the handler's own program counter (0 on entry), `run.regs` its registers.
//! The model charges every cycle to the core and never runs two steps of one core at once.

use super::config::CostModel;
use super::dtype::{DataType, Operator};

/// A lock in L1, named by the handler (e.g. `block << 8 | buffer`). Acquisition is FCFS in
/// request order; a waiting core spins.
pub type LockKey = u64;

/// What a handler does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Work for this many cycles, then step again.
    Compute(u64),
    /// Enter this lock (step again once held; the wait is spent spinning).
    Acquire(LockKey),
    /// Leave this lock (a waiting core gets it now); step again at once.
    Release(LockKey),
    /// The handler returned.
    Done,
}

/// A handler's program counter and registers, zeroed when it starts.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunState {
    pub pc: u32,
    pub regs: [u64; 4],
}

/// A packet as a handler sees it: the reduction block it belongs to, the child (port rank
/// 0..P) it came from, its payload length and, in runs that carry data, its payload bytes.
#[derive(Clone, Debug)]
pub struct Packet {
    pub block: u32,
    pub port: u32,
    pub payload_bytes: u32,
    /// An application word of the header (e.g. a quantisation scale's f32 bits).
    pub header_word: u64,
    pub data: Option<Vec<u8>>,
}

/// What a handler may see and do besides its own state: the time, where it runs, the costs,
/// L1 memory accounting, non-blocking lock attempts, and sending a block's result.
pub struct HandlerCx<'a> {
    pub(crate) now_cycles: u64,
    pub(crate) core: u32,
    pub(crate) cluster: u32,
    pub(crate) costs: &'a CostModel,
    pub(crate) children: u32,
    pub(crate) packet: &'a mut Packet,
    pub(crate) l1_used: &'a mut [u64],
    pub(crate) locks: &'a mut super::switch::LockTable,
    pub(crate) emitted: &'a mut Option<Emitted>,
}

/// A block's result as sent by its completion handler.
#[derive(Clone, Debug, Default)]
pub struct Emitted {
    pub bytes: u32,
    pub header_word: u64,
    pub data: Option<Vec<u8>>,
}

impl HandlerCx<'_> {
    pub fn now_cycles(&self) -> u64 {
        self.now_cycles
    }
    /// The HPU running this handler (0..K).
    pub fn core(&self) -> u32 {
        self.core
    }
    /// The cluster of that HPU; its L1 is local, the others' are remote.
    pub fn cluster(&self) -> u32 {
        self.cluster
    }
    pub fn costs(&self) -> &CostModel {
        self.costs
    }
    /// P: the children of this switch in the reduction tree (packets per block).
    pub fn children(&self) -> u32 {
        self.children
    }
    /// The packet being processed (for completion: the block's last packet).
    pub fn packet(&self) -> &Packet {
        self.packet
    }
    /// Moves the packet's payload out (e.g. to keep it as an aggregation buffer).
    pub fn take_packet_data(&mut self) -> Option<Vec<u8>> {
        self.packet.data.take()
    }
    /// Cycles to combine `bytes` of `dtype` with `op` in L1 of `buffer_cluster`: vector
    /// operations at the operator's cost, times the remote-L1 factor when that L1 is not local.
    pub fn combine_cycles(&self, bytes: u32, dtype: DataType, op: &Operator, buffer_cluster: u32) -> u64 {
        let per_op = match op {
            Operator::User(u) => u.cycles_per_vector_op,
            _ => self.costs.cycles_per_vector_op,
        };
        self.costs.combine_cycles(bytes, dtype.bytes(), dtype.lanes(), per_op) * self.remote(buffer_cluster)
    }
    /// Cycles of a DMA copy of `bytes` into L1 of `buffer_cluster`.
    pub fn dma_cycles(&self, bytes: u32, buffer_cluster: u32) -> u64 {
        self.costs.dma_cycles(bytes) * self.remote(buffer_cluster)
    }
    /// The remote-L1 factor for an access from this core to `buffer_cluster` (1 when local).
    pub fn remote(&self, buffer_cluster: u32) -> u64 {
        if buffer_cluster == self.cluster {
            1
        } else {
            self.costs.remote_l1_factor as u64
        }
    }
    /// Accounts `bytes` of working memory allocated in `cluster`'s L1.
    pub fn alloc_l1(&mut self, cluster: u32, bytes: u64) {
        self.l1_used[cluster as usize] += bytes;
    }
    /// Accounts `bytes` of working memory freed in `cluster`'s L1.
    pub fn free_l1(&mut self, cluster: u32, bytes: u64) {
        let u = &mut self.l1_used[cluster as usize];
        *u = u.checked_sub(bytes).expect("a handler freed more L1 than it allocated");
    }
    /// Takes `lock` if it is free and returns whether it did (never waits).
    pub fn try_acquire(&mut self, lock: LockKey) -> bool {
        self.locks.try_take(lock, self.core)
    }
    /// Sends the block's result (completion handlers; once per block).
    pub fn emit(&mut self, bytes: u32, header_word: u64, data: Option<Vec<u8>>) {
        assert!(self.emitted.is_none(), "a completion handler sent its block twice");
        *self.emitted = Some(Emitted { bytes, header_word, data });
    }
}

/// An operator or aggregation design as sPIN handlers (see the module docs).
pub trait HandlerSet {
    /// A name for reports.
    fn name(&self) -> String;
    /// Once per block, before the first packet's payload handler.
    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step;
    /// Once per packet.
    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step;
    /// Once per block, after its last payload handler; must [`HandlerCx::emit`] the result.
    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step;
    /// Buffers per block the design keeps (M of §4.3), for the model; `None` if not fixed.
    fn buffers_per_block(&self) -> Option<f64> {
        None
    }
}
