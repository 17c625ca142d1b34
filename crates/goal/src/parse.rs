//! Text GOAL → [`Trace`].
//!
//! # Grammar
//!
//! The grammar of LogGOPSim's `txt2bin` (its re2c scanner), one statement per line:
//!
//! ```text
//! num_ranks N                               before any rank block
//! rank R {                                  R < num_ranks, blocks in increasing rank order
//! [LABEL:] send SIZEb to PEER [tag T] [cpu C] [nic N]
//! [LABEL:] recv SIZEb from PEER|-1 [tag T|-1] [cpu C] [nic N]
//! [LABEL:] calc NS [cpu C]
//! LABEL requires LABEL                      the first waits until the second has completed
//! LABEL irequires LABEL                     the first waits until the second has started
//! }
//! ```
//!
//! Labels are `[a-zA-Z][a-zA-Z0-9_]*` (not `send`, `recv`, `calc`, `rank`, `num_ranks`), scoped
//! to their rank and unique in it. `-1` is any source / any tag, on receives only (MPI has no
//! wildcard sends; `txt2bin` accepts a send's `tag -1`, which then matches any receive). Omitted
//! tag, cpu and nic are 0. `//` comments run to the end of the line and `/* … */` comments may span
//! lines. A rank without a block has no operations.
//!
//! Where `txt2bin` is looser or stricter:
//! - a `requires` may name a label defined later in the same rank block (`txt2bin`: only earlier);
//! - `tag`, `cpu` and `nic` may come in any order (`txt2bin`: that order), each at most once;
//! - a comment may follow a statement on its line (`txt2bin`: only at the start of a statement);
//! - numbers that do not fit their field (sizes and times in 64 bits, ranks and tags in 32, cpu
//!   and nic in 8), duplicate labels and duplicate or out-of-order rank blocks are errors (`txt2bin`
//!   wraps numbers silently, keeps a label's first definition, and writes a broken binary).

use crate::hash::hash_bytes;
use crate::trace::{OpKind, Trace, ANY_SOURCE, ANY_TAG, MAX_OPS, MAX_RANKS, START_DEP};
use crate::GoalError;
use std::io::BufRead;
use std::path::Path;

/// Parses a whole GOAL text.
pub fn parse_str(text: &str) -> Result<Trace, GoalError> {
    parse_reader(text.as_bytes())
}

/// Parses a GOAL file, text or LogGOPSim's binary form ([`crate::binary`], told apart by its first
/// bytes); errors name the file.
pub fn parse_file(path: &Path) -> Result<Trace, GoalError> {
    let name = || path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| GoalError::new(0, format!("cannot open: {e}")).in_file(name()))?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    let head = input.fill_buf().map_err(|e| GoalError::new(0, format!("read error: {e}")).in_file(name()))?;
    if crate::binary::is_binary(head) {
        return crate::binary::parse_binary_file(input.get_mut()).map_err(|e| e.in_file(name()));
    }
    parse_reader(input).map_err(|e| e.in_file(name()))
}

/// Parses GOAL from a reader, one line at a time: the text is never held whole.
pub fn parse_reader<R: BufRead>(mut input: R) -> Result<Trace, GoalError> {
    let mut p = Parser::default();
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let n =
            input.read_until(b'\n', &mut buf).map_err(|e| GoalError::new(p.line + 1, format!("read error: {e}")))?;
        if n == 0 {
            break;
        }
        p.line += 1;
        let mut line = &buf[..];
        if let Some(l) = line.strip_suffix(b"\n") {
            line = l.strip_suffix(b"\r").unwrap_or(l);
        }
        p.parse_line(line)?;
    }
    p.finish()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokKind {
    Word,
    Num,
    /// `-` followed by digits (only `-1` is meaningful).
    Neg,
    Colon,
    Open,
    Close,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    kind: TokKind,
    start: u32,
    end: u32,
}

/// A dependency statement waiting for its rank block to end (labels may be defined later).
struct PendingDep {
    line: u32,
    kind_irequires: bool,
    /// `pending_text` ranges of the waiting and the awaited label.
    waiter: (u32, u32),
    awaited: (u32, u32),
}

#[derive(Default)]
struct Parser {
    t: Trace,
    line: u32,
    /// Line where an unterminated `/*` opened.
    in_comment: Option<u32>,
    num_ranks: Option<u32>,
    /// The open rank block and its line.
    rank: Option<(u32, u32)>,
    /// Ranks below this one have had their block.
    next_rank: u32,
    labels: LabelTable,
    pending: Vec<PendingDep>,
    pending_text: Vec<u8>,
    /// The open rank's edges: (awaited op, index within the rank; waiting op | START_DEP).
    edges: Vec<(u32, u32)>,
    toks: Vec<Tok>,
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

impl Parser {
    fn err(&self, message: impl std::fmt::Display) -> GoalError {
        match self.rank {
            Some((r, _)) => GoalError::new(self.line, format!("rank {r}: {message}")),
            None => GoalError::new(self.line, message.to_string()),
        }
    }

    /// Splits `line` into tokens, skipping blanks and comments.
    fn tokenize(&mut self, line: &[u8]) -> Result<(), GoalError> {
        self.toks.clear();
        let mut i = 0;
        while i < line.len() {
            if self.in_comment.is_some() {
                match line[i..].windows(2).position(|w| w == b"*/") {
                    Some(k) => {
                        i += k + 2;
                        self.in_comment = None;
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            let c = line[i];
            let start = i;
            let kind = match c {
                b' ' | b'\t' => {
                    i += 1;
                    continue;
                }
                b'/' if line.get(i + 1) == Some(&b'/') => return Ok(()),
                b'/' if line.get(i + 1) == Some(&b'*') => {
                    self.in_comment = Some(self.line);
                    i += 2;
                    continue;
                }
                b'a'..=b'z' | b'A'..=b'Z' => {
                    while i < line.len() && (line[i].is_ascii_alphanumeric() || line[i] == b'_') {
                        i += 1;
                    }
                    TokKind::Word
                }
                b'0'..=b'9' => {
                    while i < line.len() && line[i].is_ascii_digit() {
                        i += 1;
                    }
                    TokKind::Num
                }
                b'-' if line.get(i + 1).is_some_and(|d| d.is_ascii_digit()) => {
                    i += 1;
                    while i < line.len() && line[i].is_ascii_digit() {
                        i += 1;
                    }
                    TokKind::Neg
                }
                b':' => {
                    i += 1;
                    TokKind::Colon
                }
                b'{' => {
                    i += 1;
                    TokKind::Open
                }
                b'}' => {
                    i += 1;
                    TokKind::Close
                }
                _ => return Err(self.err(format!("unexpected {}", show_byte(c)))),
            };
            self.toks.push(Tok { kind, start: start as u32, end: i as u32 });
        }
        Ok(())
    }

    fn parse_line(&mut self, line: &[u8]) -> Result<(), GoalError> {
        if line.len() > u32::MAX as usize {
            return Err(self.err("line longer than 4 GiB"));
        }
        self.tokenize(line)?;
        let toks = std::mem::take(&mut self.toks);
        let r = self.statements(line, &toks);
        self.toks = toks;
        r
    }

    fn statements(&mut self, line: &[u8], toks: &[Tok]) -> Result<(), GoalError> {
        let text = |t: &Tok| &line[t.start as usize..t.end as usize];
        let mut i = 0;
        while i < toks.len() {
            let t = toks[i];
            match (t.kind, text(&t)) {
                (TokKind::Word, b"num_ranks") => {
                    let n = self.number(line, toks.get(i + 1), "num_ranks")?;
                    self.set_num_ranks(n)?;
                    i += 2;
                }
                (TokKind::Word, b"rank") => {
                    let r = self.number(line, toks.get(i + 1), "rank")?;
                    match toks.get(i + 2) {
                        Some(o) if o.kind == TokKind::Open => {}
                        other => return Err(self.err(format!("rank {r}: expected '{{', found {}", found(line, other)))),
                    }
                    self.open_rank(r)?;
                    i += 3;
                }
                (TokKind::Close, _) => {
                    self.close_rank()?;
                    i += 1;
                }
                (TokKind::Word, b"send" | b"recv" | b"calc") => return self.operation(line, None, &toks[i..]),
                (TokKind::Word, label) => match toks.get(i + 1) {
                    Some(c) if c.kind == TokKind::Colon => {
                        check_label(label).map_err(|m| self.err(m))?;
                        return self.operation(line, Some((t.start, t.end)), &toks[i + 2..]);
                    }
                    Some(w) if w.kind == TokKind::Word && matches!(text(w), b"requires" | b"irequires") => {
                        return self.dependency(line, &toks[i..]);
                    }
                    other => {
                        return Err(self.err(format!(
                            "after {}: expected ':', \"requires\" or \"irequires\", found {}",
                            show(label),
                            found(line, other)
                        )))
                    }
                },
                _ => {
                    return Err(self.err(format!(
                        "expected \"num_ranks\", \"rank\", an operation, a label or '}}', found {}",
                        found(line, Some(&t))
                    )))
                }
            }
        }
        Ok(())
    }

    fn number(&self, line: &[u8], t: Option<&Tok>, what: &str) -> Result<u64, GoalError> {
        match t {
            Some(t) if t.kind == TokKind::Num => {
                let digits = &line[t.start as usize..t.end as usize];
                let mut n: u64 = 0;
                for &d in digits {
                    n = match n.checked_mul(10).and_then(|n| n.checked_add((d - b'0') as u64)) {
                        Some(n) => n,
                        None => return Err(self.err(format!("{what} {} does not fit in 64 bits", show(digits)))),
                    };
                }
                Ok(n)
            }
            other => Err(self.err(format!("{what}: expected a number, found {}", found(line, other)))),
        }
    }

    fn set_num_ranks(&mut self, n: u64) -> Result<(), GoalError> {
        if let Some(old) = self.num_ranks {
            return Err(self.err(format!("num_ranks given twice (first {old})")));
        }
        if n == 0 || n > MAX_RANKS as u64 {
            return Err(self.err(format!("num_ranks {n}: must be 1 … {MAX_RANKS}")));
        }
        self.num_ranks = Some(n as u32);
        self.t.num_ranks = n as u32;
        self.t.rank_start = Vec::with_capacity(n as usize + 1);
        Ok(())
    }

    fn open_rank(&mut self, r: u64) -> Result<(), GoalError> {
        if let Some((open, open_line)) = self.rank {
            return Err(self.err(format!("rank {r}: rank {open}'s block (line {open_line}) is still open")));
        }
        let Some(n) = self.num_ranks else {
            return Err(self.err(format!("rank {r}: no num_ranks before the first rank block")));
        };
        if r >= n as u64 {
            return Err(self.err(format!("rank {r}: no such rank (num_ranks {n})")));
        }
        let r = r as u32;
        if r < self.next_rank {
            return Err(self.err(format!(
                "rank {r} after rank {}: rank blocks must come in increasing rank order, each once",
                self.next_rank - 1
            )));
        }
        let ops = self.t.kind.len() as u32;
        while self.t.rank_start.len() <= r as usize {
            self.t.rank_start.push(ops);
        }
        self.rank = Some((r, self.line));
        self.labels.clear();
        Ok(())
    }

    fn close_rank(&mut self) -> Result<(), GoalError> {
        let Some((r, _)) = self.rank else {
            return Err(self.err("'}' outside a rank block"));
        };
        self.resolve_dependencies()?;
        self.rank = None;
        self.next_rank = r + 1;
        Ok(())
    }

    fn operation(&mut self, line: &[u8], label: Option<(u32, u32)>, toks: &[Tok]) -> Result<(), GoalError> {
        let text = |t: &Tok| &line[t.start as usize..t.end as usize];
        let (Some(num_ranks), Some(_)) = (self.num_ranks, self.rank) else {
            return Err(self.err("an operation outside a rank block"));
        };
        let verb = toks.first().filter(|t| t.kind == TokKind::Word).map(text).unwrap_or(b"");
        let kind = match verb {
            b"send" => OpKind::Send,
            b"recv" => OpKind::Recv,
            b"calc" => OpKind::Calc,
            _ => {
                return Err(
                    self.err(format!("expected \"send\", \"recv\" or \"calc\", found {}", found(line, toks.first())))
                )
            }
        };
        let name = show(verb);
        let what = |s: &str| format!("{name} {s}");
        let size = self.number(line, toks.get(1), if kind == OpKind::Calc { "calc time" } else { "size" })?;
        let mut i = 2;
        let (mut peer, mut tag, mut cpu, mut nic) = (0u32, 0u32, None::<u8>, None::<u8>);
        let mut tag_given = false;
        if kind != OpKind::Calc {
            match toks.get(2) {
                Some(b) if b.kind == TokKind::Word && text(b) == b"b" => {}
                other => {
                    return Err(self.err(format!(
                        "{}: expected 'b' after the size, found {}",
                        name,
                        found(line, other)
                    )))
                }
            }
            let dir: &[u8] = if kind == OpKind::Send { b"to" } else { b"from" };
            match toks.get(3) {
                Some(d) if d.kind == TokKind::Word && text(d) == dir => {}
                other => {
                    return Err(self.err(format!("{name}: expected \"{}\", found {}", show(dir), found(line, other))))
                }
            }
            let p = toks.get(4);
            peer = if kind == OpKind::Recv && p.is_some_and(|p| p.kind == TokKind::Neg) {
                self.minus_one(line, p.unwrap(), &what("from"))?;
                ANY_SOURCE
            } else {
                let n = self.number(line, p, &what(&show(dir)))?;
                if n >= num_ranks as u64 {
                    return Err(self.err(format!("{name} {} {n}: no such rank (num_ranks {num_ranks})", show(dir))));
                }
                n as u32
            };
            i = 5;
        }
        while i < toks.len() {
            let key = toks[i];
            let key_text = text(&key);
            let value = toks.get(i + 1);
            match (key.kind, key_text) {
                (TokKind::Word, b"tag") if kind != OpKind::Calc && !tag_given => {
                    tag_given = true;
                    tag = match value {
                        Some(v) if v.kind == TokKind::Neg => {
                            self.minus_one(line, v, &what("tag"))?;
                            if kind == OpKind::Send {
                                return Err(self.err("send tag -1: only a receive may take any tag"));
                            }
                            ANY_TAG
                        }
                        _ => {
                            let n = self.number(line, value, &what("tag"))?;
                            if n >= ANY_TAG as u64 {
                                return Err(
                                    self.err(format!("{name} tag {n} does not fit (tags are 0 … {})", ANY_TAG - 1))
                                );
                            }
                            n as u32
                        }
                    };
                }
                (TokKind::Word, b"cpu") if cpu.is_none() => cpu = Some(self.small(line, value, &what("cpu"))?),
                (TokKind::Word, b"nic") if kind != OpKind::Calc && nic.is_none() => {
                    nic = Some(self.small(line, value, &what("nic"))?)
                }
                _ => {
                    let expected = if kind == OpKind::Calc {
                        "\"cpu\" or the end of the line"
                    } else {
                        "\"tag\", \"cpu\", \"nic\" or the end of the line (each once)"
                    };
                    return Err(self.err(format!("{name}: expected {expected}, found {}", found(line, Some(&key)))));
                }
            }
            i += 2;
        }
        self.push_op(line, label, kind, size, peer, tag, cpu.unwrap_or(0), nic.unwrap_or(0))
    }

    fn minus_one(&self, line: &[u8], t: &Tok, what: &str) -> Result<(), GoalError> {
        let s = &line[t.start as usize..t.end as usize];
        if s == b"-1" {
            Ok(())
        } else {
            Err(self.err(format!("{what} {}: the only negative value is -1 (any)", show(s))))
        }
    }

    fn small(&self, line: &[u8], t: Option<&Tok>, what: &str) -> Result<u8, GoalError> {
        let n = self.number(line, t, what)?;
        u8::try_from(n).map_err(|_| self.err(format!("{what} {n} does not fit (0 … 255)")))
    }

    #[allow(clippy::too_many_arguments)]
    fn push_op(
        &mut self,
        line: &[u8],
        label: Option<(u32, u32)>,
        kind: OpKind,
        size: u64,
        peer: u32,
        tag: u32,
        cpu: u8,
        nic: u8,
    ) -> Result<(), GoalError> {
        let t = &mut self.t;
        let id = t.kind.len() as u32;
        if id >= MAX_OPS {
            return Err(self.err(format!("more than {MAX_OPS} operations")));
        }
        if t.label_start.is_empty() {
            t.label_start.push(0);
            t.succ_start.push(0);
        }
        if let Some((s, e)) = label {
            let label = &line[s as usize..e as usize];
            if t.labels.len() + label.len() > u32::MAX as usize {
                return Err(self.err("labels longer than 4 GiB in total"));
            }
            let rank_first = *t.rank_start.last().unwrap_or(&0);
            if let Some(old) = self.labels.insert(t, rank_first, label, id) {
                let old_line = self.t.line[old as usize];
                return Err(self.err(format!("label {} already defined on line {old_line}", show(label))));
            }
            self.t.labels.extend_from_slice(label);
        }
        let t = &mut self.t;
        t.kind.push(kind);
        t.size.push(size);
        t.peer.push(peer);
        t.tag.push(tag);
        t.cpu.push(cpu);
        t.nic.push(nic);
        t.line.push(self.line);
        t.label_start.push(t.labels.len() as u32);
        t.max_cpu = t.max_cpu.max(cpu);
        t.max_nic = t.max_nic.max(nic);
        Ok(())
    }

    fn dependency(&mut self, line: &[u8], toks: &[Tok]) -> Result<(), GoalError> {
        let text = |t: &Tok| &line[t.start as usize..t.end as usize];
        if self.rank.is_none() {
            return Err(self.err("a dependency outside a rank block"));
        }
        let irequires = text(&toks[1]) == b"irequires";
        let verb = if irequires { "irequires" } else { "requires" };
        let awaited = match toks.get(2) {
            Some(a) if a.kind == TokKind::Word => *a,
            other => {
                return Err(self.err(format!(
                    "{} {verb}: expected a label, found {}",
                    show(text(&toks[0])),
                    found(line, other)
                )))
            }
        };
        if let Some(extra) = toks.get(3) {
            return Err(self.err(format!(
                "{} {verb} {}: expected the end of the line, found {}",
                show(text(&toks[0])),
                show(text(&awaited)),
                found(line, Some(extra))
            )));
        }
        let mut keep = |t: &Tok| {
            let s = self.pending_text.len() as u32;
            self.pending_text.extend_from_slice(text(t));
            (s, self.pending_text.len() as u32)
        };
        let waiter = keep(&toks[0]);
        let awaited = keep(&awaited);
        self.pending.push(PendingDep { line: self.line, kind_irequires: irequires, waiter, awaited });
        Ok(())
    }

    /// At the end of a rank block: labels to operations, and the rank's successor rows.
    fn resolve_dependencies(&mut self) -> Result<(), GoalError> {
        let rank_first = *self.t.rank_start.last().unwrap_or(&0);
        let ops_in_rank = self.t.kind.len() as u32 - rank_first;
        self.edges.clear();
        for d in &self.pending {
            let name = |(s, e): (u32, u32)| &self.pending_text[s as usize..e as usize];
            let look = |range| {
                self.labels.find(&self.t, rank_first, name(range)).ok_or_else(|| {
                    let (r, _) = self.rank.unwrap_or((0, 0));
                    GoalError::new(
                        d.line,
                        format!(
                            "rank {r}: {} {} {}: no operation labelled {} on rank {r}",
                            show(name(d.waiter)),
                            if d.kind_irequires { "irequires" } else { "requires" },
                            show(name(d.awaited)),
                            show(name(range))
                        ),
                    )
                })
            };
            let waiter = look(d.waiter)?;
            let awaited = look(d.awaited)?;
            self.edges.push((awaited - rank_first, waiter | if d.kind_irequires { START_DEP } else { 0 }));
        }
        self.pending.clear();
        self.pending_text.clear();
        let t = &mut self.t;
        if t.succ.len() + self.edges.len() > u32::MAX as usize {
            return Err(GoalError::new(self.line, "more than 4294967295 dependencies"));
        }
        if t.succ_start.is_empty() {
            t.label_start.push(0);
            t.succ_start.push(0);
        }
        // Counting sort by (awaited op, kind), stable: each row holds its `requires` successors then
        // its `irequires` ones, each in file order.
        let key = |&(from, to): &(u32, u32)| (from as usize) * 2 + (to & START_DEP != 0) as usize;
        let mut count = vec![0u32; ops_in_rank as usize * 2 + 1];
        for e in &self.edges {
            count[key(e) + 1] += 1;
        }
        for k in 1..count.len() {
            count[k] += count[k - 1];
        }
        let base = t.succ.len();
        t.succ.resize(base + self.edges.len(), 0);
        for e in &self.edges {
            let k = key(e);
            t.succ[base + count[k] as usize] = e.1;
            count[k] += 1;
        }
        // After the scatter, count[2i + 1] is the end of op i's row.
        for i in 0..ops_in_rank as usize {
            t.succ_start.push((base + count[2 * i + 1] as usize) as u32);
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Trace, GoalError> {
        if let Some(open) = self.in_comment {
            return Err(GoalError::new(self.line, format!("end of input inside the /* comment opened on line {open}")));
        }
        if let Some((r, open)) = self.rank {
            return Err(GoalError::new(
                self.line,
                format!("end of input inside rank {r}'s block (line {open}): missing '}}'"),
            ));
        }
        let Some(n) = self.num_ranks else {
            return Err(GoalError::new(self.line.max(1), "no num_ranks: the input declares no ranks"));
        };
        let t = &mut self.t;
        if t.label_start.is_empty() {
            t.label_start.push(0);
            t.succ_start.push(0);
        }
        let ops = t.kind.len() as u32;
        while t.rank_start.len() < n as usize + 1 {
            t.rank_start.push(ops);
        }
        for v in [&mut t.label_start, &mut t.succ_start, &mut t.peer, &mut t.tag, &mut t.line, &mut t.succ] {
            v.shrink_to_fit();
        }
        t.size.shrink_to_fit();
        t.kind.shrink_to_fit();
        t.cpu.shrink_to_fit();
        t.nic.shrink_to_fit();
        t.labels.shrink_to_fit();
        Ok(self.t)
    }
}

fn found(line: &[u8], t: Option<&Tok>) -> String {
    match t {
        None => "the end of the line".into(),
        Some(t) => format!("\"{}\"", show(&line[t.start as usize..t.end as usize])),
    }
}

fn check_label(label: &[u8]) -> Result<(), String> {
    match label {
        b"send" | b"recv" | b"calc" | b"rank" | b"num_ranks" => {
            Err(format!("\"{}\" is a keyword, not a label", show(label)))
        }
        _ => Ok(()),
    }
}

/// Labels of the open rank block → operations: open addressing over the trace's own label bytes
/// (no string is allocated per label). Slots carry the generation of the rank block they were
/// filled in, so starting a block clears the table in O(1).
#[derive(Default)]
struct LabelTable {
    /// (generation, operation); a slot is free when its generation is not the current one.
    slots: Vec<(u32, u32)>,
    generation: u32,
    used: usize,
}

impl LabelTable {
    fn clear(&mut self) {
        self.used = 0;
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.slots.iter_mut().for_each(|s| *s = (0, 0));
            self.generation = 1;
        }
    }

    fn label_of(t: &Trace, op: u32) -> &[u8] {
        &t.labels[t.label_start[op as usize] as usize..t.label_start[op as usize + 1] as usize]
    }

    fn find(&self, t: &Trace, rank_first: u32, label: &[u8]) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hash_bytes(label) as usize & mask;
        loop {
            let (g, op) = self.slots[i];
            if g != self.generation {
                return None;
            }
            if op >= rank_first && Self::label_of(t, op) == label {
                return Some(op);
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts `op` (whose label is `label`, not yet in `t`); the operation already holding the
    /// label, if any.
    fn insert(&mut self, t: &Trace, rank_first: u32, label: &[u8], op: u32) -> Option<u32> {
        if let Some(old) = self.find(t, rank_first, label) {
            return Some(old);
        }
        if (self.used + 1) * 2 > self.slots.len() {
            self.grow(t);
        }
        let mask = self.slots.len() - 1;
        let mut i = hash_bytes(label) as usize & mask;
        while self.slots[i].0 == self.generation {
            i = (i + 1) & mask;
        }
        self.slots[i] = (self.generation, op);
        self.used += 1;
        None
    }

    fn grow(&mut self, t: &Trace) {
        let cap = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![(0, 0); cap]);
        let gen = self.generation;
        if gen == 0 {
            self.generation = 1;
        }
        for (g, op) in old {
            if g == gen && gen != 0 {
                let mut i = hash_bytes(Self::label_of(t, op)) as usize & (cap - 1);
                while self.slots[i].0 == self.generation {
                    i = (i + 1) & (cap - 1);
                }
                self.slots[i] = (self.generation, op);
            }
        }
    }
}
