//! End-to-end transports of message traffic as **sans-I/O** state machines.
//!
//! A transport here is host logic only: a sender and a receiver per message and whatever a
//! receiving host shares between its messages (NDP's pull pacer). They take packet arrivals and
//! timer expiries in, with the current time as an argument, and answer with what to send; they
//! never see the network, a clock or a random number generator. `reducelab-net` drives them on
//! the packet engine (and adds the switch side: NDP's payload trimming and header queues), so
//! the same code can be tested alone, step by step, as in this crate's tests.
//!
//! - [`dcqcn`]: DCQCN (Zhu et al., SIGCOMM 2015) for lossless networks: a paced sender whose
//!   current and target rates fall on CNPs and recover on a timer and a byte counter (fast
//!   recovery, additive and hyper increase), α on its own timer; a receiver sending at most one
//!   CNP per interval per flow.
//! - [`dctcp`]: DCTCP (Alizadeh et al., SIGCOMM 2010): a window in MSS with slow start and
//!   congestion avoidance, per-packet cumulative ACKs echoing CE, the marked fraction α once per
//!   window, `cwnd·(1 − α/2)` at most once per window, fast retransmit, an RTO with backoff.
//! - [`ndp`]: NDP (Handley et al., "Re-architecting datacenter networks and stacks for low
//!   latency and high performance", SIGCOMM 2017), as csg-htsim's `ndp.cpp` implements it:
//!   an initial window at line rate, then one packet per PULL; ACK per data packet, NACK per
//!   trimmed header, retransmissions first; PULLs paced by the receiver at one per MTU time,
//!   round-robin over its flows; a retransmission timeout for lost headers and control packets.
//! - [`worker`]: the worker transport of in-network aggregation jobs (SwitchML's slot window,
//!   ATP's and DSA's AIMD window on ECN echoes and timeouts, per-PSN ACKs from switch or PS,
//!   DSA's reminders). Not yet driven by the engine.
//!
//! Units: times are integer picoseconds (`_ps`), sequence numbers count packets of a message
//! from 0. Determinism: every method is a pure function of the state and its arguments.

pub mod dcqcn;
pub mod dctcp;
pub mod ndp;
pub mod rto;
pub mod worker;

mod bitset;
