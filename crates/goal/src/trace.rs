//! The in-memory trace: one struct of arrays over every operation of every rank.
//!
//! Operations are numbered globally ([`OpId`]) in file order; rank blocks come in increasing rank
//! order (as LogGOPSim's `txt2bin` requires), so each rank owns one contiguous range of them.
//! Dependencies are stored once, as each operation's successors in a compressed sparse row: the
//! operations that `requires` it (they wait for it to complete) first, then those that
//! `irequires` it (they wait for it to start), each in file order. That is the order in which
//! LogGOPSim frees them, which decides the order of simultaneous events.
//!
//! # Bytes per operation
//!
//! Per operation: kind, cpu and nic (1 byte each), size (8), peer (4), tag (4), line (4), the
//! start of its label (4) and of its successor row (4): **31 bytes**, plus its label's bytes and 4
//! bytes per dependency edge. [`Trace::heap_bytes`] counts the actual allocation; a Schedgen
//! trace (labels `l1` … `l9999999`, about one dependency per operation) takes about 42 bytes per
//! operation (measured in `docs/workloads.md`).

use std::ops::Range;

/// An operation, numbered across the whole trace in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

/// A rank (LogGOPSim's "host").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank(pub u32);

impl OpId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl Rank {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What an operation does. The discriminants are LogGOPSim's (`OP_SEND`, `OP_RECV`, `OP_LOCOP`),
/// whose order it uses to order operations freed at the same instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum OpKind {
    Send = 1,
    Recv = 2,
    Calc = 3,
}

/// How an operation waits for another: `a requires b` (b has completed) or `a irequires b` (b has
/// started).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    Requires,
    Irequires,
}

/// `recv from -1`: a receive from any source.
pub const ANY_SOURCE: u32 = u32::MAX;
/// `tag -1` on a receive: any tag.
pub const ANY_TAG: u32 = u32::MAX;
/// The most operations a trace may hold (indices keep two bits: the dependency kind in the trace,
/// the event kind in the simulation).
pub const MAX_OPS: u32 = (1 << 30) - 1;
/// The most ranks a trace may declare: per-rank state is allocated up front, so `num_ranks` is
/// bounded rather than trusted.
pub const MAX_RANKS: u32 = 1 << 24;

/// The successor row's marker for `irequires` edges.
pub(crate) const START_DEP: u32 = 1 << 31;

/// One operation, read out of the arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    /// Bytes for `send`/`recv`, nanoseconds for `calc`.
    pub size: u64,
    /// Destination of a send, source of a receive ([`ANY_SOURCE`] for `from -1`); 0 for `calc`.
    pub peer: u32,
    /// [`ANY_TAG`] for a receive's `tag -1`; 0 when not given, and for `calc`.
    pub tag: u32,
    pub cpu: u8,
    pub nic: u8,
}

/// A parsed GOAL trace (see the module docs for the layout).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub(crate) num_ranks: u32,
    /// `rank_start[r]..rank_start[r + 1]` are rank `r`'s operations.
    pub(crate) rank_start: Vec<u32>,
    pub(crate) kind: Vec<OpKind>,
    pub(crate) cpu: Vec<u8>,
    pub(crate) nic: Vec<u8>,
    pub(crate) size: Vec<u64>,
    pub(crate) peer: Vec<u32>,
    pub(crate) tag: Vec<u32>,
    pub(crate) line: Vec<u32>,
    /// `labels[label_start[i]..label_start[i + 1]]` is operation `i`'s label (empty: none).
    pub(crate) label_start: Vec<u32>,
    pub(crate) labels: Vec<u8>,
    /// `succ[succ_start[i]..succ_start[i + 1]]`: operation `i`'s successors, [`START_DEP`] set on
    /// `irequires` edges, which come after the `requires` ones.
    pub(crate) succ_start: Vec<u32>,
    pub(crate) succ: Vec<u32>,
    pub(crate) max_cpu: u8,
    pub(crate) max_nic: u8,
}

impl Trace {
    pub fn num_ranks(&self) -> u32 {
        self.num_ranks
    }

    pub fn num_ops(&self) -> usize {
        self.kind.len()
    }

    pub fn num_deps(&self) -> usize {
        self.succ.len()
    }

    /// Rank `r`'s operations.
    pub fn ops_of(&self, r: Rank) -> Range<u32> {
        self.rank_start[r.index()]..self.rank_start[r.index() + 1]
    }

    /// The rank owning `op`.
    pub fn rank_of(&self, op: OpId) -> Rank {
        Rank((self.rank_start.partition_point(|&s| s <= op.0) - 1) as u32)
    }

    pub fn op(&self, op: OpId) -> Op {
        let i = op.index();
        Op {
            kind: self.kind[i],
            size: self.size[i],
            peer: self.peer[i],
            tag: self.tag[i],
            cpu: self.cpu[i],
            nic: self.nic[i],
        }
    }

    pub fn kind(&self, op: OpId) -> OpKind {
        self.kind[op.index()]
    }

    /// The operation's label, `""` when it has none.
    pub fn label(&self, op: OpId) -> &str {
        let i = op.index();
        let bytes = &self.labels[self.label_start[i] as usize..self.label_start[i + 1] as usize];
        // Labels are `[a-zA-Z][a-zA-Z0-9_]*`, checked by the parser.
        std::str::from_utf8(bytes).unwrap_or("")
    }

    /// The input line the operation is defined on.
    pub fn line(&self, op: OpId) -> u32 {
        self.line[op.index()]
    }

    /// The operations waiting for `op`, in the order LogGOPSim frees them (`requires`, then
    /// `irequires`, each in file order).
    pub fn successors(&self, op: OpId) -> impl Iterator<Item = (OpId, DepKind)> + '_ {
        let i = op.index();
        self.succ[self.succ_start[i] as usize..self.succ_start[i + 1] as usize].iter().map(|&s| {
            if s & START_DEP != 0 {
                (OpId(s & !START_DEP), DepKind::Irequires)
            } else {
                (OpId(s), DepKind::Requires)
            }
        })
    }

    /// The operation labelled `label` on rank `r`.
    pub fn find_label(&self, r: Rank, label: &str) -> Option<OpId> {
        self.ops_of(r).map(OpId).find(|&o| self.label(o) == label)
    }

    /// CPUs and NICs per rank the trace uses (the highest index given, plus one), as LogGOPSim
    /// allocates them.
    pub fn cpus(&self) -> usize {
        self.max_cpu as usize + 1
    }

    pub fn nics(&self) -> usize {
        self.max_nic as usize + 1
    }

    /// "rank 3: recv l17": how errors name an operation (their line says where it is; an
    /// operation with neither label nor line, from a binary schedule, is "rank 3: recv #17", its
    /// index in the rank).
    pub fn describe(&self, op: OpId) -> String {
        let r = self.rank_of(op);
        let verb = match self.kind(op) {
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::Calc => "calc",
        };
        let label = self.label(op);
        if label.is_empty() && self.line(op) == 0 {
            // Read from a binary schedule: no label, no line; its index in the rank names it.
            format!("rank {}: {verb} #{}", r.0, op.0 - self.rank_start[r.index()])
        } else if label.is_empty() {
            format!("rank {}: unlabelled {verb}", r.0)
        } else {
            format!("rank {}: {verb} {label}", r.0)
        }
    }

    /// Heap bytes held by the trace (the lengths of its arrays, not their spare capacity, which the
    /// parser trims).
    pub fn heap_bytes(&self) -> usize {
        let n = self.num_ops();
        self.rank_start.len() * 4
            + n * (1 + 1 + 1 + 8 + 4 + 4 + 4)
            + self.label_start.len() * 4
            + self.labels.len()
            + self.succ_start.len() * 4
            + self.succ.len() * 4
    }

    /// Heap bytes per operation ([`Trace::heap_bytes`] over [`Trace::num_ops`]).
    pub fn bytes_per_op(&self) -> f64 {
        self.heap_bytes() as f64 / self.num_ops().max(1) as f64
    }
}
