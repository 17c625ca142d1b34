//! The Canary packet header of §4.1 and its 19-byte wire encoding.
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
        if h.multicast != matches!(h.kind, Kind::Broadcast | Kind::Restore) {
            return Err(WireError { field: "flags.multicast", reason: format!("{} on a {:?} packet", h.multicast, h.kind) });
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let h = WireHeader { destination: 1, id: 1, counter: 9, hosts: 4, children: 0, switch_addr: 0, bypass: false, multicast: false, kind: Kind::Reduce, shard: 0 };
        h.encode(&mut b);
        assert_eq!(WireHeader::decode(&b).unwrap_err().field, "counter");
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
