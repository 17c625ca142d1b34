//! Collective schedules as data.
//!
//! One definition of each allreduce algorithm — a [`Schedule`]: per rank, ordered steps of
//! sends and receives of block sets — serves the symbolic checker ([`check`]), the cost and
//! deficiency models, the packet and flow simulators and the MPI runtime (through its
//! versioned JSON form). This crate does not depend on the simulator.

pub mod algos;
pub mod check;
pub mod export;
pub mod fuzz;
pub mod ir;
pub mod model;
pub mod msccl;
pub mod msccl_import;
pub mod plan;
pub mod registry;
pub mod select;

pub use check::{check, CheckError, CheckReport};
pub use ir::{Blocks, Collective, Program, RecvOp, Schedule, Step, Transfer, SCHEDULE_VERSION};
pub use model::{deficiencies, table2, Deficiencies, ModelReport, StepLoad, Table2, TopologyShape};
pub use msccl::{to_msccl_xml, MscclOptions};
pub use msccl_import::{from_msccl_xml, import_msccl_xml};
pub use plan::{Plan, PlanMsg, PlanStep};
pub use select::{build_for_size, choose_variant, crossover_bytes};
