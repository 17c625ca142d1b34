//! Chakra execution traces (MLCommons; the input of ASTRA-sim): one protobuf file per rank, a
//! dependency graph of compute, memory and communication nodes. This crate reads them against
//! the schema MLCommons publishes and lowers a set of them into one GOAL trace
//! (`reducelab_goal`), so that the packet engine, the flow backend and the LogGP mode run them
//! like any GOAL trace.
//!
//! # Layers
//!
//! - [`wire`]: the protobuf wire format by hand (varints, wire types, length-prefixed framing);
//!   no protobuf crate, no code generation.
//! - [`et`]: the schema's messages (`GlobalMetadata`, `Node`, `AttributeProto`), read and written
//!   ([`et::read_et`], [`et::EtWriter`]); field numbers in the module docs.
//! - [`lower`]: a set of rank files into a GOAL [`reducelab_goal::Trace`] plus the bookkeeping
//!   that maps its operations back to Chakra nodes and collective instances ([`ChakraJob`]);
//!   [`ChakraJob::results`] turns operation times into iteration time, exposed communication and
//!   per-collective times.
//!
//! # Guarantees
//!
//! - Never a panic on input: malformed protobuf, unknown node types, unknown dependencies,
//!   cycles, collectives that differ across ranks, unmatched point-to-point messages and numbers
//!   that do not fit are a [`ChakraError`] naming the file, the node id or byte offset, and the
//!   reason.
//! - Deterministic: the same files and algorithms give the same trace, byte for byte; maps are
//!   ordered (`BTreeMap`) wherever they are iterated.
//! - Units: Chakra's `duration_micros` are microseconds, GOAL `calc` times nanoseconds, results
//!   picoseconds; sizes are bytes.

pub mod et;
pub mod example;
#[doc(hidden)]
pub mod fuzz;
pub mod lower;
pub mod wire;

pub use et::{read_et, Attr, AttrValue, CommType, EtFile, EtWriter, Node, NodeType};
pub use lower::{
    collective_of, lower, lower_grouped, Algorithms, ChakraJob, ChakraResults, CollectiveInstance, CommEngine,
    CommGroups, Lowered,
};

use std::fmt;

/// An error in a set of Chakra files: the file (as the caller names it), the node id or the byte
/// offset where known, and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChakraError {
    pub file: Option<String>,
    pub node: Option<u64>,
    pub offset: Option<u64>,
    pub message: String,
}

impl ChakraError {
    pub fn new(message: impl Into<String>) -> ChakraError {
        ChakraError { file: None, node: None, offset: None, message: message.into() }
    }

    pub fn in_file(mut self, file: impl Into<String>) -> ChakraError {
        self.file = Some(file.into());
        self
    }

    pub fn at_node(mut self, node: u64) -> ChakraError {
        self.node = Some(node);
        self
    }
}

impl From<et::DecodeError> for ChakraError {
    fn from(e: et::DecodeError) -> ChakraError {
        ChakraError { file: None, node: e.node, offset: Some(e.offset), message: e.message }
    }
}

impl fmt::Display for ChakraError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        match (self.node, self.offset) {
            (Some(n), Some(o)) => write!(f, "node {n} (byte {o}): ")?,
            (Some(n), None) => write!(f, "node {n}: ")?,
            (None, Some(o)) => write!(f, "byte {o}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ChakraError {}

/// Reads rank `r`'s file of the trace set `prefix` for every rank: `{prefix}.{r}.et`, Chakra's
/// naming (its converters write it, ASTRA-sim's `--workload-configuration` takes the prefix).
/// With `ranks`, exactly that many files; without, ranks 0, 1, … while the files exist. Errors
/// name the missing file.
pub fn read_files(prefix: &std::path::Path, ranks: Option<u32>) -> Result<Vec<(String, EtFile)>, ChakraError> {
    let name = |r: u32| {
        let mut s = prefix.as_os_str().to_owned();
        s.push(format!(".{r}.et"));
        std::path::PathBuf::from(s)
    };
    let mut out = Vec::new();
    let mut r = 0u32;
    loop {
        if ranks.is_some_and(|n| r >= n) {
            break;
        }
        let path = name(r);
        let shown = path.display().to_string();
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if ranks.is_none() && r > 0 && e.kind() == std::io::ErrorKind::NotFound => {
                // A gap is a missing file, not the end of the set.
                if name(r + 1).exists() {
                    let next = name(r + 1).display().to_string();
                    return Err(ChakraError::new(format!("no such file, but {next} exists: rank {r} is missing"))
                        .in_file(shown));
                }
                break;
            }
            Err(e) => {
                let why = if e.kind() == std::io::ErrorKind::NotFound {
                    match ranks {
                        Some(n) => format!("no such file: rank {r} of {n} is missing"),
                        None => "no such file: a trace set starts with rank 0's file".to_string(),
                    }
                } else {
                    e.to_string()
                };
                return Err(ChakraError::new(why).in_file(shown));
            }
        };
        out.push((shown.clone(), read_et(&data).map_err(|e| ChakraError::from(e).in_file(shown))?));
        r += 1;
        if r > reducelab_goal::trace::MAX_RANKS {
            return Err(ChakraError::new(format!("more than {} rank files", reducelab_goal::trace::MAX_RANKS)));
        }
    }
    Ok(out)
}
