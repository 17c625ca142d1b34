//! GOAL traces: LogGOPSim's schedule format read into a compact trace, checked, and timed in a
//! LogGP simulation with LogGOPSim's semantics.
//!
//! GOAL ("Group Operation Assembly Language", Hoefler, Siebert and Lumsdaine, 2009) describes one
//! dependency graph of `send`, `recv` and `calc` operations per rank. It is the input of the
//! LogGOPSim simulator (`spcl/LogGOPSim`), written by its Schedgen, by ATLAHS' tracers and by
//! ReduceLab's own schedule export (`reducelab_sched::export`).
//!
//! # Layers
//!
//! - [`parse`]: text GOAL → [`Trace`]. Every error names the line and the reason
//!   ([`GoalError`]). Streams the input line by line: nothing but the trace outlives a rank block.
//! - [`trace`]: the trace as a struct of arrays with typed indices ([`OpId`], [`Rank`]) and the
//!   dependencies in one compressed sparse row; [`Trace::heap_bytes`] gives its size (about 31 bytes
//!   per operation, plus its label's bytes, plus 4 per dependency).
//! - [`binary`]: LogGOPSim's binary form (`txt2bin`'s output) → [`Trace`], and back. Every error
//!   names the rank, the operation and the field. [`parse_file`] reads either form.
//! - [`mod@build`]: a trace built in memory ([`TraceBuilder`]), for importers of other formats
//!   (Chakra execution traces) that lower into GOAL.
//! - [`mod@check`]: what can be proven before anything is timed — dependency cycles (naming the rank and
//!   the labels on the cycle) and sends and receives that cannot match (MPI's rules: source, tag,
//!   order). [`check::check`] returns a [`CheckedTrace`], the only thing [`loggp::simulate`] takes.
//! - [`loggp`]: a discrete-event LogGP(S) simulation that reproduces LogGOPSim's LogGP mode event for
//!   event: the same `o`, `g`, `G`, `O`, `L`, eager/rendezvous threshold `S`, the same order of
//!   simultaneous events. Results: each rank's end time, optionally each operation's start and end,
//!   and the length of the critical path.
//!
//! # Guarantees
//!
//! - Units: times are integer nanoseconds (`u64`), as LogGOPSim's (its `calc` sizes are ns), sizes
//!   are bytes. No floating point in parsing or simulation.
//! - Deterministic: the same trace and parameters give the same results, bit for bit; no hash map is
//!   iterated in a simulation path.
//! - Never a hang, never a panic on input: malformed text, unknown ranks, numbers that do not fit,
//!   cycles and unmatched operations are errors; a run whose operations cannot all complete (a
//!   deadlock across ranks) ends with an error naming the rank and label of the stuck operations.

pub mod binary;
pub mod build;
pub mod check;
#[doc(hidden)]
pub mod fuzz;
mod hash;
mod introsort;
pub mod loggp;
pub mod parse;
pub mod trace;

pub use binary::{parse_binary, write_binary};
pub use build::TraceBuilder;
pub use check::{check, CheckedTrace};
pub use loggp::{simulate, LogGpParams, LogGpResult};
pub use parse::{parse_file, parse_reader, parse_str};
pub use trace::{DepKind, Op, OpId, OpKind, Rank, Trace};

use std::fmt;

/// An error in a GOAL trace: where (the file when known, the line) and why. Errors found after
/// parsing (checker, simulation) give the line of the operation they are about, and the message
/// names its rank and label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalError {
    pub file: Option<String>,
    /// 1-based line of the input; 0 when the error is about the whole input.
    pub line: u32,
    pub message: String,
}

impl GoalError {
    pub(crate) fn new(line: u32, message: impl Into<String>) -> GoalError {
        GoalError { file: None, line, message: message.into() }
    }

    /// The same error, said to be in `file`.
    pub fn in_file(mut self, file: impl Into<String>) -> GoalError {
        self.file = Some(file.into());
        self
    }
}

impl fmt::Display for GoalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        // Line 0: about the whole input (it could not be read, time overflowed).
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for GoalError {}
