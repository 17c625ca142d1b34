//! Packets and the pool that recycles them.

use crate::ids::{PktId, PortId};
use crate::protocol::AppDst;

/// What a packet carries: a slice of a point-to-point message, or a protocol packet (a handle
/// into the workload's own arena).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// Packet `seq` of message `msg` (raw message traffic).
    Msg { msg: u32 },
    /// A protocol packet (in-network aggregation): the workload's handle.
    App(u32),
    /// A rendezvous control packet of message `msg` (header only): RTS, or CTS if `cts`.
    Ctrl { msg: u32, cts: bool },
    /// A packet of message `msg` under an end-to-end transport (NDP, DCTCP, DCQCN; see
    /// [`crate::transport`]): data packet `seq`, its trimmed header (NDP), or a control packet
    /// (ACK/NACK of packet `seq`, PULL, CNP).
    Transport { msg: u32, kind: TransportPacket },
}

/// What a transport packet is. Data and trimmed headers travel from the message's source to
/// its destination; ACK, NACK, PULL and CNP the other way. Which kinds occur depends on the
/// transport (headers, NACKs and PULLs are NDP's, CNPs DCQCN's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportPacket {
    Data,
    /// A data packet whose payload a switch trimmed (see [`crate::trimming`]).
    Header,
    Ack,
    Nack,
    Pull,
    /// DCQCN: a congestion notification packet (receiver to sender).
    Cnp,
}

impl TransportPacket {
    /// Served from a port's priority (header) queue: everything but whole data packets.
    #[inline]
    pub fn is_priority(self) -> bool {
        self != TransportPacket::Data
    }
}

/// A packet in flight: 64 bytes at a 64-byte boundary, so that each packet is one cache line
/// (an arrival's packet is the line the event loop most often waits for; at 80 bytes a packet
/// spanned two or three lines). `Copy`; the pool recycles slots so the steady state allocates
/// nothing.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
pub(crate) struct Packet {
    /// Next packet in the same queue or wire (intrusive FIFO) or in the free list.
    pub next: Option<PktId>,
    pub wire_bytes: u32,
    pub payload_bytes: u32,
    /// Destination: a host, or (protocol packets only) a switch node.
    pub dst: PackedDst,
    pub body: Body,
    pub seq: u32,
    /// Global ingress port at the current node (`None` at the source), whose credit is
    /// returned when the packet leaves this node.
    pub in_port: Option<PortId>,
    pub in_vc: u8,
    /// VC of the next link (chosen when routed).
    pub vc: u8,
    pub hops: u8,
    /// [`Packet::ECN`] (congestion experienced) and [`Packet::INTERCEPT`] bits.
    pub flags: u8,
    pub flow_hash: u32,
    /// Identity of the payload (see [`fingerprint`]); for NDP ACK/NACK/PULL packets, which
    /// carry none, the cumulative pull number they grant (0: no pull).
    pub fingerprint: u64,
    /// On a wire: when the packet behind it on that wire arrives (see [`crate::wires`]). In an
    /// input-buffered node: when it entered the node's queues (see [`crate::router`]).
    pub arrive_ps: u64,
    /// When it became ready to enter the network (age-based arbitration).
    pub born_ps: u64,
}

impl Packet {
    /// Flag: a switch marked the packet (ECN congestion experienced).
    pub const ECN: u8 = 1;
    /// Flag: a protocol packet that switches running a program hand to it (without it, it is
    /// forwarded like any other packet, e.g. Canary's bypass packets).
    pub const INTERCEPT: u8 = 2;

    /// The flags of a new packet.
    #[inline]
    pub fn new_flags(intercept: bool) -> u8 {
        if intercept {
            Self::INTERCEPT
        } else {
            0
        }
    }
    #[inline]
    pub fn ecn(&self) -> bool {
        self.flags & Self::ECN != 0
    }
    #[inline]
    pub fn intercept(&self) -> bool {
        self.flags & Self::INTERCEPT != 0
    }

    /// The workload's handle if this is a protocol packet.
    #[inline]
    pub fn app(&self) -> Option<u32> {
        match self.body {
            Body::App(a) => Some(a),
            Body::Msg { .. } | Body::Ctrl { .. } | Body::Transport { .. } => None,
        }
    }

    /// The destination as the routing's spreading key (destination-mod-k, Canary's default
    /// port): the host, or `u32::MAX` for a switch node (the value the former "no host"
    /// sentinel gave, kept so that routes and results stay the same).
    #[inline]
    pub fn dst_key(&self) -> u32 {
        match self.dst.get() {
            AppDst::Host(h) => h,
            AppDst::Node(_) => u32::MAX,
        }
    }
}

/// An [`AppDst`] in four bytes: a node id has the top bit set (host and node ids are below
/// 2^31, which `Network::new` checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedDst(u32);

impl PackedDst {
    const NODE: u32 = 1 << 31;
    /// The largest host or node id a packet can name.
    pub const MAX_ID: u32 = Self::NODE - 1;

    #[inline]
    pub fn new(d: AppDst) -> Self {
        match d {
            AppDst::Host(h) => {
                debug_assert!(h <= Self::MAX_ID);
                PackedDst(h)
            }
            AppDst::Node(n) => {
                debug_assert!(n <= Self::MAX_ID);
                PackedDst(n | Self::NODE)
            }
        }
    }
    #[inline]
    pub fn get(self) -> AppDst {
        if self.0 & Self::NODE == 0 {
            AppDst::Host(self.0)
        } else {
            AppDst::Node(self.0 & !Self::NODE)
        }
    }
}

/// The packet arena: slots are recycled through a free list threaded through `next`.
pub(crate) struct PacketPool {
    slots: Vec<Packet>,
    free: Option<PktId>,
    pub live: u32,
    pub peak: u32,
}

impl PacketPool {
    pub fn new() -> Self {
        PacketPool { slots: Vec::new(), free: None, live: 0, peak: 0 }
    }
    #[inline]
    pub fn alloc(&mut self, p: Packet) -> PktId {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        if let Some(id) = self.free {
            self.free = self.slots[id.idx()].next;
            self.slots[id.idx()] = p;
            id
        } else {
            self.slots.push(p);
            PktId::from_idx(self.slots.len() - 1)
        }
    }
    #[inline]
    pub fn release(&mut self, id: PktId) {
        self.live -= 1;
        self.slots[id.idx()].next = self.free;
        self.free = Some(id);
    }
    #[inline]
    pub fn get(&self, id: PktId) -> &Packet {
        &self.slots[id.idx()]
    }
    #[inline]
    pub fn get_mut(&mut self, id: PktId) -> &mut Packet {
        &mut self.slots[id.idx()]
    }
}

/// 64-bit fingerprint of packet `seq` of message `msg` in a run seeded with `salt`
/// (SplitMix64 finaliser). Receivers add fingerprints with wrapping arithmetic, so a lost,
/// duplicated or misdelivered packet changes the sum.
#[inline]
pub fn fingerprint(salt: u64, msg: u32, seq: u32) -> u64 {
    let mut z = salt ^ ((msg as u64) << 32 | seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet is one cache line, an event 16 bytes.
    #[test]
    fn hot_structures_keep_their_size() {
        assert_eq!(std::mem::size_of::<Packet>(), 64);
        assert_eq!(std::mem::align_of::<Packet>(), 64);
        assert!(std::mem::size_of::<crate::network::Event>() <= 16, "{}", std::mem::size_of::<crate::network::Event>());
        assert_eq!(std::mem::size_of::<Option<PktId>>(), 4);
        // A port's state is two lines, a 128-byte pair (see `crate::ports::PortState`).
        assert_eq!(std::mem::align_of::<crate::ports::PortState>(), 128);
        assert_eq!(std::mem::size_of::<crate::ports::PortState>(), 128);
        assert_eq!(std::mem::offset_of!(crate::ports::PortState, q_area), 64, "the first line's fields fill it");
    }

    #[test]
    fn packed_destinations_and_flags_round_trip() {
        for id in [0, 1, 4095, 1 << 22, PackedDst::MAX_ID] {
            for d in [AppDst::Host(id), AppDst::Node(id)] {
                assert_eq!(PackedDst::new(d).get(), d);
            }
        }
        assert_ne!(PackedDst::new(AppDst::Host(5)), PackedDst::new(AppDst::Node(5)));
        assert_eq!(Packet::new_flags(true) & Packet::ECN, 0);
        assert_eq!(Packet::new_flags(false), 0);
        assert_eq!(Packet::ECN & Packet::INTERCEPT, 0, "distinct bits");
    }
}
