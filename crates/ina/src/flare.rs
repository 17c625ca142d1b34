//! Flare (seed 004) as engine protocols, a thin adaptor over `reducelab-flare`:
//!
//! - `flare`: dense in-network allreduce on one reduction tree (§4): each switch waits for
//!   every child's packet of a block, sends the aggregate to its parent, the root sends the
//!   result back down. The switch logic is the static tree's ([`crate::tree`]); what Flare adds
//!   is the PsPIN switch's per-packet service time ([`reducelab_flare::sparse::cost`]) and the
//!   choice of the root.
//! - `flare_sparse`: sparse in-network allreduce (§7) on the same tree: hash table + spill
//!   buffer at the non-root switches, a dense array at the root, shard counters, densified
//!   results ([`reducelab_flare::sparse::switch`]).
//! - `sparcml`, `sparcml_split`: SparCML's host-based sparse recursive doubling and split
//!   allgather ([`reducelab_flare::sparse::sparcml`]) as host-to-host protocol packets; no
//!   switch programs.
//!
//! The sparse vectors are [`TopOneModel`]'s (one value per bucket of `bucket_elements`, index
//! overlap `index_overlap`); every host checks every result block (or, for SparCML, its whole
//! result) against the exact sum, pair by pair.
//!
//! **Payloads.** A sparse packet's pairs do not fit the fixed [`Values`] slab, so they ride in a
//! per-collective [`ChunkStore`] (the stand-in for the packet's payload bytes), whose handle the
//! header carries in `src`; the header's `elems` is the payload's 4-byte words (2 per pair, 1
//! per element of a dense run), so the size on the wire is right, and `tree` is the shard count
//! of a block's last packet (its high 16 bits in `counter`). On a real wire (the software
//! switch, `crates/switch`) the chunk itself travels in the frame: [`encode_chunk`] /
//! [`decode_chunk`] behind `InaProtocol::encode_payload` / `decode_payload`, which move it out
//! of the sending process's store and into the receiving one's (each process has its own).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use reducelab_flare::sparse::cost;
use reducelab_flare::sparse::format::{packetize, Chunk, Layout, Pair};
use reducelab_flare::sparse::gradients::TopOneModel;
use reducelab_flare::sparse::sparcml::SparcmlRank;
use reducelab_flare::sparse::switch::{BlockAssembler, SparseAggregator, Storage};

use crate::fabric::Fabric;
use crate::host::{Collective, HostStats};
use crate::protocol::{integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, SwitchConfig, Tenant};
use crate::tree::{build_trees, StaticTreeSwitch, StaticTrees, TreeNode};
use crate::{ports_of, Addr, Header, HostAction, Kind, Out, SwAction, SwitchProgram, SwitchStats, Values, NIL};

/// The root of a collective's reduction tree: the switch whose farthest host is nearest (ties:
/// lowest node id). On a two-level fat tree that is a spine, or the leaf if all hosts share it.
pub fn pick_root(fabric: &Fabric, hosts: &[u32]) -> Result<u32, String> {
    let mut best: Option<(u32, u32)> = None;
    for (i, n) in fabric.nodes.iter().enumerate() {
        if n.is_host {
            continue;
        }
        let d = fabric.bfs_from(i as u32);
        let far = hosts.iter().map(|&h| d[fabric.host_nodes[h as usize] as usize]).max().unwrap_or(0);
        if far != u32::MAX && best.is_none_or(|(f, _)| far < f) {
            best = Some((far, i as u32));
        }
    }
    best.map(|b| b.1).ok_or_else(|| "topology: no switch reaches every host of the allreduce".to_string())
}

fn trees_of(fabric: &Fabric, tenants: &[Tenant<'_>]) -> Result<Vec<Vec<Option<TreeNode>>>, String> {
    let roots: Vec<Vec<u32>> = tenants.iter().map(|t| pick_root(fabric, &t.coll.ranks).map(|r| vec![r])).collect::<Result<_, _>>()?;
    let ts: Vec<Tenant<'_>> = tenants.iter().zip(&roots).map(|(t, r)| Tenant { coll: t.coll, protocol: t.protocol, roots: r }).collect();
    build_trees(fabric, &ts, 1)
}

fn same_protocol<T: 'static>(tenants: &[Tenant<'_>], name: &str) -> Result<(), String> {
    for (ci, t) in tenants.iter().enumerate() {
        if t.protocol.as_any().downcast_ref::<T>().is_none() {
            return Err(format!("traffic: in-network allreduce {ci} uses protocol {}; {name} shares the switches with no other protocol", t.protocol.label()));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Dense Flare.

/// Dense Flare as configured for one collective.
#[derive(Debug)]
pub struct FlareDense {
    /// Blocks a host keeps outstanding (the aggregation buffers reserved for it, §4.3).
    pub window: u32,
    /// The window the hosts use: `window`, or fewer if the switches reserve fewer slots per
    /// tenant (§4.3: in-flight blocks ≤ aggregation buffers). Set by `switch_programs`, which
    /// the engine calls before it makes the host agents.
    hosts_window: std::sync::atomic::AtomicU32,
}

impl FlareDense {
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("flare"))?;
        let w = window(p)?;
        Ok(Arc::new(FlareDense { window: w, hosts_window: w.into() }))
    }
}

fn window(p: &Params) -> Result<u32, ParamError> {
    let w = integer(p, "window", 1024, 0, u32::MAX as u64)?;
    if w == 0 {
        return Err(ParamError::new("window", "must be at least 1"));
    }
    Ok(w as u32)
}

impl InaProtocol for FlareDense {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("flare")
    }
    fn label(&self) -> String {
        "flare".into()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn switch_programs(&self, fabric: &Fabric, tenants: &[Tenant<'_>], cfg: &SwitchConfig) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        same_protocol::<FlareDense>(tenants, "flare")?;
        let window = tenants.iter().filter_map(|t| t.protocol.as_any().downcast_ref::<FlareDense>()).map(|p| p.window).max().unwrap_or(1);
        let roles = trees_of(fabric, tenants)?;
        let slots = cfg.slots_per_tenant.unwrap_or(window);
        if slots == 0 {
            return Err("slots_per_tenant: must be at least 1".into());
        }
        // Hosts keep no more blocks outstanding than their slots (else blocks would collide
        // in the switches' static layout and be dropped).
        for t in tenants {
            let p = t.protocol.as_any().downcast_ref::<FlareDense>().expect("checked");
            p.hosts_window.store(p.window.min(slots), std::sync::atomic::Ordering::Relaxed);
        }
        if (slots as u64) * tenants.len() as u64 > cfg.table_size as u64 {
            return Err(format!("table_size: {} tenants × {slots} slots exceed {} descriptors", tenants.len(), cfg.table_size));
        }
        Ok(roles
            .into_iter()
            .enumerate()
            .map(|(i, r)| (!fabric.nodes[i].is_host).then(|| Box::new(StaticTreeSwitch::new(i as u32, r, 1, slots)) as Box<dyn SwitchProgram>))
            .collect())
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        StaticTrees { trees: 1, window: self.hosts_window.load(std::sync::atomic::Ordering::Relaxed) }.host_agent(c, rank)
    }
    fn switch_service(&self, elements_per_packet: u16) -> Option<(f64, u64)> {
        Some(cost::service(cost::dense_cycles(elements_per_packet as u64)))
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        if lost_packets > 0 {
            format!("{lost_packets} packets were lost and Flare has no loss recovery here")
        } else {
            "no event is pending".to_string()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sparse payloads.

/// The payloads of a collective's sparse packets in flight (handle = slot).
#[derive(Default, Debug)]
pub struct ChunkStore {
    slots: Vec<Chunk>,
    free: Vec<u32>,
    pub live: u32,
    pub peak: u32,
}

impl ChunkStore {
    pub fn put(&mut self, c: Chunk) -> u32 {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = c;
                s
            }
            None => {
                self.slots.push(c);
                self.slots.len() as u32 - 1
            }
        }
    }
    pub fn take(&mut self, h: u32) -> Chunk {
        self.live -= 1;
        self.free.push(h);
        std::mem::take(&mut self.slots[h as usize])
    }
}

type Store = Arc<Mutex<ChunkStore>>;

// ---------------------------------------------------------------------------------------
// The payload codec (the software switch's frames; the simulator passes chunks by handle).

/// Bytes of a chunk's payload header: block, shard count, wire words, pair count.
pub const CHUNK_HEAD_BYTES: usize = 16;

/// Largest payload of one sparse packet of `c`: its header and `elements_per_packet` pairs (a
/// dense run of `2 · pairs per packet ≤ elements_per_packet` elements may hold that many
/// non-zeros; every pair is 8 bytes on this wire, a dense run too).
pub fn max_chunk_payload_bytes(c: &Collective) -> usize {
    CHUNK_HEAD_BYTES + 8 * c.elems_per_packet as usize
}

/// Appends `chunk` as payload bytes (little-endian): `block` u32, `shards` u32, `wire_words`
/// u32, pair count u32, then (index u32, value u32) per pair, ascending by index.
pub fn encode_chunk(chunk: &Chunk, out: &mut Vec<u8>) {
    out.reserve(CHUNK_HEAD_BYTES + 8 * chunk.pairs.len());
    for w in [chunk.block, chunk.shards, chunk.wire_words, chunk.pairs.len() as u32] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for p in &chunk.pairs {
        out.extend_from_slice(&p.index.to_le_bytes());
        out.extend_from_slice(&p.value.to_le_bytes());
    }
}

/// Reads a payload made by [`encode_chunk`] for a packet with header `hdr` of collective `c`
/// (untrusted bytes: never panics). Checks, each error starting with its field: `length` (the
/// 16-byte head, and exactly 8 bytes per pair), `count` (pairs: what the bytes hold, at most
/// `wire_words`), `block` (the header id's; below `blocks` when given), `shards` (the header's),
/// `wire_words` (at most `elements_per_packet`), `index` (strictly ascending, inside `range`:
/// the block's elements, or the whole vector).
pub fn decode_chunk(hdr: &Header, c: &Collective, bytes: &[u8], blocks: Option<u32>, range: impl Fn(u32) -> (u64, u64)) -> Result<Chunk, String> {
    if bytes.len() < CHUNK_HEAD_BYTES {
        return Err(format!("length: {} payload bytes, a sparse chunk needs at least its {CHUNK_HEAD_BYTES}-byte head", bytes.len()));
    }
    let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    let (block, shards, wire_words, count) = (word(0), word(1), word(2), word(3));
    let room = (bytes.len() - CHUNK_HEAD_BYTES) / 8;
    if count as usize > room {
        return Err(format!("count: {count} pairs, the payload holds {room} ({} bytes)", bytes.len()));
    }
    if bytes.len() != CHUNK_HEAD_BYTES + 8 * count as usize {
        return Err(format!("length: {} payload bytes, {count} pairs take {}", bytes.len(), CHUNK_HEAD_BYTES + 8 * count as usize));
    }
    let id_block = Collective::block_of(hdr.id);
    if block != id_block {
        return Err(format!("block: {block}, the header's id {:#x} is block {id_block}", hdr.id));
    }
    if let Some(n) = blocks.filter(|&n| block >= n) {
        return Err(format!("block: {block}, the collective has {n} blocks"));
    }
    let hdr_shards = (hdr.counter as u32) << 16 | hdr.tree as u32;
    if shards != hdr_shards {
        return Err(format!("shards: {shards}, the header says {hdr_shards}"));
    }
    if wire_words > c.elems_per_packet as u32 {
        return Err(format!("wire_words: {wire_words}, more than the {} elements of a packet", c.elems_per_packet));
    }
    if count > wire_words {
        return Err(format!("count: {count} pairs in a packet of {wire_words} words"));
    }
    let (lo, len) = range(block);
    let mut pairs = Vec::with_capacity(count as usize);
    let mut prev: Option<u32> = None;
    for i in 0..count as usize {
        let p = Pair { index: word(4 + 2 * i), value: word(5 + 2 * i) };
        if prev.is_some_and(|q| p.index <= q) {
            return Err(format!("index: pair {i}'s index {} does not follow {} (pairs ascend, each index once)", p.index, prev.unwrap_or(0)));
        }
        if (p.index as u64) < lo || p.index as u64 >= lo + len {
            return Err(format!("index: pair {i}'s index {} is outside {lo}..{} (block {block})", p.index, lo + len));
        }
        prev = Some(p.index);
        pairs.push(p);
    }
    Ok(Chunk { block, pairs, wire_words, shards })
}

/// `encode_payload` of the sparse protocols: the chunk leaves this process's store.
fn encode_stored(store: &Store, hdr: &Header, out: &mut Vec<u8>) -> Result<(), String> {
    let mut st = store.lock().expect("not poisoned");
    if hdr.src as usize >= st.slots.len() {
        return Err(format!("src: handle {} names no chunk of this process", hdr.src));
    }
    let chunk = st.take(hdr.src);
    drop(st);
    encode_chunk(&chunk, out);
    Ok(())
}

/// `decode_payload` of the sparse protocols: the chunk enters this process's store, the
/// header names it (and its size in words, as the sender's).
fn decode_stored(store: &Store, hdr: &mut Header, c: &Collective, bytes: &[u8], blocks: Option<u32>, range: impl Fn(u32) -> (u64, u64)) -> Result<(), String> {
    let chunk = decode_chunk(hdr, c, bytes, blocks, range)?;
    hdr.elems = chunk.wire_words as u16;
    hdr.src = store.lock().expect("not poisoned").put(chunk);
    Ok(())
}

fn chunk_header(kind: Kind, dst: Addr, c: &Collective, chunk: &Chunk, handle: u32) -> Header {
    let mut h = Header::new(kind, dst, c.id(chunk.block, 0), c.tenant);
    h.elems = chunk.wire_words as u16;
    // The shard count (32 bits) in two 16-bit fields the frame carries.
    h.tree = (chunk.shards & 0xFFFF) as u16;
    h.counter = (chunk.shards >> 16) as u16;
    h.src = handle;
    h.hosts = c.n() as u16;
    h
}

/// The data model and sums of one sparse collective, shared by its hosts.
#[derive(Debug)]
struct SparseData {
    model: TopOneModel,
    expected: Mutex<Option<Arc<Vec<Pair>>>>,
}

impl SparseData {
    fn expected(&self, c: &Collective) -> Arc<Vec<Pair>> {
        let mut e = self.expected.lock().expect("not poisoned");
        e.get_or_insert_with(|| Arc::new(self.model.sum(c.tenant, c.n()))).clone()
    }
}

fn elements_of(c: &Collective) -> u64 {
    (c.blocks as u64 - 1) * c.elems_per_packet as u64 + c.last_elems as u64
}

fn sparse_model(bucket: u32, overlap: f64, c: &Collective) -> TopOneModel {
    TopOneModel { elements: elements_of(c), bucket, overlap, salt: c.salt }
}

fn sparse_keys(p: &Params) -> Result<(u32, f64), ParamError> {
    let bucket = integer(p, "bucket_elements", 512, 1, 1 << 24)? as u32;
    let overlap = number(p, "index_overlap", 0.0, 0.0, 1.0)?;
    Ok((bucket, overlap))
}

// ---------------------------------------------------------------------------------------
// Sparse Flare.

/// Sparse Flare as configured for one collective.
#[derive(Debug)]
pub struct FlareSparse {
    pub window: u32,
    /// One value per bucket of this many elements (Fig. 15: 512).
    pub bucket: u32,
    /// Probability that a rank's value of a bucket is at the bucket's shared index.
    pub overlap: f64,
    /// Hash-table slots per block at non-root switches (default: 4 packets' worth of pairs).
    pub hash_slots: Option<u32>,
    store: Store,
    data: Mutex<Option<Arc<SparseData>>>,
}

impl FlareSparse {
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info("flare_sparse"))?;
        let (bucket, overlap) = sparse_keys(p)?;
        let hash_slots = match p.get("hash_slots") {
            None => None,
            Some(_) => Some(integer(p, "hash_slots", 1, 1, 1 << 20)? as u32),
        };
        Ok(Arc::new(FlareSparse { window: window(p)?, bucket, overlap, hash_slots, store: Store::default(), data: Mutex::new(None) }))
    }

    fn data(&self, c: &Collective) -> Arc<SparseData> {
        let mut d = self.data.lock().expect("not poisoned");
        d.get_or_insert_with(|| Arc::new(SparseData { model: sparse_model(self.bucket, self.overlap, c), expected: Mutex::new(None) })).clone()
    }

    fn layout(&self, c: &Collective) -> Layout {
        let model = sparse_model(self.bucket, self.overlap, c);
        let ppp = (c.elems_per_packet as u32 / 2).max(1);
        Layout::from_density(model.elements, ppp, model.density()).expect("valid by construction")
    }
}

impl InaProtocol for FlareSparse {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info("flare_sparse")
    }
    fn label(&self) -> String {
        "flare_sparse".into()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn switch_programs(&self, fabric: &Fabric, tenants: &[Tenant<'_>], _cfg: &SwitchConfig) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        same_protocol::<FlareSparse>(tenants, "flare_sparse")?;
        for t in tenants {
            if t.coll.elems_per_packet < 2 {
                return Err("traffic: flare_sparse needs elements_per_packet ≥ 2 (a pair is two 4-byte words)".into());
            }
        }
        let roles = trees_of(fabric, tenants)?;
        let mut out = Vec::with_capacity(fabric.nodes.len());
        for (i, r) in roles.into_iter().enumerate() {
            if fabric.nodes[i].is_host {
                out.push(None);
                continue;
            }
            let mut per = Vec::with_capacity(tenants.len());
            for (t, role) in tenants.iter().zip(r) {
                let p = t.protocol.as_any().downcast_ref::<FlareSparse>().expect("checked");
                per.push(match role {
                    None => None,
                    Some(node) => {
                        let layout = p.layout(t.coll);
                        let storage = match node.parent {
                            None => Storage::Array,
                            Some(_) => {
                                let ppp = layout.pairs_per_packet;
                                Storage::Hash { slots: p.hash_slots.unwrap_or(4 * ppp), spill: ppp }
                            }
                        };
                        let children: Vec<u16> = ports_of(node.children).collect();
                        let agg = SparseAggregator::new(layout, storage, children.len() as u32, node.parent.is_none()).map_err(|e| format!("traffic: {e}"))?;
                        let parent_node = node.parent.map(|q| fabric.nodes[i].ports[q as usize].0);
                        Some(TenantRole { node, children, parent_node, agg, coll: t.coll.clone(), store: p.store.clone() })
                    }
                });
            }
            out.push(Some(Box::new(FlareSparseSwitch { roles: per, stats: SwitchStats::default(), used: 0, buf: Vec::new() }) as Box<dyn SwitchProgram>));
        }
        Ok(out)
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        Box::new(FlareSparseHost {
            rank,
            layout: self.layout(c),
            window: self.window,
            data: self.data(c),
            store: self.store.clone(),
            pairs: Vec::new(),
            next_block: 0,
            queue: std::collections::VecDeque::new(),
            cursor: 0,
            done: Vec::new(),
            done_count: 0,
            oldest: 0,
            assembler: BlockAssembler::default(),
            finished_ps: None,
            stats: HostStats::default(),
        })
    }
    fn switch_service(&self, elements_per_packet: u16) -> Option<(f64, u64)> {
        Some(cost::service(cost::sparse_cycles(elements_per_packet as u64 / 2)))
    }
    fn carries_payload(&self) -> bool {
        true
    }
    fn max_payload_bytes(&self, c: &Collective) -> usize {
        max_chunk_payload_bytes(c)
    }
    fn encode_payload(&self, _c: &Collective, hdr: &Header, out: &mut Vec<u8>) -> Result<(), String> {
        encode_stored(&self.store, hdr, out)
    }
    fn decode_payload(&self, c: &Collective, hdr: &mut Header, bytes: &[u8]) -> Result<(), String> {
        let layout = self.layout(c);
        decode_stored(&self.store, hdr, c, bytes, Some(layout.blocks()), |b| layout.range(b))
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        if lost_packets > 0 {
            format!("{lost_packets} packets were lost and Flare has no loss recovery here")
        } else {
            "no event is pending".to_string()
        }
    }
}

struct TenantRole {
    node: TreeNode,
    /// Child ports, ascending (child `i` of the aggregator is `children[i]`).
    children: Vec<u16>,
    parent_node: Option<u32>,
    agg: SparseAggregator,
    coll: Collective,
    store: Store,
}

/// One switch's sparse handlers, one per tenant whose tree crosses it.
pub struct FlareSparseSwitch {
    roles: Vec<Option<TenantRole>>,
    stats: SwitchStats,
    used: u32,
    buf: Vec<Chunk>,
}

impl FlareSparseSwitch {
    /// The result chunk goes down to every child (one copy, with its own payload, per port).
    fn down(role: &TenantRole, chunk: Chunk, out: &mut Vec<SwAction>) {
        let mut st = role.store.lock().expect("not poisoned");
        for p in ports_of(role.node.children) {
            let h = st.put(chunk.clone());
            let hdr = chunk_header(Kind::Broadcast, Addr::Switch(NIL), &role.coll, &chunk, h);
            out.push(SwAction::Emit { out: Out::Port(p), hdr });
        }
    }
}

impl SwitchProgram for FlareSparseSwitch {
    fn on_packet(&mut self, now: u64, in_port: u16, hdr: Header, _vals: &mut Values, out: &mut Vec<SwAction>) {
        out.push(SwAction::Consume);
        let Some(role) = self.roles.get_mut(hdr.tenant as usize).and_then(|r| r.as_mut()) else {
            return; // not on this tenant's tree: dropped (the run then stalls and says so)
        };
        let chunk = role.store.lock().expect("not poisoned").take(hdr.src);
        match hdr.kind {
            Kind::Reduce => {
                let Some(child) = role.children.iter().position(|&p| p == in_port) else { return };
                let before = role.agg.blocks_in_use();
                let mut buf = std::mem::take(&mut self.buf);
                let completed = match role.agg.on_chunk(child as u32, &chunk, &mut buf) {
                    Ok(c) => c,
                    Err(_) => {
                        // A malformed or duplicate packet: dropped, never aggregated (counted
                        // with the packets a table could not take).
                        self.stats.collisions += 1;
                        self.buf = buf;
                        return;
                    }
                };
                self.stats.aggregated += 1;
                let after = role.agg.blocks_in_use();
                let new_used = (self.used as i64 + after as i64 - before as i64) as u32;
                self.stats.note_use(now, self.used, new_used);
                self.used = new_used;
                if completed {
                    self.stats.flushed += 1;
                }
                for c in buf.drain(..) {
                    match role.node.parent {
                        Some(p) => {
                            let h = role.store.lock().expect("not poisoned").put(c.clone());
                            let hdr = chunk_header(Kind::Reduce, Addr::Switch(role.parent_node.unwrap_or(NIL)), &role.coll, &c, h);
                            out.push(SwAction::Emit { out: Out::Port(p), hdr });
                        }
                        None => {
                            self.stats.broadcasts += 1;
                            Self::down(role, c, out);
                        }
                    }
                }
                self.buf = buf;
            }
            Kind::Broadcast => {
                self.stats.broadcasts += 1;
                Self::down(role, chunk, out);
            }
            _ => {}
        }
    }
    fn on_timer(&mut self, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<SwAction>) {}
    fn descriptors_in_use(&self) -> u32 {
        self.used
    }
    fn stats(&self) -> &SwitchStats {
        &self.stats
    }
}

/// A host of a sparse Flare collective: sends its non-zeros block by block (at most `window`
/// blocks ahead of its oldest unfinished one), assembles each result block by its shard count
/// and checks it against the exact sum.
pub struct FlareSparseHost {
    rank: u32,
    layout: Layout,
    window: u32,
    data: Arc<SparseData>,
    store: Store,
    pairs: Vec<Pair>,
    next_block: u32,
    queue: std::collections::VecDeque<Chunk>,
    cursor: usize,
    done: Vec<bool>,
    done_count: u32,
    oldest: u32,
    assembler: BlockAssembler,
    finished_ps: Option<u64>,
    stats: HostStats,
}

impl HostProtocol for FlareSparseHost {
    fn start(&mut self, c: &Collective, _now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {
        self.pairs = self.data.model.rank_pairs(c.tenant, self.rank);
        self.done = vec![false; self.layout.blocks() as usize];
    }
    fn pull(&mut self, c: &Collective, _now: u64, room: usize, _vals: &mut Values, out: &mut Vec<HostAction>) {
        let mut made = 0;
        while made < room {
            if self.queue.is_empty() {
                let b = self.next_block;
                if b >= self.layout.blocks() || b >= self.oldest + self.window {
                    break;
                }
                let (s, n) = self.layout.range(b);
                let from = self.cursor;
                while self.cursor < self.pairs.len() && (self.pairs[self.cursor].index as u64) < s + n {
                    self.cursor += 1;
                }
                let mut v = Vec::new();
                packetize(b, s, n, &self.pairs[from..self.cursor], self.layout.pairs_per_packet, false, 0, &mut v);
                self.queue.extend(v);
                self.next_block += 1;
            }
            let Some(ch) = self.queue.pop_front() else { break };
            let h = self.store.lock().expect("not poisoned").put(ch.clone());
            out.push(HostAction::Send(chunk_header(Kind::Reduce, Addr::FirstHop, c, &ch, h)));
            self.stats.sent_reduce += 1;
            made += 1;
        }
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, _vals: &mut Values, _out: &mut Vec<HostAction>) {
        let chunk = self.store.lock().expect("not poisoned").take(hdr.src);
        if hdr.kind != Kind::Broadcast || chunk.block >= self.layout.blocks() || self.done.get(chunk.block as usize).copied().unwrap_or(true) {
            self.stats.stale += 1;
            return;
        }
        match self.assembler.add(chunk) {
            Err(_) => self.stats.bad_blocks += 1,
            Ok(None) => {}
            Ok(Some((b, pairs))) => {
                let expected = self.data.expected(c);
                let (s, n) = self.layout.range(b);
                let lo = expected.partition_point(|p| (p.index as u64) < s);
                let hi = expected.partition_point(|p| (p.index as u64) < s + n);
                if pairs[..] != expected[lo..hi] {
                    self.stats.bad_blocks += 1;
                }
                self.done[b as usize] = true;
                self.done_count += 1;
                while (self.oldest as usize) < self.done.len() && self.done[self.oldest as usize] {
                    self.oldest += 1;
                }
                if self.done_count == self.layout.blocks() {
                    self.finished_ps = Some(now);
                    self.pairs = Vec::new();
                }
            }
        }
    }
    fn on_timer(&mut self, _c: &Collective, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn finished_ps(&self) -> Option<u64> {
        self.finished_ps
    }
    fn completed_ps(&self) -> Option<u64> {
        self.finished_ps
    }
    fn missing(&self) -> u32 {
        self.layout.blocks() - self.done_count
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}

// ---------------------------------------------------------------------------------------
// SparCML.

/// SparCML as configured for one collective: sparse recursive doubling (`sparcml`) or split
/// allgather (`sparcml_split`).
#[derive(Debug)]
pub struct Sparcml {
    pub split: bool,
    pub bucket: u32,
    pub overlap: f64,
    store: Store,
    data: Mutex<Option<Arc<SparseData>>>,
}

impl Sparcml {
    pub fn build(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        Self::build_variant(p, false)
    }
    pub fn build_split(p: &Params) -> Result<Arc<dyn InaProtocol>, ParamError> {
        Self::build_variant(p, true)
    }
    fn build_variant(p: &Params, split: bool) -> Result<Arc<dyn InaProtocol>, ParamError> {
        only_known(p, crate::protocol_info(if split { "sparcml_split" } else { "sparcml" }))?;
        let (bucket, overlap) = sparse_keys(p)?;
        Ok(Arc::new(Sparcml { split, bucket, overlap, store: Store::default(), data: Mutex::new(None) }))
    }
}

impl InaProtocol for Sparcml {
    fn info(&self) -> &'static crate::ProtocolInfo {
        crate::protocol_info(if self.split { "sparcml_split" } else { "sparcml" })
    }
    fn label(&self) -> String {
        self.info().name.into()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn switch_programs(&self, fabric: &Fabric, tenants: &[Tenant<'_>], _cfg: &SwitchConfig) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        same_protocol::<Sparcml>(tenants, "sparcml")?;
        if tenants.iter().any(|t| t.protocol.as_any().downcast_ref::<Sparcml>().is_some_and(|p| p.split != self.split)) {
            return Err("traffic: every allreduce of a scenario uses the same SparCML variant".into());
        }
        for t in tenants {
            if t.coll.elems_per_packet < 2 {
                return Err("traffic: sparcml needs elements_per_packet ≥ 2 (a pair is two 4-byte words)".into());
            }
        }
        // Host-based: every switch only forwards.
        Ok(fabric.nodes.iter().map(|_| None).collect())
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        let data = {
            let mut d = self.data.lock().expect("not poisoned");
            d.get_or_insert_with(|| Arc::new(SparseData { model: sparse_model(self.bucket, self.overlap, c), expected: Mutex::new(None) })).clone()
        };
        Box::new(SparcmlHost { rank, split: self.split, data, store: self.store.clone(), state: None, finished_ps: None, stats: HostStats::default(), early: BTreeMap::new() })
    }
    fn carries_payload(&self) -> bool {
        true
    }
    fn max_payload_bytes(&self, c: &Collective) -> usize {
        max_chunk_payload_bytes(c)
    }
    fn encode_payload(&self, _c: &Collective, hdr: &Header, out: &mut Vec<u8>) -> Result<(), String> {
        encode_stored(&self.store, hdr, out)
    }
    fn decode_payload(&self, c: &Collective, hdr: &mut Header, bytes: &[u8]) -> Result<(), String> {
        // A packet's `block` is its step; any index of the vector.
        let n = elements_of(c);
        decode_stored(&self.store, hdr, c, bytes, None, |_| (0, n))
    }
    fn stall_cause(&self, lost_packets: u64) -> String {
        if lost_packets > 0 {
            format!("{lost_packets} packets were lost and SparCML (over raw packets here) has no loss recovery")
        } else {
            "no event is pending".to_string()
        }
    }
}

/// A SparCML rank on the engine.
pub struct SparcmlHost {
    rank: u32,
    split: bool,
    data: Arc<SparseData>,
    store: Store,
    state: Option<SparcmlRank>,
    finished_ps: Option<u64>,
    stats: HostStats,
    /// Packets that arrived before `start` (none in practice; kept for order independence).
    early: BTreeMap<u64, Chunk>,
}

impl SparcmlHost {
    fn check_finished(&mut self, c: &Collective, now: u64) {
        let Some(st) = self.state.as_mut() else { return };
        if self.finished_ps.is_none() && st.finished() {
            if st.result() != &self.data.expected(c)[..] {
                self.stats.bad_blocks += 1;
            }
            st.release_result();
            self.finished_ps = Some(now);
        }
    }
}

impl HostProtocol for SparcmlHost {
    fn start(&mut self, c: &Collective, now: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {
        let pairs = self.data.model.rank_pairs(c.tenant, self.rank);
        let ppp = (c.elems_per_packet as u32 / 2).max(1);
        let new = if self.split { SparcmlRank::new_split } else { SparcmlRank::new };
        let mut st = new(self.rank, c.n(), pairs, elements_of(c), ppp).expect("valid by construction");
        for (_, ch) in std::mem::take(&mut self.early) {
            if st.on_chunk(ch).is_err() {
                self.stats.bad_blocks += 1;
            }
        }
        self.state = Some(st);
        self.check_finished(c, now);
    }
    fn pull(&mut self, c: &Collective, now: u64, room: usize, _vals: &mut Values, out: &mut Vec<HostAction>) {
        let Some(st) = self.state.as_mut() else { return };
        for _ in 0..room {
            let Some((to, ch)) = st.next_chunk() else { break };
            let h = self.store.lock().expect("not poisoned").put(ch.clone());
            out.push(HostAction::Send(chunk_header(Kind::Reduce, Addr::Host(c.ranks[to as usize]), c, &ch, h)));
            self.stats.sent_reduce += 1;
        }
        self.check_finished(c, now);
    }
    fn on_packet(&mut self, c: &Collective, now: u64, hdr: Header, _vals: &mut Values, _out: &mut Vec<HostAction>) {
        let chunk = self.store.lock().expect("not poisoned").take(hdr.src);
        match self.state.as_mut() {
            None => {
                let k = self.early.len() as u64;
                self.early.insert(k, chunk);
            }
            Some(st) => {
                if st.on_chunk(chunk).is_err() {
                    self.stats.bad_blocks += 1;
                }
            }
        }
        self.check_finished(c, now);
    }
    fn on_timer(&mut self, _c: &Collective, _now: u64, _token: u64, _vals: &mut Values, _out: &mut Vec<HostAction>) {}
    fn finished_ps(&self) -> Option<u64> {
        self.finished_ps
    }
    fn completed_ps(&self) -> Option<u64> {
        self.finished_ps
    }
    fn missing(&self) -> u32 {
        match (&self.state, self.finished_ps) {
            (_, Some(_)) => 0,
            (Some(st), None) => st.steps_left().max(1),
            (None, None) => 1,
        }
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}
