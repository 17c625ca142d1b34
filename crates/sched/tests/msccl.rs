//! The MSCCL XML export: well-formed (by a strict little parser that also enforces the
//! formatting the MSCCL executor's hand-written parser needs), consistent with the schedule,
//! and proven by replaying the XML: every GPU's threadblocks run as concurrent processes with
//! MSCCL semantics (sequential steps, buffered sends over per-connection FIFOs,
//! `depid`/`deps` waits on monotone flags set by `hasdep` steps) on symbolic values (which
//! ranks' contributions a chunk holds), with vector clocks proving that every pair of
//! conflicting accesses to a chunk is ordered — so the result below holds for every
//! interleaving, not just the one replayed.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::msccl::{to_msccl_program, MscclOp, MscclOptions, MSCCL_MAX_COUNT};
use reducelab_sched::*;
use std::collections::{BTreeMap, HashMap, VecDeque};

// ---------------------------------------------------------------------------------------------
// A strict XML subset parser.

#[derive(Debug)]
struct Elem {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Elem>,
}

impl Elem {
    fn get(&self, k: &str) -> Result<&str, String> {
        self.attrs
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| format!("<{}> has no attribute {k}", self.name))
    }
    fn int(&self, k: &str) -> Result<i64, String> {
        let v = self.get(k)?;
        v.parse::<i64>().map_err(|_| format!("<{}> {k}=\"{v}\" is not an integer", self.name))
    }
}

fn is_name(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b':'
}

fn decode(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').ok_or_else(|| format!("unterminated entity in \"{v}\""))?;
        out.push(match &rest[i..i + end + 1] {
            "&amp;" => '&',
            "&lt;" => '<',
            "&gt;" => '>',
            "&quot;" => '"',
            "&apos;" => '\'',
            e => return Err(format!("unknown entity {e}")),
        });
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Elements with double-quoted attributes and no text; no declaration, comments or
/// processing instructions (the executor's parser would misread a declaration); attributes
/// separated by exactly one space and `/>` right after the last one (as it expects).
fn parse_xml(text: &str) -> Result<Elem, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut stack: Vec<Elem> = Vec::new();
    let mut root: Option<Elem> = None;
    fn attach(e: Elem, stack: &mut [Elem], root: &mut Option<Elem>) -> Result<(), String> {
        match stack.last_mut() {
            Some(parent) => parent.children.push(e),
            None if root.is_none() => *root = Some(e),
            None => return Err(format!("second root element <{}>", e.name)),
        }
        Ok(())
    }
    let name_at = |i: &mut usize| -> Result<String, String> {
        let s = *i;
        while *i < b.len() && is_name(b[*i]) {
            *i += 1;
        }
        if s == *i {
            return Err(format!("expected a name at byte {s}"));
        }
        Ok(text[s..*i].to_string())
    };
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        if b[i] != b'<' {
            return Err(format!("text content at byte {i}"));
        }
        i += 1;
        if b.get(i) == Some(&b'/') {
            i += 1;
            let name = name_at(&mut i)?;
            if b.get(i) != Some(&b'>') {
                return Err(format!("malformed closing tag </{name} at byte {i}"));
            }
            i += 1;
            let e = stack.pop().ok_or_else(|| format!("closing tag </{name}> without an open element"))?;
            if e.name != name {
                return Err(format!("<{}> closed by </{name}>", e.name));
            }
            attach(e, &mut stack, &mut root)?;
            continue;
        }
        let name = name_at(&mut i)?;
        let mut e = Elem { name, attrs: Vec::new(), children: Vec::new() };
        loop {
            match b.get(i) {
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
                Some(b' ') => {
                    i += 1;
                    let k = name_at(&mut i)?;
                    if b.get(i) != Some(&b'=') || b.get(i + 1) != Some(&b'"') {
                        return Err(format!("attribute {k} of <{}> is not k=\"v\"", e.name));
                    }
                    i += 2;
                    let s = i;
                    while i < b.len() && b[i] != b'"' {
                        if b[i] == b'<' {
                            return Err(format!("'<' in attribute {k}"));
                        }
                        i += 1;
                    }
                    if i == b.len() {
                        return Err(format!("unterminated attribute {k}"));
                    }
                    let v = decode(&text[s..i])?;
                    i += 1;
                    if e.attrs.iter().any(|(a, _)| *a == k) {
                        return Err(format!("duplicate attribute {k} on <{}>", e.name));
                    }
                    e.attrs.push((k, v));
                }
                other => return Err(format!("unexpected {:?} in <{}> at byte {i}", other.map(|&c| c as char), e.name)),
            }
        }
    }
    if let Some(e) = stack.last() {
        return Err(format!("<{}> is not closed", e.name));
    }
    root.ok_or_else(|| "empty document".into())
}

// ---------------------------------------------------------------------------------------------
// The MSCCL program, validated.

#[derive(Clone, Debug)]
struct Xstep {
    ty: String,
    srcbuf: String,
    srcoff: i64,
    dstbuf: String,
    dstoff: i64,
    cnt: usize,
    dep: Option<(usize, usize)>,
    hasdep: bool,
}

#[derive(Clone, Debug)]
struct Xtb {
    send: i64,
    recv: i64,
    steps: Vec<Xstep>,
}

#[derive(Clone, Debug)]
struct Xgpu {
    chunks: HashMap<String, usize>,
    tbs: Vec<Xtb>,
}

#[derive(Clone, Debug)]
struct Xalgo {
    coll: String,
    nchunks: usize,
    gpus: Vec<Xgpu>,
}

const TYPES: &[&str] = &["s", "r", "rrc", "re", "cpy", "nop"];

fn load(text: &str) -> Result<Xalgo, String> {
    let root = parse_xml(text)?;
    if root.name != "algo" {
        return Err(format!("root is <{}>, not <algo>", root.name));
    }
    root.get("name")?;
    for k in ["minBytes", "maxBytes"] {
        root.int(k)?;
    }
    if !["Simple", "LL", "LL128"].contains(&root.get("proto")?) {
        return Err(format!("proto {}", root.get("proto")?));
    }
    if root.int("nchannels")? != 1 || root.int("inplace")? != 1 || root.int("outofplace")? != 0 {
        return Err("expected nchannels=1 inplace=1 outofplace=0".into());
    }
    let coll = root.get("coll")?.to_string();
    if !["allreduce", "reducescatter", "allgather"].contains(&coll.as_str()) {
        return Err(format!("coll {coll}"));
    }
    let nchunks = root.int("nchunksperloop")? as usize;
    let ngpus = root.int("ngpus")? as usize;
    if root.children.len() != ngpus {
        return Err(format!("{} <gpu>s for ngpus={ngpus}", root.children.len()));
    }
    let mut gpus = Vec::new();
    for (r, g) in root.children.iter().enumerate() {
        if g.name != "gpu" || g.int("id")? != r as i64 {
            return Err(format!("child {r} of <algo> is <{} id={:?}>", g.name, g.get("id")));
        }
        let mut chunks = HashMap::new();
        for (k, b) in [("i_chunks", "i"), ("o_chunks", "o"), ("s_chunks", "s")] {
            chunks.insert(b.to_string(), g.int(k)? as usize);
        }
        let mut tbs = Vec::new();
        for (t, tb) in g.children.iter().enumerate() {
            if tb.name != "tb" || tb.int("id")? != t as i64 || tb.int("chan")? != 0 {
                return Err(format!("gpu {r}: child {t} is not <tb id=\"{t}\" chan=\"0\">"));
            }
            let (send, recv) = (tb.int("send")?, tb.int("recv")?);
            for q in [send, recv] {
                if q < -1 || q >= ngpus as i64 || q == r as i64 {
                    return Err(format!("gpu {r} tb {t}: peer {q}"));
                }
            }
            let mut steps = Vec::new();
            for (k, st) in tb.children.iter().enumerate() {
                if st.name != "step" || st.int("s")? != k as i64 || !st.children.is_empty() {
                    return Err(format!("gpu {r} tb {t}: child {k} is not <step s=\"{k}\"/>"));
                }
                let ty = st.get("type")?.to_string();
                if !TYPES.contains(&ty.as_str()) {
                    return Err(format!("gpu {r} tb {t} step {k}: type {ty}"));
                }
                let (depid, deps) = (st.int("depid")?, st.int("deps")?);
                let hasdep = match st.int("hasdep")? {
                    0 => false,
                    1 => true,
                    h => return Err(format!("hasdep={h}")),
                };
                let dep = match (depid, deps) {
                    (-1, -1) => None,
                    (a, b) if a >= 0 && b >= 0 => Some((a as usize, b as usize)),
                    _ => return Err(format!("gpu {r} tb {t} step {k}: depid={depid} deps={deps}")),
                };
                let cnt = st.int("cnt")?;
                if !(0..=MSCCL_MAX_COUNT as i64).contains(&cnt) || (ty != "nop" && cnt == 0) {
                    return Err(format!("gpu {r} tb {t} step {k}: cnt={cnt}"));
                }
                steps.push(Xstep {
                    ty,
                    srcbuf: st.get("srcbuf")?.to_string(),
                    srcoff: st.int("srcoff")?,
                    dstbuf: st.get("dstbuf")?.to_string(),
                    dstoff: st.int("dstoff")?,
                    cnt: cnt as usize,
                    dep,
                    hasdep,
                });
            }
            tbs.push(Xtb { send, recv, steps });
        }
        gpus.push(Xgpu { chunks, tbs });
    }
    let x = Xalgo { coll, nchunks, gpus };
    validate(&x)?;
    Ok(x)
}

/// Peers, buffer bounds, and dependencies: each names an existing step of another
/// threadblock of the same GPU that has `hasdep="1"`, and program order plus dependencies
/// are acyclic (every dependency is on an earlier step in some global order).
fn validate(x: &Xalgo) -> Result<(), String> {
    for (r, g) in x.gpus.iter().enumerate() {
        for (what, f) in [("send", (|t: &Xtb| t.send) as fn(&Xtb) -> i64), ("recv", |t: &Xtb| t.recv)] {
            let mut peers: Vec<i64> = g.tbs.iter().map(f).filter(|&q| q >= 0).collect();
            let n = peers.len();
            peers.sort_unstable();
            peers.dedup();
            if peers.len() != n {
                return Err(format!("gpu {r}: two threadblocks with the same {what} peer"));
            }
        }
        for (t, tb) in g.tbs.iter().enumerate() {
            for (k, st) in tb.steps.iter().enumerate() {
                let at = format!("gpu {r} tb {t} step {k} ({})", st.ty);
                let (src_local, dst_local) = match st.ty.as_str() {
                    "s" => (true, false),
                    "r" => (false, true),
                    "rrc" | "re" | "cpy" => (true, true),
                    _ => (false, false),
                };
                if st.ty == "s" && tb.send < 0 || matches!(st.ty.as_str(), "r" | "rrc") && tb.recv < 0 {
                    return Err(format!("{at}: no peer for it"));
                }
                for (local, buf, off) in [(src_local, &st.srcbuf, st.srcoff), (dst_local, &st.dstbuf, st.dstoff)] {
                    let size = *g.chunks.get(buf.as_str()).ok_or_else(|| format!("{at}: buffer {buf}"))?;
                    if local && (off < 0 || off as usize + st.cnt > size) {
                        return Err(format!("{at}: {buf}[{off}..+{}] beyond {size} chunks", st.cnt));
                    }
                }
                if let Some((dt, ds)) = st.dep {
                    if dt == t || dt >= g.tbs.len() || ds >= g.tbs[dt].steps.len() {
                        return Err(format!(
                            "{at}: dependency on tb {dt} step {ds}, which does not exist (or is its own tb)"
                        ));
                    }
                    if !g.tbs[dt].steps[ds].hasdep {
                        return Err(format!("{at}: depends on tb {dt} step {ds}, which has hasdep=0"));
                    }
                }
            }
        }
        // Kahn's algorithm over (tb, step).
        let base: Vec<usize> = g
            .tbs
            .iter()
            .scan(0, |a, tb| {
                let b = *a;
                *a += tb.steps.len();
                Some(b)
            })
            .collect();
        let total: usize = g.tbs.iter().map(|tb| tb.steps.len()).sum();
        let mut indeg = vec![0usize; total];
        let mut out: Vec<Vec<usize>> = vec![Vec::new(); total];
        for (t, tb) in g.tbs.iter().enumerate() {
            for (k, st) in tb.steps.iter().enumerate() {
                let me = base[t] + k;
                if k > 0 {
                    out[me - 1].push(me);
                    indeg[me] += 1;
                }
                if let Some((dt, ds)) = st.dep {
                    out[base[dt] + ds].push(me);
                    indeg[me] += 1;
                }
            }
        }
        let mut ready: Vec<usize> = (0..total).filter(|&v| indeg[v] == 0).collect();
        let mut seen = 0;
        while let Some(v) = ready.pop() {
            seen += 1;
            for &w in &out[v] {
                indeg[w] -= 1;
                if indeg[w] == 0 {
                    ready.push(w);
                }
            }
        }
        if seen != total {
            return Err(format!("gpu {r}: program order and dependencies form a cycle"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Replay with symbolic values and vector clocks.

/// Which ranks' contributions to `block` a chunk holds.
#[derive(Clone, Debug, PartialEq)]
struct Val {
    block: usize,
    ranks: Vec<u64>,
}

fn combine(a: &Val, b: &Val) -> Result<Val, String> {
    if a.block != b.block {
        return Err(format!("reduces block {} with block {}", a.block, b.block));
    }
    if a.ranks.iter().zip(&b.ranks).any(|(x, y)| x & y != 0) {
        return Err(format!("counts a contribution to block {} twice", a.block));
    }
    Ok(Val { block: a.block, ranks: a.ranks.iter().zip(&b.ranks).map(|(x, y)| x | y).collect() })
}

#[derive(Clone, Default)]
struct Cell {
    val: Option<Val>,
    /// Epoch `(tb, clock)` of the last write and of the reads since.
    w: Option<(usize, u32)>,
    reads: Vec<(usize, u32)>,
}

struct Msg {
    vals: Vec<Val>,
    vc: Vec<u32>,
}

struct TbState {
    pc: usize,
    vc: Vec<u32>,
    flag: i64,
    snaps: BTreeMap<usize, Vec<u32>>,
}

fn join(a: &mut [u32], b: &[u32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

struct Machine<'a> {
    x: &'a Xalgo,
    main: &'static str,
    owner: Vec<(usize, usize)>,
    base: Vec<usize>,
    tbs: Vec<TbState>,
    /// Per GPU: buffer name -> cells.
    mem: Vec<HashMap<String, Vec<Cell>>>,
    chans: HashMap<(usize, usize), VecDeque<Msg>>,
}

impl<'a> Machine<'a> {
    fn new(x: &'a Xalgo) -> Result<Machine<'a>, String> {
        let p = x.gpus.len();
        let words = p.div_ceil(64);
        let main = if x.coll == "allgather" { "o" } else { "i" };
        let k = x.nchunks / p;
        let mut owner = Vec::new();
        let mut base = Vec::new();
        for (r, g) in x.gpus.iter().enumerate() {
            base.push(owner.len());
            owner.extend((0..g.tbs.len()).map(|t| (r, t)));
        }
        let gt = owner.len();
        let tbs = (0..gt).map(|_| TbState { pc: 0, vc: vec![0; gt], flag: -1, snaps: BTreeMap::new() }).collect();
        let mut mem = Vec::new();
        for (r, g) in x.gpus.iter().enumerate() {
            if g.chunks[main] != x.nchunks {
                return Err(format!(
                    "gpu {r}: buffer {main} has {} chunks, nchunksperloop is {}",
                    g.chunks[main], x.nchunks
                ));
            }
            let mut bufs = HashMap::new();
            let one = |q: usize| {
                let mut v = vec![0u64; words];
                v[q / 64] |= 1 << (q % 64);
                v
            };
            let full: Vec<u64> =
                (0..words).map(|w| if (w + 1) * 64 <= p { u64::MAX } else { (1u64 << (p % 64)) - 1 }).collect();
            let cells = (0..x.nchunks)
                .map(|b| Cell {
                    val: if main == "o" {
                        (b / k == r).then(|| Val { block: b, ranks: full.clone() })
                    } else {
                        Some(Val { block: b, ranks: one(r) })
                    },
                    ..Cell::default()
                })
                .collect();
            bufs.insert(main.to_string(), cells);
            bufs.insert("s".to_string(), vec![Cell::default(); g.chunks["s"]]);
            mem.push(bufs);
        }
        Ok(Machine { x, main, owner, base, tbs, mem, chans: HashMap::new() })
    }

    /// Threadblock `g` (with vector clock `vc`) reads `cnt` chunks of its rank's `buf` at `off`.
    fn read(
        &mut self,
        g: usize,
        vc: &[u32],
        buf: &str,
        off: i64,
        cnt: usize,
        at: &str,
    ) -> Result<Vec<Option<Val>>, String> {
        let r = self.owner[g].0;
        let cells = self.mem[r].get_mut(buf).ok_or_else(|| format!("{at}: buffer {buf} is not modelled"))?;
        let mut out = Vec::with_capacity(cnt);
        for c in &mut cells[off as usize..off as usize + cnt] {
            if let Some((h, t)) = c.w {
                if t > vc[h] {
                    return Err(format!(
                        "{at}: race: reads {buf}[..] written by threadblock {h} without being ordered after it"
                    ));
                }
            }
            c.reads.retain(|&(h, _)| h != g);
            c.reads.push((g, vc[g]));
            out.push(c.val.clone());
        }
        Ok(out)
    }

    /// Threadblock `g` (with vector clock `vc`) writes `vals` into its rank's `buf` at `off`.
    fn write(&mut self, g: usize, vc: &[u32], buf: &str, off: i64, vals: Vec<Val>, at: &str) -> Result<(), String> {
        let r = self.owner[g].0;
        let main = buf == self.main;
        let cells = self.mem[r].get_mut(buf).ok_or_else(|| format!("{at}: buffer {buf} is not modelled"))?;
        for (j, (c, v)) in cells[off as usize..].iter_mut().zip(vals).enumerate() {
            for &(h, t) in c.w.iter().chain(&c.reads) {
                if t > vc[h] {
                    return Err(format!(
                        "{at}: race: writes {buf}[{}] while threadblock {h}'s access is not ordered before it",
                        off as usize + j
                    ));
                }
            }
            if main && v.block != off as usize + j {
                return Err(format!("{at}: puts block {} at {buf}[{}]", v.block, off as usize + j));
            }
            c.w = Some((g, vc[g]));
            c.reads.clear();
            c.val = Some(v);
        }
        Ok(())
    }

    /// Runs the next step of global threadblock `g` if it can; `Ok(false)` if blocked or done.
    fn step(&mut self, g: usize) -> Result<bool, String> {
        let (r, t) = self.owner[g];
        let x = self.x;
        let tb = &x.gpus[r].tbs[t];
        let pc = self.tbs[g].pc;
        let Some(st) = tb.steps.get(pc) else { return Ok(false) };
        let at = format!("gpu {r} tb {t} step {pc} ({})", st.ty);
        let mut vc = self.tbs[g].vc.clone();
        if let Some((dt, ds)) = st.dep {
            let dg = self.base[r] + dt;
            if self.tbs[dg].flag < ds as i64 {
                return Ok(false);
            }
            // The step that first made the flag reach `ds`.
            let snap = self.tbs[dg].snaps.range(ds..).next().expect("flag set by a snapshot").1.clone();
            join(&mut vc, &snap);
        }
        let receives = matches!(st.ty.as_str(), "r" | "rrc");
        let key = (tb.recv as usize, r);
        if receives {
            match self.chans.get(&key).and_then(|q| q.front()) {
                None => return Ok(false),
                Some(m) => {
                    if m.vals.len() != st.cnt {
                        return Err(format!(
                            "{at}: receives {} chunks, the matching send has {}",
                            st.cnt,
                            m.vals.len()
                        ));
                    }
                    join(&mut vc, &m.vc.clone());
                }
            }
        }
        vc[g] += 1;
        let send_peer = tb.send;
        let nothing = |v: Vec<Option<Val>>, what: &str| -> Result<Vec<Val>, String> {
            v.into_iter().collect::<Option<Vec<Val>>>().ok_or_else(|| format!("{what} a chunk that holds nothing"))
        };
        match st.ty.as_str() {
            "nop" => {}
            "s" => {
                let v = self.read(g, &vc, &st.srcbuf, st.srcoff, st.cnt, &at)?;
                let vals = nothing(v, &format!("{at}: sends"))?;
                self.chans.entry((r, send_peer as usize)).or_default().push_back(Msg { vals, vc: vc.clone() });
            }
            "r" => {
                let m = self.chans.get_mut(&key).unwrap().pop_front().unwrap();
                self.write(g, &vc, &st.dstbuf, st.dstoff, m.vals, &at)?;
            }
            "rrc" => {
                let m = self.chans.get_mut(&key).unwrap().pop_front().unwrap();
                let local = nothing(self.read(g, &vc, &st.srcbuf, st.srcoff, st.cnt, &at)?, &format!("{at}: reduces"))?;
                let vals = local
                    .iter()
                    .zip(&m.vals)
                    .map(|(a, b)| combine(a, b))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{at}: {e}"))?;
                self.write(g, &vc, &st.dstbuf, st.dstoff, vals, &at)?;
            }
            "re" | "cpy" => {
                let src = nothing(self.read(g, &vc, &st.srcbuf, st.srcoff, st.cnt, &at)?, &format!("{at}: reads"))?;
                let vals = if st.ty == "cpy" {
                    src
                } else {
                    let dst = nothing(
                        self.read(g, &vc, &st.dstbuf, st.dstoff, st.cnt, &at)?,
                        &format!("{at}: reduces into"),
                    )?;
                    dst.iter()
                        .zip(&src)
                        .map(|(a, b)| combine(a, b))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("{at}: {e}"))?
                };
                self.write(g, &vc, &st.dstbuf, st.dstoff, vals, &at)?;
            }
            other => return Err(format!("{at}: unknown type {other}")),
        }
        if st.hasdep {
            self.tbs[g].flag = pc as i64;
            self.tbs[g].snaps.insert(pc, vc.clone());
        }
        self.tbs[g].vc = vc;
        self.tbs[g].pc += 1;
        Ok(true)
    }

    /// Runs to completion, visiting threadblocks in an order given by `policy`.
    fn run(&mut self, policy: u64) -> Result<(), String> {
        let n = self.owner.len();
        let mut order: Vec<usize> = (0..n).collect();
        let mut seed = policy.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        loop {
            match policy {
                0 => {}
                1 => order.reverse(),
                _ => {
                    for i in (1..n).rev() {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        order.swap(i, (seed % (i as u64 + 1)) as usize);
                    }
                }
            }
            let mut progress = false;
            for &g in &order {
                // Policy 1 runs each threadblock as far as it goes; the others one step.
                while self.step(g)? {
                    progress = true;
                    if policy != 1 {
                        break;
                    }
                }
            }
            if !progress {
                break;
            }
        }
        let stuck: Vec<String> = (0..n)
            .filter(|&g| self.tbs[g].pc < self.x.gpus[self.owner[g].0].tbs[self.owner[g].1].steps.len())
            .map(|g| format!("gpu {} tb {} at step {}", self.owner[g].0, self.owner[g].1, self.tbs[g].pc))
            .collect();
        if !stuck.is_empty() {
            return Err(format!("deadlock: {}", stuck.join(", ")));
        }
        if let Some((k, q)) = self.chans.iter().find(|(_, q)| !q.is_empty()) {
            return Err(format!("{} messages from gpu {} to gpu {} never received", q.len(), k.0, k.1));
        }
        Ok(())
    }

    /// Checks the collective's postcondition.
    fn check_result(&self) -> Result<(), String> {
        let p = self.x.gpus.len();
        let k = self.x.nchunks / p;
        for r in 0..p {
            for (b, c) in self.mem[r][self.main].iter().enumerate() {
                if self.x.coll == "reducescatter" && b / k != r {
                    continue;
                }
                let ok = c
                    .val
                    .as_ref()
                    .is_some_and(|v| v.block == b && (0..p).all(|q| v.ranks[q / 64] >> (q % 64) & 1 == 1));
                if !ok {
                    return Err(format!(
                        "gpu {r} ends with {:?} at {}[{b}], not the full sum of block {b}",
                        c.val, self.main
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Replays `x` under several scheduling policies and checks the result.
fn replay(x: &Xalgo) -> Result<(), String> {
    for policy in 0..4 {
        let mut m = Machine::new(x)?;
        m.run(policy).map_err(|e| format!("policy {policy}: {e}"))?;
        m.check_result().map_err(|e| format!("policy {policy}: {e}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

fn runs_of(s: &Schedule, r: usize, sends: bool) -> usize {
    s.programs[r]
        .steps
        .iter()
        .flat_map(|st| if sends { &st.sends } else { &st.recvs })
        .flat_map(|t| t.blocks.0.iter())
        .map(|&(a, b)| (b - a).div_ceil(MSCCL_MAX_COUNT) as usize)
        .sum()
}

/// Exports, parses, validates, counts and replays; returns a summary line.
fn export_and_prove(s: &Schedule) -> String {
    let what = format!("{} {:?} p={}", s.algorithm, s.collective, s.ranks);
    check(s).unwrap_or_else(|e| panic!("{what}: the schedule itself fails the checker: {e}"));
    let xml = to_msccl_xml(s, &MscclOptions::default()).unwrap_or_else(|e| panic!("{what}: export: {e}"));
    let x = load(&xml).unwrap_or_else(|e| panic!("{what}: invalid XML: {e}\n{}", &xml[..xml.len().min(4000)]));
    assert_eq!(x.gpus.len(), s.ranks as usize);
    assert_eq!(x.nchunks, s.blocks as usize);
    let (mut tbs, mut steps, mut nops, mut deps, mut scratch) = (0, 0, 0, 0, 0);
    for (r, g) in x.gpus.iter().enumerate() {
        let count =
            |tys: &[&str]| g.tbs.iter().flat_map(|t| &t.steps).filter(|st| tys.contains(&st.ty.as_str())).count();
        assert_eq!(count(&["s"]), runs_of(s, r, true), "{what}: sends of gpu {r}");
        assert_eq!(count(&["r", "rrc"]), runs_of(s, r, false), "{what}: receives of gpu {r}");
        assert!(count(&["re", "cpy"]) <= count(&["r"]), "{what}: local steps of gpu {r}");
        tbs += g.tbs.len();
        steps += g.tbs.iter().map(|t| t.steps.len()).sum::<usize>();
        nops += count(&["nop"]);
        deps += g.tbs.iter().flat_map(|t| &t.steps).filter(|st| st.dep.is_some()).count();
        scratch += g.chunks["s"];
    }
    replay(&x).unwrap_or_else(|e| panic!("{what}: replay: {e}"));
    let p = s.ranks as usize;
    format!(
        "{what:52} tb/gpu {:5.2}  steps/gpu {:6.1}  deps/gpu {:5.1}  nops/gpu {:4.1}  scratch/gpu {:4.1}  xml {} B",
        tbs as f64 / p as f64,
        steps as f64 / p as f64,
        deps as f64 / p as f64,
        nops as f64 / p as f64,
        scratch as f64 / p as f64,
        xml.len()
    )
}

fn collectives() -> [Collective; 3] {
    [Collective::Allreduce, Collective::ReduceScatter, Collective::Allgather]
}

#[test]
fn ring_recursive_doubling_and_swing_export_and_replay_correctly() {
    for alg in ["ring", "recursive-doubling-bandwidth", "swing-bandwidth"] {
        for p in [4, 8, 16] {
            for c in collectives() {
                let s = build(alg, c, &Layout::line(p)).unwrap();
                eprintln!("{}", export_and_prove(&s));
            }
        }
    }
}

#[test]
fn every_algorithm_on_small_layouts_exports_and_replays_correctly() {
    let layouts: &[&[u32]] =
        &[&[2], &[3], &[5], &[6], &[12], &[4, 4], &[2, 4], &[3, 4], &[6, 2], &[2, 2, 2], &[4, 2, 2]];
    let mut n = 0;
    for alg in reducelab_sched::registry::variant_names() {
        for dims in layouts {
            for c in collectives() {
                let Ok(s) = build(alg, c, &Layout::new(dims.to_vec()).unwrap()) else { continue };
                let line = export_and_prove(&s);
                if c == Collective::Allreduce {
                    eprintln!("{dims:?} {line}");
                }
                n += 1;
            }
        }
    }
    eprintln!("{n} schedules exported and replayed");
    assert!(n >= 100, "only {n} schedules exported");
}

/// Direct allreduce: every rank sends its whole vector to every other rank and reduces what
/// it receives, all in one step. Each receive overwrites the block another threadblock is
/// sending in the same step, so it must be staged in scratch.
fn direct_allreduce(p: u32, blocks: u32) -> Schedule {
    let mut s = Schedule::new(Collective::Allreduce, "direct", p, blocks);
    for a in 0..p {
        for b in (0..p).filter(|&b| b != a) {
            s.exchange(0, a, b, None, None, Blocks::range(0, blocks), RecvOp::ReduceIncomingFirst);
        }
    }
    s
}

#[test]
fn same_step_send_and_receive_of_a_block_is_staged_in_scratch() {
    for p in [3, 4, 5] {
        for blocks in [1, 3] {
            let s = direct_allreduce(p, blocks);
            eprintln!("{}", export_and_prove(&s));
            let prog = to_msccl_program(&s, &MscclOptions::default()).unwrap();
            for g in &prog.gpus {
                assert!(g.s_chunks > 0);
                let reduces = g.tbs.iter().flat_map(|t| &t.steps).filter(|st| st.op == MscclOp::Reduce).count();
                // The first receive is staged (the other threadblocks are still sending the
                // block); the later ones are ordered after its reduction, hence after those
                // sends, and reduce directly.
                assert_eq!(reduces, 1, "staged reductions at p={p}");
            }
        }
    }
}

#[test]
fn the_replay_catches_missing_dependencies() {
    for s in [direct_allreduce(4, 1), build("swing-bandwidth", Collective::Allreduce, &Layout::line(8)).unwrap()] {
        let mut prog = to_msccl_program(&s, &MscclOptions::default()).unwrap();
        assert!(replay(&load(&prog.to_xml()).unwrap()).is_ok());
        for g in &mut prog.gpus {
            for tb in &mut g.tbs {
                tb.steps.retain(|st| st.op != MscclOp::Nop);
                for st in &mut tb.steps {
                    st.dep = None;
                }
            }
        }
        let e = replay(&load(&prog.to_xml()).unwrap()).unwrap_err();
        assert!(e.contains("race"), "{}: {e}", s.algorithm);
    }
}

#[test]
fn the_parser_rejects_malformed_xml() {
    let good = to_msccl_xml(&build("ring", Collective::Allreduce, &Layout::line(3)).unwrap(), &MscclOptions::default())
        .unwrap();
    assert!(load(&good).is_ok());
    for bad in [
        good.replace("</tb>", "</gpu>"),
        good.replace("\"/>", "\" />"),
        good.replacen("  <gpu", "<?xml version=\"1.0\"?>\n  <gpu", 1),
        good.replacen("cnt=\"1\"", "cnt=\"1\" cnt=\"1\"", 1),
        good.replacen("</algo>", "", 1),
        good.replacen("deps=\"-1\"", "deps=\"0\"", 1),
    ] {
        assert!(load(&bad).is_err(), "accepted:\n{bad}");
    }
}

#[test]
fn export_errors_and_options() {
    let ring = |c, p| build("ring", c, &Layout::line(p)).unwrap();
    // Unsupported collective.
    let b = build("swing-bandwidth", Collective::Broadcast { root: 0 }, &Layout::line(4)).unwrap();
    assert!(to_msccl_xml(&b, &MscclOptions::default()).unwrap_err().contains("Broadcast"));
    // Unmatched transfers.
    let mut s = ring(Collective::Allreduce, 4);
    s.programs[2].steps[1].recvs.clear();
    assert!(to_msccl_xml(&s, &MscclOptions::default()).is_err());
    // Reduce-scatter owners that are not rank-major.
    let mut s = ring(Collective::ReduceScatter, 4);
    s.block_owner.swap(0, 1);
    assert!(to_msccl_xml(&s, &MscclOptions::default()).unwrap_err().contains("rank-major"));
    // Executor limits: a 129-rank ring has 512 steps in its one threadblock.
    let big = ring(Collective::Allreduce, 129);
    assert!(to_msccl_xml(&big, &MscclOptions::default()).unwrap_err().contains("steps"));
    let opts = MscclOptions { enforce_limits: false, ..MscclOptions::default() };
    assert!(to_msccl_xml(&big, &opts).is_ok());
    // Names are escaped; reduce-scatter's coll name is configurable; long runs are split.
    let mut s = ring(Collective::ReduceScatter, 4);
    s.algorithm = "a<b>&\"c\"".into();
    let xml =
        to_msccl_xml(&s, &MscclOptions { reduce_scatter_coll: "reduce_scatter".into(), ..MscclOptions::default() })
            .unwrap();
    let root = parse_xml(&xml).unwrap();
    assert_eq!(root.get("name").unwrap(), "a<b>&\"c\"");
    assert_eq!(root.get("coll").unwrap(), "reduce_scatter");
    let s = direct_allreduce(2, 10);
    let prog = to_msccl_program(&s, &MscclOptions { max_count: 4, ..MscclOptions::default() }).unwrap();
    let cnts: Vec<u32> =
        prog.gpus[0].tbs[0].steps.iter().filter(|st| st.op == MscclOp::Send).map(|st| st.cnt).collect();
    assert_eq!(cnts, [4, 4, 2]);
}
