use crate::SimTime;

/// Bits of an event as its FIFO node holds it: a flag ([`INLINE`]) and 25 bits that are
/// either the event itself ([`Packable`]) or the slot of the event in the slab (so at most
/// 2^25 = 33 M events can wait in the slab at once).
const SLOT_BITS: u32 = 26;
/// The flag of a node that holds its event in its low [`PACKED_BITS`] bits.
const INLINE: u128 = 1 << (SLOT_BITS - 1);
const LOW_MASK: u128 = INLINE - 1;

/// Bits an event packed into its FIFO node may use (see [`Packable`]).
pub const PACKED_BITS: u32 = SLOT_BITS - 1;

/// An event type of an [`EventQueue`]. Events that [`Packable::pack`] into [`PACKED_BITS`] bits
/// travel inside their FIFO node; the others wait in a slab the node points to. A packed
/// event costs no slab access when it is pushed, peeked or popped: in the packet engine the
/// slab line of an event pushed thousands of events earlier was a cache miss at every peek
/// and pop (~10% of an NDP permutation's time; docs/engine.md, "Performance"). The order of
/// pops does not depend on packing (see [`EventQueue`]).
pub trait Packable: Copy {
    /// The event as a number below `2^PACKED_BITS`, if it has such a form. The default packs
    /// nothing.
    #[inline]
    fn pack(&self) -> Option<u32> {
        None
    }
    /// The event that packed to `bits` (called only with values [`Packable::pack`] returned).
    #[inline]
    fn unpack(bits: u32) -> Self {
        unreachable!("an event type that packs nothing unpacked {bits}")
    }
}

impl Packable for u32 {}
impl<const N: usize> Packable for [u32; N] {}
/// Four 16-byte heap keys in one 64-byte cache line. Positions past the heap's end hold
/// `u128::MAX`, so a node's children are always a whole line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u128; 4]);

const EMPTY: Line = Line([u128::MAX; 4]);

/// Heap slot `i` lives at position `i + 3`, so that the four children `4i + 1 ..= 4i + 4`
/// (positions `4(i + 1) ..`) share one cache line.
const SHIFT: usize = 3;

/// No node / no FIFO.
const NONE: u32 = u32::MAX;

/// One pending event: its key's low bits (packed event or slab slot) and the next event of
/// the same time.
#[derive(Clone, Copy)]
struct Node {
    low: u32,
    next: u32,
}

/// The events of one pending time, in push order.
#[derive(Clone, Copy)]
struct Fifo {
    time: u64,
    head: u32,
    tail: u32,
}

/// Pending events ordered by `(time, insertion order)`.
///
/// **Ordering guarantee.** `pop` returns events in non-decreasing time; events with equal time
/// come out in the order they were pushed. The order is total and independent of the queue's
/// layout: the same pushes always give the same pops. This is what makes runs deterministic
/// without any tie-breaking by component id or memory address.
///
/// Events of one time wait in a FIFO (a list through a node slab) and a 4-ary min-heap holds
/// one key per *distinct* pending time (`time << 64 | fifo`), found by time through an
/// open-addressing table. The packet engine's events cluster at equal times (its flows run in
/// lockstep: at 1,024 hosts ~11.7 k pending events share ~1.3 k times, and 40% of pushes are at
/// the time of the push before; docs/engine.md, "Performance"), so most pushes append to a
/// list and most pops take a list's head, without a sift. A sift compares keys only, one cache
/// line of children per level. Events that [`Packable::pack`] travel in their node; the others
/// wait in a slab. Nothing allocates once the slabs reached their peak size.
pub struct EventQueue<E: Packable> {
    lines: Vec<Line>,
    /// Distinct pending times in the heap.
    times: usize,
    fifos: Vec<Fifo>,
    free_fifos: Vec<u32>,
    nodes: Vec<Node>,
    free_nodes: u32,
    /// time → FIFO, linear probing; `table[i] = (time, fifo)`, `fifo == NONE` when empty.
    table: Vec<(u64, u32)>,
    /// The FIFO of the last push (most pushes are at the same time as the one before).
    last: u32,
    len: usize,
    events: Vec<E>,
    free: Vec<u32>,
    pushed: u64,
    now: u64,
}

const ARITY: usize = 4;

impl<E: Packable> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn slot_of(time: u64, mask: usize) -> usize {
    (time.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask
}

impl<E: Packable> EventQueue<E> {
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    pub fn with_capacity(n: usize) -> Self {
        EventQueue {
            lines: Vec::new(),
            times: 0,
            fifos: Vec::new(),
            free_fifos: Vec::new(),
            nodes: Vec::with_capacity(n),
            free_nodes: NONE,
            table: vec![(0, NONE); 64],
            last: NONE,
            len: 0,
            events: Vec::new(),
            free: Vec::new(),
            pushed: 0,
            now: 0,
        }
    }

    #[inline]
    fn key(&self, i: usize) -> u128 {
        let p = i + SHIFT;
        self.lines[p >> 2].0[p & 3]
    }

    #[inline]
    fn set_key(&mut self, i: usize, k: u128) {
        let p = i + SHIFT;
        self.lines[p >> 2].0[p & 3] = k;
    }

    /// Time of the last popped event (the simulation clock).
    #[inline]
    pub fn now(&self) -> SimTime {
        SimTime(self.now)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of events ever pushed.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Schedules `event` at `time`. Scheduling in the past is a logic error and panics in
    /// debug builds; in release builds the event fires "now" (after already-queued events).
    #[inline(always)]
    pub fn push(&mut self, time: SimTime, event: E) {
        debug_assert!(time.0 >= self.now, "event scheduled in the past: {} < {}", time.0, self.now);
        let t = time.0.max(self.now);
        let low = match event.pack() {
            Some(bits) => {
                debug_assert!((bits as u128) <= LOW_MASK, "packed event {bits} wider than {PACKED_BITS} bits");
                (INLINE | (bits as u128 & LOW_MASK)) as u32
            }
            None => self.store(event) as u32,
        };
        self.pushed += 1;
        self.len += 1;
        let n = self.new_node(low);
        let f = match self.last {
            f if f != NONE && self.fifos[f as usize].time == t => f,
            _ => self.fifo_of(t),
        };
        self.last = f;
        let fifo = &mut self.fifos[f as usize];
        if fifo.tail == NONE {
            fifo.head = n;
        } else {
            let tail = fifo.tail;
            self.nodes[tail as usize].next = n;
        }
        self.fifos[f as usize].tail = n;
    }

    #[inline]
    fn new_node(&mut self, low: u32) -> u32 {
        let node = Node { low, next: NONE };
        if self.free_nodes != NONE {
            let n = self.free_nodes;
            self.free_nodes = self.nodes[n as usize].next;
            self.nodes[n as usize] = node;
            n
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    /// The FIFO of time `t`, made (and its time put in the heap) if none is pending. Out of
    /// line: `push` is inlined at its callers, and most pushes append to the last FIFO.
    #[inline(never)]
    fn fifo_of(&mut self, t: u64) -> u32 {
        let mask = self.table.len() - 1;
        let mut i = slot_of(t, mask);
        loop {
            let (time, f) = self.table[i];
            if f == NONE {
                break;
            }
            if time == t {
                return f;
            }
            i = (i + 1) & mask;
        }
        let f = match self.free_fifos.pop() {
            Some(f) => {
                self.fifos[f as usize] = Fifo { time: t, head: NONE, tail: NONE };
                f
            }
            None => {
                self.fifos.push(Fifo { time: t, head: NONE, tail: NONE });
                (self.fifos.len() - 1) as u32
            }
        };
        self.table[i] = (t, f);
        self.times += 1;
        if self.times * 2 > self.table.len() {
            self.grow_table();
        }
        self.heap_push(((t as u128) << 64) | f as u128);
        f
    }

    #[cold]
    fn grow_table(&mut self) {
        let bigger = vec![(0, NONE); self.table.len() * 2];
        let old = std::mem::replace(&mut self.table, bigger);
        let mask = self.table.len() - 1;
        for (t, f) in old.into_iter().filter(|e| e.1 != NONE) {
            let mut i = slot_of(t, mask);
            while self.table[i].1 != NONE {
                i = (i + 1) & mask;
            }
            self.table[i] = (t, f);
        }
    }

    /// Removes time `t` from the table (backward-shift deletion keeps probe chains whole).
    #[inline]
    fn forget(&mut self, t: u64) {
        let mask = self.table.len() - 1;
        let mut i = slot_of(t, mask);
        while self.table[i].0 != t || self.table[i].1 == NONE {
            i = (i + 1) & mask;
        }
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let (tj, fj) = self.table[j];
            if fj == NONE {
                break;
            }
            let home = slot_of(tj, mask);
            // Entry j may move to the hole at i if its home is not in (i, j] cyclically.
            let between = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !between {
                self.table[i] = (tj, fj);
                i = j;
            }
        }
        self.table[i] = (0, NONE);
        self.times -= 1;
    }

    /// Puts an event that does not pack in the slab; its slot.
    #[inline]
    fn store(&mut self, event: E) -> u128 {
        match self.free.pop() {
            Some(s) => {
                self.events[s as usize] = event;
                s as u128
            }
            None => {
                let s = self.events.len();
                assert!((s as u128) < INLINE, "more than {} unpacked events pending at once", INLINE);
                self.events.push(event);
                s as u128
            }
        }
    }

    /// The event of node low bits `low` (left in the slab).
    #[inline]
    fn event_of(&self, low: u32) -> E {
        let k = low as u128;
        if k & INLINE != 0 {
            E::unpack((k & LOW_MASK) as u32)
        } else {
            self.events[(k & LOW_MASK) as usize]
        }
    }

    /// The `n`-th next event (n < 3): along the earliest time's FIFO, then the next times'.
    #[inline]
    fn nth(&self, n: usize) -> Option<E> {
        if self.len <= n {
            return None;
        }
        let mut left = n;
        for j in 0..3 {
            // The later times only when the earlier FIFOs are too short (rarely).
            let k = match j {
                0 => self.heap_top(),
                1 => self.heap_second(),
                _ => self.heap_third(),
            };
            if k == u128::MAX {
                return None;
            }
            let mut node = self.fifos[(k as u64 & 0xFFFF_FFFF) as usize].head;
            while node != NONE {
                if left == 0 {
                    return Some(self.event_of(self.nodes[node as usize].low));
                }
                left -= 1;
                node = self.nodes[node as usize].next;
            }
        }
        None
    }

    /// The event [`EventQueue::pop`] returns next (for a caller that prefetches what it will
    /// touch; see [`crate::prefetch`]).
    #[inline]
    pub fn peek_event(&self) -> Option<E> {
        if self.len == 0 {
            return None;
        }
        let f = (self.key(0) as u64 & 0xFFFF_FFFF) as usize;
        Some(self.event_of(self.nodes[self.fifos[f].head as usize].low))
    }

    /// The event popped after the next one, for a caller that prefetches two events ahead.
    #[inline]
    pub fn peek_second(&self) -> Option<E> {
        if self.len >= 2 {
            // Usually the earliest time's FIFO holds it.
            let f = (self.key(0) as u64 & 0xFFFF_FFFF) as usize;
            let next = self.nodes[self.fifos[f].head as usize].next;
            if next != NONE {
                return Some(self.event_of(self.nodes[next as usize].low));
            }
        }
        self.nth(1)
    }

    /// The event popped third from now, for a caller that prefetches three events ahead.
    #[inline]
    pub fn peek_third(&self) -> Option<E> {
        self.nth(2)
    }

    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        (self.len > 0).then(|| SimTime((self.key(0) >> 64) as u64))
    }

    /// Removes and returns the earliest event, advancing the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        if self.len == 0 {
            return None;
        }
        let top = self.key(0);
        let t = (top >> 64) as u64;
        let f = (top as u64 & 0xFFFF_FFFF) as u32;
        let fifo = self.fifos[f as usize];
        let n = fifo.head;
        let Node { low, next } = self.nodes[n as usize];
        self.nodes[n as usize].next = self.free_nodes;
        self.free_nodes = n;
        if next == NONE {
            // The time's last event: its FIFO and heap key go.
            self.heap_pop();
            self.forget(t);
            self.free_fifos.push(f);
            if self.last == f {
                self.last = NONE;
            }
        } else {
            self.fifos[f as usize].head = next;
        }
        self.len -= 1;
        let event = self.event_of(low);
        if (low as u128) & INLINE == 0 {
            self.free.push(low & LOW_MASK as u32);
        }
        self.now = t;
        Some((SimTime(t), event))
    }

    #[inline]
    fn heap_top(&self) -> u128 {
        if self.times > 0 {
            self.key(0)
        } else {
            u128::MAX
        }
    }

    #[inline]
    fn heap_second(&self) -> u128 {
        match self.lines.get(1) {
            Some(c) if self.times > 1 => c.0[0].min(c.0[1]).min(c.0[2].min(c.0[3])),
            _ => u128::MAX,
        }
    }

    #[inline]
    fn heap_third(&self) -> u128 {
        if self.times < 3 {
            return u128::MAX;
        }
        let c = &self.lines[1].0;
        let mut b = 0;
        for j in 1..4 {
            if c[j] < c[b] {
                b = j;
            }
        }
        let grand = self.lines.get(b + 2).map_or(EMPTY.0, |l| l.0);
        let others = (0..4).filter(|&j| j != b).map(|j| c[j]);
        others.chain(grand).min().unwrap_or(u128::MAX)
    }

    #[inline]
    fn heap_push(&mut self, k: u128) {
        // `times` already counts the new key.
        let i = self.times - 1;
        if (i + SHIFT) >> 2 >= self.lines.len() {
            self.lines.push(EMPTY);
        }
        let mut i = i;
        while i > 0 {
            let parent = (i - 1) / ARITY;
            let pk = self.key(parent);
            if k < pk {
                self.set_key(i, pk);
                i = parent;
            } else {
                break;
            }
        }
        self.set_key(i, k);
    }

    /// Removes the least key (before `forget` decrements `times`).
    #[inline]
    fn heap_pop(&mut self) {
        let n = self.times - 1;
        let last = self.key(n);
        self.set_key(n, u128::MAX);
        if n == 0 {
            return;
        }
        let mut i = 0;
        while i * ARITY + 1 < n {
            if let Some(next) = self.lines.get(ARITY * i + 2..ARITY * i + 2 + ARITY) {
                next.iter().for_each(crate::prefetch);
            }
            let c = &self.lines[i + 1].0;
            let (mut b, mut bk) = (0, c[0]);
            if c[1] < bk {
                (b, bk) = (1, c[1]);
            }
            if c[2] < bk {
                (b, bk) = (2, c[2]);
            }
            if c[3] < bk {
                (b, bk) = (3, c[3]);
            }
            if bk >= last {
                break;
            }
            self.set_key(i, bk);
            i = i * ARITY + 1 + b;
        }
        self.set_key(i, last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;
    use std::collections::BTreeMap;

    /// A test event that travels in its key when its value is not a multiple of 3 (and fits),
    /// so that the queues below hold packed and slab events mixed.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Ev(u32);

    impl Packable for Ev {
        fn pack(&self) -> Option<u32> {
            (self.0 % 3 != 0 && self.0 < 1 << PACKED_BITS).then_some(self.0)
        }
        fn unpack(bits: u32) -> Self {
            Ev(bits)
        }
    }

    /// Differential test against a naive reference: a BTreeMap keyed by (time, seq).
    /// Millions of random pushes and pops, with many equal timestamps to exercise the FIFO
    /// tie-break, and two thirds of the events packed into their keys.
    #[test]
    fn matches_btreemap_reference_over_millions_of_ops() {
        let mut rng = Rng::new(42);
        let mut q: EventQueue<Ev> = EventQueue::new();
        let mut reference: BTreeMap<(u64, u64), Ev> = BTreeMap::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        let mut payload = 0u32;
        for round in 0..3_000_000u64 {
            // Bias towards pushes in bursts, then drain, so the heap size varies widely.
            let push = if (round / 50_000) % 2 == 0 { rng.below(10) < 7 } else { rng.below(10) < 3 };
            if push || reference.is_empty() {
                let dt = match rng.below(4) {
                    0 => 0,
                    1 => rng.below(4),
                    _ => rng.below(1_000_000),
                };
                let t = now + dt;
                q.push(SimTime(t), Ev(payload));
                reference.insert((t, seq), Ev(payload));
                seq += 1;
                payload = payload.wrapping_add(1);
            } else {
                let ((t, _), v) = reference.pop_first().unwrap();
                let got = q.pop().unwrap();
                assert_eq!(got, (SimTime(t), v), "round {round}");
                now = t;
                assert_eq!(q.now(), SimTime(now));
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(((t, _), v)) = reference.pop_first() {
            assert_eq!(q.pop(), Some((SimTime(t), v)));
        }
        assert!(q.pop().is_none());
    }

    /// `peek_event`, `peek_second` and `peek_third` name the next three pops.
    #[test]
    fn peeks_name_the_next_three_pops() {
        let mut rng = Rng::new(3);
        let mut q: EventQueue<Ev> = EventQueue::new();
        for i in 0..5_000u32 {
            q.push(SimTime(rng.below(1_000)), Ev(i));
        }
        let mut extra = 10_000;
        while !q.is_empty() {
            let (first, second, third) = (q.peek_event(), q.peek_second(), q.peek_third());
            assert_eq!(q.pop().map(|e| e.1), first);
            assert_eq!(q.peek_event(), second);
            assert_eq!(q.peek_second(), third);
            if rng.below(3) == 0 {
                extra += 1;
                q.push(SimTime(q.now().0 + rng.below(50)), Ev(extra));
            }
        }
        assert!(q.peek_second().is_none() && q.peek_third().is_none());
    }

    #[test]
    fn equal_times_pop_in_push_order() {
        let mut q = EventQueue::new();
        for i in 0..100u32 {
            q.push(SimTime(5), i);
        }
        for i in 0..100u32 {
            assert_eq!(q.pop(), Some((SimTime(5), i)));
        }
    }

    /// Packed events never touch the slab; the others reuse its freed slots.
    #[test]
    fn packed_events_stay_out_of_the_slab() {
        let mut q: EventQueue<Ev> = EventQueue::new();
        for i in 1..=1_000u32 {
            q.push(SimTime(i as u64 % 7), Ev(i));
        }
        assert_eq!(q.events.len(), 333, "one slot per multiple of 3");
        let mut popped = Vec::new();
        while let Some((_, Ev(v))) = q.pop() {
            popped.push(v);
        }
        assert_eq!(q.free.len(), 333);
        q.push(SimTime(10), Ev(3));
        q.push(SimTime(10), Ev(4));
        assert_eq!((q.events.len(), q.free.len()), (333, 332));
        let mut want: Vec<u32> = (1..=1_000).collect();
        want.sort_by_key(|&i| i % 7);
        assert_eq!(popped, want);
    }
}
