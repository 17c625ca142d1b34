//! Scenario files with a `[pspin]` table: one PsPIN switch of Flare (seed 004 §3–6) aggregating
//! one allreduce from its children, with no network around it (docs/flare.md, "Scenario files").
//! Parsed here with the other scenario tables; run by `reducelab_sim::pspin_run`.

use reducelab_flare::pspin::designs::Design;
use reducelab_flare::pspin::{self, DataType, Operator, SwitchConfig, Workload};
use reducelab_flare::sparse::switch::Storage;

use crate::ScenarioError;

fn err(field: &str, reason: impl Into<String>) -> ScenarioError {
    ScenarioError { field: field.into(), reason: reason.into() }
}

/// `value` (or `default`) if it is at most `max`, else an error naming `field`.
fn at_most(field: &str, value: Option<u64>, default: u64, max: u64) -> Result<u64, ScenarioError> {
    match value {
        None => Ok(default),
        Some(v) if v <= max => Ok(v),
        Some(v) => Err(err(field, format!("expected an integer in 0..={max}, got {v}"))),
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
    resolve(&crate::parse(text)?, seed)
}

/// Validates the `[pspin]` scenario `file` (`seed` overrides the file's).
pub fn resolve(file: &crate::ScenarioFile, seed: Option<u64>) -> Result<PspinScenario, ScenarioError> {
    let Some(p) = &file.pspin else { return Err(err("pspin", "missing: this scenario has no [pspin] table")) };
    let a = &p.allreduce;
    let name = file.name.clone();
    let seed = match seed {
        Some(s) => s,
        None => at_most("seed", Some(file.seed), 1, u64::MAX >> 1)?,
    };
    let d = SwitchConfig::default();
    let c = d.costs;
    let u32max = u32::MAX as u64;
    let key = |k: &str| format!("pspin.{k}");
    let mut switch = SwitchConfig {
        clusters: at_most(&key("clusters"), p.clusters, d.clusters as u64, u32max)? as u32,
        hpus_per_cluster: at_most(&key("hpus_per_cluster"), p.hpus_per_cluster, d.hpus_per_cluster as u64, u32max)?
            as u32,
        clock_mhz: at_most(&key("clock_mhz"), p.clock_mhz, d.clock_mhz as u64, 1_000_000)? as u32,
        l1_bytes_per_cluster: at_most(
            &key("l1_bytes_per_cluster"),
            p.l1_bytes_per_cluster,
            d.l1_bytes_per_cluster,
            1 << 40,
        )?,
        l2_packet_bytes: at_most(&key("l2_packet_bytes"), p.l2_packet_bytes, d.l2_packet_bytes, 1 << 40)?,
        subset_cores: at_most(&key("subset_cores"), p.subset_cores, d.subset_cores as u64, u32max)? as u32,
        backpressure: false,
        costs: pspin::CostModel {
            cycles_per_vector_op: at_most(
                &key("cycles_per_vector_op"),
                p.cycles_per_vector_op,
                c.cycles_per_vector_op as u64,
                1 << 20,
            )? as u32,
            dma_cycles_per_kib: at_most(
                &key("dma_cycles_per_kib"),
                p.dma_cycles_per_kib,
                c.dma_cycles_per_kib as u64,
                1 << 20,
            )? as u32,
            remote_l1_factor: at_most(&key("remote_l1_factor"), p.remote_l1_factor, c.remote_l1_factor as u64, 1 << 20)?
                as u32,
            lock_cycles: at_most(&key("lock_cycles"), p.lock_cycles, c.lock_cycles as u64, 1 << 20)? as u32,
            handler_overhead_cycles: at_most(
                &key("handler_overhead_cycles"),
                p.handler_overhead_cycles,
                c.handler_overhead_cycles as u64,
                1 << 20,
            )? as u32,
        },
    };
    switch.backpressure = match p.l2_full.as_deref().unwrap_or("drop") {
        "drop" => false,
        "backpressure" => true,
        other => return Err(err("pspin.l2_full", format!("expected \"drop\" or \"backpressure\", got {other:?}"))),
    };
    switch.validate()?;

    let key = |k: &str| format!("pspin.allreduce.{k}");
    let dtype_name = a.dtype.clone().unwrap_or_else(|| "int32".into());
    let dtype = DataType::from_name(&dtype_name).ok_or_else(|| {
        err("pspin.allreduce.dtype", format!("unknown type {dtype_name:?} (known: int32, int16, int8, f32, f16)"))
    })?;
    let op_name = a.op.clone().unwrap_or_else(|| "sum".into());
    let op = Operator::from_name(&op_name).ok_or_else(|| {
        err("pspin.allreduce.op", format!("unknown operator {op_name:?} (known: sum, min, max, prod)"))
    })?;
    let bytes = at_most(&key("bytes"), a.bytes, 0, 1 << 40)?;
    // `allreduces`: back-to-back allreduces of `bytes` each (a stream); the switch sees them as
    // one vector of allreduces × bytes, each host keeping one allreduce's blocks in flight unless
    // `window_blocks` says otherwise. Flare's policy picks the design by `bytes`.
    let allreduces = at_most(&key("allreduces"), a.allreduces, 1, 1 << 20)?;
    if allreduces == 0 {
        return Err(err("pspin.allreduce.allreduces", "expected at least 1"));
    }
    let mut w = Workload::new(at_most(&key("hosts"), a.hosts, 0, 4096)? as u32, bytes.saturating_mul(allreduces));
    w.dtype = dtype;
    w.op = op;
    w.packet_bytes = at_most(&key("packet_bytes"), a.packet_bytes, 1024, 9000)? as u32;
    w.bandwidth_gbps = a.bandwidth_gbps.unwrap_or(100.0);
    w.staggered = a.staggered.unwrap_or(true);
    w.window_blocks = at_most(&key("window_blocks"), a.window_blocks, 0, u32max)? as u32;
    if allreduces > 1 {
        let per = bytes.div_ceil(w.packet_bytes.max(1) as u64) as u32;
        w.window_blocks = if w.window_blocks == 0 { per } else { w.window_blocks.min(per) };
    }
    w.jitter_ns = a.jitter_ns.unwrap_or(0.0);
    w.carry_data = a.data.unwrap_or(false);
    w.seed = seed;
    w.data_seed = at_most(&key("data_seed"), a.data_seed, 1, u64::MAX >> 1)?;
    let reproducible = a.reproducible.unwrap_or(false);
    let design_requested = a.design.clone().unwrap_or_else(|| "flare".into());
    let simulate = a.simulate.unwrap_or(true);
    // Sparse data (§7): `density` of non-zeros, `storage` hash (+ spill) or array.
    let density = a.density.unwrap_or(0.0);
    let sparse_keys: Vec<&str> = [
        ("storage", a.storage.is_some()),
        ("hash_slots", a.hash_slots.is_some()),
        ("spill_pairs", a.spill_pairs.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(k, _)| k)
    .collect();
    let ppp = (w.packet_bytes / 8).max(1) as u64;
    let storage_name_req = a.storage.clone().unwrap_or_else(|| "hash".into());
    let hash_slots = at_most(&key("hash_slots"), a.hash_slots, 4 * ppp, 1 << 24)?;
    let spill_pairs = at_most(&key("spill_pairs"), a.spill_pairs, ppp, 1 << 24)?;
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
