//! A lean reader for the explicit message lists of a scenario (`list = [[src, dst, bytes,
//! start_ns], ...]` in a `[[traffic]]` table), so a scenario with millions of messages parses in
//! memory proportional to the messages.
//!
//! The `toml` crate builds a document tree first (hundreds of bytes per value: a 50 MB file
//! with 3.3 M messages needed about 3 GB). [`extract`] instead finds each such `list` value with
//! a small TOML lexer (strings, comments, nested arrays and tables are skipped correctly), reads
//! it straight into `Vec<[u64; 4]>`, and hands `toml` the text with the value replaced by `[]`
//! plus the same number of newlines, so the line numbers of any later error stay true. Anything
//! the lean reader does not understand (a negative number, a float, an entry of the wrong
//! length, `list` in an inline table) makes it give up on the whole text: the full parser then
//! reads the original and reports the error with its usual field path. The result is the same
//! either way; only memory differs.

/// The lists taken out of a text: (index of the `[[traffic]]` table, its messages).
pub type Lists = Vec<(usize, Vec<[u64; 4]>)>;

/// The text to give the TOML parser, and the lists taken out of it. `None` if nothing was
/// taken out.
pub fn extract(text: &str) -> Option<(String, Lists)> {
    let b = text.as_bytes();
    let mut lists = Vec::new();
    let mut out = String::new();
    let mut copied = 0; // text[..copied] is in `out`
    let mut traffic: Option<usize> = None; // index of the [[traffic]] table we are in
    let mut count = 0usize; // [[traffic]] tables seen
    let mut i = 0;
    loop {
        i = skip_blank(b, i, true)?;
        if i >= b.len() {
            break;
        }
        if b[i] == b'[' {
            // A table header: one line.
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
            let line = &text[i..end];
            let line = line.split('#').next().unwrap_or("").trim();
            let name: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            if name == "[[traffic]]" {
                traffic = Some(count);
                count += 1;
            } else {
                traffic = None;
            }
            i = end;
            continue;
        }
        // key = value
        let key_start = i;
        let eq = find_eq(b, i)?;
        let key = text[key_start..eq].trim();
        i = skip_blank(b, eq + 1, false)?;
        if let (Some(t), "list", Some(b'[')) = (traffic, key, b.get(i)) {
            let (list, end) = read_list(b, i)?;
            out.push_str(&text[copied..i]);
            out.push_str("[]");
            let newlines = b[i..end].iter().filter(|&&c| c == b'\n').count();
            out.extend(std::iter::repeat_n('\n', newlines));
            copied = end;
            lists.push((t, list));
            i = end;
        } else {
            i = skip_value(b, i)?;
        }
    }
    if lists.is_empty() {
        return None;
    }
    out.push_str(&text[copied..]);
    Some((out, lists))
}

/// Skips spaces, tabs, comments and (if `newlines`) line ends.
fn skip_blank(b: &[u8], mut i: usize, newlines: bool) -> Option<usize> {
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' => i += 1,
            b'\n' if newlines => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            _ => break,
        }
    }
    Some(i)
}

/// The `=` of a key-value pair starting at `i` (quoted keys allowed); `None` if the line has
/// none (not TOML we understand).
fn find_eq(b: &[u8], mut i: usize) -> Option<usize> {
    while i < b.len() {
        match b[i] {
            b'=' => return Some(i),
            b'"' | b'\'' => i = skip_string(b, i)?,
            b'\n' | b'#' => return None,
            _ => i += 1,
        }
    }
    None
}

/// The index after the string starting at `i` (any of TOML's four kinds).
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let q = b[i];
    let triple = b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q;
    if triple {
        let mut j = i + 3;
        while j < b.len() {
            if q == b'"' && b[j] == b'\\' {
                j += 2;
                continue;
            }
            if b[j] == q && b.get(j + 1) == Some(&q) && b.get(j + 2) == Some(&q) {
                // Up to two more quotes may belong to the string ("""a""""").
                let mut k = j + 3;
                while k < b.len() && b[k] == q && k < j + 5 {
                    k += 1;
                }
                return Some(k);
            }
            j += 1;
        }
        None
    } else {
        let mut j = i + 1;
        while j < b.len() {
            match b[j] {
                b'\\' if q == b'"' => j += 2,
                c if c == q => return Some(j + 1),
                b'\n' => return None,
                _ => j += 1,
            }
        }
        None
    }
}

/// The index after the value starting at `i`: a scalar ends at the line's end or comment; an
/// array or inline table at its matching bracket (strings and comments inside skipped).
fn skip_value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => i = skip_string(b, i)?,
            b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\n' if depth == 0 => return Some(i),
            _ => i += 1,
        }
    }
    (depth == 0).then_some(i)
}

/// Reads `[[a, b, c, d], ...]` of non-negative decimal integers starting at `i` (the outer
/// `[`); returns the entries and the index after the closing `]`.
fn read_list(b: &[u8], i: usize) -> Option<(Vec<[u64; 4]>, usize)> {
    let mut out = Vec::new();
    let mut j = skip_blank(b, i + 1, true)?;
    loop {
        match b.get(j)? {
            b']' => return Some((out, j + 1)),
            b'[' => {
                let mut entry = [0u64; 4];
                j += 1;
                for (k, slot) in entry.iter_mut().enumerate() {
                    j = skip_blank(b, j, true)?;
                    let (v, next) = read_uint(b, j)?;
                    *slot = v;
                    j = skip_blank(b, next, true)?;
                    if k < 3 {
                        if b.get(j) != Some(&b',') {
                            return None;
                        }
                        j += 1;
                    } else if b.get(j) == Some(&b',') {
                        j = skip_blank(b, j + 1, true)?; // a trailing comma
                    }
                }
                if b.get(j) != Some(&b']') {
                    return None;
                }
                out.push(entry);
                j = skip_blank(b, j + 1, true)?;
                match b.get(j)? {
                    b',' => j = skip_blank(b, j + 1, true)?,
                    b']' => {}
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
}

/// A TOML decimal integer (optional `+`, digits with single underscores between them) that
/// fits a u64; `None` for anything else (the full parser then reports it).
fn read_uint(b: &[u8], mut i: usize) -> Option<(u64, usize)> {
    if b.get(i) == Some(&b'+') {
        i += 1;
    }
    let start = i;
    let mut v: u64 = 0;
    let mut last_digit = false;
    while let Some(&c) = b.get(i) {
        match c {
            b'0'..=b'9' => {
                v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
                last_digit = true;
            }
            b'_' if last_digit => last_digit = false,
            _ => break,
        }
        i += 1;
    }
    // A leading zero is only allowed for 0 itself; a number must end with a digit.
    if i == start || !last_digit || (b[start] == b'0' && i - start > 1) {
        return None;
    }
    // The number must end here (not 1.5, 1e3, 0x10).
    match b.get(i) {
        None | Some(b' ' | b'\t' | b'\r' | b'\n' | b',' | b']' | b'#') => Some((v, i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::extract;

    #[test]
    fn lists_are_taken_out_and_lines_kept() {
        let text = "name = \"a [[traffic]] b\"\n[[traffic]]\nkind = \"messages\"\nlist = [\n  [0, 1, 1_000, 0], # first\n  [2, 3, 4, 5],\n]\nx = 1\n[[traffic]]\nhosts = [\n [1], \"]\" ]\nlist = [[9, 8, 7, +6]]\n[run]\nlist = [[1, 2, 3, 4]]\n";
        let (out, lists) = extract(text).unwrap();
        assert_eq!(lists, vec![(0, vec![[0, 1, 1000, 0], [2, 3, 4, 5]]), (1, vec![[9, 8, 7, 6]])]);
        assert_eq!(out.matches('\n').count(), text.matches('\n').count(), "{out}");
        assert!(out.contains("list = []\n\n\n\nx = 1") && out.contains("[run]\nlist = [[1, 2, 3, 4]]"), "{out}");
    }

    #[test]
    fn anything_unusual_leaves_the_text_to_the_full_parser() {
        for list in [
            "[[0, 1, -2, 0]]",
            "[[0, 1, 2]]",
            "[[0, 1, 2, 3, 4]]",
            "[[0, 1, 2.5, 0]]",
            "[[0, 1, 0x10, 0]]",
            "[[01, 1, 2, 3]]",
            "[[0, 1, 2, 99999999999999999999]]",
            "[[0, 1, 2, 3]",
        ] {
            let text = format!("[[traffic]]\nlist = {list}\n");
            assert!(extract(&text).is_none(), "{list}");
        }
        assert!(extract("[[traffic]]\nkind = \"permutation\"\n").is_none());
    }
}

#[cfg(test)]
mod equivalence {
    use crate::{parse, parse_toml};
    use reducelab_des::Rng;

    /// The lean reader and the full parser give the same scenario file, over random lists
    /// written in random TOML styles (spacing, comments, underscores, trailing commas, several
    /// traffic tables, other tables and arrays around them).
    #[test]
    fn lean_and_full_parsers_agree() {
        let mut rng = Rng::new(7);
        for case in 0..200 {
            let mut text = String::from("name = \"eq\" # [[traffic]]\n[topology]\nkind = \"star\"\nhosts = 8\n");
            let tables = 1 + rng.below(3);
            let mut took_out = false;
            let mut noise = false;
            for _ in 0..tables {
                // An array with a `]` in a comment, between traffic tables (a messages entry
                // has no other array key).
                if !noise && rng.below(4) == 0 {
                    text.push_str("\n[noise]\nhosts = [ 1, # a ] comment\n  2 ]\n");
                    noise = true;
                }
                text.push_str("\n[[traffic]]\nkind = \"messages\"\n");
                if rng.below(4) == 0 {
                    text.push_str("transport = \"none\" # list = [[0, 1, 2, 3]]\n");
                }
                let n = rng.below(20) as usize;
                let sep = ["", " ", "\n  ", " # c ]\n"][rng.below(4) as usize];
                let mut items = Vec::new();
                for _ in 0..n {
                    let v: Vec<String> = (0..4)
                        .map(|_| {
                            let x = rng.below(1_000_000);
                            if rng.below(5) == 0 && x >= 1000 {
                                format!("{}_{:03}", x / 1000, x % 1000)
                            } else {
                                x.to_string()
                            }
                        })
                        .collect();
                    items.push(format!("[{}]", v.join(&format!(",{sep}"))));
                }
                let trailing = if n > 0 && rng.below(2) == 0 { "," } else { "" };
                text.push_str(&format!("list = [{sep}{}{trailing}{sep}]\n", items.join(&format!(",{sep}"))));
                took_out = true;
            }
            text.push_str("[run]\ntime_limit_us = 5\n");
            let lean = parse(&text).unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
            let full = parse_toml(&text).unwrap();
            assert_eq!(format!("{lean:?}"), format!("{full:?}"), "case {case}\n{text}");
            assert!(took_out && super::extract(&text).is_some(), "case {case}: the lean path was taken\n{text}");
        }
    }
}
