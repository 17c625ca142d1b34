//! Checks a run's results (runs that carry data) against the hosts' contributions.
//!
//! Integer types and min/max do not depend on the order of aggregation: every element must equal
//! the plain reduction. Floating-point sums and products may: each element must lie within
//! P·ε·(Σ|x| for sums, Π|x| for products) of the exact (f64) value, ε the type's unit roundoff.
//! The quantised int8 sum must lie within half a quantisation step (plus f32 rounding).

use super::dtype::{DataType, Operator};
use super::examples::QuantisedInt8Sum;
use super::switch::SwitchReport;
use super::workload::Workload;

/// `Ok` if every block's result is right, else the first wrong element.
pub fn verify(w: &Workload, r: &SwitchReport, quantised: bool) -> Result<(), String> {
    if !w.carry_data {
        return Ok(());
    }
    for b in 0..w.blocks() {
        let Some(got) = r.results.get(b as usize).and_then(|x| x.as_ref()) else {
            return Err(format!("block {b} has no result"));
        };
        let inputs: Vec<Vec<u8>> = (0..w.hosts).map(|h| w.host_block(h, b)).collect();
        let n = (w.block_bytes(b) / w.dtype.bytes()) as usize;
        if quantised {
            let deq = QuantisedInt8Sum::dequantise(got, r.result_words[b as usize]);
            let step = f32::from_bits(r.result_words[b as usize] as u32) as f64;
            for (i, g) in deq.iter().enumerate().take(n) {
                let exact: f64 =
                    (0..w.hosts).map(|h| DataType::Int8.get(&inputs[h as usize], i) * w.scale(h, b) as f64).sum();
                if (*g as f64 - exact).abs() > 0.5 * step + 1e-3 * step.max(1e-6) + 1e-6 {
                    return Err(format!("block {b} element {i}: {g} is more than half a step ({step}) from {exact}"));
                }
            }
            continue;
        }
        let exact_order = !w.dtype.is_float() || matches!(w.op, Operator::Min | Operator::Max);
        if exact_order {
            let mut want = inputs[0].clone();
            for x in &inputs[1..] {
                w.op.combine(w.dtype, &mut want, x);
            }
            if *got != want {
                let i = (0..n).find(|&i| w.dtype.get(got, i) != w.dtype.get(&want, i)).unwrap_or(0);
                return Err(format!(
                    "block {b} element {i}: {} instead of {}",
                    w.dtype.get(got, i),
                    w.dtype.get(&want, i)
                ));
            }
            continue;
        }
        let eps = if w.dtype == DataType::F16 { 2f64.powi(-11) } else { 2f64.powi(-24) };
        for i in 0..n {
            let xs: Vec<f64> = inputs.iter().map(|x| w.dtype.get(x, i)).collect();
            let (exact, mag) = match w.op {
                Operator::Prod => (xs.iter().product::<f64>(), xs.iter().map(|x| x.abs()).product::<f64>()),
                _ => (xs.iter().sum::<f64>(), xs.iter().map(|x| x.abs()).sum::<f64>()),
            };
            let g = w.dtype.get(got, i);
            if (g - exact).abs() > w.hosts as f64 * eps * mag + f64::MIN_POSITIVE {
                return Err(format!("block {b} element {i}: {g} is not within rounding of {exact}"));
            }
        }
    }
    Ok(())
}

/// A 64-bit FNV-1a fingerprint of every block's result bytes, in block order (0 without data).
pub fn fingerprint(r: &SwitchReport) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in r.results.iter().flatten() {
        for &byte in x {
            h ^= byte as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
