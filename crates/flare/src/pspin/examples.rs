//! A handler set beyond the paper: a **quantised int8 sum with scaling**.
//!
//! Each host sends int8 values `q` with a per-packet f32 scale `s` in the header (the value is
//! `q·s`, as in quantised gradient exchange). The payload handler dequantises into an f32
//! accumulator of the block in L1 (`acc += q·s`, in a critical section as single-buffer
//! aggregation does); the completion handler requantises the sum with a fresh scale
//! `s' = max|acc| / 127` and sends int8 values `round(acc / s')` with `s'` in the header. Each
//! host's packet is 1 byte per element on the wire instead of 4, while the sum is formed in f32.
//!
//! Costs (an assumption, docs/flare.md): per element one int8→f32 conversion (1 cycle) plus the
//! calibrated multiply-accumulate-store (4 cycles, seed 004 §6); the completion scans the
//! accumulator once for its maximum (1 cycle per element) and once to requantise (4 cycles per
//! element).

use super::handler::{HandlerCx, HandlerSet, RunState, Step};

/// The quantised int8 sum (see the module docs). Packets must carry int8 payloads.
#[derive(Default)]
pub struct QuantisedInt8Sum {
    acc: Vec<Option<(u32, Vec<f32>)>>,
}

impl QuantisedInt8Sum {
    pub fn new() -> Self {
        Self::default()
    }

    /// Dequantises a result (`data`, `header_word`) as sent by the completion handler.
    pub fn dequantise(data: &[u8], header_word: u64) -> Vec<f32> {
        let s = f32::from_bits(header_word as u32);
        data.iter().map(|&q| q as i8 as f32 * s).collect()
    }
}

impl HandlerSet for QuantisedInt8Sum {
    fn name(&self) -> String {
        "quantised-int8-sum".into()
    }

    fn buffers_per_block(&self) -> Option<f64> {
        Some(4.0) // an f32 accumulator is four int8 packets' worth of L1
    }

    fn header(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let (b, n, cluster) = (cx.packet().block as usize, cx.packet().payload_bytes as usize, cx.cluster());
        cx.alloc_l1(cluster, 4 * n as u64);
        if self.acc.len() <= b {
            self.acc.resize(b + 1, None);
        }
        self.acc[b] = Some((cluster, vec![0.0; n]));
        Step::Compute(cx.costs().lock_cycles as u64)
    }

    fn payload(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        let b = cx.packet().block;
        match run.pc {
            0 => {
                run.pc = 1;
                Step::Compute(cx.costs().handler_overhead_cycles as u64)
            }
            1 => {
                run.pc = 2;
                Step::Acquire(b as u64)
            }
            2 => {
                run.pc = 3;
                let n = cx.packet().payload_bytes as u64;
                let s = f32::from_bits(cx.packet().header_word as u32);
                let data = cx.take_packet_data();
                let (cluster, acc) = self.acc[b as usize].as_mut().expect("the header handler allocated the block");
                if let Some(q) = data {
                    for (a, &v) in acc.iter_mut().zip(&q) {
                        *a += v as i8 as f32 * s;
                    }
                }
                let per_elem = cx.costs().cycles_per_vector_op as u64 + 1;
                Step::Compute(2 * cx.costs().lock_cycles as u64 + n * per_elem * cx.remote(*cluster))
            }
            3 => {
                run.pc = 4;
                Step::Release(b as u64)
            }
            _ => Step::Done,
        }
    }

    fn completion(&mut self, cx: &mut HandlerCx<'_>, run: &mut RunState) -> Step {
        if run.pc == 1 {
            return Step::Done;
        }
        run.pc = 1;
        let b = cx.packet().block as usize;
        let (cluster, acc) = self.acc[b].take().expect("the header handler allocated the block");
        let max = acc.iter().fold(0f32, |m, a| m.max(a.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let q: Vec<u8> = acc.iter().map(|a| (a / scale).round().clamp(-127.0, 127.0) as i8 as u8).collect();
        let n = acc.len() as u64;
        cx.free_l1(cluster, 4 * n);
        cx.emit(n as u32, scale.to_bits() as u64, Some(q));
        Step::Compute(
            n * (1 + cx.costs().cycles_per_vector_op as u64) * cx.remote(cluster) + cx.costs().dma_cycles(n as u32),
        )
    }
}
