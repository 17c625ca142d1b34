//! A retransmission timeout from RTT samples: [`EwmaTimeout`].

/// A timeout from an exponentially weighted moving average of samples, as TCP computes it
/// (RFC 6298: gains 1/8 and 1/4, timeout = mean + 4 × deviation), never below `floor_ps`.
/// Before the first sample it is `initial_ps` (at least the floor). Used by the INA worker
/// window (RTT: a packet's send to its ACK) and DSA's parameter server (an entry's set-up to
/// its completion; seed 001 §VI: "The timeout is updated by an Exponentially Weighted Moving
/// Average (EWMA) ... DSA forces the minimum timeout to be 1 ms").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EwmaTimeout {
    pub floor_ps: u64,
    initial_ps: u64,
    srtt_ps: Option<u64>,
    rttvar_ps: u64,
}

impl EwmaTimeout {
    /// A timeout that is `floor_ps` until the first sample.
    pub fn new(floor_ps: u64) -> EwmaTimeout {
        EwmaTimeout::with_initial(floor_ps, floor_ps)
    }
    /// A timeout that is `max(initial_ps, floor_ps)` until the first sample.
    pub fn with_initial(initial_ps: u64, floor_ps: u64) -> EwmaTimeout {
        EwmaTimeout { floor_ps, initial_ps, srtt_ps: None, rttvar_ps: 0 }
    }
    /// One sample, in picoseconds.
    pub fn sample(&mut self, s: u64) {
        match self.srtt_ps {
            None => {
                self.srtt_ps = Some(s);
                self.rttvar_ps = s / 2;
            }
            Some(m) => {
                self.rttvar_ps = (3 * self.rttvar_ps + m.abs_diff(s)) / 4;
                self.srtt_ps = Some((7 * m + s) / 8);
            }
        }
    }
    pub fn timeout_ps(&self) -> u64 {
        match self.srtt_ps {
            None => self.initial_ps.max(self.floor_ps),
            Some(m) => (m + 4 * self.rttvar_ps).max(self.floor_ps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_gains_and_the_floor() {
        let mut t = EwmaTimeout::with_initial(300, 50);
        assert_eq!(t.timeout_ps(), 300);
        t.sample(20); // srtt 20, var 10
        assert_eq!(t.timeout_ps(), 60);
        t.sample(4); // var (30 + 16)/4 = 11, srtt (140 + 4)/8 = 18
        assert_eq!(t.timeout_ps(), 18 + 44);
        let mut f = EwmaTimeout::new(1000);
        assert_eq!(f.timeout_ps(), 1000);
        f.sample(20);
        assert_eq!(f.timeout_ps(), 1000);
    }
}
