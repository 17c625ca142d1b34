//! Ring allreduce (Patarasuk & Yuan): a reduce-scatter then an allgather around a ring,
//! `p−1` steps each, one block per step. `ring` is single-port, ranks in rank order around
//! the ring; `ring-bidirectional` runs two such rings in opposite directions (Swing paper
//! §2.3.1 on a 1D torus). `DirectedRing` is the ring building block shared with
//! `hamiltonian-rings` and `bucket`.

use super::chunks::{halves, Chunks};
use super::Layout;
use crate::ir::{Blocks, Collective, RecvOp, Schedule};
use crate::plan::{Plan, PlanMsg, NO_PORT};

/// Ring over all ranks in rank order (rank `r` sends to `r+1`). Supports allreduce,
/// reduce-scatter (rank `r` ends with block `r`) and allgather (rank `r` starts with block `r`).
pub fn ring(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let (s, phases) = ring_parts(collective, layout)?;
    Ok(emit_schedule(s, &phases))
}

fn ring_parts(collective: Collective, layout: &Layout) -> Result<(Schedule, Vec<Phase>), String> {
    let (rs, ag) = halves(collective, "ring")?;
    let p = layout.ranks();
    let mut s = Schedule::new(collective, "ring", p, p);
    if collective != Collective::Allreduce {
        s.block_owner = (0..p).collect();
    }
    // Step k of the reduce-scatter: r sends the partial of block (r − k − 1), so that after
    // p−1 steps rank r holds block r complete; step k of the allgather forwards block (r − k).
    let ring = DirectedRing {
        members: (0..p).collect(),
        ports: vec![(None, None); p as usize],
        owned: (0..p).map(|b| Blocks::range(b, b + 1)).collect(),
    };
    Ok((s, Phase::halves(vec![ring], rs, ag, p as usize - 1)))
}

/// Rings that run concurrently, starting at global step `step0`: the reduce-scatter or the
/// allgather of each.
pub(crate) struct Phase {
    pub step0: usize,
    pub rings: Vec<DirectedRing>,
    pub reduce: bool,
}

impl Phase {
    /// The reduce-scatter of `rings` from step 0 and/or their allgather after it
    /// (`rs_steps` later if both).
    pub fn halves(rings: Vec<DirectedRing>, rs: bool, ag: bool, rs_steps: usize) -> Vec<Phase> {
        match (rs, ag) {
            (true, true) => {
                let again = rings.clone();
                vec![Phase { step0: 0, rings, reduce: true }, Phase { step0: rs_steps, rings: again, reduce: false }]
            }
            (true, false) => vec![Phase { step0: 0, rings, reduce: true }],
            (false, true) => vec![Phase { step0: 0, rings, reduce: false }],
            (false, false) => Vec::new(),
        }
    }

    fn steps(&self) -> usize {
        self.rings.iter().map(|r| r.members.len().saturating_sub(1)).max().unwrap_or(0)
    }
}

/// Emits every phase into `s`, ring after ring.
pub(crate) fn emit_schedule(mut s: Schedule, phases: &[Phase]) -> Schedule {
    for ph in phases {
        for r in &ph.rings {
            for k in 0..r.members.len().saturating_sub(1) {
                r.each(k, ph.reduce, |from, to, (po, pi), seg| {
                    let op = if ph.reduce { RecvOp::ReduceIncomingFirst } else { RecvOp::Copy };
                    s.exchange(ph.step0 + k, from, to, po, pi, seg.clone(), op)
                });
            }
        }
    }
    s
}

/// The timing plan of the phases of `s`, step by step (no schedule is materialised).
pub(crate) fn emit_plan(s: &Schedule, phases: &[Phase]) -> Plan {
    let mut plan = Plan::new(s.algorithm.clone(), s.ranks, s.blocks, s.torus.clone());
    let total = phases.iter().map(|ph| ph.step0 + ph.steps()).max().unwrap_or(0);
    // Consecutive steps of a ring are usually alike: compare in emission order before sorting.
    let mut last: Vec<PlanMsg> = Vec::new();
    let mut msgs = Vec::new();
    for g in 0..total {
        msgs.clear();
        for ph in phases.iter().filter(|ph| ph.step0 <= g) {
            for r in &ph.rings {
                let k = g - ph.step0;
                if k + 1 < r.members.len() {
                    r.each(k, ph.reduce, |from, to, (po, _), seg| {
                        if !seg.is_empty() {
                            msgs.push(PlanMsg { from, to, port: po.unwrap_or(NO_PORT), blocks: seg.len() });
                        }
                    });
                }
            }
        }
        if g > 0 && msgs == last {
            plan.steps.last_mut().expect("a step was pushed").repeat += 1;
        } else {
            plan.push_step(msgs.clone());
            std::mem::swap(&mut last, &mut msgs);
        }
    }
    plan
}

/// The allreduce plan of `ring`, built without materialising the schedule.
pub fn ring_plan(layout: &Layout) -> Result<Plan, String> {
    let (s, phases) = ring_parts(Collective::Allreduce, layout)?;
    Ok(emit_plan(&s, &phases))
}

/// The allreduce plan of `ring-bidirectional`.
pub fn ring_bidirectional_plan(layout: &Layout) -> Result<Plan, String> {
    let (s, phases) = ring_bidirectional_parts(Collective::Allreduce, layout)?;
    Ok(emit_plan(&s, &phases))
}

/// The allreduce plan of `hamiltonian-rings`.
pub fn hamiltonian_plan(layout: &Layout) -> Result<Plan, String> {
    let (s, phases) = super::hamiltonian::parts(Collective::Allreduce, layout)?;
    Ok(emit_plan(&s, &phases))
}

/// The allreduce plan of `bucket`.
pub fn bucket_plan(layout: &Layout) -> Result<Plan, String> {
    let (s, phases) = super::bucket::parts(Collective::Allreduce, layout)?;
    Ok(emit_plan(&s, &phases))
}

/// One directed ring used by a part of a multi-ring algorithm: `members[i]` sends to
/// `members[(i+1) % m]`, leaving on port `ports[i].0` of the sender and arriving on port
/// `ports[i].1` of the receiver; `owned[i]` is what `members[i]` holds fully reduced after the
/// reduce-scatter (and starts the allgather with).
#[derive(Clone)]
pub(crate) struct DirectedRing {
    pub members: Vec<u32>,
    pub ports: Vec<(Option<u16>, Option<u16>)>,
    pub owned: Vec<Blocks>,
}

impl DirectedRing {
    /// The messages of step `k` (`0 ≤ k < m − 1`) of the reduce-scatter (`reduce`) or the
    /// allgather, as `f(from, to, ports, blocks)`. Reduce-scatter: position `i` sends the
    /// partial of what position `i − k − 1` will own. Allgather: position `i` forwards what
    /// position `i − k` owns.
    fn each(&self, k: usize, reduce: bool, mut f: impl FnMut(u32, u32, (Option<u16>, Option<u16>), &Blocks)) {
        let m = self.members.len();
        for i in 0..m {
            let seg = if reduce { &self.owned[(i + 2 * m - k - 1) % m] } else { &self.owned[(i + m - k) % m] };
            f(self.members[i], self.members[(i + 1) % m], self.ports[i], seg);
        }
    }
}

/// Bidirectional ring: two rings over the ranks in rank order, one in each direction, each
/// on half of the data (the 1D-torus multiport ring of the Swing paper §2.3.1), `2(p−1)` steps.
/// On a 1D layout the `+` ring uses port 0 and the `−` ring port 1, so each link direction
/// carries one message per step. Other layouts are accepted but get no ports (rank order is
/// not a torus cycle there; use `hamiltonian-rings` or `bucket`). Rank `q` owns blocks
/// `2q` (`+` ring) and `2q + 1` (`−` ring).
pub fn ring_bidirectional(collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let (s, phases) = ring_bidirectional_parts(collective, layout)?;
    Ok(emit_schedule(s, &phases))
}

fn ring_bidirectional_parts(collective: Collective, layout: &Layout) -> Result<(Schedule, Vec<Phase>), String> {
    let name = "ring-bidirectional";
    let (rs, ag) = halves(collective, name)?;
    let p = layout.ranks();
    let chunks = Chunks::rank_major(p, 2);
    let mut s = Schedule::new(collective, name, p, chunks.blocks());
    if collective != Collective::Allreduce {
        s.block_owner = chunks.owners();
    }
    s.noncommutative_safe = collective == Collective::Allgather;
    let on_torus = layout.ndims() == 1;
    if on_torus {
        s.torus = Some(layout.dims.clone());
    }
    let port = |q: u16| if on_torus { Some(q) } else { None };
    let rings: Vec<DirectedRing> = [(0u32, 0u16), (1, 1)]
        .into_iter()
        .map(|(c, out)| {
            let members: Vec<u32> = if c == 0 { (0..p).collect() } else { (0..p).map(|i| (p - i) % p).collect() };
            DirectedRing {
                owned: members.iter().map(|&q| chunks.chunk(c, q)).collect(),
                ports: vec![(port(out), port(out ^ 1)); p as usize],
                members,
            }
        })
        .collect();
    Ok((s, Phase::halves(rings, rs, ag, p as usize - 1)))
}
