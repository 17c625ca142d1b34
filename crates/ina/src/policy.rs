//! DSA's preemption policy (seed 001, §V) and the two strawmen of §VII-C.
//!
//! The worker computes its tensor's priority — "P_j(l) = 1/T_j × L_j/l × Comm_j/Comp_j" (Eq. 1),
//! T_j the remaining time of job j's current epoch, L_j its number of layers, l the tensor's
//! layer, Comm_j/Comp_j its communication and computation time per epoch — and "encodes the
//! priority into the packet header" (§III-B). The switch compares priorities on a collision
//! ([`Preemption::packet_wins`]). The strawmen of §VII-C: "the first one always does
//! preemption upon hash collision; the second one has a 50-50 chance to perform preemption".
//! Their coin is a fixed function of a seed and the collision (no RNG inside), so runs repeat.

use crate::mix;
use crate::pool::Task;

/// The inputs of Eq. (1) for one job, in integer picoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyInputs {
    /// T_j: remaining time of the current epoch.
    pub remaining_ps: u64,
    /// L_j: layers of the model.
    pub layers: u32,
    /// Comm_j: communication time of one epoch.
    pub comm_ps: u64,
    /// Comp_j: computation time of one epoch.
    pub comp_ps: u64,
}

/// Picoseconds per millisecond: Eq. (1)'s 1/T_j is taken per millisecond.
const PS_PER_MS: f64 = 1e9;

/// Fractional bits of the encoded priority.
pub const PRIORITY_FRACTION_BITS: u32 = 8;

/// Eq. (1) for layer `layer` (1 = the front layer, …, L_j), with T_j in milliseconds: e.g. 1 ms
/// left, 2 layers, layer 1, Comm/Comp = 2 gives 1 × 2 × 2 = 4. Errors name the argument.
pub fn priority(p: &PolicyInputs, layer: u32) -> Result<f64, String> {
    if p.layers == 0 {
        return Err("layers: a model has at least one layer".into());
    }
    if layer == 0 || layer > p.layers {
        return Err(format!("layer: {layer} is outside 1..={}", p.layers));
    }
    if p.remaining_ps == 0 {
        return Err("remaining_ps: the remaining time T_j must be positive".into());
    }
    if p.comp_ps == 0 {
        return Err("comp_ps: the computation time Comp_j must be positive".into());
    }
    let t_ms = p.remaining_ps as f64 / PS_PER_MS;
    Ok(1.0 / t_ms * (p.layers as f64 / layer as f64) * (p.comm_ps as f64 / p.comp_ps as f64))
}

/// The header's 32-bit priority: fixed point with [`PRIORITY_FRACTION_BITS`] fractional bits,
/// at least 1 (so a fresh packet can always win against an aggregator downgraded to 0, and
/// halving is the right shift of §V), saturating at `u32::MAX`.
pub fn encode(p: f64) -> u32 {
    let x = (p * (1u64 << PRIORITY_FRACTION_BITS) as f64).round();
    if x.is_nan() || x < 1.0 {
        1
    } else if x >= u32::MAX as f64 {
        u32::MAX
    } else {
        x as u32
    }
}

/// Who keeps the aggregator on a collision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preemption {
    /// DSA: "the one with a higher priority is kept in the switch" (a tie keeps the holder).
    Priority,
    /// Strawman 1: always preempt.
    Always,
    /// Strawman 2: preempt with probability 1/2, the coin a hash of `seed`, both tasks and the
    /// switch's collision count.
    Coin { seed: u64 },
}

impl Preemption {
    /// Whether the arriving packet (`pkt`, priority `pkt_priority`) takes the aggregator held by
    /// `held` (priority `held_priority`); `collision` numbers the switch's collisions.
    pub fn packet_wins(&self, pkt: Task, pkt_priority: u32, held: Task, held_priority: u32, collision: u64) -> bool {
        match *self {
            Preemption::Priority => pkt_priority > held_priority,
            Preemption::Always => true,
            Preemption::Coin { seed } => coin(seed, pkt, held, collision),
        }
    }
}

/// A fair coin as a fixed function of its inputs.
pub fn coin(seed: u64, pkt: Task, held: Task, collision: u64) -> bool {
    let a = (pkt.job as u64) << 32 | pkt.psn as u64;
    let b = (held.job as u64) << 32 | held.psn as u64;
    mix(mix(seed ^ a).wrapping_add(b.rotate_left(21)) ^ collision.wrapping_mul(0x9E37_79B9_7F4A_7C15)) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(remaining_ps: u64, comm_ps: u64, comp_ps: u64) -> PolicyInputs {
        PolicyInputs { remaining_ps, layers: 2, comm_ps, comp_ps }
    }

    #[test]
    fn equation_1_on_the_papers_two_dnns() {
        // §VII-B: L_j = 2, Comm/Comp = 2 for DNN A and 0.5 for DNN B.
        let a = inputs(1_000_000_000, 2, 1);
        let b = inputs(1_000_000_000, 1, 2);
        assert_eq!(priority(&a, 1).unwrap(), 4.0);
        assert_eq!(priority(&a, 2).unwrap(), 2.0);
        assert_eq!(priority(&b, 1).unwrap(), 1.0);
        assert_eq!(priority(&b, 2).unwrap(), 0.5);
        // Half the remaining time, twice the priority.
        assert_eq!(priority(&inputs(500_000_000, 2, 1), 1).unwrap(), 8.0);
        assert_eq!(encode(4.0), 1024);
        assert_eq!(encode(0.5), 128);
        assert_eq!(encode(0.0), 1);
        assert_eq!(encode(1e30), u32::MAX);
        assert_eq!(encode(f64::NAN), 1);
    }

    #[test]
    fn bad_inputs_name_the_argument() {
        assert!(priority(&inputs(0, 1, 1), 1).unwrap_err().starts_with("remaining_ps:"));
        assert!(priority(&inputs(1, 1, 0), 1).unwrap_err().starts_with("comp_ps:"));
        assert!(priority(&inputs(1, 1, 1), 3).unwrap_err().starts_with("layer:"));
        assert!(priority(&inputs(1, 1, 1), 0).unwrap_err().starts_with("layer:"));
        assert!(priority(&PolicyInputs { layers: 0, ..inputs(1, 1, 1) }, 1).unwrap_err().starts_with("layers:"));
    }

    #[test]
    fn rules_decide_as_specified_and_the_coin_is_fair_and_repeatable() {
        let (p, h) = (Task { job: 1, psn: 7 }, Task { job: 2, psn: 9 });
        assert!(Preemption::Priority.packet_wins(p, 5, h, 4, 0));
        assert!(!Preemption::Priority.packet_wins(p, 4, h, 4, 0), "a tie keeps the holder");
        assert!(!Preemption::Priority.packet_wins(p, 3, h, 4, 0));
        assert!(Preemption::Always.packet_wins(p, 0, h, u32::MAX, 0));
        let c = Preemption::Coin { seed: 42 };
        let wins = (0..10_000u64).filter(|&k| c.packet_wins(Task { job: 1, psn: k as u32 }, 0, h, 0, k)).count();
        assert!((4_800..=5_200).contains(&wins), "{wins} wins of 10000");
        let again = (0..10_000u64).filter(|&k| c.packet_wins(Task { job: 1, psn: k as u32 }, 0, h, 0, k)).count();
        assert_eq!(wins, again);
        // Same tasks, successive collisions: not always the same side.
        let seq: Vec<bool> = (0..64).map(|k| c.packet_wins(p, 0, h, 0, k)).collect();
        assert!(seq.iter().any(|&x| x) && seq.iter().any(|&x| !x));
        let other_seed = (0..10_000u64)
            .filter(|&k| {
                Preemption::Coin { seed: 43 }.packet_wins(Task { job: 1, psn: k as u32 }, 0, h, 0, k)
                    != c.packet_wins(Task { job: 1, psn: k as u32 }, 0, h, 0, k)
            })
            .count();
        assert!(other_seed > 4_000, "another seed, another coin ({other_seed} differ)");
    }
}
