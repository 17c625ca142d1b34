//! Schedules leave the toolkit: the JSON IR, MSCCL XML ([`crate::msccl`]) and LogGOPSim's GOAL
//! text format, for `reducelab schedule export` and `reducelab.schedule.export`.
//!
//! # GOAL
//!
//! GOAL ("Group Operation Assembly Language") is the schedule format of the LogGOPSim
//! simulator (Hoefler et al.; its `txt2bin` converts the text to LogGOPSim's binary input):
//!
//! ```text
//! num_ranks 4
//! rank 0 {
//! s0_x0: send 4096b to 1 tag 0
//! s0_x1: recv 4096b from 3 tag 0
//! s0_c1: calc 0
//! s0_c1 requires s0_x1
//! s0_end: calc 0
//! s0_end requires s0_x0
//! s0_end requires s0_c1
//! s1_x0: send 4096b to 1 tag 1
//! s1_x0 requires s0_end
//! }
//! ```
//!
//! Per rank, step `k` of the schedule becomes: one `send`/`recv` per transfer
//! (`sK_xI`, in the step's order: sends, then receives), tagged `k` (so the `i`-th message
//! from `a` to `b` in step `k` matches the `i`-th receive at `b` from `a` with tag `k`, the IR's
//! matching); a `calc` after every reducing receive (`sK_cI`, the local reduction:
//! [`GoalOptions::calc_ns_per_byte`] × the bytes reduced, rounded); and a `calc 0` barrier
//! `sK_end` that requires every send, every copy-receive and every reduction of the step. Every
//! operation of step `k + 1` requires `sK_end`: a step starts when the previous one has
//! completed, as in the IR. Messages of zero bytes (blocks empty for this vector size) are left
//! out on both sides, as the MPI runtime does. Sizes are bytes (`Nb`) of a vector of
//! [`GoalOptions::size_bytes`] per rank with [`GoalOptions::elem_bytes`]-byte elements, blocks
//! sized as in [`crate::ir`] (an all-to-all's vector is every rank's, `p` times as large).

use crate::ir::{RecvOp, Schedule};
use crate::msccl::{self, MscclOptions};
use std::fmt::Write;

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The schedule IR as JSON ([`Schedule::to_json`]).
    Json,
    /// MSCCL's XML algorithm format ([`crate::msccl`]).
    Msccl,
    /// LogGOPSim's GOAL text format (module docs).
    Goal,
}

impl Format {
    pub const NAMES: &'static [&'static str] = &["json", "msccl", "goal"];

    pub fn parse(name: &str) -> Result<Format, String> {
        match name {
            "json" => Ok(Format::Json),
            "msccl" => Ok(Format::Msccl),
            "goal" => Ok(Format::Goal),
            _ => Err(format!("unknown format '{name}' (known: {})", Format::NAMES.join(", "))),
        }
    }
}

/// GOAL export options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GoalOptions {
    /// Vector size per rank the message sizes are computed for (an all-to-all: a rank's send
    /// buffer, [`crate::Collective::vector_bytes`]).
    pub size_bytes: u64,
    pub elem_bytes: u64,
    /// Local reduction time per byte reduced (GOAL `calc` units: LogGOPSim's nanoseconds).
    pub calc_ns_per_byte: f64,
}

impl Default for GoalOptions {
    fn default() -> GoalOptions {
        GoalOptions { size_bytes: 1 << 20, elem_bytes: 4, calc_ns_per_byte: 0.0 }
    }
}

/// One send or receive of a rank's step in GOAL (see the module docs): the `i`-th transfer of
/// step `step` (sends first, then receives, in the step's order), labelled `s{step}_x{index}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoalTransfer {
    /// Its index among the step's transfers, counting those left out for being empty.
    pub index: usize,
    pub send: bool,
    pub peer: u32,
    pub bytes: u64,
    /// For a reducing receive: the local reduction's time (ns), a `calc` labelled
    /// `s{step}_c{index}` that requires the receive.
    pub reduce_ns: Option<u64>,
}

/// One step of one rank in GOAL: its non-empty transfers, tagged `step`. Steps with none are
/// left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalStep {
    pub step: usize,
    pub transfers: Vec<GoalTransfer>,
}

/// Each rank's steps as GOAL writes them (module docs): the expansion shared by [`to_goal`] and
/// every importer that lowers a schedule into a GOAL trace (Chakra's collectives).
pub fn goal_steps(s: &Schedule, opts: &GoalOptions) -> Result<Vec<Vec<GoalStep>>, String> {
    if opts.elem_bytes == 0 {
        return Err("elem_bytes must be at least 1".into());
    }
    if !opts.calc_ns_per_byte.is_finite() || opts.calc_ns_per_byte < 0.0 {
        return Err(format!("calc_ns_per_byte must be a finite number >= 0, got {}", opts.calc_ns_per_byte));
    }
    let vector = s.collective.vector_bytes(opts.size_bytes, s.ranks);
    let mut out = Vec::with_capacity(s.programs.len());
    for (r, prog) in s.programs.iter().enumerate() {
        let mut steps = Vec::new();
        for (k, st) in prog.steps.iter().enumerate() {
            let mut transfers = Vec::new();
            let all = st.sends.iter().map(|t| (t, true)).chain(st.recvs.iter().map(|t| (t, false)));
            for (i, (t, send)) in all.enumerate() {
                if t.peer >= s.ranks {
                    return Err(format!("rank {r} step {k}: peer {} out of range ({} ranks)", t.peer, s.ranks));
                }
                let bytes = s.blocks_bytes(&t.blocks, vector, opts.elem_bytes);
                if bytes == 0 {
                    continue;
                }
                let reduces = !send && matches!(t.op, Some(RecvOp::ReduceIncomingFirst | RecvOp::ReduceLocalFirst));
                let reduce_ns = reduces.then(|| (bytes as f64 * opts.calc_ns_per_byte).round() as u64);
                transfers.push(GoalTransfer { index: i, send, peer: t.peer, bytes, reduce_ns });
            }
            if !transfers.is_empty() {
                steps.push(GoalStep { step: k, transfers });
            }
        }
        out.push(steps);
    }
    Ok(out)
}

/// Writes `s` in GOAL (see the module docs).
pub fn to_goal(s: &Schedule, opts: &GoalOptions) -> Result<String, String> {
    let ranks = goal_steps(s, opts)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// {} {:?} on {} ranks, {} B vector ({} B elements); written by ReduceLab",
        s.algorithm, s.collective, s.ranks, opts.size_bytes, opts.elem_bytes
    );
    let _ = writeln!(out, "num_ranks {}", s.ranks);
    for (r, steps) in ranks.iter().enumerate() {
        let _ = writeln!(out, "\nrank {r} {{");
        let mut prev: Option<String> = None;
        for st in steps {
            let k = st.step;
            let mut ends: Vec<String> = Vec::new();
            let mut ops = String::new();
            let mut deps = String::new();
            for t in &st.transfers {
                let label = format!("s{k}_x{}", t.index);
                let (verb, dir) = if t.send { ("send", "to") } else { ("recv", "from") };
                let _ = writeln!(ops, "{label}: {verb} {}b {dir} {} tag {k}", t.bytes, t.peer);
                if let Some(p) = &prev {
                    let _ = writeln!(deps, "{label} requires {p}");
                }
                if let Some(ns) = t.reduce_ns {
                    let calc = format!("s{k}_c{}", t.index);
                    let _ = writeln!(ops, "{calc}: calc {ns}");
                    let _ = writeln!(deps, "{calc} requires {label}");
                    ends.push(calc);
                } else {
                    ends.push(label);
                }
            }
            let end = format!("s{k}_end");
            let _ = writeln!(ops, "{end}: calc 0");
            for e in &ends {
                let _ = writeln!(deps, "{end} requires {e}");
            }
            out.push_str(&ops);
            out.push_str(&deps);
            prev = Some(end);
        }
        out.push_str("}\n");
    }
    Ok(out)
}

/// Export options for every format.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    pub goal: GoalOptions,
    pub msccl: MscclOptions,
}

/// The schedule of any registry name for `collective` of `size_bytes` on the layout of the
/// topology spec `topology` (`torus:4x4`, `hyperx:8x8`, `hammingmesh:2x2,2x2`; see
/// [`crate::model::TopologyShape`]); families and policies are resolved for the size with
/// `costs` ([`crate::registry::resolve`]).
pub fn schedule_for(
    algorithm: &str,
    topology: &str,
    collective: crate::ir::Collective,
    size_bytes: u64,
    costs: &crate::registry::Costs,
) -> Result<Schedule, String> {
    let spec = crate::model::TopologyShape::parse(topology)?;
    let layout = spec.layout();
    let v = crate::registry::resolve(algorithm, collective, &layout, size_bytes, costs, false)?;
    if layout.ranks() > v.max_ranks {
        return Err(format!(
            "{} ranks is more than the {} that '{}' schedules support",
            layout.ranks(),
            v.max_ranks,
            v.name
        ));
    }
    crate::registry::build(v.name, collective, &layout).map_err(|e| format!("{} on {}: {e}", v.name, spec.spec()))
}

/// `s` in `format`.
pub fn export(s: &Schedule, format: Format, opts: &ExportOptions) -> Result<String, String> {
    match format {
        Format::Json => Ok(s.to_json()),
        Format::Msccl => msccl::to_msccl_xml(s, &opts.msccl),
        Format::Goal => to_goal(s, &opts.goal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::{build, Layout};
    use crate::ir::Collective;

    #[test]
    fn ring_on_three_ranks_is_three_messages_per_step() {
        let s = build("ring", Collective::Allreduce, &Layout::line(3)).unwrap();
        let g = to_goal(&s, &GoalOptions { size_bytes: 3 * 4 * 100, elem_bytes: 4, calc_ns_per_byte: 0.5 }).unwrap();
        assert!(g.contains("num_ranks 3\n"));
        assert!(
            g.contains("rank 0 {\ns0_x0: send 400b to 1 tag 0\ns0_x1: recv 400b from 2 tag 0\ns0_c1: calc 200\n"),
            "{g}"
        );
        assert!(g.contains("s1_x0 requires s0_end\n"));
        assert_eq!(g.matches(": send ").count(), 3 * 4);
        assert_eq!(g.matches(": recv ").count(), 3 * 4);
        assert!(Format::parse("xml").unwrap_err().contains("json, msccl, goal"));
    }
}
