//! Credits: link-level flow control of the ingress buffers.
//!
//! Guarantees (credit mode, the default):
//! - A port sends a packet on VC `v` only when it holds credits for all of its bytes in the
//!   downstream ingress buffer of `v` (`buffer_bytes` per ingress port and VC), so nothing is
//!   ever dropped for lack of space.
//! - The credits of a packet come back to the upstream port one link latency after the packet
//!   leaves the downstream node (forwarded, delivered, consumed or lost there).
//! - Credit returns wait in a per-port FIFO in arrival order (a link's latency is fixed and
//!   returns are made in event order) and are absorbed lazily when the port looks at its
//!   credits, so a port that is not starved costs no event per packet; a port starved of
//!   credits is woken by the first return (see [`crate::ports`]).
//!
//! In drop-tail mode credits never run out (the counters start at `i64::MAX / 4` and returns
//! are not recorded); the output queue's limit is what bounds the buffer. With PFC they are not
//! counted either: a (port, VC) counter is a gate, open (`i64::MAX / 4`) or shut by a PAUSE
//! (`i64::MIN / 4`), so the arbitration's credit checks are the pause checks (see
//! [`crate::pfc`]); the ingress bytes a credit return would give back go to the PFC ingress
//! accounting instead.

use crate::config::FlowControl;
use crate::ids::PortId;
use crate::network::{Event, Network};
use reducelab_des::SimTime;
use std::collections::VecDeque;

pub(crate) struct Credits {
    nvc: usize,
    lossless: bool,
    /// The counters gate something (credit or PFC); with drop-tail they never run out, and
    /// the hot path skips them (they would stay far above any packet: `i64::MAX / 4`).
    counted: bool,
    /// Credits (bytes) per (output port, VC) for the downstream ingress buffer.
    avail: Vec<i64>,
    /// Returns in flight towards each output port: (arrival ps, VC, bytes), in arrival order.
    returns: Vec<VecDeque<(u64, u8, u32)>>,
}

impl Credits {
    pub fn new(ports: usize, nvc: usize, fc: FlowControl, buffer_bytes: u64) -> Credits {
        let lossless = fc == FlowControl::Credit;
        let credit0 = if lossless { buffer_bytes as i64 } else { i64::MAX / 4 };
        let counted = fc != FlowControl::DropTail;
        Credits {
            nvc,
            lossless,
            counted,
            avail: vec![credit0; ports * nvc],
            returns: (0..ports).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Takes in the returns that have arrived at `port` by `now`.
    #[inline]
    pub fn absorb(&mut self, port: PortId, now: u64) {
        if !self.lossless {
            return; // returns are recorded in credit mode only
        }
        let q = &mut self.returns[port.idx()];
        while let Some(&(t, vc, bytes)) = q.front() {
            if t > now {
                break;
            }
            self.avail[port.idx() * self.nvc + vc as usize] += bytes as i64;
            q.pop_front();
        }
    }

    /// Credits of `port` on `vc` (absorbed returns only).
    #[inline]
    pub fn available(&self, port: PortId, vc: usize) -> i64 {
        self.avail[port.idx() * self.nvc + vc]
    }

    /// Does `port` hold credits for `bytes` on `vc`?
    #[inline]
    pub fn covers(&self, port: PortId, vc: usize, bytes: u32) -> bool {
        !self.counted || self.available(port, vc) >= bytes as i64
    }

    /// `port` sends `bytes` on `vc`.
    #[inline]
    pub fn consume(&mut self, port: PortId, vc: usize, bytes: u32) {
        if !self.counted {
            return;
        }
        self.avail[port.idx() * self.nvc + vc] -= bytes as i64;
    }

    /// PFC: opens (RESUME) or shuts (PAUSE) `port`'s VC `vc` (see the module doc).
    #[inline]
    pub fn set_gate(&mut self, port: PortId, vc: usize, open: bool) {
        debug_assert!(!self.lossless, "PFC gates on credit counters");
        self.avail[port.idx() * self.nvc + vc] = if open { i64::MAX / 4 } else { i64::MIN / 4 };
    }

    /// Bytes of credit returns on their way to `port` for `vc`.
    pub fn in_flight(&self, port: PortId, vc: usize) -> i64 {
        self.returns[port.idx()].iter().filter(|r| r.1 as usize == vc).map(|r| r.2 as i64).sum()
    }

    /// When the next return reaches `port`, if one is in flight.
    #[inline]
    pub fn next_return(&self, port: PortId) -> Option<u64> {
        if !self.lossless {
            return None;
        }
        self.returns[port.idx()].front().map(|&(t, _, _)| t)
    }
}

impl Network {
    /// Whether the bytes a node's ingress holds are accounted (credits or PFC): only then does
    /// a packet leaving a node give anything back upstream ([`Network::return_credit`]).
    #[inline]
    pub(crate) fn ingress_accounted(&self) -> bool {
        self.credits.lossless || self.pfc.on
    }

    /// Credits for `bytes` of the ingress buffer behind output `port` arrive there at `at`; a
    /// port that was waiting for credits with no return in flight is woken then. (With PFC the
    /// bytes leave that ingress's accounting now.)
    #[inline]
    pub(crate) fn return_credit(&mut self, port: PortId, vc: u8, bytes: u32, at: u64) {
        if self.pfc.on {
            // The bytes leave the ingress of this link at `port`'s peer now.
            return self.pfc_release(self.pt.peer(port), vc, bytes);
        }
        if !self.credits.lossless {
            return;
        }
        self.credits.returns[port.idx()].push_back((at, vc, bytes));
        let ps = &mut self.ports[port.idx()];
        if ps.credit_blocked && !ps.wake_pending {
            ps.credit_blocked = false;
            ps.wake_pending = true;
            self.queue.push(SimTime(at), Event::Wake { port });
        }
    }
}
