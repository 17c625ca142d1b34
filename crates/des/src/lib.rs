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

pub use queue::EventQueue;
pub use rng::Rng;
pub use time::{SimDuration, SimTime};
