//! The schedule IR: per rank, ordered steps of sends and receives of block sets.
//!
//! A collective's vector is split into `blocks` contiguous blocks (block `i` covers elements
//! `[i·count/blocks, (i+1)·count/blocks)`, so counts need not divide evenly and blocks may be
//! empty when `count < blocks`). An all-to-all's vector is the `p × p` matrix of every rank's
//! send buffer: `blocks` is a multiple `k·p²` of it, and blocks `(s·p + d)·k .. (s·p + d + 1)·k`
//! are what rank `s` sends to rank `d` ([`Schedule::alltoall_pair`]); its size is `p` times a
//! rank's send buffer ([`Collective::vector_bytes`]). Each rank runs its steps in order. Within a step every send
//! and receive is started at once (nonblocking); the step completes when all of them have
//! completed. Sends transmit the block values as they were when the step started; receives
//! are applied when the step completes, in the order listed.
//!
//! The serialized form (JSON, [`SCHEDULE_VERSION`]) is the contract with the MPI runtime.

use serde::{Deserialize, Serialize};

/// Version of the JSON form. Bump on any incompatible change.
pub const SCHEDULE_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Collective {
    /// Every rank ends with every block reduced over all ranks.
    Allreduce,
    /// The owner of each block ends with it reduced over all ranks.
    ReduceScatter,
    /// Every rank starts with the blocks it owns and ends with all blocks.
    Allgather,
    /// `root` starts with all blocks; every rank ends with them.
    Broadcast { root: u32 },
    /// `root` ends with every block reduced over all ranks.
    Reduce { root: u32 },
    /// Rank `s` starts with the blocks it sends to each rank `d`; every rank ends with the
    /// blocks each rank sent it (see the module docs for the block layout).
    Alltoall,
}

impl Collective {
    /// Every collective's name, as scenario files, the CLI and Python spell it.
    pub const NAMES: &'static [&'static str] =
        &["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall"];

    /// The collective called `name` (one of [`Collective::NAMES`]); `root` is the root of
    /// `broadcast` and `reduce`, ignored by the others.
    pub fn parse(name: &str, root: u32) -> Result<Collective, String> {
        Ok(match name {
            "allreduce" => Collective::Allreduce,
            "reduce_scatter" => Collective::ReduceScatter,
            "allgather" => Collective::Allgather,
            "broadcast" => Collective::Broadcast { root },
            "reduce" => Collective::Reduce { root },
            "alltoall" => Collective::Alltoall,
            other => {
                return Err(format!("must be one of {}, got \"{other}\"", Collective::NAMES.join(", ")));
            }
        })
    }

    /// The name [`Collective::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Allgather => "allgather",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Reduce { .. } => "reduce",
            Collective::Alltoall => "alltoall",
        }
    }

    /// Whether it combines contributions (and so has an operator).
    pub fn reduces(self) -> bool {
        matches!(self, Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce { .. })
    }

    /// The size of the schedule's vector for a collective of `bytes` bytes per rank on `ranks`
    /// ranks: `bytes` itself, except for an all-to-all, whose vector holds every rank's send
    /// buffer (`ranks · bytes`). Front ends give sizes per rank as MPI does (a rank's whole
    /// send buffer) and size blocks with this.
    pub fn vector_bytes(self, bytes: u64, ranks: u32) -> u64 {
        match self {
            Collective::Alltoall => bytes.saturating_mul(ranks as u64),
            _ => bytes,
        }
    }
}

/// How a received block is combined with the local one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecvOp {
    /// Overwrite the local block.
    Copy,
    /// `local = incoming ⊕ local` (the sender's contributions come first in rank order).
    ReduceIncomingFirst,
    /// `local = local ⊕ incoming`.
    ReduceLocalFirst,
}

/// A set of blocks as sorted, disjoint, non-adjacent half-open ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Blocks(pub Vec<(u32, u32)>);

impl Blocks {
    pub fn range(start: u32, end: u32) -> Blocks {
        if start >= end {
            Blocks(Vec::new())
        } else {
            Blocks(vec![(start, end)])
        }
    }
    /// Normalises any list of block ids.
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Blocks {
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let mut out: Vec<(u32, u32)> = Vec::new();
        for b in v {
            match out.last_mut() {
                Some(last) if last.1 == b => last.1 = b + 1,
                _ => out.push((b, b + 1)),
            }
        }
        Blocks(out)
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..b)
    }
    pub fn len(&self) -> u32 {
        self.0.iter().map(|&(a, b)| b - a).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Number of contiguous runs (1 = contiguous buffer, no datatype needed).
    pub fn runs(&self) -> usize {
        self.0.len()
    }
}

/// One send or receive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub peer: u32,
    /// NIC port to use (torus: `2i` = `+` in dimension `i`, `2i+1` = `−`), if the algorithm
    /// is topology-aware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub blocks: Blocks,
    /// For receives only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<RecvOp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sends: Vec<Transfer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recvs: Vec<Transfer>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    pub steps: Vec<Step>,
}

/// A complete schedule for `ranks` ranks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub version: u32,
    pub collective: Collective,
    /// Algorithm name and variant, e.g. `swing-bandwidth`.
    pub algorithm: String,
    pub ranks: u32,
    pub blocks: u32,
    /// Owner rank of each block (reduce-scatter: who ends with it; allgather: who starts
    /// with it). Empty for other collectives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_owner: Vec<u32>,
    /// True if every reduction combines contributions in rank order, so non-commutative
    /// operators give the result `x₀ ⊕ x₁ ⊕ … ⊕ x_{p−1}`. The checker proves it.
    pub noncommutative_safe: bool,
    /// Torus shape the ports refer to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torus: Option<Vec<u32>>,
    pub programs: Vec<Program>,
}

impl Schedule {
    pub fn new(collective: Collective, algorithm: impl Into<String>, ranks: u32, blocks: u32) -> Schedule {
        Schedule {
            version: SCHEDULE_VERSION,
            collective,
            algorithm: algorithm.into(),
            ranks,
            blocks,
            block_owner: Vec::new(),
            noncommutative_safe: false,
            torus: None,
            programs: vec![Program::default(); ranks as usize],
        }
    }

    /// For an all-to-all: the (sender, receiver) whose message block `b` is part of.
    pub fn alltoall_pair(&self, b: u32) -> (u32, u32) {
        let p = self.ranks.max(1) as u64;
        let k = (self.blocks as u64 / (p * p)).max(1);
        let q = b as u64 / k;
        ((q / p) as u32, (q % p) as u32)
    }

    /// Step `s` of rank `r`, created (empty) if needed.
    pub fn step_mut(&mut self, r: u32, s: usize) -> &mut Step {
        let p = &mut self.programs[r as usize];
        if p.steps.len() <= s {
            p.steps.resize(s + 1, Step::default());
        }
        &mut p.steps[s]
    }

    /// Adds a matched send (at `from`) and receive (at `to`) in step `s` of both ranks.
    // (The arguments are the pair's fields, named at every call site of the generators.)
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &mut self,
        s: usize,
        from: u32,
        to: u32,
        port_out: Option<u16>,
        port_in: Option<u16>,
        blocks: Blocks,
        op: RecvOp,
    ) {
        if blocks.is_empty() {
            return;
        }
        self.step_mut(from, s).sends.push(Transfer { peer: to, port: port_out, blocks: blocks.clone(), op: None });
        self.step_mut(to, s).recvs.push(Transfer { peer: from, port: port_in, blocks, op: Some(op) });
    }

    /// Drops empty steps at the end of each program and pads nothing: programs may differ in
    /// length.
    pub fn trim(&mut self) {
        for p in &mut self.programs {
            while p.steps.last().is_some_and(|s| s.sends.is_empty() && s.recvs.is_empty()) {
                p.steps.pop();
            }
        }
    }

    pub fn num_steps(&self) -> usize {
        self.programs.iter().map(|p| p.steps.len()).max().unwrap_or(0)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("schedule serializes")
    }

    /// Parses a schedule, rejecting unknown versions and structural nonsense (the checker
    /// then proves semantics).
    pub fn from_json(text: &str) -> Result<Schedule, String> {
        let s: Schedule = serde_json::from_str(text).map_err(|e| format!("invalid schedule JSON: {e}"))?;
        if s.version != SCHEDULE_VERSION {
            return Err(format!("schedule version {} is not supported (expected {SCHEDULE_VERSION})", s.version));
        }
        if s.programs.len() != s.ranks as usize {
            return Err(format!("schedule has {} programs for {} ranks", s.programs.len(), s.ranks));
        }
        Ok(s)
    }

    /// Bytes moved by rank `r` in step `s` for a vector of `bytes` bytes (blocks sized as in
    /// the module docs).
    pub fn block_bytes(&self, block: u32, total_bytes: u64, elem_bytes: u64) -> u64 {
        let count = total_bytes / elem_bytes.max(1);
        let b = self.blocks as u64;
        let lo = block as u64 * count / b;
        let hi = (block as u64 + 1) * count / b;
        (hi - lo) * elem_bytes
    }

    pub fn blocks_bytes(&self, set: &Blocks, total_bytes: u64, elem_bytes: u64) -> u64 {
        let count = total_bytes / elem_bytes.max(1);
        let b = self.blocks as u64;
        set.0.iter().map(|&(s, e)| ((e as u64 * count / b) - (s as u64 * count / b)) * elem_bytes).sum()
    }
}
