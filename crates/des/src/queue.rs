use crate::SimTime;

/// `key` packs `(time << 64) | seq`: one branch-free 128-bit compare orders entries.
#[derive(Clone, Copy)]
struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> Entry<E> {
    #[inline]
    fn before(&self, other: &Self) -> bool {
        self.key < other.key
    }
    #[inline]
    fn time(&self) -> u64 {
        (self.key >> 64) as u64
    }
}

/// Pending events ordered by `(time, insertion sequence)`.
///
/// **Ordering guarantee.** `pop` returns events in non-decreasing time; events with equal time
/// come out in the order they were pushed. The sequence number is a global `u64` counter, so
/// the order is total and independent of the heap's internal layout: the same pushes always
/// give the same pops. This is what makes runs deterministic without any tie-breaking by
/// component id or memory address.
///
/// Implemented as a 4-ary min-heap over small `Copy` entries (shallower than a binary heap,
/// and one cache line holds a node's children); nothing allocates once the heap reached its
/// peak size.
pub struct EventQueue<E: Copy> {
    heap: Vec<Entry<E>>,
    next_seq: u64,
    now: u64,
}

const ARITY: usize = 4;

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue { heap: Vec::new(), next_seq: 0, now: 0 }
    }

    pub fn with_capacity(n: usize) -> Self {
        EventQueue { heap: Vec::with_capacity(n), next_seq: 0, now: 0 }
    }

    /// Time of the last popped event (the simulation clock).
    #[inline]
    pub fn now(&self) -> SimTime {
        SimTime(self.now)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
        let e = Entry { key: ((t as u128) << 64) | self.next_seq as u128, event };
        self.next_seq += 1;
        self.heap.push(e);
        self.sift_up(self.heap.len() - 1);
    }

    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.first().map(|e| SimTime(e.time()))
    }

    /// Removes and returns the earliest event, advancing the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let n = self.heap.len();
        if n == 0 {
            return None;
        }
        let top = self.heap.swap_remove(0);
        if n > 1 {
            self.sift_down(0);
        }
        self.now = top.time();
        Some((SimTime(self.now), top.event))
    }

    #[inline]
    fn sift_up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if e.before(&self.heap[parent]) {
                self.heap[i] = self.heap[parent];
                i = parent;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }

    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        let e = self.heap[i];
        loop {
            let first = i * ARITY + 1;
            if first >= n {
                break;
            }
            let last = (first + ARITY).min(n);
            let mut best = first;
            for c in first + 1..last {
                if self.heap[c].before(&self.heap[best]) {
                    best = c;
                }
            }
            if self.heap[best].before(&e) {
                self.heap[i] = self.heap[best];
                i = best;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;
    use std::collections::BTreeMap;

    /// Differential test against a naive reference: a BTreeMap keyed by (time, seq).
    /// Millions of random pushes and pops, with many equal timestamps to exercise the FIFO
    /// tie-break.
    #[test]
    fn matches_btreemap_reference_over_millions_of_ops() {
        let mut rng = Rng::new(42);
        let mut q: EventQueue<u32> = EventQueue::new();
        let mut reference: BTreeMap<(u64, u64), u32> = BTreeMap::new();
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
                q.push(SimTime(t), payload);
                reference.insert((t, seq), payload);
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
}
