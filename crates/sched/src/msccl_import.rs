//! Import of MSCCL XML programs (the `msccl-tools` compiler output, and everything
//! [`crate::msccl`] exports) into a [`Schedule`], proven by the [`crate::check`]er before it
//! is used. The inverse of the export: `to_msccl_xml` then [`from_msccl_xml`] gives a schedule
//! that moves the same blocks between the same ranks (tested over the registry).
//!
//! # What is read
//!
//! A small reader of its own (the format is flat: elements with attributes, no text; a
//! dependency would be a second XML stack for 150 lines): optional `<?xml …?>` declaration and
//! comments, single- or double-quoted attributes, the five named entities and numeric
//! character references. Then `<algo name proto nchannels nchunksperloop ngpus coll inplace>`
//! (`minBytes`, `maxBytes`, `outofplace` are allowed and ignored), per rank `<gpu id i_chunks
//! o_chunks s_chunks>` in id order, `<tb id send recv chan>` in id order, `<step s type srcbuf
//! srcoff dstbuf dstoff cnt depid deps hasdep>` numbered from 0 (`depid`, `deps`: `-1` or
//! absent for none; `hasdep` absent = 0). Every error names the line and the element, e.g.
//! `line 14: <step s="3">: type "xyz" is not an MSCCL step type`.
//!
//! # Semantics
//!
//! As the MSCCL executor runs it: each threadblock runs its steps in order; a step with
//! `depid`/`deps` waits until step `deps` of threadblock `depid` of its GPU has completed (that
//! step must have `hasdep="1"`, or the executor would wait forever); a send is buffered and
//! the k-th send on threadblock `send=q chan=c` of GPU `a` is received by the k-th receive on
//! the threadblock `recv=a chan=c` of GPU `q` (FIFO per sender, receiver and channel). Step
//! types: `s` send `src`; `r` receive into `dst`; `rrc` `dst = src ⊕ incoming`; `rcs` receive
//! into `dst` and send it on; `rrcs` `dst = src ⊕ incoming`, sent on; `rrs` `src ⊕ incoming`
//! sent on (not stored); `re` `dst ⊕= src`; `cpy` `dst = src`; `nop` only waits. Buffers `i`,
//! `o` and `s` (scratch); in place (`inplace="1"`) the output aliases the input as in MSCCL:
//! allreduce `o = i`, reduce-scatter `o[x] = i[r·k + x]`, allgather `i[x] = o[r·k + x]` (`k =
//! nchunksperloop / ngpus`). Chunk `b` of that one vector is IR block `b`. An all-to-all is out
//! of place (`inplace="0"`, msccl-tools' `AllToAll`): the vector holds every rank's input,
//! `ngpus · nchunksperloop` blocks, input chunk `d·k + j` of rank `s` and output chunk `s·k + j`
//! of rank `d` both being block `s·nchunksperloop + d·k + j` (the IR's sender-major order), and
//! the `cpy` of a rank's own chunks from input to output is required and moves nothing.
//!
//! The importer replays the program once with vector clocks (one per threadblock): a step that
//! can never run (a dependency cycle, a receive with no send) is a deadlock error, a send never
//! received an error, and two accesses to a chunk, one a write, that no chain of program order,
//! dependencies and messages orders are a race error (the result would depend on timing).
//!
//! # Mapping to the IR, and what is refused
//!
//! The IR has one vector per rank, and a block keeps its index: a receive puts the sender's
//! block `b` into block `b`, copying or reducing. So:
//! - a received chunk must land at the index it was sent from (`r`/`rrc`/`rcs`/`rrcs` into the
//!   vector, or via scratch);
//! - scratch only stages receives: `r` into scratch, then `cpy` (copy) or `re` (reduce) of
//!   those chunks into their place in the vector is the IR receive (several `re`/`cpy` may each
//!   take part of a message); every staged chunk must be taken into place exactly once;
//! - refused: sends from scratch, `rrc`/`rcs`/`rrcs`/`rrs` with scratch operands, `rrc` whose
//!   `src` is not its `dst`, `re`/`cpy` that do not read a staged receive or write anything but
//!   the vector (local arithmetic between a rank's own chunks has no IR form; an all-to-all's
//!   copy of its own chunks is the exception above), out-of-place programs other than
//!   all-to-all, an in-place all-to-all, output runs of an all-to-all that span two senders,
//!   collectives other than allreduce, reduce-scatter, allgather, broadcast, reduce and
//!   all-to-all;
//! - `rrs` becomes a reducing receive then a send of the same blocks; it changes the local
//!   chunk, which MSCCL leaves as it was, so reading that chunk again before it is overwritten,
//!   or ending with it in the result, is refused.
//!
//! Fused receive-and-send steps become a receive, then the send in a later IR step. IR steps
//! are the smallest levels that respect every order of the replay: along program order,
//! dependencies and messages, a send comes after every write before it (a later step: IR sends
//! read the values at the start of a step), a write no earlier than anything before it (the
//! same step is fine: receives are applied at the end, in the order listed), and a message's
//! send and every receive that takes it into place share a step (the IR matches them within a
//! step). A program that needs a message sent before something that must precede its receive
//! (possible with MSCCL's buffered sends) has no such levels and is refused. Consecutive
//! receives of one step from one peer with one op are merged into one transfer (as the export
//! splits them), and the sends follow.

use crate::check::check;
use crate::ir::{Blocks, Collective, RecvOp, Schedule, Transfer};
use std::collections::HashMap;

/// Largest number of chunks of one buffer, of ranks times chunks, and of threadblocks times
/// steps the importer takes (its replay keeps a vector clock per threadblock).
const MAX_CHUNKS: u64 = 1 << 20;
const MAX_RANK_CHUNKS: u64 = 1 << 24;
const MAX_CLOCK_WORK: u64 = 1 << 28;

// ---------------------------------------------------------------------------------------------
// The XML reader.

/// One element: its name, attributes in order, children, and the line it starts on.
#[derive(Debug)]
struct Elem {
    name: String,
    line: usize,
    attrs: Vec<(String, String)>,
    children: Vec<Elem>,
}

/// MSCCL XML nests four deep (`algo > gpu > tb > step`); deeper input is refused before it is
/// built (so dropping the tree never recurses far).
const MAX_DEPTH: usize = 4;

fn decode_entities(v: &str, line: usize) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let Some(end) = rest[i..].find(';') else {
            return Err(format!("line {line}: unterminated entity in \"{v}\""));
        };
        let ent = &rest[i + 1..i + end];
        let c = match ent {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(h) = ent.strip_prefix("#x") {
                    u32::from_str_radix(h, 16).ok()
                } else if let Some(d) = ent.strip_prefix('#') {
                    d.parse::<u32>().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32).ok_or_else(|| format!("line {line}: unknown entity &{ent};"))?
            }
        };
        out.push(c);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b':' | b'.')
}

/// Parses the document into its root element.
fn parse_xml(text: &str) -> Result<Elem, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut stack: Vec<Elem> = Vec::new();
    let mut root: Option<Elem> = None;
    // Advances over `n` bytes, counting lines.
    let adv = |i: &mut usize, line: &mut usize, n: usize| {
        *line += b[*i..*i + n].iter().filter(|&&c| c == b'\n').count();
        *i += n;
    };
    let attach = |e: Elem, stack: &mut Vec<Elem>, root: &mut Option<Elem>| -> Result<(), String> {
        match stack.last_mut() {
            Some(parent) => parent.children.push(e),
            None if root.is_none() => *root = Some(e),
            None => return Err(format!("line {}: <{}>: a second root element", e.line, e.name)),
        }
        Ok(())
    };
    while i < b.len() {
        if b[i] != b'<' {
            let end = text[i..].find('<').map_or(b.len(), |k| i + k);
            if let Some(k) = text[i..end].find(|c: char| !c.is_whitespace()) {
                let at = line + text[i..i + k].matches('\n').count();
                return Err(format!("line {at}: text outside a tag (MSCCL XML has none)"));
            }
            let n = end - i;
            adv(&mut i, &mut line, n);
            continue;
        }
        let rest = &text[i..];
        if rest.starts_with("<?") || rest.starts_with("<!--") {
            let close = if rest.starts_with("<?") { "?>" } else { "-->" };
            let Some(k) = rest.find(close) else {
                return Err(format!(
                    "line {line}: unterminated {}",
                    if close == "?>" { "declaration" } else { "comment" }
                ));
            };
            adv(&mut i, &mut line, k + close.len());
            continue;
        }
        if rest.starts_with("<!") {
            return Err(format!("line {line}: DTDs and CDATA are not part of MSCCL XML"));
        }
        let name_at = |i: &mut usize| -> String {
            let s = *i;
            while *i < b.len() && is_name_byte(b[*i]) {
                *i += 1;
            }
            text[s..*i].to_string()
        };
        if rest.starts_with("</") {
            i += 2;
            let name = name_at(&mut i);
            while i < b.len() && b[i].is_ascii_whitespace() {
                adv(&mut i, &mut line, 1);
            }
            if b.get(i) != Some(&b'>') {
                return Err(format!("line {line}: malformed closing tag </{name}"));
            }
            i += 1;
            let Some(e) = stack.pop() else {
                return Err(format!("line {line}: </{name}> closes no open element"));
            };
            if e.name != name {
                return Err(format!("line {line}: </{name}> closes <{}> opened at line {}", e.name, e.line));
            }
            attach(e, &mut stack, &mut root)?;
            continue;
        }
        i += 1;
        let name = name_at(&mut i);
        if name.is_empty() {
            return Err(format!("line {line}: '<' not followed by an element name"));
        }
        if stack.len() >= MAX_DEPTH {
            return Err(format!(
                "line {line}: <{name}> is nested {} deep; MSCCL XML is algo > gpu > tb > step",
                stack.len() + 1
            ));
        }
        let mut e = Elem { name, line, attrs: Vec::new(), children: Vec::new() };
        loop {
            let ws = i;
            while i < b.len() && b[i].is_ascii_whitespace() {
                adv(&mut i, &mut line, 1);
            }
            match b.get(i) {
                None => return Err(format!("line {}: <{}> is not closed", e.line, e.name)),
                Some(b'>') => {
                    i += 1;
                    stack.push(e);
                    break;
                }
                Some(b'/') if b.get(i + 1) == Some(&b'>') => {
                    i += 2;
                    attach(e, &mut stack, &mut root)?;
                    break;
                }
                Some(&c) if is_name_byte(c) && ws < i => {
                    let k = name_at(&mut i);
                    while i < b.len() && b[i].is_ascii_whitespace() {
                        adv(&mut i, &mut line, 1);
                    }
                    if b.get(i) != Some(&b'=') {
                        return Err(format!("line {line}: <{}>: attribute {k} has no value", e.name));
                    }
                    i += 1;
                    while i < b.len() && b[i].is_ascii_whitespace() {
                        adv(&mut i, &mut line, 1);
                    }
                    let q = match b.get(i) {
                        Some(&q @ (b'"' | b'\'')) => q,
                        _ => return Err(format!("line {line}: <{}>: the value of {k} is not quoted", e.name)),
                    };
                    i += 1;
                    let s = i;
                    while i < b.len() && b[i] != q {
                        if b[i] == b'<' {
                            return Err(format!("line {line}: <{}>: '<' in the value of {k}", e.name));
                        }
                        adv(&mut i, &mut line, 1);
                    }
                    if i == b.len() {
                        return Err(format!("line {}: <{}>: the value of {k} is not terminated", e.line, e.name));
                    }
                    let v = decode_entities(&text[s..i], line)?;
                    i += 1;
                    if e.attrs.iter().any(|(a, _)| *a == k) {
                        return Err(format!("line {line}: <{}>: attribute {k} given twice", e.name));
                    }
                    e.attrs.push((k, v));
                }
                Some(&c) => {
                    return Err(format!("line {line}: <{}>: unexpected {:?} in the tag", e.name, c as char));
                }
            }
        }
    }
    if let Some(e) = stack.last() {
        return Err(format!("line {}: <{}> is not closed", e.line, e.name));
    }
    root.ok_or_else(|| "the document has no element".into())
}

impl Elem {
    /// `<step s="3">`, `<tb id="1">`: how errors name the element.
    fn label(&self) -> String {
        let key = match self.name.as_str() {
            "step" => "s",
            "gpu" | "tb" => "id",
            _ => "",
        };
        match self.attrs.iter().find(|(k, _)| k == key) {
            Some((k, v)) => format!("<{} {k}=\"{v}\">", self.name),
            None => format!("<{}>", self.name),
        }
    }
    fn err<T>(&self, reason: impl std::fmt::Display) -> Result<T, String> {
        Err(format!("line {}: {}: {reason}", self.line, self.label()))
    }
    fn opt(&self, k: &str) -> Option<&str> {
        self.attrs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
    }
    fn get(&self, k: &str) -> Result<&str, String> {
        match self.opt(k) {
            Some(v) => Ok(v),
            None => self.err(format!("missing attribute {k}")),
        }
    }
    fn int_of(&self, k: &str, v: &str) -> Result<i64, String> {
        v.trim().parse::<i64>().or_else(|_| self.err(format!("{k}=\"{v}\" is not an integer")))
    }
    fn int(&self, k: &str) -> Result<i64, String> {
        let v = self.get(k)?;
        self.int_of(k, v)
    }
    fn int_or(&self, k: &str, default: i64) -> Result<i64, String> {
        match self.opt(k) {
            Some(v) => self.int_of(k, v),
            None => Ok(default),
        }
    }
    /// An integer attribute within `lo..=hi`.
    fn ranged(&self, k: &str, lo: i64, hi: i64) -> Result<i64, String> {
        let v = self.int(k)?;
        if v < lo || v > hi {
            return self.err(format!("{k}=\"{v}\" is not within {lo}..={hi}"));
        }
        Ok(v)
    }
}

// ---------------------------------------------------------------------------------------------
// The program.

/// An MSCCL buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buf {
    Input,
    Output,
    Scratch,
}

/// The step types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Send,
    Recv,
    RecvReduceCopy,
    RecvCopySend,
    RecvReduceSend,
    RecvReduceCopySend,
    Reduce,
    Copy,
    Nop,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "s" => Ty::Send,
            "r" => Ty::Recv,
            "rrc" => Ty::RecvReduceCopy,
            "rcs" => Ty::RecvCopySend,
            "rrs" => Ty::RecvReduceSend,
            "rrcs" => Ty::RecvReduceCopySend,
            "re" => Ty::Reduce,
            "cpy" => Ty::Copy,
            "nop" => Ty::Nop,
            _ => return None,
        })
    }
    fn receives(self) -> bool {
        matches!(self, Ty::Recv | Ty::RecvReduceCopy | Ty::RecvCopySend | Ty::RecvReduceSend | Ty::RecvReduceCopySend)
    }
    fn sends(self) -> bool {
        matches!(self, Ty::Send | Ty::RecvCopySend | Ty::RecvReduceSend | Ty::RecvReduceCopySend)
    }
}

#[derive(Debug)]
struct XStep {
    line: usize,
    label: String,
    ty: Ty,
    src: (Buf, i64),
    dst: (Buf, i64),
    cnt: u32,
    dep: Option<(usize, usize)>,
    hasdep: bool,
}

#[derive(Debug)]
struct XTb {
    line: usize,
    label: String,
    send: Option<u32>,
    recv: Option<u32>,
    chan: u32,
    steps: Vec<XStep>,
}

#[derive(Debug)]
struct XGpu {
    chunks: [u32; 3],
    tbs: Vec<XTb>,
}

/// A parsed and structurally validated MSCCL program.
#[derive(Debug)]
struct XAlgo {
    name: String,
    collective: Collective,
    nchunks: u32,
    /// Chunks of the IR's vector: `nchunks`, or `p · nchunks` for an all-to-all.
    vlen: u32,
    gpus: Vec<XGpu>,
}

fn parse_buf(e: &Elem, k: &str) -> Result<Buf, String> {
    match e.get(k)? {
        "i" => Ok(Buf::Input),
        "o" => Ok(Buf::Output),
        "s" => Ok(Buf::Scratch),
        v => e.err(format!("{k}=\"{v}\" is not an MSCCL buffer (i, o or s)")),
    }
}

fn load(text: &str) -> Result<XAlgo, String> {
    let root = parse_xml(text)?;
    if root.name != "algo" {
        return root.err("the root element must be <algo>");
    }
    let name = root.get("name")?.to_string();
    let ngpus = root.ranged("ngpus", 1, crate::registry::MAX_RANKS as i64)? as u32;
    let nchunks = root.ranged("nchunksperloop", 1, MAX_CHUNKS as i64)? as u32;
    root.ranged("nchannels", 1, 1 << 16)?;
    if let Some(p) = root.opt("proto") {
        if !["Simple", "LL", "LL128"].contains(&p) {
            return root.err(format!("proto=\"{p}\" is not an MSCCL protocol (Simple, LL, LL128)"));
        }
    }
    let inplace = root.ranged("inplace", 0, 1)? == 1;
    let root_rank = root.int_or("root", 0)?;
    if root_rank < 0 || root_rank >= ngpus as i64 {
        return root.err(format!("root=\"{root_rank}\" is not a rank of {ngpus}"));
    }
    let collective = match root.get("coll")? {
        "allreduce" => Collective::Allreduce,
        "reducescatter" | "reduce_scatter" => Collective::ReduceScatter,
        "allgather" => Collective::Allgather,
        "broadcast" => Collective::Broadcast { root: root_rank as u32 },
        "reduce" => Collective::Reduce { root: root_rank as u32 },
        "alltoall" => Collective::Alltoall,
        other => {
            return root.err(format!(
                "coll=\"{other}\" is not a collective the IR has (allreduce, reducescatter, allgather, broadcast, reduce, alltoall)"
            ))
        }
    };
    match (collective, inplace) {
        (Collective::Alltoall, true) => {
            return root.err(
                "inplace=\"1\": an in-place all-to-all overwrites a rank's outgoing chunks with incoming ones; the IR keeps every (sender, receiver) block apart, as MSCCL's out-of-place all-to-all does",
            )
        }
        (Collective::Alltoall, false) | (_, true) => {}
        (_, false) => {
            return root.err(
                "inplace=\"0\": out-of-place programs are supported for alltoall only (the IR runs the other collectives in place on one vector)",
            )
        }
    }
    if matches!(collective, Collective::ReduceScatter | Collective::Allgather | Collective::Alltoall)
        && nchunks % ngpus != 0
    {
        return root.err(format!("nchunksperloop=\"{nchunks}\" does not split evenly over {ngpus} ranks"));
    }
    if root.children.len() != ngpus as usize {
        return root.err(format!("{} <gpu> elements for ngpus=\"{ngpus}\"", root.children.len()));
    }
    let mut gpus = Vec::with_capacity(ngpus as usize);
    let mut rank_chunks = 0u64;
    for (r, g) in root.children.iter().enumerate() {
        if g.name != "gpu" {
            return g.err("expected <gpu> inside <algo>");
        }
        if g.int("id")? != r as i64 {
            return g.err(format!("<gpu> number {r} must have id=\"{r}\""));
        }
        let mut chunks = [0u32; 3];
        for (j, k) in ["i_chunks", "o_chunks", "s_chunks"].iter().enumerate() {
            chunks[j] = g.ranged(k, 0, MAX_CHUNKS as i64)? as u32;
            rank_chunks += chunks[j] as u64;
        }
        if rank_chunks + nchunks as u64 * (r as u64 + 1) > MAX_RANK_CHUNKS {
            return g.err(format!("the program has more than {MAX_RANK_CHUNKS} chunks in all; too large to import"));
        }
        let mut tbs = Vec::with_capacity(g.children.len());
        for (t, tb) in g.children.iter().enumerate() {
            if tb.name != "tb" {
                return tb.err("expected <tb> inside <gpu>");
            }
            if tb.int("id")? != t as i64 {
                return tb.err(format!("<tb> number {t} of this <gpu> must have id=\"{t}\""));
            }
            let peer = |k: &str| -> Result<Option<u32>, String> {
                let q = tb.ranged(k, -1, ngpus as i64 - 1)?;
                if q == r as i64 {
                    return tb.err(format!("{k}=\"{q}\" is the GPU itself"));
                }
                Ok((q >= 0).then_some(q as u32))
            };
            let (send, recv) = (peer("send")?, peer("recv")?);
            let chan = tb.ranged("chan", 0, 1 << 16)? as u32;
            let mut steps = Vec::with_capacity(tb.children.len());
            for (k, st) in tb.children.iter().enumerate() {
                if st.name != "step" {
                    return st.err("expected <step> inside <tb> (the old, executor format)");
                }
                if st.int("s")? != k as i64 {
                    return st.err(format!("<step> number {k} of this <tb> must have s=\"{k}\""));
                }
                let tyname = st.get("type")?;
                let Some(ty) = Ty::parse(tyname) else {
                    return st.err(format!("type \"{tyname}\" is not an MSCCL step type"));
                };
                let (depid, deps) = (st.int_or("depid", -1)?, st.int_or("deps", -1)?);
                let dep = match (depid, deps) {
                    (-1, -1) => None,
                    (a, d) if a >= 0 && d >= 0 => Some((a as usize, d as usize)),
                    _ => return st.err(format!("depid=\"{depid}\" deps=\"{deps}\": both -1 or both a step")),
                };
                let hasdep = match st.int_or("hasdep", 0)? {
                    0 => false,
                    1 => true,
                    h => return st.err(format!("hasdep=\"{h}\" is not 0 or 1")),
                };
                let (cnt, src, dst) = if ty == Ty::Nop {
                    (0, (Buf::Input, -1), (Buf::Output, -1))
                } else {
                    let cnt = st.ranged("cnt", 1, MAX_CHUNKS as i64)? as u32;
                    let src = (parse_buf(st, "srcbuf")?, st.int("srcoff")?);
                    let dst = (parse_buf(st, "dstbuf")?, st.int("dstoff")?);
                    (cnt, src, dst)
                };
                if ty.sends() && send.is_none() {
                    return st.err(format!("type \"{tyname}\" sends, but its <tb> has send=\"-1\""));
                }
                if ty.receives() && recv.is_none() {
                    return st.err(format!("type \"{tyname}\" receives, but its <tb> has recv=\"-1\""));
                }
                // Local operands must lie within their buffers (a send's dst and a receive's src
                // are the peer's, and not used).
                let (src_local, dst_local) = match ty {
                    Ty::Send => (true, false),
                    Ty::Recv | Ty::RecvCopySend => (false, true),
                    Ty::RecvReduceSend => (true, false),
                    Ty::Nop => (false, false),
                    _ => (true, true),
                };
                for (local, what, (buf, off)) in [(src_local, "src", src), (dst_local, "dst", dst)] {
                    let size = chunks[buf as usize] as i64;
                    if local && (off < 0 || off + cnt as i64 > size) {
                        return st.err(format!(
                            "{what}off=\"{off}\" cnt=\"{cnt}\" is beyond the {size} chunks of buffer {}",
                            ["i", "o", "s"][buf as usize]
                        ));
                    }
                }
                steps.push(XStep { line: st.line, label: st.label(), ty, src, dst, cnt, dep, hasdep });
            }
            tbs.push(XTb { line: tb.line, label: tb.label(), send, recv, chan, steps });
        }
        // Dependencies name existing steps of other threadblocks that set their flag.
        for tb in &tbs {
            for st in &tb.steps {
                if let Some((dt, ds)) = st.dep {
                    let Some(target) = tbs.get(dt).and_then(|t| t.steps.get(ds)) else {
                        return Err(format!(
                            "line {}: {}: depid=\"{dt}\" deps=\"{ds}\" names no step of this <gpu>",
                            st.line, st.label
                        ));
                    };
                    if !target.hasdep {
                        return Err(format!(
                            "line {}: {}: depends on step {ds} of <tb id=\"{dt}\"> (line {}), which has hasdep=\"0\" and so never signals",
                            st.line, st.label, target.line
                        ));
                    }
                }
            }
        }
        // One threadblock per (peer, channel) and direction.
        for (i, a) in tbs.iter().enumerate() {
            for b in &tbs[..i] {
                for (what, pa, pb) in [("send", a.send, b.send), ("recv", a.recv, b.recv)] {
                    if pa.is_some() && pa == pb && a.chan == b.chan {
                        return Err(format!(
                            "line {}: {}: {what}=\"{}\" on chan=\"{}\" is also the {what} peer of {} (line {})",
                            a.line,
                            a.label,
                            pa.unwrap_or(0),
                            a.chan,
                            b.label,
                            b.line
                        ));
                    }
                }
            }
        }
        gpus.push(XGpu { chunks, tbs });
    }
    // Every sending threadblock has a receiving one at its peer.
    for (a, g) in gpus.iter().enumerate() {
        for tb in &g.tbs {
            if let Some(q) = tb.send {
                if !gpus[q as usize].tbs.iter().any(|t| t.recv == Some(a as u32) && t.chan == tb.chan) {
                    return Err(format!(
                        "line {}: {}: sends to gpu {q} on chan=\"{}\", which has no <tb> with recv=\"{a}\" on that channel",
                        tb.line, tb.label, tb.chan
                    ));
                }
            }
        }
    }
    // An all-to-all's vector holds every rank's input: p · nchunksperloop blocks.
    let vlen = if collective == Collective::Alltoall { nchunks * ngpus } else { nchunks };
    Ok(XAlgo { name, collective, nchunks, vlen, gpus })
}

// ---------------------------------------------------------------------------------------------
// Replay.

/// An IR effect of a node: none, a send (reads at the start of its IR step), or a write of the
/// vector (a receive applied at the end of its IR step).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    None,
    Send,
    Write,
}

struct Node {
    effect: Effect,
    preds: Vec<u32>,
    /// Line and label of the step, for errors.
    step: (u32, u32, u32),
}

/// A message in flight or delivered.
struct Msg {
    from: u32,
    /// The IR send node.
    send_node: u32,
    /// First vector chunk sent (blocks `first..first + cnt`).
    first: u32,
    cnt: u32,
    /// Per chunk: taken into place already.
    taken: Vec<bool>,
    /// Where it was sent and where it was received (step ids, for errors).
    sent_at: (u32, u32, u32),
    recv_at: Option<(u32, u32, u32)>,
}

/// One IR receive: part of a message taken into place by `node` on rank `to`.
struct Part {
    msg: u32,
    to: u32,
    node: u32,
    first: u32,
    cnt: u32,
    op: RecvOp,
}

/// Last write and reads since (threadblock, clock, step) of one chunk.
#[derive(Clone, Default)]
struct Access {
    write: Option<(u32, u32, (u32, u32, u32))>,
    reads: Vec<(u32, u32, (u32, u32, u32))>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Staged {
    Nothing,
    /// Chunk `q` of message `m`.
    Msg(u32, u32),
}

/// Messages in flight on a connection: (message, the sender's vector clock).
type Fifo = std::collections::VecDeque<(u32, Vec<u32>)>;

struct Replay<'a> {
    x: &'a XAlgo,
    /// Global threadblock index of (gpu, tb): `base[gpu] + tb`.
    base: Vec<u32>,
    /// Per global threadblock: next step, vector clock.
    pc: Vec<usize>,
    vc: Vec<Vec<u32>>,
    /// Vector clock after (global tb, step), for the steps someone depends on.
    snaps: HashMap<(u32, usize), Vec<u32>>,
    /// Per gpu: accesses of the vector and of scratch; scratch contents; `rrs` marks.
    vec_acc: Vec<Vec<Access>>,
    scr_acc: Vec<Vec<Access>>,
    staged: Vec<Vec<Staged>>,
    stale: Vec<Vec<Option<(u32, u32, u32)>>>,
    /// All-to-all: per rank, which of its own chunks (input to output) a `cpy` moved.
    own_copied: Vec<Vec<bool>>,
    /// Per connection (from, to, chan): messages in flight, each with the sender's clock.
    fifo: HashMap<(u32, u32, u32), Fifo>,
    msgs: Vec<Msg>,
    parts: Vec<Part>,
    nodes: Vec<Node>,
    /// Per global tb: the last node of its last completed step.
    last_node: Vec<Option<u32>>,
    /// Last node of (global tb, step), for dependencies.
    step_last: HashMap<(u32, usize), u32>,
}

fn label_of(x: &XAlgo, at: (u32, u32, u32)) -> String {
    let st = &x.gpus[at.0 as usize].tbs[at.1 as usize].steps[at.2 as usize];
    format!("line {}: {}", st.line, st.label)
}

impl<'a> Replay<'a> {
    fn new(x: &'a XAlgo) -> Result<Replay<'a>, String> {
        let mut base = Vec::with_capacity(x.gpus.len());
        let mut total = 0u32;
        let mut steps = 0u64;
        for g in &x.gpus {
            base.push(total);
            total += g.tbs.len() as u32;
            steps += g.tbs.iter().map(|t| t.steps.len() as u64).sum::<u64>();
        }
        if total as u64 * (steps + total as u64) > MAX_CLOCK_WORK {
            return Err(format!(
                "{total} threadblocks and {steps} steps are too many to check (at most {MAX_CLOCK_WORK} threadblocks × steps)"
            ));
        }
        let n = total as usize;
        Ok(Replay {
            x,
            base,
            pc: vec![0; n],
            vc: vec![vec![0; n]; n],
            snaps: HashMap::new(),
            vec_acc: x.gpus.iter().map(|_| vec![Access::default(); x.vlen as usize]).collect(),
            scr_acc: x.gpus.iter().map(|g| vec![Access::default(); g.chunks[2] as usize]).collect(),
            staged: x.gpus.iter().map(|g| vec![Staged::Nothing; g.chunks[2] as usize]).collect(),
            stale: x.gpus.iter().map(|_| vec![None; x.vlen as usize]).collect(),
            own_copied: match x.collective {
                Collective::Alltoall => {
                    x.gpus.iter().map(|_| vec![false; (x.nchunks / x.gpus.len() as u32) as usize]).collect()
                }
                _ => Vec::new(),
            },
            fifo: HashMap::new(),
            msgs: Vec::new(),
            parts: Vec::new(),
            nodes: Vec::new(),
            last_node: vec![None; n],
            step_last: HashMap::new(),
        })
    }

    /// The vector chunk that chunk `off` of `buf` is on `gpu` (in place), or `None` for scratch.
    /// An all-to-all (`n` = nchunksperloop, `c = n / p` chunks per pair): input chunk
    /// `d·c + j` of rank `s` and output chunk `s·c + j` of rank `d` are both block
    /// `(s·p + d)·c + j` = `s·n + d·c + j`, the IR's (sender, receiver) order.
    fn vec_index(&self, gpu: u32, buf: Buf, off: i64) -> Option<u32> {
        let k = self.x.nchunks / self.x.gpus.len() as u32;
        let n = self.x.nchunks;
        let off = off as u32;
        match (buf, self.x.collective) {
            (Buf::Scratch, _) => None,
            (Buf::Output, Collective::ReduceScatter) => Some(gpu * k + off),
            (Buf::Input, Collective::Allgather) => Some(gpu * k + off),
            (Buf::Input, Collective::Alltoall) => Some(gpu * n + off),
            (Buf::Output, Collective::Alltoall) => Some((off / k) * n + gpu * k + off % k),
            _ => Some(off),
        }
    }

    /// Checks that the vector chunks of an operand exist (and, for an all-to-all's output, come
    /// from one sender: its chunks from two senders are not consecutive blocks).
    fn vec_range(&self, at: (u32, u32, u32), what: &str, buf: Buf, off: i64, cnt: u32) -> Result<u32, String> {
        let first = self.vec_index(at.0, buf, off).expect("not scratch");
        let k = self.x.nchunks / self.x.gpus.len() as u32;
        if self.x.collective == Collective::Alltoall
            && buf == Buf::Output
            && off as u64 % k as u64 + cnt as u64 > k as u64
        {
            return Err(format!(
                "{}: {what} output chunks {off}..{} hold the data of more than one sender ({k} chunks each); the IR moves one sender's blocks at a time",
                label_of(self.x, at),
                off as u64 + cnt as u64
            ));
        }
        if first as u64 + cnt as u64 > self.x.vlen as u64 {
            return Err(format!(
                "{}: {what} chunks {first}..{} of the vector are beyond its {} chunks",
                label_of(self.x, at),
                first as u64 + cnt as u64,
                self.x.vlen
            ));
        }
        Ok(first)
    }

    /// Records an access of `cnt` chunks at `first` of the vector (or scratch) of `at`'s gpu by
    /// global threadblock `g` with clock `vc`, refusing races.
    fn access(
        &mut self,
        at: (u32, u32, u32),
        g: u32,
        scratch: bool,
        first: u32,
        cnt: u32,
        write: bool,
    ) -> Result<(), String> {
        let vc = &self.vc[g as usize];
        let accs = if scratch { &mut self.scr_acc[at.0 as usize] } else { &mut self.vec_acc[at.0 as usize] };
        let buf = if scratch { "scratch" } else { "vector" };
        for c in first..first + cnt {
            let a = &mut accs[c as usize];
            let mut earlier = a.write.iter();
            let reads = if write { a.reads.as_slice() } else { &[] };
            if let Some(&(_, _, s)) = earlier.by_ref().chain(reads).find(|&&(h, t, _)| t > vc[h as usize]) {
                return Err(format!(
                    "{}: {} {buf} chunk {c}, which {} ({}) also accesses with no dependency or message ordering the two (a race)",
                    label_of(self.x, at),
                    if write { "writes" } else { "reads" },
                    label_of(self.x, s),
                    if scratch { "scratch" } else { "the same GPU" }
                ));
            }
            if write {
                a.write = Some((g, vc[g as usize], at));
                a.reads.clear();
            } else {
                a.reads.retain(|r| r.0 != g);
                a.reads.push((g, vc[g as usize], at));
            }
        }
        Ok(())
    }

    fn node(&mut self, effect: Effect, preds: Vec<u32>, at: (u32, u32, u32)) -> u32 {
        self.nodes.push(Node { effect, preds, step: at });
        self.nodes.len() as u32 - 1
    }

    /// Marks vector chunks read by `at`: refused if an `rrs` left them changed in the IR only.
    fn not_stale(&self, at: (u32, u32, u32), first: u32, cnt: u32) -> Result<(), String> {
        for c in first..first + cnt {
            if let Some(r) = self.stale[at.0 as usize][c as usize] {
                return Err(format!(
                    "{}: reads chunk {c}, which the rrs at {} left unchanged in MSCCL but reduced in the IR (it has no reduce-and-forward without storing)",
                    label_of(self.x, at),
                    label_of(self.x, r)
                ));
            }
        }
        Ok(())
    }

    /// Whether the next step of global threadblock `g` (gpu, tb) can run.
    fn ready(&self, gpu: u32, tb: u32) -> bool {
        let g = (self.base[gpu as usize] + tb) as usize;
        let t = &self.x.gpus[gpu as usize].tbs[tb as usize];
        let Some(st) = t.steps.get(self.pc[g]) else { return false };
        if let Some((dt, ds)) = st.dep {
            if self.pc[(self.base[gpu as usize] + dt as u32) as usize] <= ds {
                return false;
            }
        }
        if st.ty.receives() {
            let key = (t.recv.expect("validated"), gpu, t.chan);
            return self.fifo.get(&key).is_some_and(|q| !q.is_empty());
        }
        true
    }

    /// Runs the next step of (gpu, tb), which is ready.
    fn step(&mut self, gpu: u32, tb: u32) -> Result<(), String> {
        let x = self.x;
        let g = self.base[gpu as usize] + tb;
        let gu = g as usize;
        let t = &x.gpus[gpu as usize].tbs[tb as usize];
        let k = self.pc[gu];
        let st = &t.steps[k];
        let at = (gpu, tb, k as u32);
        let mut preds: Vec<u32> = self.last_node[gu].into_iter().collect();
        if let Some((dt, ds)) = st.dep {
            let dg = self.base[gpu as usize] + dt as u32;
            let snap = self.snaps.get(&(dg, ds)).expect("snapshot of a step with hasdep");
            for (a, b) in self.vc[gu].iter_mut().zip(snap) {
                *a = (*a).max(*b);
            }
            preds.extend(self.step_last.get(&(dg, ds)).copied());
        }
        let mut incoming = None;
        if st.ty.receives() {
            let key = (t.recv.expect("validated"), gpu, t.chan);
            let (m, mvc) = self.fifo.get_mut(&key).and_then(|q| q.pop_front()).expect("ready");
            for (a, b) in self.vc[gu].iter_mut().zip(&mvc) {
                *a = (*a).max(*b);
            }
            let msg = &mut self.msgs[m as usize];
            if msg.cnt != st.cnt {
                return Err(format!(
                    "{}: receives {} chunks, but the matching send ({}) sends {}",
                    label_of(x, at),
                    st.cnt,
                    label_of(x, msg.sent_at),
                    msg.cnt
                ));
            }
            msg.recv_at = Some(at);
            preds.push(msg.send_node);
            incoming = Some(m);
        }
        self.vc[gu][gu] += 1;
        let cnt = st.cnt;
        let refuse = |why: &str| -> Result<(), String> { Err(format!("{}: {why}", label_of(x, at))) };
        // The vector chunks of an operand, refusing scratch where the IR needs the vector.
        let vector = |me: &Self, what: &str, (buf, off): (Buf, i64)| -> Result<u32, String> {
            if buf == Buf::Scratch {
                return Err(format!(
                    "{}: its {what} is in scratch; the IR {}",
                    label_of(x, at),
                    if what == "src" && st.ty == Ty::Send {
                        "sends only chunks of the rank's vector"
                    } else {
                        "supports scratch only for staging a receive (r into scratch, then re or cpy into place)"
                    }
                ));
            }
            me.vec_range(at, what, buf, off, cnt)
        };
        let mut last;
        match st.ty {
            Ty::Nop => last = self.node(Effect::None, preds, at),
            Ty::Send => {
                let first = vector(self, "src", st.src)?;
                self.not_stale(at, first, cnt)?;
                self.access(at, g, false, first, cnt, false)?;
                last = self.node(Effect::Send, preds, at);
                self.send(at, g, last, first, cnt);
            }
            Ty::Recv if st.dst.0 == Buf::Scratch => {
                let m = incoming.expect("receives");
                let off = st.dst.1 as u32;
                self.access(at, g, true, off, cnt, true)?;
                for q in 0..cnt {
                    self.staged[gpu as usize][(off + q) as usize] = Staged::Msg(m, q);
                }
                last = self.node(Effect::None, preds, at);
            }
            Ty::Recv | Ty::RecvReduceCopy | Ty::RecvCopySend | Ty::RecvReduceSend | Ty::RecvReduceCopySend => {
                let m = incoming.expect("receives");
                let reduce = !matches!(st.ty, Ty::Recv | Ty::RecvCopySend);
                // The vector chunks written in the IR: dst, or rrs's src (reduced in place).
                let place = if st.ty == Ty::RecvReduceSend { st.src } else { st.dst };
                let first = vector(self, if st.ty == Ty::RecvReduceSend { "src" } else { "dst" }, place)?;
                if reduce && st.ty != Ty::RecvReduceSend {
                    let src = vector(self, "src", st.src)?;
                    if src != first {
                        return refuse(&format!(
                            "reduces chunks {src}.. into chunks {first}..; the IR reduces a received block into the same block"
                        ));
                    }
                }
                if reduce {
                    self.not_stale(at, first, cnt)?;
                    self.access(at, g, false, first, cnt, false)?;
                }
                if st.ty != Ty::RecvReduceSend {
                    self.access(at, g, false, first, cnt, true)?;
                }
                let w = self.node(Effect::Write, preds, at);
                self.take(at, m, 0, first, cnt, w, reduce)?;
                last = w;
                for c in first..first + cnt {
                    self.stale[gpu as usize][c as usize] = (st.ty == Ty::RecvReduceSend).then_some(at);
                }
                if st.ty.sends() {
                    last = self.node(Effect::Send, vec![w], at);
                    self.send(at, g, last, first, cnt);
                }
            }
            Ty::Copy if x.collective == Collective::Alltoall && st.src.0 == Buf::Input && st.dst.0 == Buf::Output => {
                // A rank's own chunks, input to output: the same blocks in the IR (in place).
                let first = vector(self, "src", st.src)?;
                if vector(self, "dst", st.dst)? != first {
                    return refuse("copies input chunks to another rank's place in the output; only a rank's own chunks are copied locally in an all-to-all");
                }
                self.access(at, g, false, first, cnt, false)?;
                let k = x.nchunks / x.gpus.len() as u32;
                for j in 0..cnt {
                    self.own_copied[gpu as usize][((st.dst.1 as u32 + j) % k) as usize] = true;
                }
                last = self.node(Effect::None, preds, at);
            }
            Ty::Reduce | Ty::Copy => {
                let reduce = st.ty == Ty::Reduce;
                if st.src.0 != Buf::Scratch {
                    return refuse(&format!(
                        "a local {} from the rank's own vector; the IR has no local arithmetic (only a received message staged in scratch may be taken into place)",
                        if reduce { "reduction" } else { "copy" }
                    ));
                }
                let first = vector(self, "dst", st.dst)?;
                let off = st.src.1 as u32;
                self.access(at, g, true, off, cnt, false)?;
                if reduce {
                    self.not_stale(at, first, cnt)?;
                    self.access(at, g, false, first, cnt, false)?;
                }
                self.access(at, g, false, first, cnt, true)?;
                for c in first..first + cnt {
                    self.stale[gpu as usize][c as usize] = None;
                }
                let w = self.node(Effect::Write, preds, at);
                // Runs of consecutive chunks of one message.
                let mut q = 0;
                while q < cnt {
                    let Staged::Msg(m, mq) = self.staged[gpu as usize][(off + q) as usize] else {
                        return refuse(&format!("reads scratch chunk {}, which holds no received message", off + q));
                    };
                    let mut n = 1;
                    while q + n < cnt && self.staged[gpu as usize][(off + q + n) as usize] == Staged::Msg(m, mq + n) {
                        n += 1;
                    }
                    self.take(at, m, mq, first + q, n, w, reduce)?;
                    q += n;
                }
                last = w;
            }
        }
        if st.hasdep {
            self.snaps.insert((g, k), self.vc[gu].clone());
        }
        self.step_last.insert((g, k), last);
        self.last_node[gu] = Some(last);
        self.pc[gu] += 1;
        Ok(())
    }

    fn send(&mut self, at: (u32, u32, u32), g: u32, node: u32, first: u32, cnt: u32) {
        let t = &self.x.gpus[at.0 as usize].tbs[at.1 as usize];
        let to = t.send.expect("validated");
        let m = self.msgs.len() as u32;
        self.msgs.push(Msg {
            from: at.0,
            send_node: node,
            first,
            cnt,
            taken: vec![false; cnt as usize],
            sent_at: at,
            recv_at: None,
        });
        let vc = self.vc[g as usize].clone();
        self.fifo.entry((at.0, to, t.chan)).or_default().push_back((m, vc));
    }

    /// Chunks `q..q + n` of message `m` are taken into vector chunks `first..` by `node`.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        at: (u32, u32, u32),
        m: u32,
        q: u32,
        first: u32,
        n: u32,
        node: u32,
        reduce: bool,
    ) -> Result<(), String> {
        let msg = &mut self.msgs[m as usize];
        if msg.first + q != first {
            return Err(format!(
                "{}: puts chunk {} sent by gpu {} ({}) at chunk {first}; the IR keeps a block at its index",
                label_of(self.x, at),
                msg.first + q,
                msg.from,
                label_of(self.x, msg.sent_at)
            ));
        }
        for j in q..q + n {
            if std::mem::replace(&mut msg.taken[j as usize], true) {
                return Err(format!(
                    "{}: takes chunk {} of the message received at {} into place a second time",
                    label_of(self.x, at),
                    msg.first + j,
                    label_of(self.x, msg.recv_at.expect("received"))
                ));
            }
        }
        let op = if reduce { RecvOp::ReduceIncomingFirst } else { RecvOp::Copy };
        self.parts.push(Part { msg: m, to: at.0, node, first, cnt: n, op });
        Ok(())
    }

    /// Runs every threadblock to completion (round-robin, each as far as it goes).
    fn run(&mut self) -> Result<(), String> {
        // Snapshots are kept only for the steps something depends on.
        let x = self.x;
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (r, gp) in x.gpus.iter().enumerate() {
            for t in 0..gp.tbs.len() {
                pairs.push((r as u32, t as u32));
            }
        }
        loop {
            let mut progress = false;
            for &(r, t) in &pairs {
                while self.ready(r, t) {
                    self.step(r, t)?;
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        for &(r, t) in &pairs {
            let g = (self.base[r as usize] + t) as usize;
            let tb = &x.gpus[r as usize].tbs[t as usize];
            if let Some(st) = tb.steps.get(self.pc[g]) {
                let why = match st.dep {
                    Some((dt, ds)) if self.pc[(self.base[r as usize] + dt as u32) as usize] <= ds => {
                        format!("step {ds} of <tb id=\"{dt}\">")
                    }
                    _ => format!("a message from gpu {} on chan=\"{}\"", tb.recv.unwrap_or(0), tb.chan),
                };
                return Err(format!(
                    "line {}: {}: deadlock: gpu {r} <tb id=\"{t}\"> waits here forever for {why} (a dependency cycle, or a receive no send matches)",
                    st.line, st.label
                ));
            }
        }
        let mut left: Vec<(&(u32, u32, u32), u32)> =
            self.fifo.iter().filter_map(|(k, q)| q.front().map(|&(m, _)| (k, m))).collect();
        left.sort_unstable();
        if let Some(((_, to, chan), m)) = left.first() {
            return Err(format!(
                "{}: sends a message that gpu {to} never receives on chan=\"{chan}\" (no matching receive)",
                label_of(x, self.msgs[*m as usize].sent_at)
            ));
        }
        for msg in &self.msgs {
            if let Some(q) = msg.taken.iter().position(|&t| !t) {
                return Err(format!(
                    "{}: chunk {} of this message (sent at {}) is received into scratch but never copied or reduced into place",
                    label_of(x, msg.recv_at.expect("received")),
                    msg.first + q as u32,
                    label_of(x, msg.sent_at)
                ));
            }
        }
        // An rrs leaves the IR's block reduced where MSCCL keeps the old value: fine only where
        // the result does not include the block.
        let k = x.nchunks / x.gpus.len() as u32;
        for (r, stale) in self.stale.iter().enumerate() {
            let r = r as u32;
            for (c, s) in stale.iter().enumerate() {
                let c = c as u32;
                let counts = match x.collective {
                    Collective::Allreduce | Collective::Allgather | Collective::Broadcast { .. } => true,
                    Collective::ReduceScatter => c / k == r,
                    Collective::Reduce { root } => r == root,
                    Collective::Alltoall => true,
                };
                if let (Some(at), true) = (s, counts) {
                    return Err(format!(
                        "{}: leaves chunk {c} of gpu {r} unchanged in MSCCL but reduced in the IR, and the result includes it",
                        label_of(x, *at)
                    ));
                }
            }
        }
        // An all-to-all's own chunks are in place in the IR; in MSCCL a `cpy` puts them in the
        // output, and without it the output keeps whatever was there.
        for (r, own) in self.own_copied.iter().enumerate() {
            if let Some(j) = own.iter().position(|c| !c) {
                let k = own.len();
                return Err(format!(
                    "gpu {r} never copies its own input chunk {} to output chunk {} (an all-to-all's output holds the rank's own data too)",
                    r * k + j,
                    r * k + j
                ));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Levels and the schedule.

fn find(uf: &mut [u32], mut v: u32) -> u32 {
    while uf[v as usize] != v {
        uf[v as usize] = uf[uf[v as usize] as usize];
        v = uf[v as usize];
    }
    v
}

/// IR step of every node (see the module docs), or why there is none.
fn levels(rp: &Replay) -> Result<Vec<u32>, String> {
    let n = rp.nodes.len();
    let mut uf: Vec<u32> = (0..n as u32).collect();
    for p in &rp.parts {
        let (a, b) = (find(&mut uf, rp.msgs[p.msg as usize].send_node), find(&mut uf, p.node));
        uf[a as usize] = b;
    }
    let root: Vec<u32> = (0..n as u32).map(|v| find(&mut uf, v)).collect();
    let mut floor = vec![0u32; n];
    let (mut level, mut vis, mut prev) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
    loop {
        // Nodes are in replay order: every predecessor comes first.
        for v in 0..n {
            let node = &rp.nodes[v];
            let (mut pv, mut pp) = (0, 0);
            for &u in &node.preds {
                pv = pv.max(vis[u as usize]);
                pp = pp.max(prev[u as usize]);
            }
            let l = match node.effect {
                Effect::Send => pv,
                Effect::Write | Effect::None => pp,
            }
            .max(floor[root[v] as usize]);
            level[v] = l;
            prev[v] = pp.max(l);
            vis[v] = pv.max(if node.effect == Effect::Write { l + 1 } else { l });
        }
        let mut changed = false;
        for v in 0..n {
            let r = root[v] as usize;
            if level[v] > floor[r] {
                floor[r] = level[v];
                changed = true;
            }
        }
        if !changed {
            return Ok(level);
        }
        if let Some(v) = (0..n).find(|&v| floor[root[v] as usize] as usize > n + 1) {
            let at = rp.nodes[v].step;
            return Err(format!(
                "{}: the program cannot be put into IR steps: a message must be sent before something its receive depends on (MSCCL buffers sends; the IR matches a send and its receive within one step)",
                label_of(rp.x, at)
            ));
        }
    }
}

/// Whether two sorted id lists share an id.
fn overlaps(a: &[u32], b: &[u32]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// Imports an MSCCL XML program (see the module docs) without checking it.
pub fn import_msccl_xml(text: &str) -> Result<Schedule, String> {
    let x = load(text)?;
    let mut rp = Replay::new(&x)?;
    rp.run()?;
    let level = levels(&rp)?;
    let p = x.gpus.len() as u32;
    let mut s = Schedule::new(x.collective, format!("msccl:{}", x.name), p, x.vlen);
    if matches!(x.collective, Collective::ReduceScatter | Collective::Allgather) {
        let k = x.nchunks / p;
        s.block_owner = (0..x.nchunks).map(|b| b / k).collect();
    }
    // Receives per (rank, level), in replay order, merged: (peer, op, sorted block ids).
    let mut order: Vec<usize> = (0..rp.parts.len()).collect();
    order.sort_by_key(|&i| (rp.parts[i].to, level[rp.parts[i].node as usize], rp.parts[i].node, i));
    type Recv = (u32, RecvOp, Vec<u32>);
    let mut recvs: Vec<((u32, u32), Vec<Recv>)> = Vec::new();
    for i in order {
        let part = &rp.parts[i];
        let key = (part.to, level[part.node as usize]);
        if recvs.last().is_none_or(|(k, _)| *k != key) {
            recvs.push((key, Vec::new()));
        }
        let list = &mut recvs.last_mut().expect("pushed").1;
        let from = rp.msgs[part.msg as usize].from;
        let ids: Vec<u32> = (part.first..part.first + part.cnt).collect();
        // Merge into the last receive from the same peer with the same op when nothing listed
        // after it touches these blocks (the order of applying them is then unchanged).
        let target = list.iter().rposition(|(q, op, _)| *q == from && *op == part.op);
        let mergeable =
            target.filter(|&g| !overlaps(&list[g].2, &ids) && list[g + 1..].iter().all(|(_, _, b)| !overlaps(b, &ids)));
        match mergeable {
            Some(g) => {
                let merged = &mut list[g].2;
                merged.extend(ids);
                merged.sort_unstable();
            }
            None => list.push((from, part.op, ids)),
        }
    }
    for ((to, l), list) in recvs {
        for (from, op, ids) in list {
            let blocks = Blocks::from_ids(ids);
            s.step_mut(from, l as usize).sends.push(Transfer {
                peer: to,
                port: None,
                blocks: blocks.clone(),
                op: None,
            });
            s.step_mut(to, l as usize).recvs.push(Transfer { peer: from, port: None, blocks, op: Some(op) });
        }
    }
    // Levels where nothing is sent are dropped (every rank drops the same ones); a rank with
    // nothing in a level keeps an empty step there.
    let mut used: Vec<bool> = Vec::new();
    for prog in &s.programs {
        used.resize(used.len().max(prog.steps.len()), false);
        for (l, st) in prog.steps.iter().enumerate() {
            used[l] |= !st.sends.is_empty() || !st.recvs.is_empty();
        }
    }
    for prog in &mut s.programs {
        let steps = std::mem::take(&mut prog.steps);
        prog.steps = steps.into_iter().enumerate().filter(|(l, _)| used[*l]).map(|(_, st)| st).collect();
    }
    s.trim();
    Ok(s)
}

/// Imports an MSCCL XML program and proves it with the checker: the schedule, or why not
/// (a reason prefixed `line N: <elem>:` for the XML, or the checker's).
pub fn from_msccl_xml(text: &str) -> Result<Schedule, String> {
    let s = import_msccl_xml(text)?;
    check(&s).map_err(|e| format!("the program does not compute its {:?}: {e}", s.collective))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_takes_what_msccl_tools_writes() {
        let x = "<?xml version='1.0'?>\n<!-- c -->\n<algo name='a&amp;b' ngpus = \"1\">\n  <gpu id=\"0\"/>\n</algo>\n";
        let root = parse_xml(x).unwrap();
        assert_eq!(root.opt("name"), Some("a&b"));
        assert_eq!(root.children[0].line, 4);
    }
}
