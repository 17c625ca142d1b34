//! LogGOPSim's binary schedule form: what its `txt2bin` writes and `LogGOPSim -f` reads (ATLAHS
//! ships large traces this way), read into a [`Trace`] and written from one.
//!
//! # Layout
//!
//! `txt2bin` maps the file and stores its structures' fields one after another, unpadded and
//! little-endian (x86's order; a file from a big-endian machine is refused by its first bytes):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic cookie 4223 (2342: `txt2bin` did not finish) |
//! | 4 | `num_ranks` |
//! | 1 + 1 | the highest CPU and NIC index used |
//! | 16 × `num_ranks` | per rank: start and end of its block, byte offsets counted after the cookie |
//!
//! and per rank, at its start: the number of operations `n` (4), the number of operations that
//! wait for nothing (4) and their indices (4 each), then `n` records of 39 bytes —
//! dependencies count (4), type (1: 1 send, 2 recv, 3 calc), peer (4), size (8: bytes, or ns for
//! a calc), tag (4), CPU (1), NIC (1), then the operations waiting for this one's end and for its
//! start as (count, first index into the appendix) pairs (4 + 4, 4 + 4) — and the appendix: the
//! waiting operations' indices (4 each) within the rank. `-1` (`0xffffffff`) is any source or any
//! tag, as in the text.
//!
//! # What is checked
//!
//! Everything a reader could trip on is an error naming the rank, the operation's index in its
//! rank (`#k`, the text form's order) and the field: offsets outside the file or the rank's
//! block, counts that do not fit, an unknown type, peers outside `num_ranks`, a send to any
//! source or with any tag (the text form refuses them too), dependency indices outside the rank,
//! and a dependencies count or list of independent operations that disagrees with the edges
//! (LogGOPSim starts exactly the listed operations and runs one when its count reaches zero, so
//! a disagreement is a schedule that cannot run as written). Cycles and unmatched messages are
//! the checker's ([`crate::check`]), as for text.
//!
//! Binary operations have no labels and no lines; errors and results name them `#k`
//! ([`Trace::describe`]). The successors of an operation keep the file's order (end-waiters, then
//! start-waiters), the order in which LogGOPSim frees them, so a binary file and the text it came
//! from simulate identically. A file is read one rank's block at a time: beyond the trace (31 bytes
//! per operation, 4 per dependency: no labels) the reader holds one block and the dependencies'
//! 8 bytes each until the trace is finished.

use crate::build::TraceBuilder;
use crate::trace::{OpKind, Rank, Trace, ANY_SOURCE, ANY_TAG, MAX_OPS, MAX_RANKS};
use crate::{GoalError, OpId};

/// The first 8 bytes of a finished `txt2bin` output.
pub const MAGIC: u64 = 4223;
/// The cookie `txt2bin` writes before it has finished.
const MAGIC_UNFINISHED: u64 = 2342;
/// Bytes of one operation's record.
const RECORD: usize = 39;

/// Whether `data` starts as a binary schedule does, finished or not, of either byte order (the
/// text form starts with `num_ranks`, a comment or white space).
pub fn is_binary(data: &[u8]) -> bool {
    let Some(head) = data.get(..8) else { return false };
    let head: [u8; 8] = head.try_into().expect("8 bytes");
    matches!(u64::from_le_bytes(head), MAGIC | MAGIC_UNFINISHED) || u64::from_be_bytes(head) == MAGIC
}

fn err(message: impl Into<String>) -> GoalError {
    GoalError::new(0, message)
}

/// A cursor over the file with bounds-checked little-endian reads.
struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn at(&self, pos: usize, len: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GoalError> {
        pos.checked_add(len).filter(|&e| e <= self.data.len()).map(|e| &self.data[pos..e]).ok_or_else(|| {
            err(format!("{}: byte {pos} + {len} is past the end of the file ({} bytes)", what(), self.data.len()))
        })
    }
    fn u8(&self, pos: usize, what: &dyn Fn() -> String) -> Result<u8, GoalError> {
        Ok(self.at(pos, 1, what)?[0])
    }
    fn u32(&self, pos: usize, what: &dyn Fn() -> String) -> Result<u32, GoalError> {
        Ok(u32::from_le_bytes(self.at(pos, 4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&self, pos: usize, what: &dyn Fn() -> String) -> Result<u64, GoalError> {
        Ok(u64::from_le_bytes(self.at(pos, 8, what)?.try_into().expect("8 bytes")))
    }
}

/// One operation's record, read.
struct Record {
    deps: u32,
    kind: OpKind,
    peer: u32,
    size: u64,
    tag: u32,
    cpu: u8,
    nic: u8,
    /// (count, first appendix index) of the operations waiting for its end, and for its start.
    end_waiters: (u32, u32),
    start_waiters: (u32, u32),
}

/// The cookie's verdict on the first 8 bytes.
fn check_cookie(head: &[u8]) -> Result<(), GoalError> {
    let Some(head) = head.get(..8) else {
        return Err(err(format!("{} bytes: too short for a binary schedule's cookie", head.len())));
    };
    let head: [u8; 8] = head.try_into().expect("8 bytes");
    match u64::from_le_bytes(head) {
        MAGIC => Ok(()),
        MAGIC_UNFINISHED => Err(err("cookie 2342: txt2bin did not finish writing this file")),
        _ if u64::from_be_bytes(head) == MAGIC => {
            Err(err("a big-endian binary schedule (written on another kind of machine): convert its text form"))
        }
        c => Err(err(format!("cookie {c}: not a binary schedule (txt2bin's files start with 4223)"))),
    }
}

/// `num_ranks` from the 4 bytes after the cookie.
fn num_ranks_of(b: &[u8]) -> Result<u32, GoalError> {
    let num_ranks = Bytes { data: b }.u32(0, &|| "num_ranks".into())?;
    if num_ranks == 0 || num_ranks > MAX_RANKS {
        return Err(err(format!("num_ranks {num_ranks}: must be 1 … {MAX_RANKS}")));
    }
    Ok(num_ranks)
}

/// Rank `r`'s block `[start, end)` from the jump table `table` (16 bytes per rank), checked
/// against `len`, the bytes after the cookie.
fn extent(table: &[u8], r: u32, len: u64) -> Result<(u64, u64), GoalError> {
    let b = Bytes { data: table };
    let start = b.u64(16 * r as usize, &|| format!("rank {r}'s start"))?;
    let end = b.u64(16 * r as usize + 8, &|| format!("rank {r}'s end"))?;
    if start > end || end > len {
        return Err(err(format!(
            "rank {r}: block {start} … {end} is not within the file's {len} bytes after the cookie"
        )));
    }
    Ok((start, end))
}

/// Reads a binary schedule held in memory (module docs). Errors have line 0 and name the rank,
/// the operation (`#k`) and the field. [`crate::parse_file`] reads a file rank by rank instead.
pub fn parse_binary(data: &[u8]) -> Result<Trace, GoalError> {
    check_cookie(data)?;
    let b = &data[8..];
    let num_ranks = num_ranks_of(b)?;
    let table = Bytes { data: b }.at(6, 16 * num_ranks as usize, &|| format!("the jump table of {num_ranks} ranks"))?;
    let mut reader = Reader::new(num_ranks)?;
    for r in 0..num_ranks {
        let (start, end) = extent(table, r, b.len() as u64)?;
        reader.rank(r, &b[start as usize..end as usize])?;
    }
    reader.finish()
}

/// Reads a binary schedule from a file, one rank's block in memory at a time (the trace and one
/// block: no copy of the whole file).
pub(crate) fn parse_binary_file(f: &mut std::fs::File) -> Result<Trace, GoalError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |e: std::io::Error| err(format!("read error: {e}"));
    let len = f.metadata().map_err(io)?.len();
    let mut head = vec![0u8; (len.min(14)) as usize];
    f.seek(SeekFrom::Start(0)).map_err(io)?;
    f.read_exact(&mut head).map_err(io)?;
    check_cookie(&head)?;
    let num_ranks = num_ranks_of(&head[8..])?;
    let after = len - 8;
    if 6 + 16 * num_ranks as u64 > after {
        return Err(err(format!(
            "the jump table of {num_ranks} ranks: byte 6 + {} is past the end of the file ({after} bytes)",
            16 * num_ranks
        )));
    }
    let mut table = vec![0u8; 16 * num_ranks as usize];
    f.read_exact(&mut table).map_err(io)?;
    let mut reader = Reader::new(num_ranks)?;
    let mut block = Vec::new();
    for r in 0..num_ranks {
        let (start, end) = extent(&table, r, after)?;
        block.resize((end - start) as usize, 0);
        f.seek(SeekFrom::Start(8 + start)).map_err(io)?;
        f.read_exact(&mut block).map_err(io)?;
        reader.rank(r, &block)?;
    }
    reader.finish()
}

/// A trace read rank by rank.
struct Reader {
    builder: TraceBuilder,
    nics: Vec<(OpId, u8)>,
}

impl Reader {
    fn new(num_ranks: u32) -> Result<Reader, GoalError> {
        Ok(Reader { builder: TraceBuilder::new(num_ranks)?, nics: Vec::new() })
    }

    fn finish(self) -> Result<Trace, GoalError> {
        let mut t = self.builder.finish()?;
        for (op, nic) in self.nics {
            t.nic[op.index()] = nic;
            t.max_nic = t.max_nic.max(nic);
        }
        Ok(t)
    }

    /// Rank `r`'s block (module docs), its offsets relative to the block.
    fn rank(&mut self, r: u32, data: &[u8]) -> Result<(), GoalError> {
        let num_ranks = self.builder.num_ranks();
        let builder = &mut self.builder;
        let rank = |m: String| err(format!("rank {r}: {m}"));
        let block = Bytes { data };
        let n = block.u32(0, &|| format!("rank {r}: operations count"))? as usize;
        let roots = block.u32(4, &|| format!("rank {r}: independent operations count"))? as usize;
        let records_at = 8usize
            .checked_add(roots.checked_mul(4).ok_or_else(|| rank(format!("{roots} independent operations")))?)
            .ok_or_else(|| rank(format!("{roots} independent operations")))?;
        let appendix_at = n
            .checked_mul(RECORD)
            .and_then(|x| x.checked_add(records_at))
            .filter(|&x| x <= block.data.len())
            .ok_or_else(|| {
                rank(format!(
                    "{n} operations and {roots} independent ones do not fit in its block of {} bytes",
                    block.data.len()
                ))
            })?;
        if builder.num_ops() + n > MAX_OPS as usize {
            return Err(rank(format!("more than {MAX_OPS} operations in the file")));
        }
        let appendix_len = (block.data.len() - appendix_at) / 4;
        if (block.data.len() - appendix_at) % 4 != 0 {
            return Err(rank(format!(
                "the dependency appendix is {} bytes, not a whole number of indices",
                block.data.len() - appendix_at
            )));
        }
        let mut recs = Vec::with_capacity(n);
        for k in 0..n {
            let at = records_at + k * RECORD;
            let f = |field: &'static str| move || format!("rank {r}: #{k}: {field}");
            let kind = match block.u8(at + 4, &f("type"))? {
                1 => OpKind::Send,
                2 => OpKind::Recv,
                3 => OpKind::Calc,
                t => return Err(rank(format!("#{k}: type {t} is not send (1), recv (2) or calc (3)"))),
            };
            let rec = Record {
                deps: block.u32(at, &f("dependencies count"))?,
                kind,
                peer: block.u32(at + 5, &f("peer"))?,
                size: block.u64(at + 9, &f("size"))?,
                tag: block.u32(at + 17, &f("tag"))?,
                cpu: block.u8(at + 21, &f("cpu"))?,
                nic: block.u8(at + 22, &f("nic"))?,
                end_waiters: (
                    block.u32(at + 23, &f("end-waiters count"))?,
                    block.u32(at + 27, &f("end-waiters index"))?,
                ),
                start_waiters: (
                    block.u32(at + 31, &f("start-waiters count"))?,
                    block.u32(at + 35, &f("start-waiters index"))?,
                ),
            };
            match kind {
                OpKind::Send if rec.peer >= num_ranks => {
                    return Err(rank(format!(
                        "#{k}: send to {}: no such rank (num_ranks {num_ranks})",
                        rec.peer as i64
                    )))
                }
                OpKind::Send if rec.tag == ANY_TAG => {
                    return Err(rank(format!("#{k}: send tag -1: only a receive may take any tag")))
                }
                OpKind::Recv if rec.peer >= num_ranks && rec.peer != ANY_SOURCE => {
                    return Err(rank(format!("#{k}: recv from {}: no such rank (num_ranks {num_ranks})", rec.peer)))
                }
                _ => {}
            }
            recs.push(rec);
        }
        // The edges: each names operations within the rank, from inside the appendix.
        let mut indeg = vec![0u32; n];
        let first = builder.num_ops() as u32;
        for (k, rec) in recs.iter().enumerate() {
            let op = builder.op(Rank(r), rec.kind, rec.size, rec.peer, rec.tag, rec.cpu, "")?;
            debug_assert_eq!(op.0, first + k as u32);
            if rec.nic != 0 {
                self.nics.push((op, rec.nic));
            }
        }
        for (k, rec) in recs.iter().enumerate() {
            for (start_dep, (count, from)) in [(false, rec.end_waiters), (true, rec.start_waiters)] {
                let which = if start_dep { "start-waiters" } else { "end-waiters" };
                if count == 0 {
                    continue; // its index is undefined (txt2bin writes 999 or -1 there)
                }
                let (count, from) = (count as usize, from as usize);
                if from.checked_add(count).is_none_or(|e| e > appendix_len) {
                    return Err(rank(format!(
                        "#{k}: {which} {from} … {} are outside the appendix of {appendix_len} indices",
                        from.saturating_add(count)
                    )));
                }
                for i in from..from + count {
                    let w = block.u32(appendix_at + 4 * i, &|| format!("rank {r}: #{k}: {which}"))? as usize;
                    if w >= n {
                        return Err(rank(format!("#{k}: {which} name #{w}, and the rank has {n} operations")));
                    }
                    indeg[w] += 1;
                    let (waiter, awaited) = (OpId(first + w as u32), OpId(first + k as u32));
                    if start_dep {
                        builder.irequires(waiter, awaited)?;
                    } else {
                        builder.requires(waiter, awaited)?;
                    }
                }
            }
        }
        for (k, rec) in recs.iter().enumerate() {
            if rec.deps != indeg[k] {
                return Err(rank(format!(
                    "#{k}: its dependencies count is {}, and {} operations name it as waiting for them",
                    rec.deps, indeg[k]
                )));
            }
        }
        let mut listed = vec![false; n];
        for i in 0..roots {
            let k = block.u32(8 + 4 * i, &|| format!("rank {r}: independent operation {i}"))? as usize;
            if k >= n || indeg[k] != 0 || listed[k] {
                return Err(rank(format!(
                    "independent operation {i} is #{k}, which {}",
                    if k >= n {
                        format!("is not one of its {n} operations")
                    } else if listed[k] {
                        "is listed twice".to_string()
                    } else {
                        format!("waits for {} others", indeg[k])
                    }
                )));
            }
            listed[k] = true;
        }
        if let Some(k) = (0..n).find(|&k| indeg[k] == 0 && !listed[k]) {
            return Err(rank(format!(
                "#{k} waits for nothing but is not listed as independent: LogGOPSim would never start it"
            )));
        }
        Ok(())
    }
}

/// `trace` in the binary form `txt2bin` writes for its text (module docs): ranks in order, each
/// rank's operations in order, independent operations in order, waiters in successor order.
pub fn write_binary(t: &Trace) -> Vec<u8> {
    let p = t.num_ranks() as usize;
    let mut out = Vec::with_capacity(8 + 6 + 16 * p + t.num_ops() * (RECORD + 4) + t.num_deps() * 4);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&t.num_ranks().to_le_bytes());
    out.push(t.max_cpu);
    out.push(t.max_nic);
    let table = out.len();
    out.resize(table + 16 * p, 0);
    let mut indeg = vec![0u32; t.num_ops()];
    for &s in &t.succ {
        indeg[(s & !crate::trace::START_DEP) as usize] += 1;
    }
    for r in 0..t.num_ranks() {
        let ops = t.ops_of(Rank(r));
        let first = ops.start;
        let start = (out.len() - 8) as u64;
        out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
        let roots: Vec<u32> = ops.clone().filter(|&o| indeg[o as usize] == 0).map(|o| o - first).collect();
        out.extend_from_slice(&(roots.len() as u32).to_le_bytes());
        roots.iter().for_each(|k| out.extend_from_slice(&k.to_le_bytes()));
        let mut appendix: Vec<u32> = Vec::new();
        for o in ops.clone() {
            let op = t.op(OpId(o));
            out.extend_from_slice(&indeg[o as usize].to_le_bytes());
            out.push(op.kind as u8);
            out.extend_from_slice(&op.peer.to_le_bytes());
            out.extend_from_slice(&op.size.to_le_bytes());
            out.extend_from_slice(&op.tag.to_le_bytes());
            out.push(op.cpu);
            out.push(op.nic);
            for kind in [crate::DepKind::Requires, crate::DepKind::Irequires] {
                let at = appendix.len() as u32;
                appendix.extend(t.successors(OpId(o)).filter(|&(_, d)| d == kind).map(|(w, _)| w.0 - first));
                out.extend_from_slice(&(appendix.len() as u32 - at).to_le_bytes());
                out.extend_from_slice(&at.to_le_bytes());
            }
        }
        appendix.iter().for_each(|k| out.extend_from_slice(&k.to_le_bytes()));
        let end = (out.len() - 8) as u64;
        out[table + 16 * r as usize..][..8].copy_from_slice(&start.to_le_bytes());
        out[table + 16 * r as usize + 8..][..8].copy_from_slice(&end.to_le_bytes());
    }
    out
}
