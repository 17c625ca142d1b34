//! The host side of a [`crate::Session`]: one thread per session owns the rank's socket and its
//! agents for as long as the session is open, and the application's calls are handed to it.
//!
//! **Why a thread that stays.** A rank returns from a call as soon as it has its own result,
//! but its peers may still need it: a co-located parameter server (ATP, DSA) answers a rank that
//! lost a result by a re-send, DSA's server fetches a block's original contributions from every
//! rank (its reminders, also from ranks that have their result), and Canary's coordinator
//! answers a rank whose release was lost. Between two calls the application does not call in
//! (an MPI rank may be waiting for the very peer that needs it), so the socket is served by a
//! thread of its own, not by the caller.
//!
//! **Which agents it keeps.** The agents of the two latest calls. A rank begins call `k + 2`
//! only after it had every result of call `k + 1`, which needs every rank's contribution to
//! every block of it, so every rank had already returned from call `k` and nobody needs call
//! `k`'s agents any more: they are released ([`HostProtocol::release`], freeing a server's
//! kept results) as call `k + 2` begins. Each call's application data stays with its agent
//! (a DSA rank answers a fetch with its original contribution).
//!
//! **Which packet is whose.** By the call's tenant (a protocol whose calls take the next tenant,
//! Canary) or by the block its id names (a protocol whose calls continue one block sequence).
//! A packet of a call this rank has not begun yet (peers are ahead: their contributions to the
//! co-located server, a fetch) is kept for it; anything else is stale and counted.
//!
//! **When a call returns.** When its agent is released (Canary: the coordinator's notice, or
//! [`HostProtocol::release_wait_ps`] after it had every block; the others: when it had every
//! block), with the result its agent checked block by block ([`reducelab_ina::AppCall`]); or
//! with an error at the call's deadline, saying what is missing and why.
//!
//! **Closing.** The thread stays after the session closes while its agents may still be needed:
//! until no packet has reached it for the longest [`HostProtocol::linger_ps`] of its agents
//! (how long a rank its peers may need stays after it had every result: Canary's coordinator,
//! ATP's and DSA's server, DSA's ranks; [`MAX_CLOSE_WAIT`] at most; at least the options'
//! `linger`). A peer that still needs it re-sends to it, or reminds its server, once per
//! retransmission timeout, several times within that wait. Ranks nobody needs (SwitchML's
//! and the trees', whose switches keep the results) leave at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use reducelab_ina::host::{Collective, MAX_BLOCKS};
use reducelab_ina::{wire, AppCall, HostAction, HostProtocol, SessionCalls, Values, NIL};

use crate::host::{first_sends, stall_message, HostOptions};
use crate::plan::InaPlan;
use crate::udp;

/// The longest a closed session's thread waits for its peers (module docs, "Closing"): protocols
/// with timeouts of seconds (tests without faults) would otherwise hold a closing rank for tens
/// of seconds.
pub(crate) const MAX_CLOSE_WAIT: Duration = Duration::from_secs(1);

enum Request {
    Call(Collective, Vec<i32>),
    Close,
}

type Reply = Result<Vec<i32>, String>;

/// The caller's end of a session's host thread.
pub(crate) struct SessionHost {
    requests: mpsc::Sender<Request>,
    replies: mpsc::Receiver<Reply>,
    /// Wakes the thread from its wait on the sockets (a datagram to its wake-up socket).
    waker: UdpSocket,
    wake_at: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl SessionHost {
    /// Starts the thread of rank `rank` (host `host` of `plan`) on its bound socket `sock`.
    pub(crate) fn start(
        plan: Arc<InaPlan>,
        host: u32,
        rank: u32,
        sock: UdpSocket,
        calls_map: SessionCalls,
        opts: HostOptions,
    ) -> Result<SessionHost, String> {
        let local = |e: std::io::Error| format!("the session's wake-up socket: {e}");
        let wake = UdpSocket::bind("127.0.0.1:0").map_err(local)?;
        wake.set_nonblocking(true).map_err(local)?;
        let wake_at = wake.local_addr().map_err(local)?;
        let waker = UdpSocket::bind("127.0.0.1:0").map_err(local)?;
        let node = plan.fabric.host_nodes[host as usize];
        let (sw, sw_port) = plan.fabric.nodes[node as usize].ports[0];
        let first_hop = plan.endpoints.of(sw, sw_port);
        let (req_tx, req_rx) = mpsc::channel();
        let (rep_tx, rep_rx) = mpsc::channel();
        // The loop is built in its thread: the protocols' host agents are not `Send`.
        let thread = std::thread::Builder::new()
            .name(format!("reducelab-host-{host}"))
            .spawn(move || {
                let family = plan.frame();
                let vals = Values::new(plan.max_elems as usize);
                let host_loop = HostLoop {
                    plan,
                    host,
                    rank,
                    calls_map,
                    opts,
                    sock,
                    wake,
                    first_hop,
                    family,
                    vals,
                    out: Vec::new(),
                    frame: Vec::with_capacity(2048),
                    txq: udp::TxQueue::default(),
                    timers: BinaryHeap::new(),
                    seq: 0,
                    live: VecDeque::new(),
                    begun: 0,
                    stash: Vec::new(),
                    epoch: Instant::now(),
                    replies: rep_tx,
                    tx: 0,
                    rx: 0,
                    stale: 0,
                };
                host_loop.run(req_rx)
            })
            .map_err(|e| format!("cannot start the session's host thread: {e}"))?;
        Ok(SessionHost { requests: req_tx, replies: rep_rx, waker, wake_at, thread: Some(thread) })
    }

    fn wake(&self) {
        // A lost wake-up only delays the thread until its next poll timeout (at most 20 ms).
        let _ = self.waker.send_to(&[0], self.wake_at);
    }

    /// Runs one call: `coll` (this rank's collective for it) contributing `data`.
    pub(crate) fn call(&mut self, coll: Collective, data: Vec<i32>) -> Reply {
        self.requests
            .send(Request::Call(coll, data))
            .map_err(|_| "the session's host thread has stopped".to_string())?;
        self.wake();
        self.replies.recv().map_err(|_| "the session's host thread stopped without an answer".to_string())?
    }
}

impl Drop for SessionHost {
    /// Waits for the thread, which stays while its peers may still need it (module docs).
    fn drop(&mut self) {
        let _ = self.requests.send(Request::Close);
        self.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One call's agent.
struct Call {
    /// The call's number in the session.
    number: u64,
    coll: Collective,
    agent: Box<dyn HostProtocol>,
    /// First transmissions produced by `pull` (blocks put in flight).
    pulled: u64,
    deadline: Instant,
    /// Its caller has its answer.
    replied: bool,
}

/// A timer: (when, order of arming, call number, the agent's token).
type Timer = Reverse<(u64, u64, u64, u64)>;

struct HostLoop {
    plan: Arc<InaPlan>,
    host: u32,
    rank: u32,
    calls_map: SessionCalls,
    opts: HostOptions,
    sock: UdpSocket,
    wake: UdpSocket,
    first_hop: SocketAddrV4,
    family: wire::Frame,
    vals: Values,
    out: Vec<HostAction>,
    frame: Vec<u8>,
    txq: udp::TxQueue,
    timers: BinaryHeap<Timer>,
    seq: u64,
    /// The agents of the latest calls, oldest first (at most two).
    live: VecDeque<Call>,
    /// Calls begun (the next call's number).
    begun: u64,
    /// Frames of a call not begun yet.
    stash: Vec<Vec<u8>>,
    epoch: Instant,
    replies: mpsc::Sender<Reply>,
    tx: u64,
    rx: u64,
    /// Frames of no live or coming call, from elsewhere than the first hop, or malformed
    /// (reported when a call times out).
    stale: u64,
}

impl HostLoop {
    fn now_ps(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 * 1000
    }

    fn run(mut self, requests: mpsc::Receiver<Request>) {
        let mut rxb = udp::RxBatch::new(8);
        let mut ready = Vec::new();
        let mut closing = false;
        let mut last_rx = Instant::now();
        loop {
            loop {
                match requests.try_recv() {
                    Ok(Request::Call(coll, data)) => self.begin(coll, data),
                    Ok(Request::Close) | Err(mpsc::TryRecvError::Disconnected) => {
                        closing = true;
                        break;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            self.timers_due();
            let sent = self.pull();
            self.flush();
            let got = self.receive(&mut rxb);
            if got {
                last_rx = Instant::now();
            }
            self.answer();
            if closing && self.may_leave(last_rx) {
                break;
            }
            if !got && !sent {
                let mut wait = Duration::from_millis(20);
                if let Some(&Reverse((at, ..))) = self.timers.peek() {
                    wait = wait.min(Duration::from_nanos(at.saturating_sub(self.now_ps()) / 1000));
                }
                if let Some(d) = self.live.iter().filter(|c| !c.replied).map(|c| c.deadline).min() {
                    wait = wait.min(d.saturating_duration_since(Instant::now()));
                }
                udp::poll_readable(&[&self.sock, &self.wake], wait, &mut ready);
                if ready.get(1) == Some(&true) {
                    let mut b = [0u8; 16];
                    while self.wake.recv_from(&mut b).is_ok() {}
                }
            }
        }
    }

    /// Whether a closed session's thread may stop (module docs, "Closing").
    fn may_leave(&self, last_rx: Instant) -> bool {
        let needed = self.live.iter().map(|c| c.agent.linger_ps()).max().unwrap_or(0);
        let wait = Duration::from_nanos(needed / 1000).min(MAX_CLOSE_WAIT).max(self.opts.linger);
        self.live.iter().all(|c| c.replied) && last_rx.elapsed() >= wait
    }

    /// Begins the session's next call.
    fn begin(&mut self, mut coll: Collective, data: Vec<i32>) {
        let now = self.now_ps();
        while self.live.len() >= 2 {
            let mut old = self.live.pop_front().expect("two calls");
            old.agent.release(now, &mut self.vals);
            self.vals.close_call(&old.coll);
        }
        // The agents check fingerprints only: the expected values are the seeded ones.
        coll.expected_values = Vec::new();
        let agent = self.plan.specs[0].protocol.host_agent(&coll, self.rank);
        self.vals.open_call(AppCall::new(&coll, self.rank, data));
        let number = self.begun;
        self.begun += 1;
        self.live.push_back(Call {
            number,
            coll,
            agent,
            pulled: 0,
            deadline: Instant::now() + self.opts.timeout,
            replied: false,
        });
        let i = self.live.len() - 1;
        let c = &mut self.live[i];
        c.agent.start(&c.coll, now, &mut self.vals, &mut self.out);
        self.carry_out(i);
        // What arrived for it before it began.
        for bytes in std::mem::take(&mut self.stash) {
            self.handle(self.first_hop, &bytes);
        }
        self.flush();
    }

    /// Carries out the actions in `out` of live call `i`.
    fn carry_out(&mut self, i: usize) {
        let number = self.live[i].number;
        for a in self.out.drain(..) {
            match a {
                HostAction::Send(h) => {
                    self.frame.clear();
                    let values = (h.data != NIL).then(|| self.vals.get(h.data));
                    let r = self.family.emit(&h, values, &mut self.frame);
                    self.vals.release(h.data);
                    r.unwrap_or_else(|e| {
                        panic!("host {}: the wire frame cannot carry {h:?}: {e} (a protocol bug)", self.host)
                    });
                    self.txq.push(&self.frame);
                }
                HostAction::Timer { at, token } => {
                    self.seq += 1;
                    self.timers.push(Reverse((at, self.seq, number, token)));
                }
            }
        }
    }

    fn flush(&mut self) {
        if !self.txq.is_empty() {
            let (sent, _, failed) = self.txq.flush(&self.sock, self.first_hop);
            // A frame the kernel refused is lost to the protocol, which recovers or times out.
            self.tx += sent + failed;
        }
    }

    fn timers_due(&mut self) {
        while let Some(&Reverse((at, _, number, token))) = self.timers.peek() {
            let now = self.now_ps();
            if at > now {
                break;
            }
            self.timers.pop();
            // A released call's timers are dropped.
            let Some(i) = self.live.iter().position(|c| c.number == number) else { continue };
            let c = &mut self.live[i];
            c.agent.on_timer(&c.coll, now, token, &mut self.vals, &mut self.out);
            self.carry_out(i);
        }
        self.flush();
    }

    /// The NIC pulls more blocks of each live call while fewer than `max_inflight` are
    /// outstanding. True if anything was sent.
    fn pull(&mut self) -> bool {
        let mut sent = false;
        for i in 0..self.live.len() {
            let now = self.now_ps();
            let c = &mut self.live[i];
            let done = (c.coll.blocks - c.agent.missing()) as u64;
            let room = (self.opts.max_inflight as u64).saturating_sub(c.pulled.saturating_sub(done)) as usize;
            if room > 0 {
                let before = first_sends(c.agent.stats());
                c.agent.pull(&c.coll, now, room, &mut self.vals, &mut self.out);
                c.pulled += first_sends(c.agent.stats()).wrapping_sub(before);
                sent |= self.out.iter().any(|x| matches!(x, HostAction::Send(_)));
                self.carry_out(i);
            }
        }
        sent
    }

    /// Everything that has arrived. True if anything did.
    fn receive(&mut self, rxb: &mut udp::RxBatch) -> bool {
        let mut got = false;
        loop {
            let n = rxb.recv(&self.sock);
            if n == 0 {
                break;
            }
            got = true;
            for i in 0..n {
                let (from, datagrams) = rxb.get(i);
                for bytes in datagrams {
                    self.handle(from, bytes);
                }
            }
            self.flush();
        }
        got
    }

    /// The live call a packet (tenant, id) is of.
    fn call_of(&self, tenant: u16, id: u32) -> Option<usize> {
        self.live.iter().rposition(|c| {
            c.coll.tenant == tenant
                && (self.calls_map == SessionCalls::NextTenant || c.coll.block_in(id) < c.coll.blocks)
        })
    }

    /// Whether a packet (tenant, id) is of a call this rank has not begun yet.
    fn is_ahead(&self, tenant: u16, id: u32) -> bool {
        match self.calls_map {
            SessionCalls::NextTenant => tenant == (self.begun % 256) as u16,
            _ => {
                let next = self.live.back().map_or(0, |c| c.coll.sequence_base.wrapping_add(c.coll.blocks));
                tenant == self.plan.colls[0].tenant && id.wrapping_sub(next) & (MAX_BLOCKS - 1) < MAX_BLOCKS / 2
            }
        }
    }

    fn handle(&mut self, from: SocketAddrV4, bytes: &[u8]) {
        self.rx += 1;
        if from != self.first_hop {
            self.stale += 1;
            return;
        }
        let Ok((mut hdr, payload)) = self.family.parse_header(bytes) else {
            self.stale += 1;
            return;
        };
        let Some(i) = self.call_of(hdr.tenant, hdr.id) else {
            if self.is_ahead(hdr.tenant, hdr.id) {
                self.stash.push(bytes.to_vec());
            } else {
                self.stale += 1;
            }
            return;
        };
        let slot = self.vals.alloc_for_overwrite();
        if wire::values_into(payload, self.vals.get_mut(slot)).is_err() {
            self.vals.release(slot);
            self.stale += 1;
            return;
        }
        hdr.data = slot;
        let now = self.now_ps();
        let c = &mut self.live[i];
        c.agent.on_packet(&c.coll, now, hdr, &mut self.vals, &mut self.out);
        self.carry_out(i);
    }

    /// Answers the calls that are over: released with every result checked, or past their
    /// deadline (that call's agent is then dropped).
    fn answer(&mut self) {
        let now = self.now_ps();
        let mut i = 0;
        while i < self.live.len() {
            let c = &self.live[i];
            if c.replied {
                i += 1;
                continue;
            }
            let a = &c.agent;
            let released = a.completed_ps().is_some()
                || a.finished_ps().zip(a.release_wait_ps()).is_some_and(|(f, w)| now >= f.saturating_add(w));
            if released {
                let reply = self.result(i);
                self.live[i].replied = true;
                let _ = self.replies.send(reply);
                i += 1;
            } else if Instant::now() >= c.deadline {
                let info = self.plan.specs[0].protocol.info();
                let msg = stall_message(
                    self.host,
                    &[(&c.coll, self.rank, &*c.agent, info)],
                    self.opts.timeout,
                    self.tx,
                    self.rx,
                    self.stale,
                );
                let mut c = self.live.remove(i).expect("a live call");
                c.agent.release(now, &mut self.vals);
                self.vals.close_call(&c.coll);
                let _ = self.replies.send(Err(msg));
            } else {
                i += 1;
            }
        }
    }

    /// The result of live call `i`, whose agent is released.
    fn result(&self, i: usize) -> Reply {
        let c = &self.live[i];
        let bad = c.agent.stats().bad_blocks;
        if bad > 0 {
            return Err(format!(
                "host {}: in-network allreduce {}: {bad} of {} results differ from the exact sum of the ranks' contributions",
                self.host, c.coll.tenant, c.coll.blocks
            ));
        }
        let call = self.vals.call(&c.coll).expect("a live call's data is open");
        if let Some(b) = call.first_missing() {
            return Err(format!(
                "host {}: allreduce {}: the result of block {b} was never checked by this rank's agent (the protocol does not expose it)",
                self.host, c.coll.tenant
            ));
        }
        Ok(call.result.clone())
    }
}
