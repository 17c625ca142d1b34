use crate::SimTime;

/// Bits of a heap key below its sequence number: a flag ([`INLINE`]) and 25 bits that are
/// either the event itself ([`Packable`]) or the slot of the event in the slab (so at most
/// 2^25 = 33 M events can wait in the slab at once).
const SLOT_BITS: u32 = 26;
const SLOT_MASK: u128 = (1 << SLOT_BITS) - 1;
/// The flag of a key that holds its event in its low [`PACKED_BITS`] bits.
const INLINE: u128 = 1 << (SLOT_BITS - 1);
const LOW_MASK: u128 = INLINE - 1;

/// Bits an event packed into its heap key may use (see [`Packable`]).
pub const PACKED_BITS: u32 = SLOT_BITS - 1;

/// An event type of an [`EventQueue`]. Events that [`Packable::pack`] into [`PACKED_BITS`] bits
/// travel inside their 16-byte heap key; the others wait in a slab the key points to. A packed
/// event costs no slab access when it is pushed, peeked or popped: in the packet engine the
/// slab line of an event pushed thousands of events earlier was a cache miss at every peek
/// and pop (~10% of an NDP permutation's time; docs/engine.md, "Performance"). The order of
/// pops does not depend on packing (the low bits never decide a comparison, see
/// [`EventQueue`]).
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
/// Insertion sequence numbers fit in the key's remaining 38 bits; when they run out (after
/// 2.7·10^11 pushes) the pending keys are renumbered in order (see [`EventQueue::renumber`]).
const SEQ_LIMIT: u64 = 1 << (64 - SLOT_BITS);

/// Four 16-byte heap keys in one 64-byte cache line. Positions past the heap's end hold
/// `u128::MAX`, so a node's children are always a whole line (no key is that large: its
/// sequence field is below 2^38).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u128; 4]);

const EMPTY: Line = Line([u128::MAX; 4]);

/// Heap slot `i` lives at position `i + 3`, so that the four children `4i + 1 ..= 4i + 4`
/// (positions `4(i + 1) ..`) share one cache line.
const SHIFT: usize = 3;

/// Pending events ordered by `(time, insertion sequence)`.
///
/// **Ordering guarantee.** `pop` returns events in non-decreasing time; events with equal time
/// come out in the order they were pushed. The sequence number is a global counter, so the
/// order is total and independent of the heap's internal layout: the same pushes always give
/// the same pops. This is what makes runs deterministic without any tie-breaking by component
/// id or memory address.
///
/// Implemented as a 4-ary min-heap of 16-byte keys, `time << 64 | seq << 26 | low`, where
/// `low` is the event packed ([`Packable`], with the flag [`INLINE`]) or the slot of the event
/// in a slab; since no two keys have the same `(time, seq)`, `low` never decides the order.
/// A sift compares and moves keys only, one cache line of children per level (the former heap of 32-byte (key, event) entries read two; at 8,192
/// hosts the heap outgrows the L2 cache and its misses were the largest cost, see
/// docs/engine.md, "Performance"). Nothing allocates once the heap reached its peak size.
pub struct EventQueue<E: Packable> {
    lines: Vec<Line>,
    len: usize,
    events: Vec<E>,
    free: Vec<u32>,
    next_seq: u64,
    now: u64,
}

const ARITY: usize = 4;

impl<E: Packable> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Packable> EventQueue<E> {
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    pub fn with_capacity(n: usize) -> Self {
        EventQueue {
            lines: Vec::with_capacity((n + SHIFT).div_ceil(4)),
            len: 0,
            events: Vec::with_capacity(n),
            free: Vec::new(),
            next_seq: 0,
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
        self.next_seq
    }

    /// Schedules `event` at `time`. Scheduling in the past is a logic error and panics in
    /// debug builds; in release builds the event fires "now" (after already-queued events).
    #[inline]
    pub fn push(&mut self, time: SimTime, event: E) {
        debug_assert!(time.0 >= self.now, "event scheduled in the past: {} < {}", time.0, self.now);
        let t = time.0.max(self.now);
        let low = match event.pack() {
            Some(bits) => {
                debug_assert!((bits as u128) <= LOW_MASK, "packed event {bits} wider than {PACKED_BITS} bits");
                INLINE | (bits as u128 & LOW_MASK)
            }
            None => self.store(event),
        };
        if self.next_seq == SEQ_LIMIT {
            self.renumber();
        }
        let k = ((t as u128) << 64) | ((self.next_seq as u128) << SLOT_BITS) | low;
        self.next_seq += 1;
        let i = self.len;
        self.len += 1;
        if (i + SHIFT) >> 2 == self.lines.len() {
            self.lines.push(EMPTY);
        }
        self.sift_up(i, k);
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

    /// The event of key `k` (left in the slab).
    #[inline]
    fn event_of(&self, k: u128) -> E {
        if k & INLINE != 0 {
            E::unpack((k & LOW_MASK) as u32)
        } else {
            self.events[(k & LOW_MASK) as usize]
        }
    }

    /// Gives the pending keys sequence numbers `0..len` in their order (the order of pops is
    /// unchanged), when the 38-bit counter runs out.
    #[cold]
    fn renumber(&mut self) {
        let mut keys: Vec<u128> = (0..self.len).map(|i| self.key(i)).collect();
        keys.sort_unstable();
        for (n, k) in keys.iter().enumerate() {
            let t = k >> 64;
            // A sorted array is a valid heap.
            self.set_key(n, (t << 64) | ((n as u128) << SLOT_BITS) | (k & SLOT_MASK));
        }
        self.next_seq = self.len as u64;
    }

    /// The event [`EventQueue::pop`] returns next (for a caller that prefetches what it will
    /// touch; see [`crate::prefetch`]).
    #[inline]
    pub fn peek_event(&self) -> Option<E> {
        (self.len > 0).then(|| self.event_of(self.key(0)))
    }

    /// The event popped after the next one (the least child of the root: one cache line,
    /// hot anyway), for a caller that prefetches two events ahead.
    #[inline]
    pub fn peek_second(&self) -> Option<E> {
        if self.len < 2 {
            return None;
        }
        let c = &self.lines[1].0;
        let m = c[0].min(c[1]).min(c[2].min(c[3]));
        Some(self.event_of(m))
    }

    /// The event popped third from now, for a caller that prefetches three events ahead: the
    /// least of the root's other children and the second's children (two lines).
    #[inline]
    pub fn peek_third(&self) -> Option<E> {
        if self.len < 3 {
            return None;
        }
        let c = &self.lines[1].0;
        let mut b = 0;
        for j in 1..4 {
            if c[j] < c[b] {
                b = j;
            }
        }
        // Slot `b + 1`'s children are line `b + 2` (all `u128::MAX` past the end).
        let grand = self.lines.get(b + 2).map_or(EMPTY.0, |l| l.0);
        let others = (0..4).filter(|&j| j != b).map(|j| c[j]);
        others.chain(grand).min().map(|k| self.event_of(k))
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
        self.len -= 1;
        let last = self.key(self.len);
        self.set_key(self.len, u128::MAX);
        if self.len > 0 {
            self.sift_down(last);
        }
        let event = self.event_of(top);
        if top & INLINE == 0 {
            self.free.push((top & LOW_MASK) as u32);
        }
        self.now = (top >> 64) as u64;
        Some((SimTime(self.now), event))
    }

    #[inline]
    fn sift_up(&mut self, mut i: usize, k: u128) {
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

    /// Puts `k` (the former last key) in the hole at the root and sinks it. The children of
    /// slot `i`, `4i + 1 ..= 4i + 4`, are line `i + 1`.
    #[inline]
    fn sift_down(&mut self, k: u128) {
        let n = self.len;
        let mut i = 0;
        while i * ARITY + 1 < n {
            // The children's children are the four lines after `4i + 1`, one of which the next
            // level reads: start loading them before this level's comparisons, so that the
            // misses of two levels overlap (the deep levels miss once the heap outgrows the
            // L2 cache, ~60 k events at 8,192 hosts).
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
            if bk >= k {
                break;
            }
            self.set_key(i, bk);
            i = i * ARITY + 1 + b;
        }
        self.set_key(i, k);
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

    /// Running out of sequence numbers renumbers the pending keys without changing the order
    /// of pops (forced here by starting the counter just below the limit).
    #[test]
    fn renumbering_keeps_the_order() {
        let mut q: EventQueue<Ev> = EventQueue::new();
        let mut reference: BTreeMap<(u64, u64), Ev> = BTreeMap::new();
        let mut rng = Rng::new(7);
        q.next_seq = SEQ_LIMIT - 500;
        for i in 0..2_000u32 {
            let t = rng.below(50);
            q.push(SimTime(t), Ev(i));
            reference.insert((t, i as u64), Ev(i));
        }
        assert_eq!(q.next_seq, 2_000, "renumbered once, at the 500th push");
        while let Some(((t, _), v)) = reference.pop_first() {
            assert_eq!(q.pop(), Some((SimTime(t), v)));
        }
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
        while q.len() > 0 {
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
