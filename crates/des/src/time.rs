use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// Absolute simulated time in picoseconds since the start of the run.
///
/// `u64` picoseconds cover 213 days of simulated time, far beyond any run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

/// A span of simulated time in picoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    pub fn ps(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-12
    }
    pub fn as_us_f64(self) -> f64 {
        self.0 as f64 * 1e-6
    }
    /// Time elapsed since `earlier`; saturates at zero.
    pub fn since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);
    pub const fn from_ps(ps: u64) -> Self {
        SimDuration(ps)
    }
    pub const fn from_ns(ns: u64) -> Self {
        SimDuration(ns * 1_000)
    }
    pub const fn from_us(us: u64) -> Self {
        SimDuration(us * 1_000_000)
    }
    pub fn ps(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-12
    }
    /// Time to serialise `bytes` at `bits_per_second`, rounded **up** to the next picosecond
    /// (a packet is never on the wire for less than its physical duration).
    pub fn serialization(bytes: u64, bits_per_second: u64) -> Self {
        debug_assert!(bits_per_second > 0);
        let num = bytes as u128 * 8 * 1_000_000_000_000u128;
        let bps = bits_per_second as u128;
        SimDuration(num.div_ceil(bps) as u64)
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0 + d.0)
    }
}
impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 += d.0;
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0 + d.0)
    }
}
impl AddAssign for SimDuration {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 += d.0;
    }
}
impl Sub for SimTime {
    type Output = SimDuration;
    fn sub(self, o: SimTime) -> SimDuration {
        SimDuration(self.0 - o.0)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ps", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn serialization_is_exact_or_rounded_up() {
        // 100 Gb/s = 80 ps per byte exactly.
        assert_eq!(SimDuration::serialization(4000, 100_000_000_000).ps(), 320_000);
        // 3.2 Tb/s = 2.5 ps per byte: one byte rounds up to 3 ps, two bytes are exactly 5 ps.
        assert_eq!(SimDuration::serialization(1, 3_200_000_000_000).ps(), 3);
        assert_eq!(SimDuration::serialization(2, 3_200_000_000_000).ps(), 5);
    }
}
