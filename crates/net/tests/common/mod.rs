//! What the engine's test files share (each test file is its own crate and declares
//! `mod common;`): the message-list workload, link parameters and trace order.
#![allow(dead_code)] // each test file uses a part

use reducelab_des::{Rng, SimTime};
use reducelab_net::{MsgId, NetConfig, Network, RunEnd, TransportConfig, TransportEvent, WorkDone, Workload};
use reducelab_topo::{LinkParams, Topology};

pub const GBPS100: u64 = 100_000_000_000;

pub fn lp(bw: u64, lat_ps: u64) -> LinkParams {
    LinkParams { bandwidth_bps: bw, latency_ps: lat_ps }
}

/// Sends a fixed list of messages, each at its start time, and stops the run when all are
/// delivered.
pub struct Batch {
    /// (src, dst, bytes, start_ps, port); `None` lets the router choose the port.
    msgs: Vec<(u32, u32, u64, u64, Option<u16>)>,
    remaining: usize,
    /// (message id, time in ps) of every delivery, in the order the workload saw them.
    pub seen: Vec<(u32, u64)>,
}

impl Batch {
    /// (src, dst, bytes, start_ps) messages, on the ports the router chooses.
    pub fn new(msgs: Vec<(u32, u32, u64, u64)>) -> Batch {
        Batch::with_ports(msgs.into_iter().map(|(s, d, b, t)| (s, d, b, t, None)).collect())
    }

    /// (src, dst, bytes) messages, all sent at time 0.
    pub fn at_zero(msgs: &[(u32, u32, u64)]) -> Batch {
        Batch::new(msgs.iter().map(|&(s, d, b)| (s, d, b, 0)).collect())
    }

    /// (src, dst, bytes, start_ps, port) messages.
    pub fn with_ports(msgs: Vec<(u32, u32, u64, u64, Option<u16>)>) -> Batch {
        Batch { remaining: msgs.len(), msgs, seen: Vec::new() }
    }
}

impl Workload for Batch {
    fn on_start(&mut self, net: &mut Network) {
        for &(s, d, b, t, p) in &self.msgs {
            net.send(s, d, b, SimTime(t), 0, p);
        }
    }

    fn on_delivered(&mut self, net: &mut Network, m: MsgId) {
        self.seen.push((m.0, net.now().ps()));
        self.remaining -= 1;
        if self.remaining == 0 {
            net.stop();
        }
    }

    /// Payload delivered so far, for the watchdog of `Network::run_limited`.
    fn work(&self, net: &Network) -> WorkDone {
        WorkDone { fraction: 0.0, units: net.foreground().payload_bytes, waiting: self.remaining > 0 }
    }
}

/// A transport trace in time order, events at the same time by their debug text: traces
/// compare whatever order simultaneous events were recorded in.
pub fn sorted_trace(mut v: Vec<(u64, TransportEvent)>) -> Vec<(u64, TransportEvent)> {
    v.sort_by_key(|(t, e)| (*t, format!("{e:?}")));
    v
}

/// Runs `msgs` to the end on the transport `tc` with its trace recorded (seed 1); every message
/// arrives verified.
pub fn run_traced(topo: &Topology, cfg: NetConfig, tc: TransportConfig, msgs: Vec<(u32, u32, u64, u64)>) -> Network {
    let mut net = Network::new(topo, cfg, vec![], &Rng::new(1)).unwrap();
    net.set_transport(tc).unwrap();
    net.record_transport();
    let end = net.run(&mut Batch::new(msgs), None, &mut |_| {});
    assert_eq!(end, RunEnd::Stopped);
    assert!(net.messages().iter().all(|m| m.verified()));
    net
}
