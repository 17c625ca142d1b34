//! The Canary packet header of §4.1, its 19-byte wire encoding, and the protocol frame every
//! in-network protocol's [`Header`] is emitted to and parsed from ([`emit`], [`parse`]: the
//! smoltcp `Repr` pattern, `Header` being the checked representation).
//!
//! | field | bytes | use |
//! | --- | --- | --- |
//! | destination | 4 | leader host (or the switch a restoration packet is for) |
//! | id | 4 | application id (8 bits) ⊕ sequence (24 bits) |
//! | counter | 2 | contributions already reduced into the packet |
//! | hosts | 2 | hosts taking part |
//! | children | 4 | ingress port of a collided packet; port bitmap shard of a restoration packet |
//! | switch address | 2 | the switch where a collision happened / a restoration is for |
//! | flags | 1 | bypass (bit 7), multicast (bit 6), then 6 bits the paper leaves as padding |
//!
//! The 6 padding bits carry what the paper's prototype keeps implicit: the packet kind (3 bits:
//! reduce, broadcast, restore, retransmission request, retransmit, failure, fallback, done) and,
//! for restoration packets, which 32-port shard of the children bitmap the `children` field
//! holds (3 bits, as the multicast shards of §4.2). On the wire a packet also pays 14 B of
//! Ethernet header and 24 B of framing overhead (preamble, FCS, inter-packet gap): 57 B in all
//! per packet with the data (§5.1).

use std::mem::MaybeUninit;

use crate::{Addr, Header, MULTICAST_MARK, NIL};

/// Canary header bytes.
pub const HEADER_BYTES: u32 = 19;
/// Ethernet header.
pub const ETHERNET_BYTES: u32 = 14;
/// Preamble, start delimiter, FCS and inter-packet gap.
pub const FRAMING_BYTES: u32 = 24;
/// Everything but the data, per packet on the wire.
pub const OVERHEAD_BYTES: u32 = HEADER_BYTES + ETHERNET_BYTES + FRAMING_BYTES;

/// What a packet is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Data going up towards the leader, aggregated on the way.
    Reduce = 0,
    /// Reduced data going down along the recorded children.
    Broadcast = 1,
    /// Leader → a switch that lost children to collisions: multicast on these ports.
    Restore = 2,
    /// Host → leader: my result for this id did not arrive.
    RetxRequest = 3,
    /// Leader → host: the reduced data again.
    Retransmit = 4,
    /// Leader → hosts: the block was only partly reduced; re-issue it under a new id.
    Failure = 5,
    /// Host → leader, after too many failures: the block's contribution, reduced by the leader
    /// host (host-based fallback), never aggregated by switches.
    Fallback = 6,
    /// Explicit completion notification (host → coordinator, and the coordinator's release).
    Done = 7,
}

impl Kind {
    pub fn from_bits(b: u8) -> Kind {
        match b & 7 {
            0 => Kind::Reduce,
            1 => Kind::Broadcast,
            2 => Kind::Restore,
            3 => Kind::RetxRequest,
            4 => Kind::Retransmit,
            5 => Kind::Failure,
            6 => Kind::Fallback,
            _ => Kind::Done,
        }
    }
}

/// A decoded Canary header (the fields of §4.1 plus the kind and shard from the padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireHeader {
    pub destination: u32,
    pub id: u32,
    pub counter: u16,
    pub hosts: u16,
    pub children: u32,
    pub switch_addr: u16,
    pub bypass: bool,
    pub multicast: bool,
    pub kind: Kind,
    pub shard: u8,
}

/// Why bytes are not a valid Canary packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl WireHeader {
    pub fn encode(&self, out: &mut [u8; HEADER_BYTES as usize]) {
        out[0..4].copy_from_slice(&self.destination.to_be_bytes());
        out[4..8].copy_from_slice(&self.id.to_be_bytes());
        out[8..10].copy_from_slice(&self.counter.to_be_bytes());
        out[10..12].copy_from_slice(&self.hosts.to_be_bytes());
        out[12..16].copy_from_slice(&self.children.to_be_bytes());
        out[16..18].copy_from_slice(&self.switch_addr.to_be_bytes());
        out[18] = (self.bypass as u8) << 7 | (self.multicast as u8) << 6 | (self.kind as u8) << 3 | (self.shard & 7);
    }

    /// Decodes a header and checks the fields' consistency (a parser for untrusted bytes:
    /// it never panics).
    pub fn decode(b: &[u8]) -> Result<WireHeader, WireError> {
        if b.len() < HEADER_BYTES as usize {
            return Err(WireError { field: "header", reason: format!("{} bytes, need {HEADER_BYTES}", b.len()) });
        }
        let u32at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u16at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let h = WireHeader {
            destination: u32at(0),
            id: u32at(4),
            counter: u16at(8),
            hosts: u16at(10),
            children: u32at(12),
            switch_addr: u16at(16),
            bypass: b[18] & 0x80 != 0,
            multicast: b[18] & 0x40 != 0,
            kind: Kind::from_bits(b[18] >> 3),
            shard: b[18] & 7,
        };
        if h.hosts == 0 && matches!(h.kind, Kind::Reduce | Kind::Broadcast) {
            return Err(WireError { field: "hosts", reason: "0 hosts in a reduce/broadcast packet".into() });
        }
        if h.counter > h.hosts && h.kind == Kind::Reduce {
            return Err(WireError { field: "counter", reason: format!("{} exceeds hosts ({})", h.counter, h.hosts) });
        }
        if h.shard != 0 && h.kind != Kind::Restore {
            return Err(WireError { field: "flags.shard", reason: "set on a packet that is not a restoration".into() });
        }
        if h.shard > 1 {
            // The decoded header's port bitmap is 64 bits: shards 0 and 1.
            return Err(WireError {
                field: "flags.shard",
                reason: format!("{} is beyond the 64-port bitmap (shards 0 and 1)", h.shard),
            });
        }
        // Broadcasts and restorations are multicast; a failure notice may be (down the tree).
        if h.multicast != matches!(h.kind, Kind::Broadcast | Kind::Restore) && !(h.multicast && h.kind == Kind::Failure)
        {
            return Err(WireError {
                field: "flags.multicast",
                reason: format!("{} on a {:?} packet", h.multicast, h.kind),
            });
        }
        Ok(h)
    }
}

/// Bytes of the fingerprint trailer of a [`emit`]ted frame.
pub const FINGERPRINT_BYTES: usize = 8;

fn err<T>(field: &'static str, reason: impl Into<String>) -> Result<T, WireError> {
    Err(WireError { field, reason: reason.into() })
}

/// Whether a packet of this kind uses the `children` and `switch address` fields for their
/// §4.1 meaning (collided ingress port / restoration bitmap, and the switch).
fn uses_children(kind: Kind, bypass: bool) -> bool {
    kind == Kind::Restore || (kind == Kind::Reduce && bypass)
}

const DST_FIRST_HOP: u32 = u32::MAX;
const DST_ANY_SWITCH: u32 = u32::MAX - 1;
const DST_SWITCH_BIT: u32 = 1 << 31;

/// A destination as the frames carry it: a host index, `2^31 | node` for a switch, all ones for
/// the sender's first hop (`Switch(NIL)`, any switch: all ones but one).
pub(crate) fn encode_addr(a: Addr) -> Result<u32, WireError> {
    match a {
        Addr::FirstHop => Ok(DST_FIRST_HOP),
        Addr::Switch(NIL) => Ok(DST_ANY_SWITCH),
        Addr::Switch(s) if s < DST_ANY_SWITCH & !DST_SWITCH_BIT => Ok(DST_SWITCH_BIT | s),
        Addr::Host(x) if x < DST_SWITCH_BIT => Ok(x),
        other => err("destination", format!("{other:?} has no encoding")),
    }
}

/// [`encode_addr`]'s inverse (every value is some destination).
pub(crate) fn decode_addr(d: u32) -> Addr {
    match d {
        DST_FIRST_HOP => Addr::FirstHop,
        DST_ANY_SWITCH => Addr::Switch(NIL),
        d if d & DST_SWITCH_BIT != 0 => Addr::Switch(d & !DST_SWITCH_BIT),
        d => Addr::Host(d),
    }
}

/// The frame a protocol's packets travel in on a wire (`InaProtocol::frame`): every protocol
/// of the registry hands its runtime the same [`Header`], and the frame family encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The Canary header of §4.1 ([`emit`], [`parse_header`]), with a protocol's own payload
    /// where it has one.
    Canary,
    /// The shared-pool frame with the destination address
    /// ([`crate::pool_wire::emit_addressed`]): ATP's and DSA's 64-bit bitmap and priority do not
    /// fit the Canary header.
    Pool,
}

impl Frame {
    /// Appends `h`'s frame to `out` (values: `values`, or zeros without).
    pub fn emit(self, h: &Header, values: Option<&[i32]>, out: &mut Vec<u8>) -> Result<(), WireError> {
        match self {
            Frame::Canary => emit(h, values, out),
            Frame::Pool => crate::pool_wire::emit_addressed(h, values, out),
        }
    }
    /// Parses a frame's header; the rest is its dense values, undecoded ([`values_into`]).
    /// Untrusted bytes: errors, never panics.
    pub fn parse_header(self, b: &[u8]) -> Result<(Header, &[u8]), WireError> {
        match self {
            Frame::Canary => parse_header(b),
            Frame::Pool => crate::pool_wire::parse_addressed(b),
        }
    }
    /// Bytes of a frame beside its values.
    pub fn overhead_bytes(self) -> usize {
        match self {
            Frame::Canary => HEADER_BYTES as usize + FINGERPRINT_BYTES,
            Frame::Pool => crate::pool_wire::ADDRESSED_HEADER_BYTES,
        }
    }
    /// `h` as a receiver parses it from its frame(s) ([`round_trip`] for the Canary frame).
    pub fn round_trip(
        self,
        h: &Header,
        values: Option<&[i32]>,
        buf: &mut Vec<u8>,
    ) -> Result<(Header, Vec<i32>), WireError> {
        match self {
            Frame::Canary => round_trip(h, values, buf),
            Frame::Pool => {
                buf.clear();
                self.emit(h, values, buf)?;
                let (p, payload) = self.parse_header(buf)?;
                let mut v = vec![0i32; payload.len() / 4];
                values_into(payload, &mut v)?;
                Ok((p, v))
            }
        }
    }
}

/// Appends the frame of `h` to `out`: the §4.1 header, the `h.elems` elements (32-bit
/// big-endian; `values`, or zeros when the run carries none) and the 8-byte fingerprint.
///
/// The §4.1 fields a kind leaves unused carry what the protocols need beyond the paper's
/// header: the sender (`src`: requests, fallbacks, completion notices, contributions) rides in
/// `children` when the packet has no children to report, a static tree's index in `switch
/// address` when no switch is named, and a restoration's inner kind in the bypass bit (set:
/// failure). Destinations: a host index, `2^31 | node` for a switch, all ones for the sender's
/// first hop. A restoration's bitmap must lie in one 32-port shard (split larger ones).
pub fn emit(h: &Header, values: Option<&[i32]>, out: &mut Vec<u8>) -> Result<(), WireError> {
    let destination = encode_addr(h.dst)?;
    if h.tenant as u32 != h.id >> 24 {
        return err("id", format!("tenant {} is not the id's application byte ({})", h.tenant, h.id >> 24));
    }
    let uses = uses_children(h.kind, h.bypass);
    let (children, shard) = if h.kind == Kind::Restore {
        let shard = if h.children == 0 { 0 } else { h.children.trailing_zeros() / 32 };
        let field = h.children >> (32 * shard);
        if field >> 32 != 0 {
            return err("children", format!("bitmap {:#x} spans more than one 32-port shard", h.children));
        }
        (field as u32, shard as u8)
    } else if uses {
        if h.children >> 32 != 0 {
            return err("children", format!("port {} does not fit", h.children));
        }
        (h.children as u32, 0)
    } else {
        if h.children != 0 {
            return err("children", format!("set on a {:?} packet", h.kind));
        }
        (h.src, 0)
    };
    let multicast_failure = h.kind == Kind::Failure && h.switch_addr == MULTICAST_MARK;
    let switch_addr = if uses {
        if h.switch_addr >= 0xFFFF {
            return err("switch_addr", format!("switch {} does not fit 16 bits", h.switch_addr));
        }
        h.switch_addr as u16
    } else {
        if h.switch_addr != NIL && !multicast_failure {
            return err("switch_addr", format!("set on a {:?} packet", h.kind));
        }
        h.tree
    };
    if uses && h.tree != 0 {
        return err("tree", "a static-tree index on a packet that names a switch");
    }
    if h.kind != Kind::Restore && h.inner != Kind::Broadcast {
        return err("inner", format!("only restorations carry an inner kind, not {:?}", h.kind));
    }
    if h.bypass && h.kind != Kind::Reduce {
        return err("flags.bypass", format!("set on a {:?} packet", h.kind));
    }
    let bypass = match h.kind {
        Kind::Reduce => h.bypass,
        Kind::Restore => h.inner == Kind::Failure,
        _ => false,
    };
    let w = WireHeader {
        destination,
        id: h.id,
        counter: h.counter,
        hosts: h.hosts,
        children,
        switch_addr,
        bypass,
        multicast: matches!(h.kind, Kind::Broadcast | Kind::Restore) || multicast_failure,
        kind: h.kind,
        shard,
    };
    let mut head = [0u8; HEADER_BYTES as usize];
    w.encode(&mut head);
    out.extend_from_slice(&head);
    let n = h.elems as usize;
    match values {
        Some(v) if v.len() >= n => {
            // Written once, into the spare capacity (zero-filling first was a second pass over
            // 1 KiB per frame, and the first touch of a cold egress queue).
            out.reserve(4 * n + FINGERPRINT_BYTES);
            let start = out.len();
            encode_words(&mut out.spare_capacity_mut()[..4 * n], &v[..n]);
            // SAFETY: `encode_words` initialised all 4n bytes after `start` (its `dst` is
            // exactly 4 bytes per element of `src`), within the capacity reserved above.
            unsafe { out.set_len(start + 4 * n) };
        }
        Some(v) => return err("elems", format!("{n} elements but {} values", v.len())),
        None => out.resize(out.len() + 4 * n, 0),
    }
    out.extend_from_slice(&h.fp.to_be_bytes());
    Ok(())
}

/// `src`'s big-endian 32-bit words into `dst` (as many as `dst` holds). The payload of every
/// frame passes here and through [`encode_words`]; both are compiled twice, for the baseline
/// CPU and with AVX2 (one byte shuffle per 8 elements instead of SSE2's unpack, shuffle and
/// pack sequence), and pick one by the CPU's features at run time. Same results either way.
fn decode_words(dst: &mut [i32], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the function is otherwise safe code.
        return unsafe { decode_words_avx2(dst, src) };
    }
    decode_words_portable(dst, src)
}

#[inline(always)]
fn decode_words_portable(dst: &mut [i32], src: &[u8]) {
    for (v, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *v = i32::from_be_bytes([c[0], c[1], c[2], c[3]]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_words_avx2(dst: &mut [i32], src: &[u8]) {
    decode_words_portable(dst, src)
}

/// `src` as big-endian 32-bit words into `dst`, which must be exactly 4 bytes per element
/// (every byte of it is written); see [`decode_words`].
fn encode_words(dst: &mut [MaybeUninit<u8>], src: &[i32]) {
    assert_eq!(dst.len(), 4 * src.len(), "encode_words: 4 bytes per element");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the function is otherwise safe code.
        return unsafe { encode_words_avx2(dst, src) };
    }
    encode_words_portable(dst, src)
}

#[inline(always)]
fn encode_words_portable(dst: &mut [MaybeUninit<u8>], src: &[i32]) {
    for (c, x) in dst.chunks_exact_mut(4).zip(src) {
        let b = x.to_be_bytes();
        c[0].write(b[0]);
        c[1].write(b[1]);
        c[2].write(b[2]);
        c[3].write(b[3]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn encode_words_avx2(dst: &mut [MaybeUninit<u8>], src: &[i32]) {
    encode_words_portable(dst, src)
}

/// Parses a frame made by [`emit`] (untrusted bytes: errors, never panics). The header's `data`
/// is [`NIL`]; the elements come back beside it.
pub fn parse(b: &[u8]) -> Result<(Header, Vec<i32>), WireError> {
    let n = b.len().saturating_sub(HEADER_BYTES as usize + FINGERPRINT_BYTES) / 4;
    let mut values = vec![0; n.min(u16::MAX as usize)];
    let h = parse_into(b, &mut values)?;
    Ok((h, values))
}

/// [`parse`] with the elements decoded into `values[..h.elems]` and the rest of `values` zeroed
/// (a slot of the caller's, e.g. a `Values` slab entry): no allocation, one pass over the
/// payload. A frame with more elements than `values` holds is refused (field `payload`).
pub fn parse_into(b: &[u8], values: &mut [i32]) -> Result<Header, WireError> {
    let (h, payload) = parse_header(b)?;
    values_into(payload, values)?;
    Ok(h)
}

/// The elements of a frame's payload (as [`parse_header`] returns it) into `values[..n]`, the
/// rest of `values` zeroed. More elements than `values` holds: refused (field `payload`).
pub fn values_into(payload: &[u8], values: &mut [i32]) -> Result<(), WireError> {
    let n = payload.len() / 4;
    if n > values.len() {
        return err("payload", format!("{n} elements, more than the {} of a slot", values.len()));
    }
    decode_words(&mut values[..n], &payload[..4 * n]);
    // The rest of the slot is zeroed, so a caller may hand in a recycled slot unzeroed
    // (`Values::alloc_for_overwrite`): the slot ends up exactly as decoding into a fresh one.
    values[n..].fill(0);
    Ok(())
}

/// Parses a frame's header and fingerprint, and returns its payload bytes undecoded (a
/// multiple of 4; `h.elems` is their count of 4-byte words): dense values for
/// [`values_into`], or a protocol's own payload (`InaProtocol::decode_payload`). Untrusted
/// bytes: errors, never panics.
pub fn parse_header(b: &[u8]) -> Result<(Header, &[u8]), WireError> {
    let w = WireHeader::decode(b)?;
    let rest = &b[HEADER_BYTES as usize..];
    if rest.len() < FINGERPRINT_BYTES || (rest.len() - FINGERPRINT_BYTES) % 4 != 0 {
        return err(
            "payload",
            format!("{} bytes after the header: need 4 per element plus {FINGERPRINT_BYTES}", rest.len()),
        );
    }
    let n = (rest.len() - FINGERPRINT_BYTES) / 4;
    if n > u16::MAX as usize {
        return err("payload", format!("{n} elements"));
    }
    let mut fp = [0u8; 8];
    fp.copy_from_slice(&rest[4 * n..]);
    let mut h = Header::new(w.kind, decode_addr(w.destination), w.id, (w.id >> 24) as u16);
    h.counter = w.counter;
    h.hosts = w.hosts;
    h.elems = n as u16;
    h.fp = u64::from_be_bytes(fp);
    let bypass = w.kind == Kind::Reduce && w.bypass;
    if uses_children(w.kind, bypass) {
        h.children = (w.children as u64) << (32 * w.shard as u32);
        h.switch_addr = w.switch_addr as u32;
        h.bypass = bypass;
    } else {
        h.src = w.children;
        h.tree = w.switch_addr;
        if w.kind == Kind::Failure && w.multicast {
            h.switch_addr = MULTICAST_MARK;
        }
    }
    if w.kind == Kind::Restore {
        h.inner = if w.bypass { Kind::Failure } else { Kind::Broadcast };
    }
    Ok((h, &rest[..4 * n]))
}

/// [`emit`] with a protocol's own payload bytes (`InaProtocol::encode_payload`) in place of the
/// dense elements: the header, `payload` (a multiple of 4 bytes, at most 65535 words; `h.elems`
/// is ignored, the frame's word count is the payload's) and the fingerprint.
pub fn emit_payload(h: &Header, payload: &[u8], out: &mut Vec<u8>) -> Result<(), WireError> {
    if payload.len() % 4 != 0 || payload.len() / 4 > u16::MAX as usize {
        return err("payload", format!("{} bytes: need a multiple of 4, at most {} words", payload.len(), u16::MAX));
    }
    let start = out.len();
    emit(&Header { elems: 0, data: NIL, ..*h }, None, out)?;
    let fp_at = out.len() - FINGERPRINT_BYTES;
    out.splice(fp_at..fp_at, payload.iter().copied());
    debug_assert_eq!(out.len() - start, HEADER_BYTES as usize + payload.len() + FINGERPRINT_BYTES);
    Ok(())
}

/// `h` carried by one or more frames and parsed back (a restoration's bitmap is split into
/// 32-port shards, one frame each, and merged again): what a receiver of `h`'s bytes sees.
pub fn round_trip(h: &Header, values: Option<&[i32]>, buf: &mut Vec<u8>) -> Result<(Header, Vec<i32>), WireError> {
    let shards: Vec<u64> = if h.kind == Kind::Restore && h.children != 0 {
        (0..2).map(|s| h.children & (0xFFFF_FFFFu64 << (32 * s))).filter(|&m| m != 0).collect()
    } else {
        vec![h.children]
    };
    let mut merged: Option<(Header, Vec<i32>)> = None;
    for part in shards {
        buf.clear();
        emit(&Header { children: part, ..*h }, values, buf)?;
        let (p, v) = parse(buf)?;
        merged = Some(match merged {
            None => (p, v),
            Some((m, mv)) => (Header { children: m.children | p.children, ..m }, mv),
        });
    }
    Ok(merged.expect("at least one frame"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_round_trip(h: Header, values: Option<&[i32]>) -> (Header, Vec<i32>) {
        let mut buf = Vec::new();
        let out = round_trip(&h, values, &mut buf).unwrap_or_else(|e| panic!("{e}: {h:?}"));
        out
    }

    /// The payload is 32-bit big-endian on the wire whatever path encodes and decodes it (the
    /// AVX2 one where the CPU has it), for every length around the 8- and 32-element vector
    /// steps; `parse_into` zeroes the rest of a dirty slot, so a recycled slot handed in without
    /// zeroing (`Values::alloc_for_overwrite`) ends up as a fresh one would.
    #[test]
    fn payload_words_are_big_endian_and_a_dirty_slot_is_fully_overwritten() {
        for n in 0..=70u16 {
            let vals: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(0x0123_4567) ^ -i).collect();
            let mut h = Header::new(Kind::Reduce, Addr::Host(1), 7, 0);
            (h.counter, h.hosts, h.elems, h.fp) = (1, 4, n, 0x0102_0304_0506_0708);
            let mut buf = vec![0xAB]; // emit appends
            emit(&h, Some(&vals), &mut buf).unwrap();
            let payload = &buf[1 + HEADER_BYTES as usize..];
            let expect: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).chain(h.fp.to_be_bytes()).collect();
            assert_eq!(payload, &expect[..], "{n} elements");
            let mut slot = vec![-7i32; n as usize + 5];
            let p = parse_into(&buf[1..], &mut slot).unwrap();
            assert_eq!((p.elems, p.fp), (n, h.fp));
            assert_eq!(&slot[..n as usize], &vals[..]);
            assert_eq!(&slot[n as usize..], &[0; 5], "{n} elements: the rest of the slot is zeroed");
        }
    }

    #[test]
    fn every_kind_of_protocol_header_survives_its_frame() {
        let mut c = Header::new(Kind::Reduce, Addr::Host(7), 3 << 24 | 2 << 20 | 99, 3);
        (c.counter, c.hosts, c.elems, c.src, c.fp) = (1, 12, 4, 5, 0xDEAD_BEEF_0123_4567);
        let vals = [1, -2, 3, i32::MIN];
        let (p, v) = frame_round_trip(c, Some(&vals));
        assert_eq!((p, v.as_slice()), (c, &vals[..]));
        let mut bypass = c;
        (bypass.bypass, bypass.switch_addr, bypass.children, bypass.src) = (true, 41, 17, NIL);
        assert_eq!(frame_round_trip(bypass, Some(&vals)).0, bypass);
        let mut tree = Header::new(Kind::Broadcast, Addr::Switch(NIL), 5 << 24 | 7, 5);
        (tree.tree, tree.hosts, tree.counter, tree.src) = (3, 8, 8, 2);
        assert_eq!(frame_round_trip(tree, None).0, tree);
        let mut restore = Header::new(Kind::Restore, Addr::Switch(40), 9, 0);
        (restore.inner, restore.switch_addr, restore.children, restore.counter) =
            (Kind::Failure, 40, 1 << 3 | 1 << 40, 2);
        assert_eq!(frame_round_trip(restore, None).0, restore, "two shards, merged again");
        let mut failure = Header::new(Kind::Failure, Addr::FirstHop, 9, 0);
        (failure.switch_addr, failure.hosts, failure.counter) = (MULTICAST_MARK, 4, 1);
        assert_eq!(frame_round_trip(failure, None).0, failure);
        for kind in [Kind::RetxRequest, Kind::Retransmit, Kind::Fallback, Kind::Done] {
            let mut h = Header::new(kind, Addr::Host(3), 1 << 24 | 5, 1);
            (h.src, h.counter, h.hosts) = (11, 1, 4);
            assert_eq!(frame_round_trip(h, None).0, h, "{kind:?}");
        }
    }

    #[test]
    fn headers_the_frame_cannot_carry_are_refused_naming_the_field() {
        let mut buf = Vec::new();
        let mut h = Header::new(Kind::Reduce, Addr::Host(1), 1 << 24, 2);
        h.hosts = 2;
        assert_eq!(emit(&h, None, &mut buf).unwrap_err().field, "id");
        let mut h = Header::new(Kind::Broadcast, Addr::Host(1), 0, 0);
        h.children = 5;
        assert_eq!(emit(&h, None, &mut buf).unwrap_err().field, "children");
        let mut h = Header::new(Kind::Restore, Addr::Switch(3), 0, 0);
        h.children = 1 | 1 << 40;
        assert_eq!(emit(&h, None, &mut buf).unwrap_err().field, "children");
    }

    #[test]
    fn parsing_arbitrary_frames_never_panics_and_is_a_fixpoint() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let (mut again, mut parsed) = (Vec::new(), 0);
        for i in 0..100_000u32 {
            let len = 19 + (i as usize % 40);
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            match parse(&buf) {
                Ok((h, v)) => {
                    parsed += 1;
                    again.clear();
                    if emit(&h, Some(&v), &mut again).is_ok() {
                        assert_eq!(parse(&again).unwrap(), (h, v));
                    }
                }
                Err(e) => assert!(!e.field.is_empty() && !e.reason.is_empty()),
            }
        }
        assert!(parsed > 1000, "only {parsed} random frames parsed: the sweep tests little");
    }

    #[test]
    fn header_is_19_bytes_and_round_trips() {
        let h = WireHeader {
            destination: 0x0A00_0107,
            id: 3 << 24 | 4095,
            counter: 17,
            hosts: 512,
            children: 0b1011,
            switch_addr: 33,
            bypass: true,
            multicast: true,
            kind: Kind::Restore,
            shard: 1,
        };
        let mut b = [0u8; 19];
        h.encode(&mut b);
        assert_eq!(WireHeader::decode(&b), Ok(h));
        assert_eq!(OVERHEAD_BYTES, 57);
    }

    #[test]
    fn decoder_names_bad_fields_and_never_panics() {
        assert_eq!(WireHeader::decode(&[0; 5]).unwrap_err().field, "header");
        let mut b = [0u8; 19];
        let h = WireHeader {
            destination: 1,
            id: 1,
            counter: 9,
            hosts: 4,
            children: 0,
            switch_addr: 0,
            bypass: false,
            multicast: false,
            kind: Kind::Reduce,
            shard: 0,
        };
        h.encode(&mut b);
        assert_eq!(WireHeader::decode(&b).unwrap_err().field, "counter");
        let r = WireHeader { counter: 0, kind: Kind::Restore, multicast: true, shard: 2, ..h };
        r.encode(&mut b);
        assert_eq!(WireHeader::decode(&b).unwrap_err().field, "flags.shard");
        assert!(WireHeader::decode(&b).unwrap_err().reason.contains("64-port"));
        // Exhaustive over the flags byte and a pseudo-random sweep of the rest: no panic.
        let mut x = 0x1234_5678_9abc_def0u64;
        for i in 0..200_000u32 {
            let mut buf = [0u8; 19];
            for byte in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            buf[18] = i as u8;
            let len = (x % 21) as usize;
            let _ = WireHeader::decode(&buf[..len.min(19)]);
            if let Ok(h) = WireHeader::decode(&buf) {
                let mut again = [0u8; 19];
                h.encode(&mut again);
                assert_eq!(again, buf, "decode/encode must round-trip");
            }
        }
    }
}
