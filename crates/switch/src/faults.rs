//! Faults the switch injects on its egress ports (the kernel's netem is not available here):
//! loss, duplication, delay and reordering, each a per-packet probability or a duration, drawn
//! from a seeded generator per port so a run's fault decisions depend only on the seed and the
//! order of the packets a port sends.

use std::time::Duration;

/// One port's (or every port's) fault rates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PortFaults {
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Probability that a packet is sent twice.
    pub dup: f64,
    /// Probability that a packet is held back by `reorder_us` (later packets overtake it).
    pub reorder: f64,
    /// Extra hold time of a reordered packet.
    pub reorder_us: f64,
    /// Delay added to every packet.
    pub delay_us: f64,
}

/// A `--fault` argument: `[port=N,]loss=P,dup=P,reorder=P,reorder_us=D,delay_us=D`
/// (probabilities in 0..=1, durations in microseconds). Without `port` it applies to every port.
pub fn parse_fault(spec: &str) -> Result<(Option<u16>, PortFaults), String> {
    let mut f = PortFaults { reorder_us: 200.0, ..PortFaults::default() };
    let mut port = None;
    for part in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("--fault: `{part}` is not key=value"))?;
        if k == "port" {
            port = Some(v.parse::<u16>().map_err(|_| format!("--fault port: `{v}` is not a port number"))?);
            continue;
        }
        let x: f64 = v.parse().map_err(|_| format!("--fault {k}: `{v}` is not a number"))?;
        let prob = |x: f64| if (0.0..=1.0).contains(&x) { Ok(x) } else { Err(format!("--fault {k}: probability {x} is not within 0..=1")) };
        let dur = |x: f64| if x.is_finite() && (0.0..=10e6).contains(&x) { Ok(x) } else { Err(format!("--fault {k}: {x} µs is not within 0..=10000000")) };
        match k {
            "loss" => f.loss = prob(x)?,
            "dup" => f.dup = prob(x)?,
            "reorder" => f.reorder = prob(x)?,
            "reorder_us" => f.reorder_us = dur(x)?,
            "delay_us" => f.delay_us = dur(x)?,
            _ => return Err(format!("--fault: unknown key `{k}` (port, loss, dup, reorder, reorder_us, delay_us)")),
        }
    }
    if f.loss + f.dup > 1.0 {
        return Err(format!("--fault: loss {} + dup {} exceed 1", f.loss, f.dup));
    }
    Ok((port, f))
}

/// A fault file: one `--fault` spec per line; blank lines and `#` comments are skipped.
/// Errors name the file and line.
pub fn parse_fault_file(path: &str, text: &str) -> Result<Vec<(Option<u16>, PortFaults)>, String> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if !line.is_empty() {
            v.push(parse_fault(line).map_err(|e| format!("{path}:{}: {e}", i + 1))?);
        }
    }
    Ok(v)
}

/// What happens to one packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fate {
    Drop,
    /// Send `copies` (1 or 2) copies after `hold`.
    Send { copies: u8, hold: Duration },
}

/// A port's fault state: rates and its own generator.
#[derive(Clone, Debug)]
pub struct FaultPort {
    pub rates: PortFaults,
    state: u64,
}

impl FaultPort {
    pub fn new(rates: PortFaults, seed: u64, node: u32, port: u16) -> FaultPort {
        FaultPort { rates, state: reducelab_ina::mix(seed ^ (node as u64) << 32 ^ (port as u64) << 16 ^ 0xFA17) }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (reducelab_ina::mix(self.state) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn is_clean(&self) -> bool {
        self.rates == PortFaults { reorder_us: self.rates.reorder_us, ..PortFaults::default() }
    }

    /// The fate of the next packet (one draw per rate, in a fixed order).
    pub fn fate(&mut self) -> Fate {
        if self.is_clean() {
            return Fate::Send { copies: 1, hold: Duration::ZERO };
        }
        let r = self.rates;
        let (u_loss, u_reorder) = (self.uniform(), self.uniform());
        if u_loss < r.loss {
            return Fate::Drop;
        }
        let copies = if u_loss < r.loss + r.dup { 2 } else { 1 };
        let mut hold_us = r.delay_us;
        if u_reorder < r.reorder {
            hold_us += r.reorder_us;
        }
        Fate::Send { copies, hold: Duration::from_nanos((hold_us * 1000.0) as u64) }
    }
}
