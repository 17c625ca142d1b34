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
use crate::protocol::{
    integer, number, only_known, HostProtocol, InaProtocol, ParamError, Params, Progress, SessionCalls, SwitchConfig,
    Tenant,
};
use crate::tree::{build_trees, tree_session_calls, StaticTreeSwitch, StaticTrees, TreeNode};
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
    let roots: Vec<Vec<u32>> =
        tenants.iter().map(|t| pick_root(fabric, &t.coll.ranks).map(|r| vec![r])).collect::<Result<_, _>>()?;
    let ts: Vec<Tenant<'_>> =
        tenants.iter().zip(&roots).map(|(t, r)| Tenant { coll: t.coll, protocol: t.protocol, roots: r }).collect();
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
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        same_protocol::<FlareDense>(tenants, "flare")?;
        let window = tenants
            .iter()
            .filter_map(|t| t.protocol.as_any().downcast_ref::<FlareDense>())
            .map(|p| p.window)
            .max()
            .unwrap_or(1);
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
            return Err(format!(
                "table_size: {} tenants × {slots} slots exceed {} descriptors",
                tenants.len(),
                cfg.table_size
            ));
        }
        Ok(roles
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (!fabric.nodes[i].is_host)
                    .then(|| Box::new(StaticTreeSwitch::new(i as u32, r, 1, slots)) as Box<dyn SwitchProgram>)
            })
            .collect())
    }
    fn host_agent(&self, c: &Collective, rank: u32) -> Box<dyn HostProtocol> {
        StaticTrees { trees: 1, window: self.hosts_window.load(std::sync::atomic::Ordering::Relaxed) }
            .host_agent(c, rank)
    }
    fn switch_service(&self, elements_per_packet: u16) -> Option<(f64, u64)> {
        Some(cost::service(cost::dense_cycles(elements_per_packet as u64)))
    }
    /// As static trees' (its switches run the same program on one tree): a tenant's switch
    /// state is its tree and its slots, not the collective's size.
    fn session_calls(&self) -> Result<SessionCalls, String> {
        tree_session_calls(self.window)
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

/// The packets a receiver took, by (block or step, sender, `seq`), and the blocks it is done
/// with: a duplicated frame (a real network's, or the software switch's `--fault dup`) is
/// dropped and counted, never added twice. Packets carry no sequence of their own beyond
/// `Chunk::seq`, and a shard count alone cannot tell a duplicate from the next packet.
#[derive(Default)]
struct Seen {
    /// Per block not yet complete: the (sender, seq) taken (a handful: a scan beats a set),
    /// and its shard count once known ([`Self::first_of_block`]).
    live: BTreeMap<u32, (u32, Vec<(u32, u32)>)>,
    /// Bitmap of the complete blocks.
    done: Vec<u64>,
    /// Lists of complete blocks, kept for the next ones (no allocation per block).
    spare: Vec<Vec<(u32, u32)>>,
}

impl Seen {
    fn is_done(&self, block: u32) -> bool {
        self.done.get(block as usize / 64).is_some_and(|w| w >> (block % 64) & 1 != 0)
    }
    /// Whether this is the first time (block, from, seq) arrives, its block not yet done.
    fn first(&mut self, block: u32, from: u32, seq: u32) -> bool {
        self.take(block, from, seq).is_some()
    }
    /// [`Self::first`], returning the block's entry when it is.
    fn take(&mut self, block: u32, from: u32, seq: u32) -> Option<&mut (u32, Vec<(u32, u32)>)> {
        if self.is_done(block) {
            return None;
        }
        let spare = &mut self.spare;
        let e = self.live.entry(block).or_insert_with(|| (0, spare.pop().unwrap_or_default()));
        if e.1.contains(&(from, seq)) {
            return None;
        }
        e.1.push((from, seq));
        Some(e)
    }
    /// [`Self::first`] for the packets of one sender (`c.seq`), the block complete once as many
    /// arrived as its last one's shard count says: a switch passing a result down.
    fn first_of_block(&mut self, c: &Chunk) -> bool {
        let Some(e) = self.take(c.block, 0, c.seq) else { return false };
        if c.shards != 0 {
            e.0 = c.shards;
        }
        if e.0 == e.1.len() as u32 {
            self.complete(c.block);
        }
        true
    }
    /// The block is complete: later packets of it are duplicates.
    fn complete(&mut self, block: u32) {
        if let Some((_, mut v)) = self.live.remove(&block) {
            v.clear();
            self.spare.push(v);
        }
        let w = block as usize / 64;
        if self.done.len() <= w {
            self.done.resize(w + 1, 0);
        }
        self.done[w] |= 1 << (block % 64);
    }
}

// ---------------------------------------------------------------------------------------
// The payload codec (the software switch's frames; the simulator passes chunks by handle).

/// Bytes of a chunk's payload header: block, shard count, sequence, wire words, pair count.
pub const CHUNK_HEAD_BYTES: usize = 20;

/// Largest payload of one sparse packet of `c`: its header and `elements_per_packet` pairs (a
/// dense run of `2 · pairs per packet ≤ elements_per_packet` elements may hold that many
/// non-zeros; every pair is 8 bytes on this wire, a dense run too).
pub fn max_chunk_payload_bytes(c: &Collective) -> usize {
    CHUNK_HEAD_BYTES + 8 * c.elems_per_packet as usize
}

/// Appends `chunk` as payload bytes (little-endian): `block` u32, `shards` u32, `seq` u32,
/// `wire_words` u32, pair count u32, then (index u32, value u32) per pair, ascending by index.
pub fn encode_chunk(chunk: &Chunk, out: &mut Vec<u8>) {
    out.reserve(CHUNK_HEAD_BYTES + 8 * chunk.pairs.len());
    for w in [chunk.block, chunk.shards, chunk.seq, chunk.wire_words, chunk.pairs.len() as u32] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for p in &chunk.pairs {
        out.extend_from_slice(&p.index.to_le_bytes());
        out.extend_from_slice(&p.value.to_le_bytes());
    }
}

/// Reads a payload made by [`encode_chunk`] for a packet with header `hdr` of collective `c`
/// (untrusted bytes: never panics). Checks, each error starting with its field: `length` (the
/// 20-byte head, and exactly 8 bytes per pair), `count` (pairs: what the bytes hold, at most
/// `wire_words`), `block` (the header id's; below `blocks` when given), `shards` (the header's),
/// `seq` (a block's last packet, the one with the shard count, is number `shards - 1`),
/// `wire_words` (at most `elements_per_packet`), `index` (ascending, inside `range`: the
/// block's elements, or the whole vector; an index may repeat, as in a hash switch's spill,
/// whose pairs the next switch adds up).
pub fn decode_chunk(
    hdr: &Header,
    c: &Collective,
    bytes: &[u8],
    blocks: Option<u32>,
    range: impl Fn(u32) -> (u64, u64),
) -> Result<Chunk, String> {
    if bytes.len() < CHUNK_HEAD_BYTES {
        return Err(format!(
            "length: {} payload bytes, a sparse chunk needs at least its {CHUNK_HEAD_BYTES}-byte head",
            bytes.len()
        ));
    }
    let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    let (block, shards, seq, wire_words, count) = (word(0), word(1), word(2), word(3), word(4));
    let room = (bytes.len() - CHUNK_HEAD_BYTES) / 8;
    if count as usize > room {
        return Err(format!("count: {count} pairs, the payload holds {room} ({} bytes)", bytes.len()));
    }
    if bytes.len() != CHUNK_HEAD_BYTES + 8 * count as usize {
        return Err(format!(
            "length: {} payload bytes, {count} pairs take {}",
            bytes.len(),
            CHUNK_HEAD_BYTES + 8 * count as usize
        ));
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
    if shards != 0 && seq != shards - 1 {
        return Err(format!("seq: {seq} on a last packet, its shard count {shards} makes it {}", shards - 1));
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
        let p = Pair { index: word(5 + 2 * i), value: word(6 + 2 * i) };
        if prev.is_some_and(|q| p.index < q) {
            return Err(format!(
                "index: pair {i}'s index {} is below the one before, {} (pairs ascend)",
                p.index,
                prev.unwrap_or(0)
            ));
        }
        if (p.index as u64) < lo || p.index as u64 >= lo + len {
            return Err(format!("index: pair {i}'s index {} is outside {lo}..{} (block {block})", p.index, lo + len));
        }
        prev = Some(p.index);
        pairs.push(p);
    }
    Ok(Chunk { block, pairs, wire_words, shards, seq })
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
fn decode_stored(
    store: &Store,
    hdr: &mut Header,
    c: &Collective,
    bytes: &[u8],
    blocks: Option<u32>,
    range: impl Fn(u32) -> (u64, u64),
) -> Result<(), String> {
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
        Ok(Arc::new(FlareSparse {
            window: window(p)?,
            bucket,
            overlap,
            hash_slots,
            store: Store::default(),
            data: Mutex::new(None),
        }))
    }

    fn data(&self, c: &Collective) -> Arc<SparseData> {
        let mut d = self.data.lock().expect("not poisoned");
        d.get_or_insert_with(|| {
            Arc::new(SparseData { model: sparse_model(self.bucket, self.overlap, c), expected: Mutex::new(None) })
        })
        .clone()
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
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        _cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
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
                        let agg = SparseAggregator::new(layout, storage, children.len() as u32, node.parent.is_none())
                            .map_err(|e| format!("traffic: {e}"))?;
                        let parent_node = node.parent.map(|q| fabric.nodes[i].ports[q as usize].0);
                        Some(TenantRole {
                            node,
                            children,
                            parent_node,
                            agg,
                            coll: t.coll.clone(),
                            store: p.store.clone(),
                            seen: Seen::default(),
                            down: Seen::default(),
                        })
                    }
                });
            }
            out.push(Some(Box::new(FlareSparseSwitch {
                roles: per,
                stats: SwitchStats::default(),
                used: 0,
                buf: Vec::new(),
            }) as Box<dyn SwitchProgram>));
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
            seen: Seen::default(),
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
    /// Packets taken from the children (by child and seq) and, below the root, from the
    /// parent (the result on its way down).
    seen: Seen,
    down: Seen,
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
                if !role.seen.first(chunk.block, child as u32, chunk.seq) {
                    // A duplicate (or a packet of a block already complete): dropped, counted
                    // with the packets a table could not take, never aggregated twice.
                    self.stats.collisions += 1;
                    return;
                }
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
                    role.seen.complete(chunk.block);
                }
                for c in buf.drain(..) {
                    match role.node.parent {
                        Some(p) => {
                            let h = role.store.lock().expect("not poisoned").put(c.clone());
                            let hdr = chunk_header(
                                Kind::Reduce,
                                Addr::Switch(role.parent_node.unwrap_or(NIL)),
                                &role.coll,
                                &c,
                                h,
                            );
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
                if !role.down.first_of_block(&chunk) {
                    // A duplicated result packet: dropped and counted, not passed down again.
                    self.stats.collisions += 1;
                    return;
                }
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
    seen: Seen,
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
                packetize(&self.layout, b, &self.pairs[from..self.cursor], false, 0, &mut v);
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
        if hdr.kind != Kind::Broadcast
            || chunk.block >= self.layout.blocks()
            || self.done.get(chunk.block as usize).copied().unwrap_or(true)
        {
            self.stats.stale += 1;
            return;
        }
        if !self.seen.first(chunk.block, 0, chunk.seq) {
            self.stats.duplicates += 1;
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
                self.seen.complete(b);
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
    fn progress(&self) -> Progress {
        Progress { finished_ps: self.finished_ps, missing: self.layout.blocks() - self.done_count }
    }
    fn expected(&self, _c: &Collective) -> (u32, &'static str) {
        (self.layout.blocks(), "sparse blocks")
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
    fn switch_programs(
        &self,
        fabric: &Fabric,
        tenants: &[Tenant<'_>],
        _cfg: &SwitchConfig,
    ) -> Result<Vec<Option<Box<dyn SwitchProgram>>>, String> {
        same_protocol::<Sparcml>(tenants, "sparcml")?;
        if tenants.iter().any(|t| t.protocol.as_any().downcast_ref::<Sparcml>().is_some_and(|p| p.split != self.split))
        {
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
            d.get_or_insert_with(|| {
                Arc::new(SparseData { model: sparse_model(self.bucket, self.overlap, c), expected: Mutex::new(None) })
            })
            .clone()
        };
        Box::new(SparcmlHost {
            rank,
            split: self.split,
            data,
            store: self.store.clone(),
            state: None,
            finished_ps: None,
            stats: HostStats::default(),
            early: BTreeMap::new(),
            seen: Default::default(),
        })
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
    /// (step, seq) of every packet taken: one peer sends to a rank per step, so a repeat is a
    /// duplicated frame (dropped, counted, never merged twice).
    seen: std::collections::BTreeSet<(u32, u32)>,
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
        if !self.seen.insert((chunk.block, chunk.seq)) {
            self.stats.duplicates += 1;
            return;
        }
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
    fn progress(&self) -> Progress {
        let missing = match (&self.state, self.finished_ps) {
            (_, Some(_)) => 0,
            (Some(st), None) => st.steps_left().max(1),
            (None, None) => 1,
        };
        Progress { finished_ps: self.finished_ps, missing }
    }
    fn expected(&self, _c: &Collective) -> (u32, &'static str) {
        (self.state.as_ref().map_or(1, |st| st.steps().max(1)), "steps")
    }
    fn stats(&self) -> &HostStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    //! The sparse payload codec, and the sparse protocols run through it as separate
    //! processes would (each node with its own protocol instance, so its own chunk store),
    //! with duplicated and reordered frames.
    use super::*;
    use crate::fabric::FabricNode;
    use crate::{wire, HostAction, SwAction};

    struct Xs(u64);
    impl Xs {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn coll(n: u32, bytes: u64, epp: u16) -> Collective {
        Collective::new(0, (0..n).collect(), bytes, epp, 0x5EED, false).unwrap()
    }

    fn header_of(c: &Collective, ch: &Chunk) -> Header {
        chunk_header(Kind::Reduce, Addr::FirstHop, c, ch, 0)
    }

    fn p(index: u32, value: u32) -> Pair {
        Pair { index, value }
    }

    /// The byte layout: little-endian head, then the pairs, exactly; and back.
    #[test]
    fn chunks_round_trip_and_the_layout_is_the_documented_one() {
        let c = coll(4, 1 << 16, 64);
        let whole = |_| (0, elements_of(&c));
        let cases = [
            Chunk { block: 3, pairs: vec![p(5, 1), p(9, u32::MAX), p(4000, 0)], wire_words: 6, shards: 0, seq: 1 },
            // A dense run: more pairs than half its words, one of value 0 (a wrapping sum).
            Chunk {
                block: 3,
                pairs: (100..140).map(|i| p(i, i.wrapping_mul(7))).collect(),
                wire_words: 64,
                shards: 3,
                seq: 2,
            },
            Chunk { block: 0, pairs: vec![], wire_words: 0, shards: 1, seq: 0 },
        ];
        for ch in cases {
            let mut b = Vec::new();
            encode_chunk(&ch, &mut b);
            assert_eq!(b.len(), CHUNK_HEAD_BYTES + 8 * ch.pairs.len());
            assert_eq!(&b[..4], &ch.block.to_le_bytes());
            assert_eq!(&b[16..20], &(ch.pairs.len() as u32).to_le_bytes());
            if let Some(q) = ch.pairs.first() {
                assert_eq!(&b[20..28], &[q.index.to_le_bytes(), q.value.to_le_bytes()].concat()[..]);
            }
            assert_eq!(decode_chunk(&header_of(&c, &ch), &c, &b, None, whole), Ok(ch.clone()));
        }
        assert!(max_chunk_payload_bytes(&c) >= CHUNK_HEAD_BYTES + 8 * 64);
    }

    /// Every check of the decoder, each error starting with the field it is about.
    #[test]
    fn bad_payloads_are_refused_naming_the_field() {
        let c = coll(4, 1 << 16, 64);
        let good = Chunk { block: 2, pairs: vec![p(10, 1), p(20, 2)], wire_words: 4, shards: 2, seq: 1 };
        let h = header_of(&c, &good);
        let mut b = Vec::new();
        encode_chunk(&good, &mut b);
        let field = |bytes: &[u8], hdr: &Header, range: (u64, u64)| {
            decode_chunk(hdr, &c, bytes, Some(8), |_| range).unwrap_err()
        };
        let all = (0, elements_of(&c));
        let set = |i: usize, v: u32| {
            let mut x = b.clone();
            x[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
            x
        };
        assert!(field(&b[..7], &h, all).starts_with("length: 7 payload bytes"));
        assert!(field(&b[..b.len() - 1], &h, all).starts_with("count: 2 pairs"), "a truncated pair");
        assert!(field(&[&b[..], &[0; 8]].concat(), &h, all).starts_with("length: "), "trailing bytes");
        assert!(field(&set(4, 1000), &h, all).starts_with("count: 1000 pairs"));
        assert!(field(&set(0, 5), &h, all).starts_with("block: 5, the header's id"));
        let mut h9 = h;
        h9.id = c.id(9, 0);
        assert!(field(&set(0, 9), &h9, all).starts_with("block: 9, the collective has 8 blocks"));
        assert!(field(&set(1, 7), &h, all).starts_with("shards: 7"));
        assert!(field(&set(2, 0), &h, all).starts_with("seq: 0 on a last packet"));
        assert!(field(&set(3, 65), &h, all).starts_with("wire_words: 65"));
        assert!(field(&set(3, 1), &h, all).starts_with("count: 2 pairs in a packet of 1 words"));
        assert!(field(&set(7, 9), &h, all).starts_with("index: pair 1's index 9 is below the one before, 10"));
        assert!(field(&set(5, 99), &h, all).starts_with("index: pair 1's index 20 is below the one before, 99"));
        // A spill repeats an index: taken as it is (the next switch adds the pairs up).
        assert_eq!(decode_chunk(&h, &c, &set(7, 10), Some(8), |_| all).unwrap().pairs, vec![p(10, 1), p(10, 2)]);
        assert!(field(&b, &h, (11, 100)).starts_with("index: pair 0's index 10 is outside 11..111"));
        assert!(field(&set(7, u32::MAX), &h, all).starts_with("index: pair 1's index 4294967295 is outside"));
    }

    /// Random bytes, and valid payloads with random bytes changed, through the protocols'
    /// `decode_payload` hook: never a panic, every error names a field, and what decodes is
    /// stored, named by the header, and encodes back to the same bytes.
    #[test]
    fn decoding_random_and_mutated_payloads_never_panics_and_names_the_field() {
        let c = coll(4, 1 << 16, 64);
        let mut x = Xs(0xC0FF_EE00_D15E_A5E5);
        let fields = ["length: ", "count: ", "block: ", "shards: ", "seq: ", "wire_words: ", "index: "];
        for name in ["flare_sparse", "sparcml", "sparcml_split"] {
            let proto = (crate::protocol(name).unwrap().build)(&Params::new()).unwrap();
            let valid =
                Chunk { block: 0, pairs: (0..12).map(|i| p(i * 3, i)).collect(), wire_words: 24, shards: 0, seq: 0 };
            let mut vb = Vec::new();
            encode_chunk(&valid, &mut vb);
            let (mut ok, mut refused) = (0, 0);
            for i in 0..60_000u32 {
                let mut bytes: Vec<u8> = if i % 2 == 0 {
                    (0..x.next() % 160).map(|_| x.next() as u8).collect()
                } else {
                    let mut b = vb.clone();
                    for _ in 0..1 + x.next() % 3 {
                        let at = (x.next() % b.len() as u64) as usize;
                        b[at] = if x.next() % 2 == 0 { x.next() as u8 } else { b[at] ^ 1 << (x.next() % 8) };
                    }
                    if x.next() % 8 == 0 {
                        b.truncate((x.next() % b.len() as u64) as usize);
                    }
                    b
                };
                // Half the time the header agrees with the payload's block and shard count.
                let mut h = header_of(&c, &valid);
                if bytes.len() >= 8 && i % 4 < 2 {
                    let block = u32::from_le_bytes(bytes[..4].try_into().unwrap()) & (crate::host::MAX_BLOCKS - 1);
                    bytes[..4].copy_from_slice(&block.to_le_bytes());
                    let shards = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
                    h.id = c.id(block, 0);
                    (h.tree, h.counter) = ((shards & 0xFFFF) as u16, (shards >> 16) as u16);
                }
                let before = h;
                match proto.decode_payload(&c, &mut h, &bytes) {
                    Ok(()) => {
                        ok += 1;
                        let mut again = Vec::new();
                        proto.encode_payload(&c, &h, &mut again).unwrap();
                        assert_eq!(again, bytes, "{name}: decode/encode is a fixpoint");
                    }
                    Err(e) => {
                        refused += 1;
                        assert!(fields.iter().any(|f| e.starts_with(f)), "{name}: `{e}` names no field");
                        assert_eq!(h, before, "{name}: a refused payload leaves the header alone");
                    }
                }
            }
            assert!(ok > 1000 && refused > 10_000, "{name}: {ok} decoded, {refused} refused: the sweep tests little");
        }
    }

    fn star(n: u32) -> Fabric {
        let mut nodes =
            vec![FabricNode { is_host: false, forwards: true, ports: (0..n).map(|h| (h + 1, 0)).collect() }];
        for h in 0..n {
            nodes.push(FabricNode { is_host: true, forwards: false, ports: vec![(0, h as u16)] });
        }
        Fabric { nodes, host_nodes: (1..=n).collect() }
    }

    struct Outcome {
        hosts: Vec<HostStats>,
        missing: u32,
        switch: Option<SwitchStats>,
        frames: u64,
        duplicated: u64,
    }

    /// `n` hosts around one switch, every node with its own protocol instance (its own chunk
    /// store, as separate processes have): every packet is encoded with the sender's
    /// `encode_payload` into a wire frame and decoded with the receiver's `decode_payload`.
    /// `dup_every` = k > 0: every k-th frame is delivered twice, the copy after everything else
    /// (reordered), and every (k+2)-th (not k-th) twice in a row.
    fn run(name: &str, params: &Params, n: u32, bytes: u64, epp: u16, dup_every: u64) -> Outcome {
        let info = crate::protocol(name).unwrap();
        let fabric = star(n);
        let c = coll(n, bytes, epp);
        let procs: Vec<Arc<dyn InaProtocol>> = (0..=n).map(|_| (info.build)(params).unwrap()).collect();
        let cfg = SwitchConfig { table_size: 1 << 16, slots_per_tenant: None, timeout_ps: 0, reclaim_ps: 0 };
        let tenants = [Tenant { coll: &c, protocol: &*procs[0], roots: &[] }];
        let mut program = procs[0].switch_programs(&fabric, &tenants, &cfg).unwrap().remove(0);
        let mut agents: Vec<Box<dyn HostProtocol>> = (0..n).map(|r| procs[r as usize + 1].host_agent(&c, r)).collect();
        let mut vals = Values::new(epp as usize);
        let (mut queue, mut later) = (std::collections::VecDeque::new(), Vec::new());
        let (mut frames, mut duplicated) = (0u64, 0u64);
        // A packet `hdr` made by node `from` leaves it as a frame for node `to` (port `port` there).
        let mut send = |from: usize,
                        to: usize,
                        port: u16,
                        hdr: &Header,
                        queue: &mut std::collections::VecDeque<(usize, u16, Vec<u8>)>,
                        later: &mut Vec<(usize, u16, Vec<u8>)>| {
            let mut payload = Vec::new();
            procs[from].encode_payload(&c, hdr, &mut payload).unwrap();
            let mut frame = Vec::new();
            wire::emit_payload(hdr, &payload, &mut frame).unwrap();
            frames += 1;
            let copy = frame.clone();
            queue.push_back((to, port, frame));
            if dup_every > 0 && frames % dup_every == 0 {
                duplicated += 1;
                later.push((to, port, copy));
            } else if dup_every > 0 && frames % (dup_every + 2) == 0 {
                duplicated += 1;
                queue.push_back((to, port, copy));
            }
        };
        let mut acts = Vec::new();
        let mut sw_acts = Vec::new();
        for (r, a) in agents.iter_mut().enumerate() {
            a.start(&c, 0, &mut vals, &mut acts);
            assert!(acts.is_empty(), "rank {r}");
        }
        for _ in 0..1_000_000 {
            let mut sent = false;
            for (r, a) in agents.iter_mut().enumerate() {
                a.pull(&c, 0, 8, &mut vals, &mut acts);
                for act in acts.drain(..) {
                    let HostAction::Send(h) = act else { panic!("no timers") };
                    sent = true;
                    match h.dst {
                        // Host-based: the switch forwards to the host (its port = the host).
                        Addr::Host(d) => send(r + 1, d as usize + 1, 0, &h, &mut queue, &mut later),
                        _ => send(r + 1, 0, r as u16, &h, &mut queue, &mut later),
                    }
                }
            }
            // Delayed copies go in once the queue runs dry: duplicates arrive reordered.
            if queue.is_empty() {
                queue.extend(later.drain(..));
            }
            let Some((to, port, frame)) = queue.pop_front() else {
                if !sent {
                    break;
                }
                continue;
            };
            let (mut h, payload) = wire::parse_header(&frame).unwrap();
            procs[to].decode_payload(&c, &mut h, payload).unwrap();
            if to == 0 {
                let prog = program.as_mut().expect("a switch program");
                prog.on_packet(0, port, h, &mut vals, &mut sw_acts);
                for a in sw_acts.drain(..) {
                    match a {
                        SwAction::Emit { out: Out::Port(p), hdr } => {
                            send(0, p as usize + 1, 0, &hdr, &mut queue, &mut later)
                        }
                        SwAction::Consume => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
            } else {
                agents[to - 1].on_packet(&c, 0, h, &mut vals, &mut acts);
                assert!(acts.is_empty());
            }
        }
        Outcome {
            hosts: agents.iter().map(|a| a.stats().clone()).collect(),
            missing: agents.iter().map(|a| a.missing()).sum(),
            switch: program.map(|p| p.stats().clone()),
            frames,
            duplicated,
        }
    }

    /// Through the codec, with separate stores, every rank's result is the exact sum; with
    /// every 3rd frame duplicated (the copy arriving after everything else) and every 5th
    /// duplicated at once (before the block it belongs to is complete), still exact, the
    /// switch aggregated as many packets as without duplicates, and every copy was dropped and
    /// counted (switch `collisions`, host `duplicates` or `stale`), none added twice.
    #[test]
    fn sparse_protocols_reduce_exactly_through_the_codec_and_never_add_a_duplicate_twice() {
        let mut params = Params::new();
        params.insert("index_overlap".into(), 0.5);
        params.insert("bucket_elements".into(), 64.0);
        let mut dense = params.clone();
        dense.insert("bucket_elements".into(), 2.0); // sums dense enough for the root's dense runs
        for (name, ps) in [
            ("flare_sparse", &params),
            ("flare_sparse", &dense),
            ("sparcml", &params),
            ("sparcml", &dense),
            ("sparcml_split", &params),
        ] {
            let clean = run(name, ps, 4, 64 << 10, 32, 0);
            assert_eq!(clean.missing, 0, "{name}");
            assert!(
                clean.hosts.iter().all(|s| s.bad_blocks == 0 && s.duplicates == 0 && s.stale == 0),
                "{name}: {:?}",
                clean.hosts
            );
            assert!(clean.frames > 20, "{name}: {} frames", clean.frames);
            let dup = run(name, ps, 4, 64 << 10, 32, 3);
            assert!(dup.duplicated > 5, "{name}");
            assert_eq!(dup.missing, 0, "{name}");
            assert!(
                dup.hosts.iter().all(|s| s.bad_blocks == 0),
                "{name}: a duplicate was added twice: {:?}",
                dup.hosts
            );
            let dropped_at_hosts: u64 = dup.hosts.iter().map(|s| s.duplicates + s.stale).sum();
            let dropped_at_switch = dup.switch.as_ref().map_or(0, |s| s.collisions);
            assert_eq!(
                dropped_at_hosts + dropped_at_switch,
                dup.duplicated,
                "{name}: every copy dropped and counted once"
            );
            if let (Some(a), Some(b)) = (&clean.switch, &dup.switch) {
                assert_eq!(
                    (a.aggregated, a.flushed, a.broadcasts),
                    (b.aggregated, b.flushed, b.broadcasts),
                    "{name}: the switch aggregated the same packets"
                );
                assert!(dropped_at_switch > 0, "{name}: duplicates reached the switch");
            }
        }
    }
}
