/// Index of a packet in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketId(pub u32);

pub(crate) const NIL: u32 = u32::MAX;

/// A packet in flight. Kept small and `Copy`; the pool recycles slots so the steady state
/// allocates nothing.
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // `src`/`seq` identify the packet for protocol layers and debugging
pub(crate) struct Packet {
    /// Next packet in the same queue (intrusive FIFO) or in the free list.
    pub next: u32,
    pub wire_bytes: u32,
    pub payload_bytes: u32,
    pub src: u32,
    pub dst: u32,
    pub msg: u32,
    pub seq: u32,
    /// Global ingress port at the current node (`NIL` at the source), whose credit is
    /// returned when the packet leaves this node.
    pub in_port: u32,
    pub in_vc: u8,
    /// VC of the next link (chosen when routed).
    pub vc: u8,
    pub hops: u8,
    pub ecn: bool,
    pub flow_hash: u32,
    pub fingerprint: u64,
    /// Handle of a protocol packet (in-network aggregation) in the workload's arena, or
    /// `NIL` for raw message traffic.
    pub app: u32,
    /// Destination node of a protocol packet addressed to a switch (`NIL`: `dst` is a host).
    pub dst_node: u32,
    /// A protocol packet that switches running a program hand to it (`false`: forwarded
    /// like any other packet, e.g. Canary's bypass packets).
    pub intercept: bool,
    /// When the packet reaches the far end of the wire it is on.
    pub arrive_ps: u64,
    /// When it became ready to enter the network (age-based arbitration).
    pub born_ps: u64,
}

pub(crate) struct PacketPool {
    slots: Vec<Packet>,
    free: u32,
    pub live: u32,
    pub peak: u32,
}

impl PacketPool {
    pub fn new() -> Self {
        PacketPool { slots: Vec::new(), free: NIL, live: 0, peak: 0 }
    }
    #[inline]
    pub fn alloc(&mut self, p: Packet) -> u32 {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        if self.free != NIL {
            let id = self.free;
            self.free = self.slots[id as usize].next;
            self.slots[id as usize] = p;
            id
        } else {
            self.slots.push(p);
            self.slots.len() as u32 - 1
        }
    }
    #[inline]
    pub fn release(&mut self, id: u32) {
        self.live -= 1;
        self.slots[id as usize].next = self.free;
        self.free = id;
    }
    #[inline]
    pub fn get(&self, id: u32) -> &Packet {
        &self.slots[id as usize]
    }
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Packet {
        &mut self.slots[id as usize]
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
