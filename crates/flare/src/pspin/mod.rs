//! The PsPIN switch model and Flare's dense aggregation designs (seed 004 §3–6; PsPIN in seed
//! 003 §3.4).
//!
//! - [`config`]: the switch (clusters × HPUs, clock, L1, L2, scheduling subsets) and the cycle
//!   costs calibrated from the seeds (docs/flare.md quotes each one).
//! - [`dtype`]: element types with their SIMD widths, and operators (built-in and user-defined).
//! - [`handler`]: the sPIN interface — header, payload and completion handlers as state
//!   machines the model steps and charges cycles for.
//! - [`switch`]: the discrete-event model of one switch (arrivals at line rate, L2 occupancy and
//!   drops, hierarchical FCFS over subsets of S cores, spinning on locks).
//! - [`workload`]: the hosts (ports, windows, staggered sending, seeded data).
//! - [`designs`]: single buffer, B buffers, tree aggregation, Flare's size policy.
//! - [`model`]: the analytical models of §4–6 (ℬ, τ, Q, 𝒬, ℒ, M, ℛ).
//! - [`examples`]: a handler set beyond the paper (int8 sum with per-packet scales).
//! - [`verify`]: checks of a run's results against the hosts' data.
//!
//! Everything here is sans-I/O and deterministic: the same inputs give the same report.

pub mod config;
pub mod designs;
pub mod dtype;
pub mod examples;
pub mod handler;
pub mod model;
pub mod switch;
pub mod verify;
pub mod workload;

pub use config::{ConfigError, CostModel, SwitchConfig};
pub use designs::{Design, DesignHandlers};
pub use dtype::{DataType, Operator, UserOperator};
pub use handler::{HandlerCx, HandlerSet, Packet, RunState, Step};
pub use switch::{run, SwitchReport};
pub use workload::Workload;
