//! What the direct soaks of this crate's protocols share (each test file is its own crate and
//! declares `mod common;`): a seeded random stream, an event queue whose links lose, delay and
//! duplicate packets, and the environment knobs of case counts and seeds.
#![allow(dead_code)] // each test file uses a part

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use reducelab_ina::{Header, Values};

/// xorshift64: a small seeded stream (the soaks' cases and faults).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// `name` from the environment as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Events in time order (ties in the order they were made). Its clock never goes back: an
/// event made for a time already passed is refused (`push`), and a timer asked for such a
/// time fires at the present (`timer`), as in the packet engine and the switch's hosts.
pub struct Queue<E> {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    evs: Vec<Option<E>>,
    /// The time of the last event popped.
    now: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue { heap: BinaryHeap::new(), evs: Vec::new(), now: 0 }
    }
}

impl<E> Queue<E> {
    pub fn push(&mut self, at: u64, ev: E) {
        assert!(at >= self.now, "an event at {at} ps made at {} ps: the soak's clock would go back", self.now);
        self.heap.push(Reverse((at, self.evs.len() as u64)));
        self.evs.push(Some(ev));
    }
    /// A host agent's `HostAction::Timer` at `at`: at once if `at` has passed.
    pub fn timer(&mut self, at: u64, ev: E) {
        self.push(at.max(self.now), ev);
    }
    pub fn pop(&mut self) -> Option<(u64, E)> {
        let Reverse((at, i)) = self.heap.pop()?;
        self.now = at;
        Some((at, self.evs[i as usize].take().unwrap()))
    }
    /// Sends `hdr` over one link at `now`: duplicated with probability `dup` (the copy up to
    /// `late_ps` late), lost with probability `loss`, else delayed 0.5–5.5 ns at random.
    /// `make` gives the event of an arrival.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        rng: &mut Rng,
        vals: &mut Values,
        now: u64,
        hdr: Header,
        (loss, dup, late_ps): (f64, f64, u64),
        make: impl Fn(Header) -> E,
    ) {
        if rng.chance(dup) {
            let mut copy = hdr;
            copy.data = vals.duplicate(hdr.data);
            self.push(now + 1_000 + rng.below(late_ps), make(copy));
        }
        if rng.chance(loss) {
            vals.release(hdr.data);
            return;
        }
        self.push(now + 500 + rng.below(5_000), make(hdr));
    }
}

/// One case of a session soak: calls of these sizes one after another, the agents' window and
/// re-send timeout, the links' loss and duplication, elements per packet.
pub struct SessionCase {
    pub window: u32,
    pub rto_ps: u64,
    pub loss: f64,
    pub dup: f64,
    pub calls: Vec<u64>,
    pub epp: u16,
}

impl SessionCase {
    /// A random case: 1 to `max_calls` calls of 4 to `3 + max_bytes` bytes, window 1–8, a
    /// 2–42 µs timeout, no loss in a fifth of the cases else below `max_loss_permille` ‰,
    /// duplication below 30 %, 1, 4 or 16 elements per packet.
    pub fn draw(rng: &mut Rng, max_calls: u64, max_bytes: u64, max_loss_permille: u64) -> SessionCase {
        let calls = (0..1 + rng.below(max_calls)).map(|_| 4 + rng.below(max_bytes)).collect();
        SessionCase {
            window: 1 + rng.below(8) as u32,
            rto_ps: 2_000_000 + rng.below(40_000_000),
            loss: if rng.chance(0.2) { 0.0 } else { rng.below(max_loss_permille) as f64 / 1000.0 },
            dup: rng.below(300) as f64 / 1000.0,
            calls,
            epp: [1, 4, 16][rng.below(3) as usize],
        }
    }
    /// Loss, duplication, and how late a copy comes at most (`rtos` re-send timeouts), as
    /// [`Queue::send`] takes them.
    pub fn faults(&self, rtos: u64) -> (f64, f64, u64) {
        (self.loss, self.dup, rtos * self.rto_ps)
    }
}

impl fmt::Display for SessionCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "window {}, rto {} ps, loss {}, duplication {}, calls {:?} bytes, {} elements per packet",
            self.window, self.rto_ps, self.loss, self.dup, self.calls, self.epp
        )
    }
}
