//! Export of a [`Schedule`] to the XML algorithm format of Microsoft's MSCCL (the
//! `msccl-tools` compiler output, run by the MSCCL executor inside NCCL / RCCL).
//!
//! # What is emitted
//!
//! One `<algo>` with, per rank, one `<gpu>` holding threadblocks (`<tb>`) of `<step>`s, in the
//! "old" (executor) format that `msccl-tools` writes:
//!
//! ```text
//! <algo name="swing-bandwidth" proto="Simple" nchannels="1" nchunksperloop="B" ngpus="P"
//!       coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="…">
//!   <gpu id="r" i_chunks=".." o_chunks=".." s_chunks="..">
//!     <tb id="t" send="peer|-1" recv="peer|-1" chan="0">
//!       <step s="k" type="s|r|rrc|re|cpy|nop" srcbuf="i|o|s" srcoff=".." dstbuf="i|o|s"
//!             dstoff=".." cnt=".." depid="tb|-1" deps="step|-1" hasdep="0|1"/>
//! ```
//!
//! The subset: one channel (`chan="0"`), protocol `Simple` (configurable), in-place only
//! (`inplace="1" outofplace="0"`), step types `s` (send), `r` (receive and copy), `rrc`
//! (receive, reduce with the local chunk, store), `re` (local reduce `dst ⊕= src`), `cpy`
//! (local copy) and `nop` (carries an extra dependency). No fused `rcs` / `rrs` / `rrcs`.
//! Collectives: allreduce, reduce-scatter and allgather (an error for the others). The text
//! has no XML declaration or comments, one space between attributes and `/>` right after
//! the last one, as the executor's hand-written parser expects.
//!
//! # Mapping
//!
//! - **Chunks.** Schedule block `b` is MSCCL chunk `b`: `nchunksperloop` = the schedule's
//!   `blocks`. MSCCL chunks are equal-sized, so the vector's element count must be a
//!   multiple of `nchunksperloop` (the IR itself allows uneven blocks).
//! - **Buffers.** Everything happens in one buffer: the input buffer `i` for allreduce and
//!   reduce-scatter, the output buffer `o` for allgather (in-place MSCCL semantics: the
//!   reduce-scatter output of rank `r` is `i[r·k, (r+1)·k)`, the allgather input of rank `r`
//!   is `o[r·k, (r+1)·k)`, `k = blocks/p`). For reduce-scatter and allgather the schedule's
//!   `block_owner` must therefore be `b / k` (the MPI layout every generator here uses);
//!   `i_chunks` / `o_chunks` are `blocks` and `k` accordingly. The scratch buffer `s` holds
//!   staged receives (below).
//! - **Threadblocks.** Per rank, one threadblock per (send peer, receive peer) pair: a peer
//!   the rank both sends to and receives from gets `tb send=q recv=q`; the remaining send-only
//!   and receive-only peers are paired in order of first use (`send=a recv=b`), leftovers get
//!   `-1`. So every send to `q` goes through the one threadblock with `send=q` and every
//!   receive from `q` through the one with `recv=q`, which keeps the IR's matching (the k-th
//!   send from `a` to `b` matches the k-th receive at `b` from `a`) as MSCCL's per-connection
//!   FIFO order. Threadblocks are numbered by `(send, recv)`.
//! - **Steps.** Each rank's schedule steps are visited in order; within a step all sends (in
//!   the listed order), then all receives (in the listed order), are appended to their
//!   threadblocks. A block set becomes one MSCCL step per contiguous run `[a, b)`:
//!   `srcoff = a`, `cnt = b − a` (runs longer than [`MscclOptions::max_count`] are split).
//!   Sends are `s` (`srcbuf/srcoff` = the local chunks, `dstbuf/dstoff` = where the matching
//!   receive puts them). Receives with `op = copy` are `r`; reductions (`reduce_incoming_first`
//!   / `reduce_local_first`) are `rrc` with `src = dst` = the local chunks. MSCCL's reduction
//!   has no operand order, so the export assumes a commutative operator.
//! - **Scratch.** A receive whose chunks are also sent in the *same* schedule step by
//!   *another* threadblock of the rank (the IR sends the value as of the start of the step)
//!   must not overwrite them before that send has read them. It is staged: `r` into the
//!   threadblock's own scratch region, then `re` (reduction) or `cpy` (copy) from scratch
//!   into place, the latter depending on those sends. Each threadblock owns a region of the
//!   scratch buffer as large as its largest staged run (`s_chunks` is their sum); its steps
//!   are sequential, so the region is reused without further dependencies. (A receive whose
//!   conflicting send is in its own threadblock needs nothing: the send comes first there.)
//!   None of the generators here needs staging (their same-step sends and receives touch
//!   disjoint blocks, or share a threadblock); a direct all-to-all exchange does.
//! - **Matching.** After all ranks are converted, the k-th send run from `a` to `b` is paired
//!   with the k-th receive run at `b` from `a` (an error if counts or sizes differ); the send's
//!   `dstbuf/dstoff` become the receive's destination (scratch if staged) and the receive's
//!   `srcbuf/srcoff` the send's source, as `msccl-tools` writes them.
//! - **Dependencies.** Per chunk the exporter tracks the step that last wrote it and the sends
//!   that read it since. A send depends on the last writer of each of its chunks
//!   (read-after-write); a receive or local reduce/copy into chunks depends on their last
//!   writer (write-after-write, and read-after-write for reductions) and on every send that
//!   read them since (write-after-read). Dependencies on the step's own threadblock are
//!   dropped (program order), so are dependencies already implied by an earlier wait of the
//!   same threadblock on the same or a later step of the same threadblock; of several steps of
//!   one threadblock only the latest is kept (MSCCL flags are monotone). A step with `n > 1`
//!   dependencies is preceded by `n − 1` `nop` steps, each carrying one (`depid`, `deps`),
//!   and carries the last itself, as `msccl-tools` does; `deps` counts the `nop`s (step `s`
//!   numbers every `<step>` of the threadblock from 0). Every step something depends on has
//!   `hasdep="1"`.
//!
//! # Correctness argument
//!
//! Every wait goes to something earlier in the order (schedule step, sends before receives,
//! listed order): a send waits on writes of earlier schedule steps, a receive on its
//! matching send (same schedule step, sends first) and on writes / sends before it, and a
//! threadblock's steps are appended in that order. So with MSCCL's buffered sends (a send
//! completes without the receiver, the connection FIFO holding the data) the program cannot
//! deadlock, and the dependencies order every conflicting access as the IR does.
//! `crates/sched/tests/msccl.rs` replays the XML with symbolic values and vector clocks: it
//! checks that every conflicting pair of accesses is ordered (so every interleaving computes
//! the same), and that every rank ends with the right sums.
//!
//! # Limits
//!
//! With [`MscclOptions::enforce_limits`] the exporter refuses programs beyond the limits of
//! the MSCCL executor's parser: `cnt ≤ 71`, at most 256 steps per threadblock, 32
//! threadblocks sending (or receiving) per channel, and `1 + ngpus + threadblocks + steps ≤
//! 1024` XML nodes per rank. Large rings and `p ≳ 64` therefore do not fit in one channel.

use crate::ir::{Blocks, Collective, RecvOp, Schedule};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// Largest `cnt` the MSCCL executor accepts (`MSCCL_MAX_COUNT` = 72, exclusive).
pub const MSCCL_MAX_COUNT: u32 = 71;
/// Largest number of steps of one threadblock (`MSCCL_MAX_NUM_STEPS`).
pub const MSCCL_MAX_STEPS: usize = 256;
/// Largest number of send (or receive) peers per channel
/// (`MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`).
pub const MSCCL_MAX_PEERS_PER_CHANNEL: usize = 32;
/// Largest number of XML nodes the executor's parser loads for one rank.
pub const MSCCL_MAX_XML_NODES: usize = 1024;

/// Export options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MscclOptions {
    /// `name` of the `<algo>`; the schedule's algorithm name if `None`.
    pub name: Option<String>,
    /// `proto`: `Simple`, `LL` or `LL128`.
    pub proto: String,
    /// Longest run of chunks in one step; longer runs are split.
    pub max_count: u32,
    /// `minBytes` / `maxBytes`: the size range the executor may use the algorithm for.
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// `coll` for reduce-scatter: the executor parses `reducescatter`; `msccl-tools` writes
    /// `reduce_scatter`.
    pub reduce_scatter_coll: String,
    /// Refuse programs beyond the executor's limits (see the module docs).
    pub enforce_limits: bool,
}

impl Default for MscclOptions {
    fn default() -> MscclOptions {
        MscclOptions {
            name: None,
            proto: "Simple".into(),
            max_count: MSCCL_MAX_COUNT,
            min_bytes: 0,
            max_bytes: i64::MAX as u64,
            reduce_scatter_coll: "reducescatter".into(),
            enforce_limits: true,
        }
    }
}

/// An MSCCL buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MscclBuf {
    Input,
    Output,
    Scratch,
}

impl MscclBuf {
    pub fn as_str(self) -> &'static str {
        match self {
            MscclBuf::Input => "i",
            MscclBuf::Output => "o",
            MscclBuf::Scratch => "s",
        }
    }
}

/// The step types emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MscclOp {
    /// `s`: send `src` to the threadblock's send peer.
    Send,
    /// `r`: receive from the recv peer into `dst`.
    Recv,
    /// `rrc`: receive, reduce with `src`, store in `dst`.
    RecvReduceCopy,
    /// `re`: `dst = dst ⊕ src` (local).
    Reduce,
    /// `cpy`: `dst = src` (local).
    Copy,
    /// `nop`: only waits for its dependency.
    Nop,
}

impl MscclOp {
    pub fn as_str(self) -> &'static str {
        match self {
            MscclOp::Send => "s",
            MscclOp::Recv => "r",
            MscclOp::RecvReduceCopy => "rrc",
            MscclOp::Reduce => "re",
            MscclOp::Copy => "cpy",
            MscclOp::Nop => "nop",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MscclStep {
    pub op: MscclOp,
    pub src: (MscclBuf, i64),
    pub dst: (MscclBuf, i64),
    pub cnt: u32,
    /// `(depid, deps)`: threadblock and step this step waits for.
    pub dep: Option<(usize, usize)>,
    pub hasdep: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MscclTb {
    pub send: i64,
    pub recv: i64,
    pub steps: Vec<MscclStep>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MscclGpu {
    pub i_chunks: u32,
    pub o_chunks: u32,
    pub s_chunks: u32,
    pub tbs: Vec<MscclTb>,
}

/// The exported program (rank `r` is `gpus[r]`, threadblock `t` is `tbs[t]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MscclProgram {
    pub name: String,
    pub proto: String,
    pub coll: String,
    pub nchunksperloop: u32,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub gpus: Vec<MscclGpu>,
}

/// Exports `s` as MSCCL XML (see the module docs).
pub fn to_msccl_xml(s: &Schedule, opts: &MscclOptions) -> Result<String, String> {
    Ok(to_msccl_program(s, opts)?.to_xml())
}

/// Contiguous runs of `blocks`, each at most `max` long: `(offset, count)`.
fn runs(blocks: &Blocks, max: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
    blocks.0.iter().flat_map(move |&(a, b)| (a..b).step_by(max as usize).map(move |o| (o, max.min(b - o))))
}

struct TbDraft {
    tb: MscclTb,
    /// Latest step of each other threadblock this one has already waited for.
    waited: BTreeMap<usize, usize>,
    /// Size of the scratch region (largest staged run).
    scratch: u32,
}

/// Appends `step` to threadblock `tb` after `nop`s for all but one of its dependencies.
fn emit(tbs: &mut [TbDraft], tb: usize, mut step: MscclStep, deps: impl IntoIterator<Item = (usize, usize)>) -> usize {
    let mut latest: BTreeMap<usize, usize> = BTreeMap::new();
    for (dt, ds) in deps {
        if dt != tb {
            let e = latest.entry(dt).or_insert(ds);
            *e = (*e).max(ds);
        }
    }
    let need: Vec<(usize, usize)> =
        latest.into_iter().filter(|&(dt, ds)| tbs[tb].waited.get(&dt).is_none_or(|&w| w < ds)).collect();
    for &(dt, ds) in &need {
        tbs[tb].waited.insert(dt, ds);
        tbs[dt].tb.steps[ds].hasdep = true;
    }
    if let Some((&last, extra)) = need.split_last() {
        for &dep in extra {
            tbs[tb].tb.steps.push(MscclStep {
                op: MscclOp::Nop,
                src: (MscclBuf::Input, -1),
                dst: (MscclBuf::Output, -1),
                cnt: 0,
                dep: Some(dep),
                hasdep: false,
            });
        }
        step.dep = Some(last);
    }
    tbs[tb].tb.steps.push(step);
    tbs[tb].tb.steps.len() - 1
}

/// A send or receive step, for matching: `(rank, tb, step)`.
type Log = BTreeMap<(u32, u32), Vec<(u32, usize, usize)>>;

/// Exports `s` as a structured MSCCL program (see the module docs).
pub fn to_msccl_program(s: &Schedule, opts: &MscclOptions) -> Result<MscclProgram, String> {
    let p = s.ranks;
    let nb = s.blocks;
    if s.programs.len() != p as usize {
        return Err(format!("schedule has {} programs for {p} ranks", s.programs.len()));
    }
    if opts.max_count == 0 {
        return Err("max_count must be at least 1".into());
    }
    if opts.enforce_limits && opts.max_count > MSCCL_MAX_COUNT {
        return Err(format!("max_count {} exceeds the executor's limit {MSCCL_MAX_COUNT}", opts.max_count));
    }
    let owner_layout = |what: &str| -> Result<u32, String> {
        if p == 0 || nb % p != 0 {
            return Err(format!(
                "{what}: {nb} blocks do not split evenly over {p} ranks, as MSCCL's in-place layout needs"
            ));
        }
        let k = nb / p;
        if s.block_owner.len() != nb as usize || s.block_owner.iter().enumerate().any(|(b, &o)| o != b as u32 / k) {
            return Err(format!(
                "{what}: block owners are not rank-major (block b owned by b / {k}), as MSCCL's in-place layout needs"
            ));
        }
        Ok(k)
    };
    let (coll, buf, i_chunks, o_chunks) = match s.collective {
        Collective::Allreduce => ("allreduce".to_string(), MscclBuf::Input, nb, nb),
        Collective::ReduceScatter => {
            (opts.reduce_scatter_coll.clone(), MscclBuf::Input, nb, owner_layout("reduce-scatter")?)
        }
        Collective::Allgather => ("allgather".to_string(), MscclBuf::Output, owner_layout("allgather")?, nb),
        other => return Err(format!("MSCCL export supports allreduce, reduce-scatter and allgather, not {other:?}")),
    };
    let mut send_log: Log = BTreeMap::new();
    let mut recv_log: Log = BTreeMap::new();
    let mut gpus = Vec::with_capacity(p as usize);
    for r in 0..p {
        gpus.push(convert_rank(s, r, buf, opts.max_count, &mut send_log, &mut recv_log)?);
    }
    // Match the k-th send from a to b with the k-th receive at b from a; point each send at
    // where its receive puts the data, and each receive at where the data comes from.
    for (&(a, b), sends) in &send_log {
        let recvs = recv_log.get(&(a, b)).map(Vec::as_slice).unwrap_or(&[]);
        if sends.len() != recvs.len() {
            return Err(format!(
                "rank {a} sends {} runs to rank {b}, which receives {} from it",
                sends.len(),
                recvs.len()
            ));
        }
        for (k, (&(_, st, ss), &(_, rt, rs))) in sends.iter().zip(recvs).enumerate() {
            let send = gpus[a as usize].tbs[st].steps[ss].clone();
            let recv = &mut gpus[b as usize].tbs[rt].steps[rs];
            if send.cnt != recv.cnt {
                return Err(format!(
                    "message {k} from rank {a} to rank {b}: {} chunks sent at offset {}, {} received at offset {}",
                    send.cnt, send.src.1, recv.cnt, recv.dst.1
                ));
            }
            recv.src = send.src;
            let dst = recv.dst;
            gpus[a as usize].tbs[st].steps[ss].dst = dst;
        }
    }
    if let Some((&(a, b), _)) = recv_log.iter().find(|(k, v)| !v.is_empty() && !send_log.contains_key(k)) {
        return Err(format!("rank {b} receives from rank {a}, which never sends to it"));
    }
    for g in &mut gpus {
        g.i_chunks = i_chunks;
        g.o_chunks = o_chunks;
    }
    let prog = MscclProgram {
        name: opts.name.clone().unwrap_or_else(|| s.algorithm.clone()),
        proto: opts.proto.clone(),
        coll,
        nchunksperloop: nb,
        min_bytes: opts.min_bytes,
        max_bytes: opts.max_bytes,
        gpus,
    };
    if opts.enforce_limits {
        prog.check_limits()?;
    }
    Ok(prog)
}

fn convert_rank(
    s: &Schedule,
    r: u32,
    buf: MscclBuf,
    max_count: u32,
    send_log: &mut Log,
    recv_log: &mut Log,
) -> Result<MscclGpu, String> {
    let p = s.ranks;
    let nb = s.blocks as usize;
    let prog = &s.programs[r as usize];
    // Threadblocks.
    let (mut sends, mut recvs): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    for (t, st) in prog.steps.iter().enumerate() {
        for (list, seen, what) in [(&st.sends, &mut sends, "sends to"), (&st.recvs, &mut recvs, "receives from")] {
            for tr in list.iter() {
                if tr.peer == r || tr.peer >= p {
                    return Err(format!("rank {r} {what} rank {} in step {t} (p = {p})", tr.peer));
                }
                if !tr.blocks.is_empty() && !seen.contains(&tr.peer) {
                    seen.push(tr.peer);
                }
            }
        }
    }
    let mut pairs: Vec<(i64, i64)> =
        sends.iter().filter(|q| recvs.contains(q)).map(|&q| (q as i64, q as i64)).collect();
    let send_only: Vec<u32> = sends.iter().copied().filter(|q| !recvs.contains(q)).collect();
    let recv_only: Vec<u32> = recvs.iter().copied().filter(|q| !sends.contains(q)).collect();
    for i in 0..send_only.len().max(recv_only.len()) {
        pairs.push((send_only.get(i).map_or(-1, |&q| q as i64), recv_only.get(i).map_or(-1, |&q| q as i64)));
    }
    pairs.sort_unstable();
    let mut send_tb: HashMap<u32, usize> = HashMap::new();
    let mut recv_tb: HashMap<u32, usize> = HashMap::new();
    let mut tbs: Vec<TbDraft> = Vec::with_capacity(pairs.len());
    for (i, &(sp, rp)) in pairs.iter().enumerate() {
        if sp >= 0 {
            send_tb.insert(sp as u32, i);
        }
        if rp >= 0 {
            recv_tb.insert(rp as u32, i);
        }
        tbs.push(TbDraft {
            tb: MscclTb { send: sp, recv: rp, steps: Vec::new() },
            waited: BTreeMap::new(),
            scratch: 0,
        });
    }
    // Per chunk: last writer, and the sends that read it since `(tb, step, schedule step)`.
    let mut writer: Vec<Option<(usize, usize)>> = vec![None; nb];
    let mut readers: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); nb];
    let check_range = |off: u32, cnt: u32, t: usize| -> Result<(), String> {
        if (off + cnt) as usize > nb {
            return Err(format!("rank {r} step {t}: blocks [{off}, {}) beyond the {nb} blocks", off + cnt));
        }
        Ok(())
    };
    for (t, st) in prog.steps.iter().enumerate() {
        for tr in &st.sends {
            for (off, cnt) in runs(&tr.blocks, max_count) {
                check_range(off, cnt, t)?;
                let tb = send_tb[&tr.peer];
                let range = off as usize..(off + cnt) as usize;
                let deps: Vec<(usize, usize)> = range.clone().filter_map(|b| writer[b]).collect();
                let step = MscclStep {
                    op: MscclOp::Send,
                    src: (buf, off as i64),
                    dst: (buf, off as i64),
                    cnt,
                    dep: None,
                    hasdep: false,
                };
                let k = emit(&mut tbs, tb, step, deps);
                for b in range {
                    readers[b].push((tb, k, t));
                }
                send_log.entry((r, tr.peer)).or_default().push((r, tb, k));
            }
        }
        for tr in &st.recvs {
            let reduce = match tr.op {
                Some(RecvOp::Copy) => false,
                Some(RecvOp::ReduceIncomingFirst | RecvOp::ReduceLocalFirst) => true,
                None => return Err(format!("rank {r} step {t}: receive from rank {} has no op", tr.peer)),
            };
            for (off, cnt) in runs(&tr.blocks, max_count) {
                check_range(off, cnt, t)?;
                let tb = recv_tb[&tr.peer];
                let range = off as usize..(off + cnt) as usize;
                let hazard = range.clone().any(|b| readers[b].iter().any(|&(rt, _, rs)| rt != tb && rs == t));
                let deps: Vec<(usize, usize)> = range
                    .clone()
                    .flat_map(|b| writer[b].into_iter().chain(readers[b].iter().map(|&(a, k, _)| (a, k))))
                    .collect();
                let here = (buf, off as i64);
                let (recv_at, wrote) = if !hazard {
                    let op = if reduce { MscclOp::RecvReduceCopy } else { MscclOp::Recv };
                    let k =
                        emit(&mut tbs, tb, MscclStep { op, src: here, dst: here, cnt, dep: None, hasdep: false }, deps);
                    (k, k)
                } else {
                    tbs[tb].scratch = tbs[tb].scratch.max(cnt);
                    let stage = (MscclBuf::Scratch, 0);
                    let k = emit(
                        &mut tbs,
                        tb,
                        MscclStep { op: MscclOp::Recv, src: here, dst: stage, cnt, dep: None, hasdep: false },
                        [],
                    );
                    let op = if reduce { MscclOp::Reduce } else { MscclOp::Copy };
                    let l = emit(
                        &mut tbs,
                        tb,
                        MscclStep { op, src: stage, dst: here, cnt, dep: None, hasdep: false },
                        deps,
                    );
                    (k, l)
                };
                for b in range {
                    writer[b] = Some((tb, wrote));
                    readers[b].clear();
                }
                recv_log.entry((tr.peer, r)).or_default().push((r, tb, recv_at));
            }
        }
    }
    // Scratch regions, one per threadblock, in threadblock order.
    let mut base = 0i64;
    for d in &mut tbs {
        for st in &mut d.tb.steps {
            for loc in [&mut st.src, &mut st.dst] {
                if loc.0 == MscclBuf::Scratch {
                    loc.1 += base;
                }
            }
        }
        base += d.scratch as i64;
    }
    Ok(MscclGpu { i_chunks: 0, o_chunks: 0, s_chunks: base as u32, tbs: tbs.into_iter().map(|d| d.tb).collect() })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

impl MscclProgram {
    /// Refuses programs beyond the MSCCL executor's limits (see the module docs).
    pub fn check_limits(&self) -> Result<(), String> {
        let ngpus = self.gpus.len();
        for (r, g) in self.gpus.iter().enumerate() {
            let senders = g.tbs.iter().filter(|t| t.send >= 0).count();
            let receivers = g.tbs.iter().filter(|t| t.recv >= 0).count();
            if senders.max(receivers) > MSCCL_MAX_PEERS_PER_CHANNEL {
                return Err(format!(
                    "rank {r} uses {senders} send and {receivers} receive peers; MSCCL allows {MSCCL_MAX_PEERS_PER_CHANNEL} per channel"
                ));
            }
            let mut nodes = 1 + ngpus + g.tbs.len();
            for (t, tb) in g.tbs.iter().enumerate() {
                if tb.steps.len() > MSCCL_MAX_STEPS {
                    return Err(format!(
                        "rank {r} threadblock {t} has {} steps; MSCCL allows {MSCCL_MAX_STEPS}",
                        tb.steps.len()
                    ));
                }
                if let Some(st) = tb.steps.iter().find(|st| st.cnt > MSCCL_MAX_COUNT) {
                    return Err(format!("rank {r} threadblock {t}: cnt {} exceeds MSCCL's {MSCCL_MAX_COUNT}", st.cnt));
                }
                nodes += tb.steps.len();
            }
            if nodes > MSCCL_MAX_XML_NODES {
                return Err(format!(
                    "rank {r} needs {nodes} XML nodes; the MSCCL parser loads at most {MSCCL_MAX_XML_NODES}"
                ));
            }
        }
        Ok(())
    }

    /// The XML text: no declaration or comments, attributes separated by one space, `/>`
    /// right after the last attribute (as the executor's hand-written parser expects).
    pub fn to_xml(&self) -> String {
        let mut x = String::new();
        let _ = writeln!(
            x,
            "<algo name=\"{}\" proto=\"{}\" nchannels=\"1\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{}\" inplace=\"1\" outofplace=\"0\" minBytes=\"{}\" maxBytes=\"{}\">",
            escape(&self.name),
            escape(&self.proto),
            self.nchunksperloop,
            self.gpus.len(),
            escape(&self.coll),
            self.min_bytes,
            self.max_bytes
        );
        for (r, g) in self.gpus.iter().enumerate() {
            let _ = writeln!(
                x,
                "  <gpu id=\"{r}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">",
                g.i_chunks, g.o_chunks, g.s_chunks
            );
            for (t, tb) in g.tbs.iter().enumerate() {
                let _ = writeln!(x, "    <tb id=\"{t}\" send=\"{}\" recv=\"{}\" chan=\"0\">", tb.send, tb.recv);
                for (k, st) in tb.steps.iter().enumerate() {
                    let (depid, deps) = st.dep.map_or((-1, -1), |(a, b)| (a as i64, b as i64));
                    let _ = writeln!(
                        x,
                        "      <step s=\"{k}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{depid}\" deps=\"{deps}\" hasdep=\"{}\"/>",
                        st.op.as_str(),
                        st.src.0.as_str(),
                        st.src.1,
                        st.dst.0.as_str(),
                        st.dst.1,
                        st.cnt,
                        u8::from(st.hasdep)
                    );
                }
                x.push_str("    </tb>\n");
            }
            x.push_str("  </gpu>\n");
        }
        x.push_str("</algo>\n");
        x
    }
}

/// The all-pairs allreduce on `p` ranks, a program the registry does not have, as the schedule
/// the MSCCL example is exported from: `p` blocks; in step 0 every rank sends block `q` to rank
/// `q` (who reduces it into its own), in step 1 every rank sends its reduced block to every
/// other rank (who copies it). Two steps, each rank sends `2(p−1)/p` of the vector.
pub fn allpairs_allreduce(p: u32) -> Schedule {
    let mut s = Schedule::new(Collective::Allreduce, "allpairs", p, p);
    for a in 0..p {
        for b in (0..p).filter(|&b| b != a) {
            s.exchange(0, a, b, None, None, Blocks::range(b, b + 1), RecvOp::ReduceIncomingFirst);
            s.exchange(1, b, a, None, None, Blocks::range(b, b + 1), RecvOp::Copy);
        }
    }
    s
}

/// An all-pairs all-to-all in MSCCL XML, as msccl-tools' `alltoall_allpairs` program writes
/// it (out of place, `c` chunks per pair): every rank sends its input chunks for each peer
/// straight to it, receives the peer's into its output, and copies its own chunks from input to
/// output. The IR cannot export an all-to-all to MSCCL (its blocks keep one index, MSCCL's move
/// from input to output), so this program is written directly; the importer reads it back.
pub fn allpairs_alltoall_xml(p: u32, c: u32) -> String {
    use std::fmt::Write;
    let n = p * c;
    let mut x = String::new();
    let _ = writeln!(
        x,
        "<algo name=\"alltoall-allpairs-{p}\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"{n}\" ngpus=\"{p}\" coll=\"alltoall\" inplace=\"0\" outofplace=\"1\" minBytes=\"0\" maxBytes=\"0\">"
    );
    let step = |x: &mut String, s: u32, ty: &str, src: (&str, u32), dst: (&str, u32)| {
        let _ = writeln!(
            x,
            "      <step s=\"{s}\" type=\"{ty}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{c}\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>",
            src.0, src.1, dst.0, dst.1
        );
    };
    for r in 0..p {
        let _ = writeln!(x, "  <gpu id=\"{r}\" i_chunks=\"{n}\" o_chunks=\"{n}\" s_chunks=\"0\">");
        let _ = writeln!(x, "    <tb id=\"0\" send=\"-1\" recv=\"-1\" chan=\"0\">");
        step(&mut x, 0, "cpy", ("i", r * c), ("o", r * c));
        let _ = writeln!(x, "    </tb>");
        for (t, q) in (0..p).filter(|&q| q != r).enumerate() {
            let _ = writeln!(x, "    <tb id=\"{}\" send=\"{q}\" recv=\"{q}\" chan=\"0\">", t + 1);
            step(&mut x, 0, "s", ("i", q * c), ("o", r * c));
            step(&mut x, 1, "r", ("i", r * c), ("o", q * c));
            let _ = writeln!(x, "    </tb>");
        }
        let _ = writeln!(x, "  </gpu>");
    }
    x.push_str("</algo>\n");
    x
}

/// The MSCCL XML of [`allpairs_allreduce`]: `scenarios/examples/msccl_allpairs_8.xml` is
/// `allpairs_allreduce_xml(8)` (a test keeps the file equal to it).
pub fn allpairs_allreduce_xml(p: u32) -> Result<String, String> {
    to_msccl_xml(
        &allpairs_allreduce(p),
        &MscclOptions { name: Some(format!("allpairs-{p}")), ..MscclOptions::default() },
    )
}
