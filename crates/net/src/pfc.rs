//! PFC: priority flow control (IEEE 802.1Qbb), pause frames instead of credits
//! (`FlowControl::Pfc`), as ns-3's qbb switches (the HPCC/DCQCN code) and htsim's lossless
//! queues model it. A VC is a PFC priority.
//!
//! Guarantees:
//! - **Ingress accounting.** Every node counts, per ingress port and VC, the bytes it holds that
//!   arrived through that port on that VC, from the packet's arrival (last bit plus pipeline
//!   latency) until it leaves the node (forwarded, delivered, consumed or lost): the span a
//!   credit accounts in credit mode.
//! - **PAUSE and RESUME.** When an arrival makes a forwarding node's ingress hold more than
//!   XOFF, the node pauses that VC of the upstream's egress; when the ingress drains to XON or
//!   below, it resumes it. Nodes that do not forward (plain hosts) consume what they receive
//!   at once (an unbounded receive buffer) and never pause.
//! - **Control frames go first.** A control frame is 64 B on the wire and carries the pause
//!   state of every VC of the link (a PFC frame carries all eight priorities). It waits only
//!   for the frame already being serialised on the reverse direction (a MAC never aborts a
//!   frame), goes ahead of every queued data packet, holds the link for its 64 B (the next data
//!   packet starts after it) and arrives one link latency later. Its content is the state when
//!   it starts, so a PAUSE and a RESUME that cancel out before the link is free send nothing.
//!   Control frames are never lost (link loss and failures apply to data packets).
//! - **Pausing.** A paused egress (a switch port or a host's NIC) starts no packet on that VC;
//!   a packet already on the wire finishes. A pause lasts until the RESUME (pause quanta and
//!   their refresh are not modelled: a sender that refreshes its pause behaves the same).
//! - **Headroom.** Between the arrival that crosses XOFF and the last byte the upstream sends
//!   before the PAUSE stops it, a link of `B` bit/s, latency `L` and pipeline latency `S`
//!   delivers at most `ceil(B·(2L + S + 2·t_MTU + t_64)/8) + MTU` bytes (`t_x`: serialisation
//!   time of `x` bytes): the bytes already on the wire or in the pipeline, the frame the PAUSE
//!   waits for, its own 64 B, its flight back, and the packet the upstream has started. With
//!   the crossing packet's own overshoot, the least headroom is
//!   `ceil(B·(2L + S + 2·t_MTU + t_64)/8) + 2·MTU` (about `B·(2L + S)/8 + 4·MTU + 64`).
//!   [`pfc_thresholds`] refuses a configured headroom below it, or a buffer that cannot hold
//!   headroom + XOFF, naming the key.
//! - **Lossless.** Nothing is dropped for lack of space. An ingress that ever holds more than
//!   XOFF + headroom (<= `buffer_bytes`; impossible by the bound above) ends the run as stalled
//!   with a reason naming the node, port and VC, instead of dropping silently: every run checks
//!   the bound.
//! - **Deadlock freedom.** Routing and VCs are those of credit mode ([`crate::VcPolicy`]): a
//!   paused VC waits only on the next hop's ingress of the VC the packet uses there, the same
//!   channel dependencies as credits, so the acyclic policies stay deadlock-free. Duato's
//!   adaptive torus VC is refused ([`pfc_supports`]): it needs the sender to know the
//!   downstream room, which pauses do not tell.

use crate::config::{FlowControl, NetConfig};
use crate::ids::PortId;
use crate::network::{Event, Network};
use crate::routing::VcPolicy;
use reducelab_des::{SimDuration, SimTime};
use reducelab_topo::Topology;
use serde::Serialize;

/// Bytes of a PFC frame on the wire.
pub const PFC_FRAME_BYTES: u64 = 64;

/// The PFC thresholds of the ingress buffer of one port (per VC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PfcThresholds {
    pub xoff_bytes: u64,
    pub xon_bytes: u64,
    pub headroom_bytes: u64,
    /// The least headroom the port's link needs ([`pfc_min_headroom_bytes`]).
    pub min_headroom_bytes: u64,
}

/// The least headroom of an ingress buffer behind a link of `bandwidth_bps` and `latency_ps`
/// into a node of `switch_latency_ps` pipeline latency, with `mtu_bytes` packets (see the
/// module doc): `ceil(B·(2L + S + 2·t_MTU + t_64)/8) + 2·MTU`.
pub fn pfc_min_headroom_bytes(bandwidth_bps: u64, latency_ps: u64, switch_latency_ps: u64, mtu_bytes: u32) -> u64 {
    let mtu = mtu_bytes as u64;
    let t = |b: u64| SimDuration::serialization(b, bandwidth_bps).0 as u128;
    let window_ps = 2 * latency_ps as u128 + switch_latency_ps as u128 + 2 * t(mtu) + t(PFC_FRAME_BYTES);
    let bytes = (bandwidth_bps as u128 * window_ps).div_ceil(8 * 1_000_000_000_000);
    bytes as u64 + 2 * mtu
}

/// Is PFC deadlock-free with this VC policy? Duato's adaptive torus channel is not: it admits
/// a packet only where the downstream buffer has room, which a PFC sender cannot know.
pub fn pfc_supports(policy: &VcPolicy) -> Result<(), String> {
    match policy {
        VcPolicy::TorusDuato { .. } => Err(
            "routing 'adaptive' on a torus uses Duato's adaptive VC, which needs credits (a packet may take it only where the downstream buffer has room); with flow_control 'pfc' use 'minimal' (dimension order with dateline VCs)".into(),
        ),
        _ => Ok(()),
    }
}

/// The PFC thresholds of every ingress port in global port order (node by node, port by
/// port); `None` for the ports of nodes that do not forward (they never pause). `Err` names
/// the `NetConfig` field at fault (`buffer_bytes`, `pfc.xoff_bytes`, `pfc.xon_bytes`,
/// `pfc.headroom_bytes`) and why.
pub fn pfc_thresholds(topo: &Topology, cfg: &NetConfig) -> Result<Vec<Option<PfcThresholds>>, (&'static str, String)> {
    let mtu = cfg.mtu_bytes as u64;
    let p = cfg.pfc;
    if let Some(x) = p.xoff_bytes {
        if x < mtu {
            return Err((
                "pfc.xoff_bytes",
                format!("must be at least one MTU ({mtu} bytes), or every packet pauses the link; got {x}"),
            ));
        }
    }
    let mut out = Vec::new();
    for n in &topo.nodes {
        for port in &n.ports {
            if !n.forwards {
                out.push(None);
                continue;
            }
            let l = &topo.links[port.link.idx()];
            let link =
                || format!("a link of {} Gb/s and {} ns", l.bandwidth_bps as f64 / 1e9, l.latency_ps as f64 / 1e3);
            let min = pfc_min_headroom_bytes(l.bandwidth_bps, l.latency_ps, cfg.switch_latency_ps, cfg.mtu_bytes);
            let headroom = p.headroom_bytes.unwrap_or(min);
            if headroom < min {
                return Err((
                    "pfc.headroom_bytes",
                    format!(
                        "{headroom} bytes is less than {} can deliver after a PAUSE is triggered: {min} bytes (ceil(bandwidth x (2 latency + switch latency + 2 MTU times + one 64 B frame time) / 8) + 2 MTU); the buffer could overflow",
                        link()
                    ),
                ));
            }
            let xoff = match p.xoff_bytes {
                Some(x) => x,
                None => cfg.buffer_bytes.saturating_sub(headroom),
            };
            if xoff < mtu || xoff + headroom > cfg.buffer_bytes {
                let what = if p.xoff_bytes.is_some() {
                    format!("XOFF ({xoff})")
                } else {
                    format!("at least one MTU of XOFF ({mtu})")
                };
                return Err((
                    "buffer_bytes",
                    format!(
                        "{} bytes per ingress port and VC cannot hold the PFC headroom ({headroom}) plus {what} on {}: it needs {} bytes",
                        cfg.buffer_bytes,
                        link(),
                        headroom + xoff.max(mtu)
                    ),
                ));
            }
            let xon = match p.xon_bytes {
                Some(x) => x,
                None => xoff.saturating_sub(2 * mtu),
            };
            if xon > xoff {
                return Err((
                    "pfc.xon_bytes",
                    format!("{xon} bytes exceeds XOFF ({xoff} bytes on {}); XON must not exceed XOFF", link()),
                ));
            }
            out.push(Some(PfcThresholds {
                xoff_bytes: xoff,
                xon_bytes: xon,
                headroom_bytes: headroom,
                min_headroom_bytes: min,
            }));
        }
    }
    Ok(out)
}

/// PFC counters of a run (see [`Network::pfc_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PfcStats {
    /// Control frames sent that paused at least one VC.
    pub pause_frames: u64,
    /// Control frames sent that only resumed VCs.
    pub resume_frames: u64,
    /// Sum over egress ports of the time each had at least one VC paused.
    pub paused_ps: u64,
    /// The most bytes one ingress port held on one VC.
    pub max_ingress_bytes: u64,
    /// Of the ports that forward: the least XOFF + headroom (what `max_ingress_bytes` is
    /// bounded by when all links are alike).
    pub min_xoff_plus_headroom_bytes: u64,
}

/// PFC counters of one output port (one link direction): its egress was paused this many
/// times and this long, and what it sent peaked at this many bytes in the downstream ingress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PfcPortStats {
    pub pauses: u64,
    pub paused_ps: u64,
    /// Peak bytes (one VC) held in the peer's ingress buffer of this direction.
    pub max_ingress_bytes: u64,
    /// That ingress's XOFF + headroom (`u64::MAX` if the peer does not forward).
    pub ingress_limit_bytes: u64,
}

pub(crate) struct Pfc {
    pub on: bool,
    nvc: usize,
    /// Per ingress port: XOFF, XON and XOFF + headroom, the most it may hold (`u64::MAX`: never
    /// pauses).
    xoff: Vec<u64>,
    xon: Vec<u64>,
    room: Vec<u64>,
    /// Per (ingress port, VC): bytes held, and the peak.
    held: Vec<u64>,
    peak: Vec<u64>,
    /// Per ingress port, as masks of VCs: paused now (what the next frame will say), and what
    /// the last frame sent said.
    want: Vec<u32>,
    told: Vec<u32>,
    /// Per port (as an output): a control frame is reserved and has not started; the link is
    /// free of control frames from `ctrl_free`; the data frame on the wire ends at `frame_end`.
    ctrl_pending: Vec<bool>,
    ctrl_free: Vec<u64>,
    pub frame_end: Vec<u64>,
    /// Per egress port: VCs paused by the downstream (mask), since when, for how long in total,
    /// how many times.
    paused: Vec<u32>,
    paused_since: Vec<u64>,
    paused_ps: Vec<u64>,
    pauses: Vec<u64>,
    pause_frames: u64,
    resume_frames: u64,
    /// The first ingress overflow (a broken guarantee), as a stall reason.
    pub violation: Option<String>,
}

impl Pfc {
    pub fn off() -> Pfc {
        Pfc {
            on: false,
            nvc: 0,
            xoff: Vec::new(),
            xon: Vec::new(),
            room: Vec::new(),
            held: Vec::new(),
            peak: Vec::new(),
            want: Vec::new(),
            told: Vec::new(),
            ctrl_pending: Vec::new(),
            ctrl_free: Vec::new(),
            frame_end: Vec::new(),
            paused: Vec::new(),
            paused_since: Vec::new(),
            paused_ps: Vec::new(),
            pauses: Vec::new(),
            pause_frames: 0,
            resume_frames: 0,
            violation: None,
        }
    }

    /// PFC state for `cfg` (off unless its flow control is PFC); `Err` as [`pfc_thresholds`],
    /// as a message naming the field.
    pub fn new(topo: &Topology, cfg: &NetConfig, nvc: usize) -> Result<Pfc, String> {
        if cfg.flow_control != FlowControl::Pfc {
            return Ok(Pfc::off());
        }
        if nvc > 32 {
            return Err(format!("flow_control pfc supports up to 32 VCs (priorities); this network needs {nvc}"));
        }
        let th = pfc_thresholds(topo, cfg).map_err(|(field, why)| format!("{field}: {why}"))?;
        let np = th.len();
        let mut p = Pfc::off();
        p.on = true;
        p.nvc = nvc;
        p.xoff = th.iter().map(|t| t.map_or(u64::MAX, |t| t.xoff_bytes)).collect();
        p.xon = th.iter().map(|t| t.map_or(u64::MAX, |t| t.xon_bytes)).collect();
        p.room = th.iter().map(|t| t.map_or(u64::MAX, |t| t.xoff_bytes + t.headroom_bytes)).collect();
        p.held = vec![0; np * nvc];
        p.peak = vec![0; np * nvc];
        p.want = vec![0; np];
        p.told = vec![0; np];
        p.ctrl_pending = vec![false; np];
        p.ctrl_free = vec![0; np];
        p.frame_end = vec![0; np];
        p.paused = vec![0; np];
        p.paused_since = vec![0; np];
        p.paused_ps = vec![0; np];
        p.pauses = vec![0; np];
        Ok(p)
    }
}

impl Network {
    /// `bytes` arrived through ingress `port` on `vc` and are now held by its node: a PAUSE if
    /// the ingress now holds more than XOFF.
    #[inline]
    pub(crate) fn pfc_hold(&mut self, port: PortId, vc: u8, bytes: u32) {
        let i = port.idx();
        let k = i * self.pfc.nvc + vc as usize;
        let f = &mut self.pfc;
        f.held[k] += bytes as u64;
        let held = f.held[k];
        if held > f.peak[k] {
            f.peak[k] = held;
            if held > f.room[i] && f.violation.is_none() {
                let room = f.room[i];
                self.pfc_overflow(port, vc, held, room);
            }
        }
        let f = &mut self.pfc;
        let bit = 1u32 << vc;
        if held > f.xoff[i] && f.want[i] & bit == 0 {
            f.want[i] |= bit;
            self.pfc_signal(port);
        }
    }

    #[cold]
    fn pfc_overflow(&mut self, port: PortId, vc: u8, held: u64, room: u64) {
        let n = self.pt.node(port);
        self.pfc.violation = Some(format!(
            "PFC ingress overflow (an engine bug: the headroom should prevent it): node {} port {} VC {vc} holds {held} bytes, more than XOFF + headroom ({room}) of its buffer_bytes ({})",
            n.0,
            self.pt.local(port),
            self.cfg.buffer_bytes
        ));
        self.stop();
    }

    /// `bytes` that arrived through ingress `port` on `vc` left its node: a RESUME if the
    /// ingress now holds XON or less and had paused the upstream.
    #[inline]
    pub(crate) fn pfc_release(&mut self, port: PortId, vc: u8, bytes: u32) {
        let i = port.idx();
        let k = i * self.pfc.nvc + vc as usize;
        let f = &mut self.pfc;
        f.held[k] -= bytes as u64;
        let bit = 1u32 << vc;
        if f.want[i] & bit != 0 && f.held[k] <= f.xon[i] {
            f.want[i] &= !bit;
            self.pfc_signal(port);
        }
    }

    /// The pause state of ingress `port` changed: reserve a control frame on the reverse
    /// direction (output `port`), after the frame on the wire, ahead of all queued data. A frame
    /// already reserved and not yet started carries the new state.
    fn pfc_signal(&mut self, port: PortId) {
        let g = port.idx();
        if self.pfc.ctrl_pending[g] {
            return;
        }
        let now = self.queue.now().0;
        let at = now.max(self.pfc.frame_end[g]).max(self.pfc.ctrl_free[g]);
        let end = at + SimDuration::serialization(PFC_FRAME_BYTES, self.pt.bps(port)).0;
        self.pfc.ctrl_free[g] = end;
        // Data waits for the control frame: the port's next packet starts after it (a wake-up
        // that comes earlier finds the port busy and re-arms; see `ports`).
        let ps = &mut self.ports[g];
        ps.busy_until = ps.busy_until.max(end);
        if at == now {
            self.pfc_send(port);
        } else {
            self.pfc.ctrl_pending[g] = true;
            self.queue.push(SimTime(at), Event::PfcSend { port });
        }
    }

    /// The control frame reserved on output `port` starts now: it says the ingress's current
    /// pause state, if that differs from what the upstream was last told.
    pub(crate) fn pfc_send(&mut self, port: PortId) {
        let g = port.idx();
        let f = &mut self.pfc;
        f.ctrl_pending[g] = false;
        let (want, told) = (f.want[g], f.told[g]);
        if want == told {
            return;
        }
        f.told[g] = want;
        if want & !told != 0 {
            f.pause_frames += 1;
        } else {
            f.resume_frames += 1;
        }
        let now = self.queue.now().0;
        let arrive = now + SimDuration::serialization(PFC_FRAME_BYTES, self.pt.bps(port)).0 + self.pt.latency_ps(port);
        self.queue.push(SimTime(arrive), Event::PfcArrive { port: self.pt.peer(port), paused: want });
    }

    /// A control frame reaches egress `port`: its VCs in `paused` stop starting packets, the
    /// others may go on.
    pub(crate) fn pfc_arrive(&mut self, port: PortId, paused: u32) {
        let g = port.idx();
        let now = self.queue.now().0;
        let f = &mut self.pfc;
        let was = f.paused[g];
        if was == paused {
            return;
        }
        f.pauses[g] += (paused & !was).count_ones() as u64;
        for vc in 0..self.nvc {
            let bit = 1u32 << vc;
            if (was ^ paused) & bit != 0 {
                self.credits.set_gate(port, vc, paused & bit == 0);
            }
        }
        if was == 0 {
            f.paused_since[g] = now;
        } else if paused == 0 {
            f.paused_ps[g] += now - f.paused_since[g];
        }
        f.paused[g] = paused;
        if was & !paused != 0 && self.has_work(port) {
            self.kick(port);
        }
    }

    /// The PFC part of a stall reason: the egress VCs paused now (a pause cycle would leave
    /// some), `None` unless PFC or if none is paused.
    pub(crate) fn pfc_state(&self) -> Option<String> {
        if !self.pfc.on {
            return None;
        }
        let paused: u32 = self.pfc.paused.iter().map(|m| m.count_ones()).sum();
        let ports = self.pfc.paused.iter().filter(|&&m| m != 0).count();
        (paused > 0).then(|| format!("PFC: {paused} VCs of {ports} egress ports are paused"))
    }

    /// PFC counters (`None` unless the flow control is PFC).
    pub fn pfc_stats(&self) -> Option<PfcStats> {
        if !self.pfc.on {
            return None;
        }
        let now = self.queue.now().0;
        let f = &self.pfc;
        let paused_ps = (0..f.paused.len())
            .map(|g| f.paused_ps[g] + if f.paused[g] != 0 { now - f.paused_since[g] } else { 0 })
            .sum();
        let min_room = f.room.iter().copied().filter(|&r| r != u64::MAX).min().unwrap_or(0);
        Some(PfcStats {
            pause_frames: f.pause_frames,
            resume_frames: f.resume_frames,
            paused_ps,
            max_ingress_bytes: f.peak.iter().copied().max().unwrap_or(0),
            min_xoff_plus_headroom_bytes: min_room,
        })
    }

    /// Per output port PFC counters in global port order (`None` unless PFC).
    pub fn pfc_port_stats(&self) -> Option<Vec<PfcPortStats>> {
        if !self.pfc.on {
            return None;
        }
        let now = self.queue.now().0;
        let f = &self.pfc;
        Some(
            self.pt
                .all()
                .map(|g| {
                    let i = g.idx();
                    let ing = self.pt.peer(g).idx();
                    let peak = (0..f.nvc).map(|vc| f.peak[ing * f.nvc + vc]).max().unwrap_or(0);
                    PfcPortStats {
                        pauses: f.pauses[i],
                        paused_ps: f.paused_ps[i] + if f.paused[i] != 0 { now - f.paused_since[i] } else { 0 },
                        max_ingress_bytes: peak,
                        ingress_limit_bytes: f.room[ing],
                    }
                })
                .collect(),
        )
    }

    /// After a run in which every packet left the network: every ingress holds nothing and no
    /// egress is paused (nor about to be told otherwise). `Err` names the first violation.
    pub(crate) fn pfc_check_quiescent(&self) -> Result<(), String> {
        if !self.pfc.on {
            return Ok(());
        }
        let f = &self.pfc;
        for g in self.pt.all() {
            let i = g.idx();
            for vc in 0..f.nvc {
                if f.held[i * f.nvc + vc] != 0 {
                    return Err(format!("ingress {g:?} VC {vc} still holds {} bytes", f.held[i * f.nvc + vc]));
                }
            }
            if f.want[i] != 0 || f.told[i] != 0 {
                return Err(format!(
                    "ingress {g:?} still pauses its upstream (mask {:#x}, told {:#x})",
                    f.want[i], f.told[i]
                ));
            }
            if f.paused[i] != 0 {
                return Err(format!("egress {g:?} is still paused (mask {:#x})", f.paused[i]));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RunEnd, Workload};
    use reducelab_des::Rng;
    use reducelab_topo::{star, LinkParams};

    const LAT: u64 = 1_000_000;

    /// A 2-host star under PFC and the switch's ingress (= output) port towards host 0.
    fn net() -> (Network, PortId, PortId) {
        let topo = star(2, LinkParams { bandwidth_bps: 100_000_000_000, latency_ps: LAT }).unwrap();
        let cfg = NetConfig { flow_control: FlowControl::Pfc, buffer_bytes: 1 << 20, ..NetConfig::default() };
        let net = Network::new(&topo, cfg, vec![], &Rng::new(1)).unwrap();
        let host = net.pt.of(topo.hosts[0], 0);
        let sw = net.pt.peer(host);
        (net, host, sw)
    }

    fn next(net: &mut Network) -> (u64, Event) {
        let (t, ev) = net.queue.pop().expect("an event");
        (t.0, ev)
    }

    #[test]
    fn a_pause_waits_for_the_frame_on_the_wire_then_goes_before_data_and_a_resume_follows_it() {
        let (mut net, host, sw) = net();
        let xoff = net.pfc.xoff[sw.idx()];
        // A 4 KiB data frame is on the wire from the switch to host 0 until 1000 ps.
        net.pfc.frame_end[sw.idx()] = 1000;
        net.ports[sw.idx()].busy_until = 1000;
        net.pfc_hold(sw, 0, xoff as u32 + 1);
        let t64 = 64 * 80; // 64 B at 100 Gb/s
                           // The PAUSE is reserved right after that frame, and holds the link for its 64 B: data
                           // queued at the switch for host 0 cannot start before it ends.
        assert_eq!(net.ports[sw.idx()].busy_until, 1000 + t64);
        assert!(matches!(next(&mut net), (1000, Event::PfcSend { port }) if port == sw));
        net.pfc_send(sw);
        // The ingress drains as the PAUSE starts: the RESUME queues behind it.
        net.pfc_release(sw, 0, xoff as u32 + 1);
        assert_eq!(net.ports[sw.idx()].busy_until, 1000 + 2 * t64);
        let (t, ev) = next(&mut net);
        assert!(matches!(ev, Event::PfcSend { port } if port == sw) && t == 1000 + t64, "{t} {ev:?}");
        net.pfc_send(sw);
        // Both cross the link in order, one link latency after they end.
        let (t, ev) = next(&mut net);
        assert_eq!(t, 1000 + t64 + LAT);
        let Event::PfcArrive { port, paused } = ev else { panic!("{ev:?}") };
        assert_eq!((port, paused), (host, 1));
        // At the host, the PAUSE shuts the NIC's VC, the RESUME opens it.
        assert!(net.credits.covers(host, 0, 4096));
        net.pfc_arrive(host, paused);
        assert!(!net.credits.covers(host, 0, 1));
        let (t, ev) = next(&mut net);
        assert!(
            matches!(ev, Event::PfcArrive { port, paused: 0 } if port == host) && t == 1000 + 2 * t64 + LAT,
            "{t} {ev:?}"
        );
        net.pfc_arrive(host, 0);
        assert!(net.credits.covers(host, 0, 4096));
        assert_eq!(net.pfc_port_stats().unwrap()[host.idx()].paused_ps, t64);
        assert_eq!(net.pfc_stats().unwrap().pause_frames, 1);
        assert_eq!(net.pfc_stats().unwrap().resume_frames, 1);
    }

    #[test]
    fn a_pause_and_resume_that_cancel_before_the_link_is_free_send_nothing() {
        let (mut net, _, sw) = net();
        let xoff = net.pfc.xoff[sw.idx()];
        net.pfc.frame_end[sw.idx()] = 1000;
        net.pfc_hold(sw, 0, xoff as u32 + 1);
        net.pfc_release(sw, 0, xoff as u32 + 1);
        let (t, ev) = next(&mut net);
        assert!(matches!(ev, Event::PfcSend { .. }) && t == 1000);
        net.pfc_send(sw);
        assert!(net.queue.pop().is_none(), "no frame: the state did not change");
        assert_eq!(net.pfc_stats().unwrap().pause_frames, 0);
    }

    #[test]
    fn an_ingress_overflow_ends_the_run_with_a_reason_instead_of_a_drop() {
        struct Idle;
        impl Workload for Idle {}
        let (mut net, _, sw) = net();
        net.pfc_hold(sw, 0, (1 << 20) + 1);
        let end = net.run(&mut Idle, None, &mut |_| {});
        let RunEnd::Stalled { reason } = end else { panic!("{end:?}") };
        assert!(
            reason.contains("PFC ingress overflow") && reason.contains("of its buffer_bytes (1048576)"),
            "{reason}"
        );
        assert_eq!(net.stats().drops_buffer, 0);
    }
}
