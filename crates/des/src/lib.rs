//! Discrete-event kernel of ReduceLab.
//!
//! Knows nothing about networks. It provides:
//! - [`SimTime`] / [`SimDuration`]: integer picoseconds. Floating point never decides event
//!   order, so a run is reproducible bit for bit on any machine.
//! - [`EventQueue`]: a min-queue with a **total order** on `(time, insertion sequence)`. Two
//!   events at the same picosecond pop in the order they were pushed (FIFO). Together with a
//!   seeded RNG this makes a simulation a pure function of (scenario, seed).
//! - [`Rng`]: xoshiro256++ seeded through SplitMix64, passed explicitly (no globals), with
//!   [`Rng::fork`] for independent per-component streams.

mod queue;
mod rng;
mod time;

pub use queue::{EventQueue, Packable, PACKED_BITS};
pub use rng::Rng;
pub use time::{SimDuration, SimTime};

/// Asks the CPU to start loading the cache lines of `r` (a hint: no effect on results, a no-op
/// off x86-64). An event loop calls it for the data of the *next* event while it handles the
/// current one, so that a miss to memory overlaps with useful work instead of stalling it.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address; `sse` is part of
    // the x86-64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let first = r as *const T as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(first);
        // A value may straddle two lines, unless it is line-aligned and at most a line long
        // (a packet); both sizes are constants, so the test costs nothing.
        if std::mem::align_of::<T>() < 64 || std::mem::size_of::<T>() > 64 {
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(std::mem::size_of::<T>().max(1) - 1));
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
