//! OS noise at the hosts: with `NetConfig::noise_probability`, a packet a host injects is
//! delayed by `noise_delay_ps`, on the hosts of `NetConfig::noise_hosts` (every host if unset).
//!
//! Two models ([`NoiseMode`]):
//! - **port stall** (the default): the host's NIC port stalls for the delay before the chosen
//!   packet; the packets behind it wait too.
//! - **packet**: only the chosen packet is delayed. It is cut from its message (or taken from
//!   the protocol queue) and set aside; the port goes on at once with the packets behind it,
//!   and the set-aside packet competes again, as the oldest, once its delay has passed.
//!
//! Guarantees:
//! - A set-aside packet holds no credits: credits are taken when a packet is transmitted, and
//!   a released packet is sent only when the downstream buffer has room for it (so lossless
//!   flow control stays exact, with nothing to give back).
//! - Release times of one port are in order (one delay, a monotone clock), so the packets
//!   set aside on a port wait in a FIFO and leave in the order they were chosen.
//! - The draw per packet comes from the noise stream forked from the scenario seed; a
//!   released packet is never drawn for again.

use crate::config::{NetConfig, NoiseMode};
use crate::ids::{PktId, PortId};
use crate::network::{Event, Network};
use crate::ports::PortTable;
use reducelab_des::{Rng, SimTime};
use reducelab_topo::Topology;
use std::collections::VecDeque;

pub(crate) struct Noise {
    pub rng: Rng,
    /// Per global port: a host port that noise may delay.
    on_port: Vec<bool>,
    /// Per global port: packets set aside by per-packet noise, with their release time.
    held: Vec<VecDeque<(u64, PktId)>>,
}

impl Noise {
    pub fn new(topo: &Topology, pt: &PortTable, cfg: &NetConfig, rng: Rng) -> Result<Noise, String> {
        let nhosts = topo.hosts.len();
        let mut noisy = vec![cfg.noise_hosts.is_none(); nhosts];
        if let Some(hosts) = &cfg.noise_hosts {
            for &h in hosts {
                if h as usize >= nhosts {
                    return Err(format!("noise host {h} does not exist (the topology has {nhosts} hosts)"));
                }
                noisy[h as usize] = true;
            }
        }
        let mut on_port = vec![false; pt.len()];
        for (h, &node) in topo.hosts.iter().enumerate() {
            for p in pt.of_node(node) {
                on_port[p.idx()] = noisy[h];
            }
        }
        let held = if cfg.noise_mode == NoiseMode::Packet {
            (0..pt.len()).map(|_| VecDeque::new()).collect()
        } else {
            Vec::new()
        };
        Ok(Noise { rng, on_port, held })
    }

    /// Noise may delay injections on `port` (a host port of a noisy host).
    #[inline]
    pub fn on(&self, port: PortId) -> bool {
        self.on_port[port.idx()]
    }

    /// The set-aside packet of `port` whose delay has passed by `now`, if any.
    #[inline]
    pub fn released(&self, port: PortId, now: u64) -> Option<PktId> {
        match self.held.get(port.idx()).and_then(|q| q.front()) {
            Some(&(t, pkt)) if t <= now => Some(pkt),
            _ => None,
        }
    }

    /// Packets currently set aside (for stall reports).
    pub fn held_packets(&self) -> usize {
        self.held.iter().map(|q| q.len()).sum()
    }
}

impl Network {
    /// Sets `pkt`, just cut for host port `port`, aside for the noise delay: it competes
    /// again for the port from `now + noise_delay_ps` on.
    pub(crate) fn set_aside(&mut self, port: PortId, pkt: PktId) {
        let at = self.queue.now().0 + self.cfg.noise_delay_ps;
        self.noise.held[port.idx()].push_back((at, pkt));
        self.queue.push(SimTime(at), Event::NoiseRelease { port });
    }

    /// Takes the released set-aside packet of `port` off its queue (after [`Noise::released`]).
    pub(crate) fn take_released(&mut self, port: PortId) -> PktId {
        self.noise.held[port.idx()].pop_front().expect("a released packet").1
    }
}
