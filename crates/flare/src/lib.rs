//! Flare (seed 004) on a PsPIN switch (seed 003 §3.4–3.5).
//!
//! - [`pspin`]: the switch model (clusters of HPUs, L1/L2, FCFS scheduling, per-packet cycle costs),
//!   the aggregation designs of §6, data types and operators, and the sPIN handler interface.
//! - [`sparse`]: sparse allreduce of §7 (blocks, shards, hash table + spill buffer, densification)
//!   and its baselines.

pub mod pspin;
pub mod sparse;
