//! A user-space software switch whose ports are UDP sockets on loopback, and the host side
//! that drives the in-network protocols' host agents over real sockets (docs/switch.md).
//!
//! - [`plan`]: what every process derives from the scenario file (fabric, forwarding tables,
//!   the UDP endpoint of every port, collectives, switch programs).
//! - [`ports`]: the data plane of every switch node, whatever its protocol family: a UDP
//!   socket per port, the one event loop, egress faults and shaping.
//! - [`switch`]: one switch node's logic running its protocol's `SwitchProgram` over [`ports`].
//! - [`host`]: one host's agents over a UDP socket, results checked against exact sums.
//! - [`session`]: a rank that stays (socket bound once, one allreduce per call): the C ABI's
//!   and the MPI runtime's host side; its socket and agents live in a thread of their own
//!   (`session_host`), which answers peers between calls.
//! - [`pool_plan`], [`pool_switch`], [`pool_host`]: the same for the pool protocols' training
//!   jobs (SwitchML, ATP, DSA), driving the simulator's `PoolProgram`s, parameter servers and the
//!   worker transport's `WorkerWindow` over the pool wire frame (`reducelab_ina::pool_wire`).
//! - [`pool_session`]: a pool protocol's rank that stays (SwitchML, ATP, DSA), opened by [`Session`]
//!   when the scenario's traffic is a training job.
//! - [`faults`]: loss, duplication, delay and reordering on a switch's egress ports.
//!
//! The protocol code is `reducelab-ina`'s, unchanged: the switch parses each datagram with
//! `wire::parse`, hands the header to the program, and emits what it asks with `wire::emit`.
//! Units: the programs' clock is integer picoseconds since the process started (a monotonic
//! clock); fault durations are microseconds; element values are 32-bit integers.

pub mod bench;
pub mod faults;
pub mod host;
pub mod plan;
pub mod pool_host;
pub mod pool_plan;
pub mod pool_session;
pub mod pool_switch;
pub mod ports;
pub mod session;
mod session_host;
pub mod switch;
pub mod udp;

pub use host::{allreduce_data, run_host, HostOptions, HostReport};
pub use plan::{EndpointSpec, InaPlan};
pub use ports::SwitchOptions;
pub use session::Session;
pub use switch::{run_switch, Switch, SwitchReport};
