//! Unit conversions of scenario values (ns to ps, Gb/s to b/s, ps to µs) with the range checks
//! that name the offending field.

use super::e;
use crate::ScenarioError;
use reducelab_des::SimDuration;

pub(crate) fn pos_f64(field: &str, v: f64) -> Result<f64, ScenarioError> {
    if !v.is_finite() || v <= 0.0 {
        return e(field, format!("must be a positive number, got {v}"));
    }
    Ok(v)
}

fn nonneg_f64(field: &str, v: f64) -> Result<f64, ScenarioError> {
    if !v.is_finite() || v < 0.0 {
        return e(field, format!("must be a non-negative number, got {v}"));
    }
    Ok(v)
}

/// The latest time a scenario may name, in ns (1e18 ps, about 11.6 days of simulated time).
pub(super) const MAX_TIME_NS: u64 = 1_000_000_000_000_000;

pub(crate) fn ns_to_ps(field: &str, ns: f64) -> Result<u64, ScenarioError> {
    let ns = nonneg_f64(field, ns)?;
    let ps = (ns * 1000.0).round();
    if ps > MAX_TIME_NS as f64 * 1000.0 {
        return e(field, format!("{ns} ns is too large (at most {MAX_TIME_NS} ns, about 11.6 days)"));
    }
    Ok(ps as u64)
}

pub(super) fn gbps_to_bps(field: &str, g: f64) -> Result<u64, ScenarioError> {
    let g = pos_f64(field, g)?;
    if g > 1e6 {
        return e(field, format!("{g} Gb/s is beyond any link; the unit is Gb/s"));
    }
    Ok((g * 1e9).round() as u64)
}

/// Duration helper used by reports.
pub fn ps_to_us(ps: u64) -> f64 {
    SimDuration(ps).as_secs_f64() * 1e6
}
