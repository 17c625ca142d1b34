//! Scenario files with a `[pspin]` table: one PsPIN switch of Flare (seed 004 §3–6) aggregating
//! one allreduce from its children, with no network around it (docs/flare.md, "Scenario files").
//! Parsed here with the other scenario tables; run by `reducelab_sim::pspin_run`.

use reducelab_flare::pspin::designs::Design;
use reducelab_flare::pspin::{self, DataType, Operator, SwitchConfig, Workload};
use reducelab_flare::sparse::switch::Storage;

use crate::ScenarioError;

/// Whether `text` is a PsPIN switch scenario (has a top-level `[pspin]` table).
pub fn is_pspin(text: &str) -> bool {
    text.parse::<toml::Table>().map(|t| t.contains_key("pspin")).unwrap_or(false)
}

fn err(field: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError { field: field.into(), reason: reason.into() }
}

/// A table's fields, each taken once; what is left at the end is an unknown field.
struct Fields<'a> {
    path: &'a str,
    table: toml::Table,
}

impl<'a> Fields<'a> {
    fn new(path: &'a str, v: Option<toml::Value>) -> Result<Self, ScenarioError> {
        match v {
            None => Ok(Fields { path, table: toml::Table::new() }),
            Some(toml::Value::Table(table)) => Ok(Fields { path, table }),
            Some(_) => Err(err(path, "expected a table")),
        }
    }
    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
    fn int(&mut self, key: &str, default: u64, max: u64) -> Result<u64, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if i >= 0 && i as u64 <= max => Ok(i as u64),
            Some(v) => Err(err(&self.field(key), format!("expected an integer in 0..={max}, got {v}"))),
        }
    }
    fn num(&mut self, key: &str, default: f64) -> Result<f64, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) => Ok(i as f64),
            Some(toml::Value::Float(f)) => Ok(f),
            Some(v) => Err(err(&self.field(key), format!("expected a number, got {v}"))),
        }
    }
    fn boolean(&mut self, key: &str, default: bool) -> Result<bool, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default),
            Some(toml::Value::Boolean(b)) => Ok(b),
            Some(v) => Err(err(&self.field(key), format!("expected true or false, got {v}"))),
        }
    }
    fn string(&mut self, key: &str, default: &str) -> Result<String, ScenarioError> {
        match self.table.remove(key) {
            None => Ok(default.to_string()),
            Some(toml::Value::String(s)) => Ok(s),
            Some(v) => Err(err(&self.field(key), format!("expected a string, got {v}"))),
        }
    }
    fn take(&mut self, key: &str) -> Option<toml::Value> {
        self.table.remove(key)
    }
    fn done(self) -> Result<(), ScenarioError> {
        match self.table.keys().next() {
            Some(k) => Err(err(&self.field(k), "unknown field")),
            None => Ok(()),
        }
    }
}

/// The handlers a scenario asks for.
pub enum Handlers {
    Design(Design),
    QuantisedInt8Sum,
    /// Sparse data (seed 004 §7) at this density and storage, aggregated by this design.
    Sparse(Design, f64, Storage),
}

/// A parsed PsPIN scenario.
pub struct PspinScenario {
    pub name: String,
    pub seed: u64,
    pub switch: SwitchConfig,
    pub workload: Workload,
    pub design_requested: String,
    pub reproducible: bool,
    pub handlers: Handlers,
    pub allreduces: u64,
    /// `simulate = false`: evaluate the §4–6 model only (Fig. 13); the run is not simulated.
    pub simulate: bool,
}

/// Parses and validates a `[pspin]` scenario (`seed` overrides the file's).
pub fn parse(text: &str, seed: Option<u64>) -> Result<PspinScenario, ScenarioError> {
    let doc: toml::Table =
        text.parse().map_err(|e: toml::de::Error| err("", format!("invalid TOML: {}", e.message())))?;
    let mut top = Fields::new("", Some(toml::Value::Table(doc)))?;
    let name = top.string("name", "pspin")?;
    let seed = match seed {
        Some(s) => s,
        None => top.int("seed", 1, u64::MAX >> 1)?,
    };
    let _ = top.take("seed");
    let mut p = Fields::new("pspin", top.take("pspin"))?;
    top.done()?;
    let d = SwitchConfig::default();
    let c = d.costs;
    let mut a = Fields::new("pspin.allreduce", p.take("allreduce"))?;
    let mut switch = SwitchConfig {
        clusters: p.int("clusters", d.clusters as u64, u32::MAX as u64)? as u32,
        hpus_per_cluster: p.int("hpus_per_cluster", d.hpus_per_cluster as u64, u32::MAX as u64)? as u32,
        clock_mhz: p.int("clock_mhz", d.clock_mhz as u64, 1_000_000)? as u32,
        l1_bytes_per_cluster: p.int("l1_bytes_per_cluster", d.l1_bytes_per_cluster, 1 << 40)?,
        l2_packet_bytes: p.int("l2_packet_bytes", d.l2_packet_bytes, 1 << 40)?,
        subset_cores: p.int("subset_cores", d.subset_cores as u64, u32::MAX as u64)? as u32,
        backpressure: false,
        costs: pspin::CostModel {
            cycles_per_vector_op: p.int("cycles_per_vector_op", c.cycles_per_vector_op as u64, 1 << 20)? as u32,
            dma_cycles_per_kib: p.int("dma_cycles_per_kib", c.dma_cycles_per_kib as u64, 1 << 20)? as u32,
            remote_l1_factor: p.int("remote_l1_factor", c.remote_l1_factor as u64, 1 << 20)? as u32,
            lock_cycles: p.int("lock_cycles", c.lock_cycles as u64, 1 << 20)? as u32,
            handler_overhead_cycles: p.int("handler_overhead_cycles", c.handler_overhead_cycles as u64, 1 << 20)?
                as u32,
        },
    };
    switch.backpressure = match p.string("l2_full", "drop")?.as_str() {
        "drop" => false,
        "backpressure" => true,
        other => return Err(err("pspin.l2_full", format!("expected \"drop\" or \"backpressure\", got {other:?}"))),
    };
    p.done()?;
    switch.validate()?;

    let dtype_name = a.string("dtype", "int32")?;
    let dtype = DataType::from_name(&dtype_name).ok_or_else(|| {
        err("pspin.allreduce.dtype", format!("unknown type {dtype_name:?} (known: int32, int16, int8, f32, f16)"))
    })?;
    let op_name = a.string("op", "sum")?;
    let op = Operator::from_name(&op_name).ok_or_else(|| {
        err("pspin.allreduce.op", format!("unknown operator {op_name:?} (known: sum, min, max, prod)"))
    })?;
    let bytes = a.int("bytes", 0, 1 << 40)?;
    // `allreduces`: back-to-back allreduces of `bytes` each (a stream); the switch sees them as
    // one vector of allreduces × bytes, each host keeping one allreduce's blocks in flight unless
    // `window_blocks` says otherwise. Flare's policy picks the design by `bytes`.
    let allreduces = a.int("allreduces", 1, 1 << 20)?;
    if allreduces == 0 {
        return Err(err("pspin.allreduce.allreduces", "expected at least 1"));
    }
    let mut w = Workload::new(a.int("hosts", 0, 4096)? as u32, bytes.saturating_mul(allreduces));
    w.dtype = dtype;
    w.op = op;
    w.packet_bytes = a.int("packet_bytes", 1024, 9000)? as u32;
    w.link_gbps = a.num("link_gbps", 100.0)?;
    w.staggered = a.boolean("staggered", true)?;
    w.window_blocks = a.int("window_blocks", 0, u32::MAX as u64)? as u32;
    if allreduces > 1 {
        let per = bytes.div_ceil(w.packet_bytes.max(1) as u64) as u32;
        w.window_blocks = if w.window_blocks == 0 { per } else { w.window_blocks.min(per) };
    }
    w.jitter_ns = a.num("jitter_ns", 0.0)?;
    w.carry_data = a.boolean("data", false)?;
    w.seed = seed;
    w.data_seed = a.int("data_seed", 1, u64::MAX >> 1)?;
    let reproducible = a.boolean("reproducible", false)?;
    let design_requested = a.string("design", "flare")?;
    let simulate = a.boolean("simulate", true)?;
    // Sparse data (§7): `density` of non-zeros, `storage` hash (+ spill) or array.
    let density = a.num("density", 0.0)?;
    let sparse_keys: Vec<&str> =
        ["storage", "hash_slots", "spill_pairs"].into_iter().filter(|k| a.table.contains_key(*k)).collect();
    let ppp = (w.packet_bytes / 8).max(1) as u64;
    let storage_name_req = a.string("storage", "hash")?;
    let hash_slots = a.int("hash_slots", 4 * ppp, 1 << 24)?;
    let spill_pairs = a.int("spill_pairs", ppp, 1 << 24)?;
    a.done()?;
    if density == 0.0 {
        if let Some(k) = sparse_keys.first() {
            return Err(err(&format!("pspin.allreduce.{k}"), "is for sparse runs: set `density` (0 < density ≤ 1)"));
        }
    } else if !(density.is_finite() && density > 0.0 && density <= 1.0) {
        return Err(err("pspin.allreduce.density", format!("expected a fraction in (0, 1], got {density}")));
    }
    if w.hosts == 0 {
        return Err(err("pspin.allreduce.hosts", "missing: the number of children (ports) of the switch"));
    }
    w.validate()?;
    if density > 0.0 {
        if dtype != DataType::Int32 || !matches!(op, Operator::Sum) {
            return Err(err(
                "pspin.allreduce.dtype",
                "sparse runs aggregate int32 sums (pairs of a 4-byte index and a 4-byte value)",
            ));
        }
        if w.carry_data {
            return Err(err("pspin.allreduce.data", "sparse runs always carry their pairs; `data` is for dense runs"));
        }
        if reproducible {
            return Err(err(
                "pspin.allreduce.reproducible",
                "sparse runs are integer sums (reproducibility is for floating point)",
            ));
        }
        let storage = match storage_name_req.as_str() {
            "hash" => {
                if hash_slots == 0 || spill_pairs == 0 {
                    return Err(err(
                        if hash_slots == 0 { "pspin.allreduce.hash_slots" } else { "pspin.allreduce.spill_pairs" },
                        "must be at least 1",
                    ));
                }
                Storage::Hash { slots: hash_slots as u32, spill: spill_pairs as u32 }
            }
            "array" => Storage::Array,
            other => {
                return Err(err("pspin.allreduce.storage", format!("expected \"hash\" or \"array\", got {other:?}")))
            }
        };
        let design = match design_requested.as_str() {
            "flare" => Design::flare_policy(bytes, false),
            name => Design::from_name(name).ok_or_else(|| {
                err(
                    "pspin.allreduce.design",
                    format!("unknown design {name:?} for sparse data (known: single, multi-B, tree, flare)"),
                )
            })?,
        };
        if simulate && design != Design::SingleBuffer {
            return Err(err(
                "pspin.allreduce.design",
                format!("the simulated sparse handlers aggregate in a single buffer (the {} design is modelled only: simulate = false)", design.name()),
            ));
        }
        return Ok(PspinScenario {
            name,
            seed,
            switch,
            workload: w,
            design_requested,
            reproducible,
            handlers: Handlers::Sparse(design, density, storage),
            allreduces,
            simulate,
        });
    }
    let handlers = match design_requested.as_str() {
        "flare" => Handlers::Design(Design::flare_policy(bytes, reproducible)),
        "quantised-int8-sum" => {
            if dtype != DataType::Int8 || !matches!(op, Operator::Sum) {
                return Err(err(
                    "pspin.allreduce.dtype",
                    "design quantised-int8-sum aggregates int8 sums (dtype = \"int8\", op = \"sum\")",
                ));
            }
            w.header_scales = true;
            Handlers::QuantisedInt8Sum
        }
        name => match Design::from_name(name) {
            Some(d) if reproducible && d != Design::Tree => {
                return Err(err(
                    "pspin.allreduce.reproducible",
                    format!("only the tree design is reproducible, not {name:?}"),
                ))
            }
            Some(d) => Handlers::Design(d),
            None => {
                return Err(err(
                    "pspin.allreduce.design",
                    format!(
                        "unknown design {name:?} (known: single, multi-B for B in 2..=64, tree, flare, \
                         quantised-int8-sum)"
                    ),
                ))
            }
        },
    };
    Ok(PspinScenario {
        name,
        seed,
        switch,
        workload: w,
        design_requested,
        reproducible,
        handlers,
        allreduces,
        simulate,
    })
}
