//! The wire frame of the shared-pool protocols (SwitchML, ATP, DSA): one [`AggPacket`] per UDP
//! datagram, for the software switch (docs/switch.md, "Pool protocols"). A sibling of
//! [`crate::wire`] (Canary's §4.1 header), with its own magic byte so a frame of one family is
//! never taken for the other.
//!
//! | field | bytes | use |
//! | --- | --- | --- |
//! | magic | 1 | `0xA6` |
//! | kind | 1 | gradient 0, partial 1, ack 2, reminder 3, fetch 4, reminder notice 5, other 6 |
//! | dst | 1 | switch 0, PS 1, workers 2, worker 3 |
//! | flags | 1 | bit 0: ATP's resend flag; bit 1: ECN congestion experienced ([`FLAG_ECN`]); bit 2: addressed to a tree's leaf ([`FLAG_TREE_CHILD`]); the other bits must be 0 |
//! | dst rank | 2 | the worker of `dst = worker`; with bit 2 of the flags, the child (leaf) of the job's tree the packet is for; 0 otherwise |
//! | job | 2 | JobID |
//! | psn | 4 | PSN |
//! | bitmap | 8 | contributors (bit r = rank r) |
//! | workers | 2 | workers of the job, 1..=64 |
//! | elems | 2 | element values that follow |
//! | priority | 4 | DSA's encoded priority |
//! | fingerprint | 8 | wrapping sum of the contributions' fingerprints |
//! | values | 4·elems | 32-bit big-endian integers |
//!
//! The registry's ATP and DSA allreduces (`crate::pool_allreduce`) use the **addressed** form
//! ([`emit_addressed`], [`parse_addressed`]): magic `0xA7`, the same 36 bytes, then the packet's
//! 4-byte destination (as the Canary header's), then the values; the ECN mark rides in the
//! flags. It carries a registry [`Header`] of theirs exactly.
//!
//! All fields big endian; 36 bytes before the values (the paper's 306-byte packet has 58 bytes of
//! Ethernet/IP/UDP and ATP headers before its 62 values; here the UDP datagram is the packet).
//! [`parse_into`] checks every field (untrusted bytes: an error naming the field, never a panic).

use crate::pool::{AggPacket, Dest, PacketKind};
use crate::wire::WireError;
use crate::{Header, NIL};

/// First byte of every pool frame.
pub const MAGIC: u8 = 0xA6;
/// Bytes before the values.
pub const HEADER_BYTES: usize = 36;
/// First byte of an addressed pool frame ([`emit_addressed`]): the frame of the registry's
/// ATP and DSA allreduces, routed by address as every registry protocol's packets are.
pub const MAGIC_ADDRESSED: u8 = 0xA7;
/// An addressed frame's bytes before the values: the header and a 4-byte destination (a host
/// index, `2^31 | node` for a switch, all ones for the first hop; as the Canary header's).
pub const ADDRESSED_HEADER_BYTES: usize = HEADER_BYTES + 4;
/// Flags bit of an ECN mark (congestion experienced). The mark is not part of [`AggPacket`]
/// (the simulator carries it beside the packet, as IP carries it beside the payload): a switch
/// sets it on a frame it queues above its threshold ([`mark_ecn`]) and copies it onto what it
/// forwards; a host reads it with [`ecn`].
pub const FLAG_ECN: u8 = 2;

/// Flags bit of a packet addressed to one leaf of its job's two-level tree (`aggregation =
/// "tree"`): the PS's reminder copy for each leaf (DSA), the root's copy of the PS's ACK for
/// each leaf (ATP). The child's index is in the `dst rank` field ([`tree_child`]); the simulator
/// addresses these to the leaf's node.
pub const FLAG_TREE_CHILD: u8 = 4;

/// The tree child a frame (checked by [`parse_into`]) is addressed to, if any.
pub fn tree_child(frame: &[u8]) -> Option<u16> {
    (frame.len() >= 6 && frame[3] & FLAG_TREE_CHILD != 0).then(|| u16::from_be_bytes([frame[4], frame[5]]))
}

/// Addresses a frame made by [`emit`] (not to one worker) to child `c` of its job's tree.
pub fn set_tree_child(frame: &mut [u8], c: u16) {
    if frame.len() >= 6 {
        frame[3] |= FLAG_TREE_CHILD;
        frame[4..6].copy_from_slice(&c.to_be_bytes());
    }
}

/// Whether a frame (checked by [`parse_into`]) carries an ECN mark.
pub fn ecn(frame: &[u8]) -> bool {
    frame.get(3).is_some_and(|f| f & FLAG_ECN != 0)
}

/// Sets a frame's ECN mark (a frame made by [`emit`]).
pub fn mark_ecn(frame: &mut [u8]) {
    if let Some(f) = frame.get_mut(3) {
        *f |= FLAG_ECN;
    }
}

fn err<T>(field: &'static str, reason: impl Into<String>) -> Result<T, WireError> {
    Err(WireError { field, reason: reason.into() })
}

fn kind_code(k: PacketKind) -> u8 {
    match k {
        PacketKind::Gradient => 0,
        PacketKind::Partial => 1,
        PacketKind::Ack => 2,
        PacketKind::Reminder => 3,
        PacketKind::Fetch => 4,
        PacketKind::ReminderNotice => 5,
        PacketKind::Other => 6,
    }
}

/// Appends `p`'s frame to `out`: the header and `p.elems` values (`values`, or zeros without).
pub fn emit(p: &AggPacket, values: Option<&[i32]>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let (dst, rank) = match p.dst {
        Dest::Switch => (0u8, 0u16),
        Dest::Ps => (1, 0),
        Dest::Workers => (2, 0),
        Dest::Worker(r) => (3, r),
    };
    if !p.well_formed() {
        return err("bitmap", format!("{:#x} does not fit {} workers (1..=64)", p.bitmap, p.workers));
    }
    out.push(MAGIC);
    out.push(kind_code(p.kind));
    out.push(dst);
    out.push(p.resend as u8);
    out.extend_from_slice(&rank.to_be_bytes());
    out.extend_from_slice(&p.job.to_be_bytes());
    out.extend_from_slice(&p.psn.to_be_bytes());
    out.extend_from_slice(&p.bitmap.to_be_bytes());
    out.extend_from_slice(&p.workers.to_be_bytes());
    out.extend_from_slice(&p.elems.to_be_bytes());
    out.extend_from_slice(&p.priority.to_be_bytes());
    out.extend_from_slice(&p.fp.to_be_bytes());
    push_values(p.elems, values, out)
}

/// Appends `n` values (`values`, or zeros without), big endian.
fn push_values(n: u16, values: Option<&[i32]>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let n = n as usize;
    match values {
        Some(v) if v.len() >= n => {
            for x in &v[..n] {
                out.extend_from_slice(&x.to_be_bytes());
            }
        }
        Some(v) => return err("elems", format!("{n} elements but {} values", v.len())),
        None => out.resize(out.len() + 4 * n, 0),
    }
    Ok(())
}

/// The registry header `h` of an ATP or DSA allreduce (`crate::pool_allreduce::to_header`'s
/// form) as an addressed pool frame: [`emit`]'s frame with the magic [`MAGIC_ADDRESSED`], the
/// ECN mark in the flags and `h.dst` in 4 bytes before the values.
pub fn emit_addressed(h: &Header, values: Option<&[i32]>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let p = crate::pool_allreduce::from_header(h, 0);
    let dst = crate::wire::encode_addr(h.dst)?;
    let start = out.len();
    // The header alone (no values), re-tagged, then the address and the values.
    emit(&AggPacket { elems: 0, ..p }, None, out)?;
    out[start] = MAGIC_ADDRESSED;
    if h.ecn {
        out[start + 3] |= FLAG_ECN;
    }
    out[start + 22..start + 24].copy_from_slice(&p.elems.to_be_bytes());
    out.extend_from_slice(&dst.to_be_bytes());
    push_values(p.elems, values, out)
}

/// Parses an addressed pool frame ([`emit_addressed`]) into the registry header it carries
/// (`data` [`NIL`]) and its values, undecoded (`crate::wire::values_into`). Untrusted bytes:
/// errors naming the field, never panics.
pub fn parse_addressed(b: &[u8]) -> Result<(Header, &[u8]), WireError> {
    if b.len() < ADDRESSED_HEADER_BYTES {
        return err("header", format!("{} bytes, need {ADDRESSED_HEADER_BYTES}", b.len()));
    }
    if b[0] != MAGIC_ADDRESSED {
        return err("magic", format!("{:#04x} is not an addressed pool frame ({MAGIC_ADDRESSED:#04x})", b[0]));
    }
    let p = fields(b, ADDRESSED_HEADER_BYTES)?;
    // Only what `to_header` makes: the address names the host (no rank, no tree child), and a
    // contribution names its contributor.
    let known = matches!(
        (p.kind, p.dst),
        (PacketKind::Gradient, Dest::Switch | Dest::Ps)
            | (PacketKind::Partial, Dest::Ps)
            | (PacketKind::Ack | PacketKind::Fetch, Dest::Workers | Dest::Worker(0))
            | (PacketKind::Reminder, Dest::Switch)
            | (PacketKind::ReminderNotice, Dest::Ps)
    );
    if !known {
        return err("dst", format!("{:?} to {:?} is not a packet of the registry's pool allreduces", p.kind, p.dst));
    }
    if b[3] & FLAG_TREE_CHILD != 0 {
        return err("flags", "a tree child on an addressed frame (its address names the node)");
    }
    if p.kind == PacketKind::Gradient && p.bitmap == 0 {
        return err("bitmap", "a contribution without its contributor");
    }
    if p.job > 0xFF {
        return err("job", format!("{} does not fit the 8-bit application id", p.job));
    }
    if p.psn >= crate::host::MAX_BLOCKS {
        return err("psn", format!("{:#x} is beyond the {}-block sequence", p.psn, crate::host::MAX_BLOCKS));
    }
    let at = HEADER_BYTES;
    let dst = crate::wire::decode_addr(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]));
    let mut h = crate::pool_allreduce::to_header(&p, dst);
    h.ecn = b[3] & FLAG_ECN != 0;
    h.data = NIL;
    Ok((h, &b[ADDRESSED_HEADER_BYTES..]))
}

/// Parses a frame made by [`emit`], the values into `values[..elems]` (a slot of the caller's
/// `Values` slab). The packet's `data` is [`NIL`] (the caller sets its slot).
pub fn parse_into(b: &[u8], values: &mut [i32]) -> Result<AggPacket, WireError> {
    if b.len() < HEADER_BYTES {
        return err("header", format!("{} bytes, need {HEADER_BYTES}", b.len()));
    }
    if b[0] != MAGIC {
        return err("magic", format!("{:#04x} is not a pool frame ({MAGIC:#04x})", b[0]));
    }
    let p = fields(b, HEADER_BYTES)?;
    let n = p.elems as usize;
    if n > values.len() {
        return err("elems", format!("{n} elements, more than the {} of a slot", values.len()));
    }
    for (v, c) in values[..n].iter_mut().zip(b[HEADER_BYTES..].chunks_exact(4)) {
        *v = i32::from_be_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok(p)
}

/// The checked fields of a frame whose values start at `values_at` (its length checked
/// against them); the magic is the caller's.
fn fields(b: &[u8], values_at: usize) -> Result<AggPacket, WireError> {
    let u16at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let u32at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let u64at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let kind = match b[1] {
        0 => PacketKind::Gradient,
        1 => PacketKind::Partial,
        2 => PacketKind::Ack,
        3 => PacketKind::Reminder,
        4 => PacketKind::Fetch,
        5 => PacketKind::ReminderNotice,
        6 => PacketKind::Other,
        k => return err("kind", format!("{k} is not a packet kind (0..=6)")),
    };
    if b[3] & !(1 | FLAG_ECN | FLAG_TREE_CHILD) != 0 {
        return err(
            "flags",
            format!("{:#04x} sets bits other than the resend flag, the ECN mark and the tree child", b[3]),
        );
    }
    let rank = u16at(4);
    let workers = u16at(20);
    if !(1..=64).contains(&workers) {
        return err("workers", format!("{workers} is outside 1..=64 (the bitmap has 64 bits)"));
    }
    let dst = match b[2] {
        0 => Dest::Switch,
        1 => Dest::Ps,
        2 => Dest::Workers,
        3 if rank < workers => Dest::Worker(rank),
        3 => return err("dst_rank", format!("worker {rank} of a job of {workers} workers")),
        d => return err("dst", format!("{d} is not a destination (0..=3)")),
    };
    if b[3] & FLAG_TREE_CHILD != 0 {
        if b[2] == 3 {
            return err("flags", "a packet to one worker addressed to a tree child as well");
        }
        if rank >= 64 {
            return err("dst_rank", format!("tree child {rank}: a root has at most 64 children"));
        }
    } else if b[2] != 3 && rank != 0 {
        return err("dst_rank", format!("{rank} on a packet not addressed to one worker"));
    }
    let elems = u16at(22);
    let n = elems as usize;
    if b.len() != values_at + 4 * n {
        return err("length", format!("{} bytes for {n} elements (need {})", b.len(), values_at + 4 * n));
    }
    let mut p = AggPacket::new(kind, dst, u16at(6), u32at(8), workers);
    p.bitmap = u64at(12);
    p.elems = elems;
    p.priority = u32at(24);
    p.fp = u64at(28);
    p.resend = b[3] & 1 == 1;
    p.data = NIL;
    if !p.well_formed() {
        return err("bitmap", format!("{:#x} has bits beyond the job's {workers} workers", p.bitmap));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AggPacket {
        let mut p = AggPacket::new(PacketKind::Ack, Dest::Worker(5), 3, 0xDEAD_BEEF, 8);
        (p.bitmap, p.elems, p.priority, p.fp, p.resend) = (0xFF, 3, 77, 0x0123_4567_89AB_CDEF, true);
        p
    }

    #[test]
    fn every_kind_and_destination_round_trips() {
        let kinds = [
            PacketKind::Gradient,
            PacketKind::Partial,
            PacketKind::Ack,
            PacketKind::Reminder,
            PacketKind::Fetch,
            PacketKind::ReminderNotice,
            PacketKind::Other,
        ];
        for kind in kinds {
            for dst in [Dest::Switch, Dest::Ps, Dest::Workers, Dest::Worker(7)] {
                let p = AggPacket { kind, dst, ..sample() };
                let mut buf = Vec::new();
                emit(&p, Some(&[1, -2, i32::MIN]), &mut buf).unwrap();
                assert_eq!(buf.len(), HEADER_BYTES + 12);
                let mut v = [0i32; 62];
                let q = parse_into(&buf, &mut v).unwrap();
                assert_eq!(q, p);
                assert_eq!(&v[..3], &[1, -2, i32::MIN]);
            }
        }
    }

    #[test]
    fn the_ecn_mark_rides_in_the_flags_beside_the_resend_flag() {
        let mut buf = Vec::new();
        emit(&sample(), Some(&[1, 2, 3]), &mut buf).unwrap();
        assert!(!ecn(&buf));
        mark_ecn(&mut buf);
        assert!(ecn(&buf));
        let mut v = [0i32; 62];
        let q = parse_into(&buf, &mut v).unwrap();
        assert_eq!(q, sample(), "the mark changes nothing else");
        assert!(q.resend);
        assert!(!ecn(&[]));
    }

    #[test]
    fn a_tree_child_address_rides_in_the_rank_field() {
        let mut buf = Vec::new();
        let p = AggPacket { dst: Dest::Switch, ..sample() };
        emit(&p, Some(&[1, 2, 3]), &mut buf).unwrap();
        assert_eq!(tree_child(&buf), None);
        set_tree_child(&mut buf, 5);
        assert_eq!(tree_child(&buf), Some(5));
        let mut v = [0i32; 62];
        assert_eq!(parse_into(&buf, &mut v).unwrap(), p, "the address changes nothing else");
        buf[5] = 64;
        assert_eq!(parse_into(&buf, &mut v).unwrap_err().field, "dst_rank");
        let mut w = Vec::new();
        emit(&sample(), Some(&[1, 2, 3]), &mut w).unwrap();
        set_tree_child(&mut w, 1);
        assert_eq!(parse_into(&w, &mut v).unwrap_err().field, "flags", "one worker and a tree child");
    }

    #[test]
    fn bad_frames_name_the_field() {
        let mut good = Vec::new();
        emit(&sample(), Some(&[1, 2, 3]), &mut good).unwrap();
        let mut v = [0i32; 62];
        let field = |b: &[u8], v: &mut [i32]| parse_into(b, v).unwrap_err().field;
        assert_eq!(field(&good[..10], &mut v), "header");
        let set = |i: usize, x: u8| {
            let mut b = good.clone();
            b[i] = x;
            b
        };
        assert_eq!(field(&set(0, 0x00), &mut v), "magic");
        assert_eq!(field(&set(1, 9), &mut v), "kind");
        assert_eq!(field(&set(2, 4), &mut v), "dst");
        assert_eq!(field(&set(3, 8), &mut v), "flags");
        assert_eq!(field(&set(3, 0x80), &mut v), "flags");
        assert_eq!(field(&set(5, 8), &mut v), "dst_rank", "worker 8 of 8");
        assert_eq!(field(&set(2, 0), &mut v), "dst_rank", "a rank on a switch-bound packet");
        assert_eq!(field(&set(21, 0), &mut v), "workers");
        assert_eq!(field(&set(21, 65), &mut v), "workers");
        assert_eq!(field(&set(18, 1), &mut v), "bitmap", "bit 8 of 8 workers");
        assert_eq!(field(&good[..good.len() - 1], &mut v), "length");
        assert_eq!(field(&[good.clone(), vec![0; 4]].concat(), &mut v), "length");
        assert_eq!(field(&good, &mut v[..2]), "elems");
        let mut bad = sample();
        bad.bitmap = 1 << 9;
        assert_eq!(emit(&bad, None, &mut Vec::new()).unwrap_err().field, "bitmap");
        assert_eq!(emit(&sample(), Some(&[1]), &mut Vec::new()).unwrap_err().field, "elems");
    }

    /// Every header an ATP or DSA allreduce makes comes back from its addressed frame as it
    /// went, values, destination and ECN mark included.
    #[test]
    fn the_addressed_frame_carries_a_registry_header_exactly() {
        use crate::{Addr, Header};
        let mut x = 0x1234_5678_9ABC_DEF1u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 11
        };
        let kinds = [
            (PacketKind::Gradient, Dest::Switch),
            (PacketKind::Gradient, Dest::Ps),
            (PacketKind::Partial, Dest::Ps),
            (PacketKind::Ack, Dest::Workers),
            (PacketKind::Ack, Dest::Worker(0)),
            (PacketKind::Reminder, Dest::Switch),
            (PacketKind::Fetch, Dest::Workers),
            (PacketKind::ReminderNotice, Dest::Ps),
        ];
        for i in 0..3000 {
            let (kind, dst) = kinds[i % kinds.len()];
            let workers = 1 + (next() % 64) as u16;
            let mut p = AggPacket::new(kind, dst, (next() % 256) as u16, (next() % (1 << 20)) as u32, workers);
            p.bitmap = (next() & crate::pool::full_bitmap(workers)).max(1);
            p.priority = next() as u32;
            p.resend = kind == PacketKind::Gradient && dst == Dest::Switch && next() % 2 == 1;
            p.elems = (next() % 70) as u16;
            p.fp = next();
            let to = [Addr::FirstHop, Addr::Switch((next() % 1000) as u32), Addr::Host((next() % 1000) as u32)][i % 3];
            let mut h: Header = crate::pool_allreduce::to_header(&p, to);
            h.ecn = next() % 2 == 1;
            h.data = NIL;
            let values: Vec<i32> = (0..p.elems).map(|_| next() as i32).collect();
            let mut buf = Vec::new();
            emit_addressed(&h, Some(&values), &mut buf).unwrap();
            assert_eq!(buf.len(), ADDRESSED_HEADER_BYTES + 4 * p.elems as usize);
            let (back, payload) = parse_addressed(&buf).unwrap();
            assert_eq!(back, h);
            let mut v = vec![0i32; p.elems as usize];
            crate::wire::values_into(payload, &mut v).unwrap();
            assert_eq!(v, values);
            // Truncated or re-tagged, it is refused naming the field, never a panic.
            assert!(parse_addressed(&buf[..buf.len() - 1]).is_err() || p.elems == 0);
            let mut other = buf.clone();
            other[0] = MAGIC;
            assert_eq!(parse_addressed(&other).unwrap_err().field, "magic");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut v = [0i32; 62];
        for len in 0..400 {
            let b: Vec<u8> = (0..len)
                .map(|i| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    if i == 0 {
                        MAGIC
                    } else {
                        (x >> 56) as u8
                    }
                })
                .collect();
            let _ = parse_into(&b, &mut v);
            let mut a = b.clone();
            if let Some(m) = a.first_mut() {
                *m = MAGIC_ADDRESSED;
            }
            let _ = parse_addressed(&a);
        }
    }
}
