//! The algorithm registry: the one table of every collective algorithm name ReduceLab knows.
//!
//! Every front end reads this table and nothing else: the schedule builders and timing plans
//! ([`crate::algos::build`], [`crate::plan::plan`]), the variant choice by size
//! ([`crate::select`]), the cost model and its Table 2 rows ([`crate::model`]), the simulator's
//! scenario files and Swing runs (`crates/sim`), the C ABI and through it the MPI runtime
//! (`crates/capi`: `rl_algorithm_count`, `rl_algorithm_info`, `rl_algorithm_resolve`), and
//! Python and the CLI (`reducelab.algorithms()`, `reducelab model --list`). The table itself,
//! [`REGISTRY`], sits in `algos/mod.rs` next to the `mod` lines of the generators, so adding an
//! algorithm is its generator module plus one [`Algorithm`] entry there (docs/extending.md).
//!
//! # Kinds of names
//!
//! - [`Kind::Variant`]: builds a schedule (it has a [`Algorithm::build`]). The only names a
//!   [`Schedule`] carries.
//! - [`Kind::Family`]: a latency- and a bandwidth-optimal variant; [`resolve`] picks the one the
//!   α-β model ([`crate::select::choose_variant`]) finds cheaper for the vector size.
//! - [`Kind::Alias`]: another name of one variant (`rabenseifner`).
//! - [`Kind::Policy`]: a fixed size rule ([`Rule`]s, first match wins) over variants: `auto`,
//!   the MPI runtime's measured default (docs/mpi.md).
//!
//! [`resolve`] turns any name into the variant that runs; it is the only place where names are
//! resolved, in Rust and (through the C ABI) in C.

use crate::algos::{ring, Layout};
use crate::ir::{Collective, Schedule};
use crate::plan::Plan;

/// Builds the schedule of a variant for a collective on a layout.
pub type Builder = fn(Collective, &Layout) -> Result<Schedule, String>;
/// Builds the allreduce timing plan of a variant directly, without materialising its schedule.
pub type DirectPlan = fn(&Layout) -> Result<Plan, String>;

/// What kind of name an entry is (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Variant,
    Family,
    Alias,
    Policy,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Variant => "variant",
            Kind::Family => "family",
            Kind::Alias => "alias",
            Kind::Policy => "policy",
        }
    }
}

/// Which end of the size range a variant is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeClass {
    /// Few steps, the whole vector in each (small vectors).
    Latency,
    /// Each rank sends about `2n` bytes in total (large vectors).
    Bandwidth,
}

impl SizeClass {
    pub fn as_str(self) -> &'static str {
        match self {
            SizeClass::Latency => "latency",
            SizeClass::Bandwidth => "bandwidth",
        }
    }
}

/// Row of the Swing paper's Table 2 a variant corresponds to (closed forms in
/// [`crate::model::table2`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelRow {
    Ring,
    RecursiveDoublingLatency,
    RecursiveDoublingBandwidth,
    Bucket,
    SwingLatency,
    SwingBandwidth,
}

/// Closed-form per-step loads the variant choice uses ([`crate::select::closed_form`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostForm {
    Swing { bandwidth: bool },
    RecursiveDoubling { bandwidth: bool },
}

/// One rule of a [`Kind::Policy`]: vectors below `below_bytes` (of any collective, or of
/// allreduce only) run `variant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub below_bytes: u64,
    pub allreduce_only: bool,
    pub variant: &'static str,
}

/// One registry entry. Fields that do not apply to a kind are `None` / empty.
#[derive(Clone, Copy, Debug)]
pub struct Algorithm {
    pub name: &'static str,
    /// Family the name belongs to (the variant's stem: `swing`, `recursive-doubling`, `ring`, …).
    pub family: &'static str,
    pub kind: Kind,
    /// One line for `reducelab model --list`.
    pub summary: &'static str,
    /// Variant: the schedule generator.
    pub build: Option<Builder>,
    /// Variant: the direct allreduce plan, for the variants whose schedules are large.
    pub direct_plan: Option<DirectPlan>,
    /// Variant: latency- or bandwidth-optimal.
    pub size_class: Option<SizeClass>,
    /// Variant: its Table 2 row, if the Swing paper has one.
    pub model_row: Option<ModelRow>,
    /// Variant: how the model's Table 2 row relates to it, when they differ.
    pub model_note: &'static str,
    /// Variant: the closed form the variant choice uses, for family members.
    pub cost: Option<CostForm>,
    /// Variant: builds allreduce (every variant but the all-to-all ones).
    pub allreduce: bool,
    /// Variant: builds reduce-scatter and allgather.
    pub halves: bool,
    /// Variant: builds broadcast and reduce.
    pub rooted: bool,
    /// Variant: builds all-to-all.
    pub alltoall: bool,
    /// Variant: fewest layout dimensions of size ≥ 2 it builds on (2: needs a 2D torus).
    pub min_dims: u32,
    /// Variant: most ranks a schedule may have (schedules list every message: ring-like ones
    /// grow as p², the others as p·log p).
    pub max_ranks: u32,
    /// Variant: the checker proves its 1D schedules combine contributions in rank order, so it
    /// runs non-commutative operators (the MPI runtime uses it for them whatever was named).
    pub rank_ordered_1d: bool,
    /// Variant: what the MPI interposition library runs instead for reduce-scatter and
    /// allgather when this allreduce is named (it builds none, or its block owners do not
    /// follow MPI's layout).
    pub substitute: Option<&'static str>,
    /// Family: `(latency-optimal, bandwidth-optimal)` variants.
    pub variants: Option<(&'static str, &'static str)>,
    /// Alias: the variant it names.
    pub alias_of: Option<&'static str>,
    /// Policy: the rules (first match wins) and the variant for every other size.
    pub rules: &'static [Rule],
    pub otherwise: Option<&'static str>,
}

/// Most ranks of a ring-like schedule (`p²` transfers) and of any other schedule.
pub const MAX_RANKS_RING: u32 = 2048;
/// Most ranks of an all-to-all: its `p²` blocks make the checker's and a packet run's state
/// grow as `p³` (128 ranks: about 50 MB in the checker).
pub const MAX_RANKS_ALLTOALL: u32 = 128;
pub const MAX_RANKS: u32 = 16384;

/// A variant entry with the defaults: builds allreduce, reduce-scatter and allgather, up to
/// [`MAX_RANKS`] ranks, 1D or more, no direct plan, no model row.
pub const fn variant(
    name: &'static str,
    family: &'static str,
    build: Builder,
    size_class: SizeClass,
    summary: &'static str,
) -> Algorithm {
    Algorithm {
        name,
        family,
        kind: Kind::Variant,
        summary,
        build: Some(build),
        direct_plan: None,
        size_class: Some(size_class),
        model_row: None,
        model_note: "",
        cost: None,
        allreduce: true,
        halves: true,
        rooted: false,
        alltoall: false,
        min_dims: 1,
        max_ranks: MAX_RANKS,
        rank_ordered_1d: false,
        substitute: None,
        variants: None,
        alias_of: None,
        rules: &[],
        otherwise: None,
    }
}

/// A family / alias / policy entry (no builder).
pub const fn other(name: &'static str, family: &'static str, kind: Kind, summary: &'static str) -> Algorithm {
    Algorithm {
        kind,
        build: None,
        size_class: None,
        allreduce: false,
        halves: false,
        min_dims: 0,
        max_ranks: 0,
        ..variant(name, family, ring::ring, SizeClass::Bandwidth, summary)
    }
}

pub use crate::algos::REGISTRY;

/// Every entry, in registry order.
pub fn all() -> &'static [Algorithm] {
    REGISTRY
}

/// Every name, in registry order.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|a| a.name).collect()
}

/// The names that build schedules ([`Kind::Variant`]).
pub fn variant_names() -> Vec<&'static str> {
    REGISTRY.iter().filter(|a| a.kind == Kind::Variant).map(|a| a.name).collect()
}

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static Algorithm> {
    REGISTRY.iter().find(|a| a.name == name)
}

/// `unknown algorithm 'x' (known: …)`, every registry name listed.
pub fn unknown(name: &str) -> String {
    format!("unknown algorithm '{name}' (known: {})", names().join(", "))
}

/// The entry called `name`, or an error listing every known name.
pub fn lookup(name: &str) -> Result<&'static Algorithm, String> {
    find(name).ok_or_else(|| unknown(name))
}

/// The variant called `name`: an error listing every known name if there is none, and one
/// naming the variants if `name` is a family, alias or policy (those need a size to resolve:
/// see [`resolve`]).
pub fn variant_entry(name: &str) -> Result<&'static Algorithm, String> {
    let a = lookup(name)?;
    match a.kind {
        Kind::Variant => Ok(a),
        Kind::Alias => variant_entry(a.alias_of.expect("alias names a variant")),
        Kind::Family => {
            let (l, b) = a.variants.expect("family has variants");
            Err(format!("'{name}' picks its latency- or bandwidth-optimal variant by vector size: name the variant ({l}, {b}) or resolve it for a size"))
        }
        Kind::Policy => Err(format!(
            "'{name}' picks a variant by vector size ({}): name a variant or resolve it for a size",
            a.summary
        )),
    }
}

impl Algorithm {
    /// Whether this variant builds `collective`.
    pub fn supports(&self, collective: Collective) -> bool {
        self.kind == Kind::Variant
            && match collective {
                Collective::Allreduce => self.allreduce,
                Collective::ReduceScatter | Collective::Allgather => self.halves,
                Collective::Broadcast { .. } | Collective::Reduce { .. } => self.rooted,
                Collective::Alltoall => self.alltoall,
            }
    }

    /// The names ([`Collective::NAMES`], in that order) of the collectives the name runs: a
    /// variant's own, and for the other kinds those of any variant it resolves to.
    pub fn collectives(&self) -> Vec<&'static str> {
        let root = 0;
        let variants: Vec<&Algorithm> = match self.kind {
            Kind::Variant => vec![self],
            _ => self.resolves_to().into_iter().filter_map(find).collect(),
        };
        [
            Collective::Allreduce,
            Collective::ReduceScatter,
            Collective::Allgather,
            Collective::Broadcast { root },
            Collective::Reduce { root },
            Collective::Alltoall,
        ]
        .into_iter()
        .filter(|&c| variants.iter().any(|v| v.supports(c)))
        .map(Collective::name)
        .collect()
    }

    /// The variants a name may resolve to (itself for a variant).
    pub fn resolves_to(&self) -> Vec<&'static str> {
        match self.kind {
            Kind::Variant => vec![self.name],
            Kind::Alias => vec![self.alias_of.expect("alias")],
            Kind::Family => {
                let (l, b) = self.variants.expect("family");
                vec![l, b]
            }
            Kind::Policy => {
                let mut v: Vec<&'static str> = self.rules.iter().map(|r| r.variant).collect();
                v.extend(self.otherwise);
                v.dedup();
                v
            }
        }
    }
}

/// α-β parameters a family is resolved with: seconds per step, seconds per byte on a link
/// (`8 / link bits-per-second`), seconds per link of a path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    pub alpha_s: f64,
    pub beta_s_per_byte: f64,
    pub per_hop_s: f64,
}

impl Default for Costs {
    /// The defaults of `reducelab model`: α = 1 µs, 400 Gb/s links, no per-hop term.
    fn default() -> Costs {
        Costs { alpha_s: 1e-6, beta_s_per_byte: 8.0 / 400e9, per_hop_s: 0.0 }
    }
}

impl Costs {
    /// The costs a simulated network with links of `bandwidth_bps` and `latency_ps` resolves
    /// families with: α = 1 µs per step (the default of `reducelab model`), β of the link,
    /// the link latency per hop.
    pub fn for_links(bandwidth_bps: u64, latency_ps: u64) -> Costs {
        Costs {
            alpha_s: 1e-6,
            beta_s_per_byte: 8.0 / bandwidth_bps.max(1) as f64,
            per_hop_s: latency_ps as f64 * 1e-12,
        }
    }
}

/// Resolves any registry name to the variant that runs `collective` of `size_bytes` on
/// `layout`: a variant is itself, an alias its variant, a family the variant
/// [`crate::select::choose_variant`] picks with `costs` (the bandwidth-optimal one if the other
/// does not build `collective`), a policy the variant of its first matching rule. With
/// `substitute`, a variant named for an allreduce that has a [`Algorithm::substitute`] gives
/// way to it for reduce-scatter and allgather (the MPI interposition library's rule).
pub fn resolve(
    name: &str,
    collective: Collective,
    layout: &Layout,
    size_bytes: u64,
    costs: &Costs,
    substitute: bool,
) -> Result<&'static Algorithm, String> {
    let a = lookup(name)?;
    let v = match a.kind {
        Kind::Variant => a,
        Kind::Alias => variant_entry(name)?,
        Kind::Family => {
            let (_, bw) = a.variants.expect("family");
            let pick = crate::select::choose_variant(
                name,
                layout,
                size_bytes,
                costs.alpha_s,
                costs.beta_s_per_byte,
                costs.per_hop_s,
            )?;
            let pick = variant_entry(pick)?;
            if pick.supports(collective) {
                pick
            } else {
                variant_entry(bw)?
            }
        }
        Kind::Policy => {
            let allreduce = collective == Collective::Allreduce;
            let rule = a.rules.iter().find(|r| size_bytes < r.below_bytes && (allreduce || !r.allreduce_only));
            variant_entry(rule.map(|r| r.variant).or(a.otherwise).expect("policy has a default"))?
        }
    };
    if substitute && matches!(collective, Collective::ReduceScatter | Collective::Allgather) {
        if let Some(s) = v.substitute {
            return variant_entry(s);
        }
    }
    Ok(v)
}

/// Builds the schedule of the variant `name` (aliases accepted) for `collective` on `layout`.
pub fn build(name: &str, collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    let a = variant_entry(name)?;
    if !a.supports(collective) {
        let all = variants_for(collective);
        let kin: Vec<&str> = all.iter().copied().filter(|v| find(v).is_some_and(|v| v.family == a.family)).collect();
        return Err(format!(
            "{} builds {}, not {} (use {})",
            a.name,
            a.collectives().join(", "),
            collective.name(),
            if kin.is_empty() { all } else { kin }.join(", ")
        ));
    }
    (a.build.expect("variant has a builder"))(collective, layout)
}

/// The variants that build `collective`, in registry order.
pub fn variants_for(collective: Collective) -> Vec<&'static str> {
    REGISTRY.iter().filter(|a| a.supports(collective)).map(|a| a.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cross-reference of the table points at a variant, names are unique, and each kind
    /// has exactly the fields it needs.
    #[test]
    fn the_table_is_consistent() {
        let mut seen = std::collections::BTreeSet::new();
        for a in REGISTRY {
            assert!(seen.insert(a.name), "{} twice", a.name);
            assert!(!a.summary.is_empty() && !a.family.is_empty(), "{}", a.name);
            assert_eq!(a.build.is_some(), a.kind == Kind::Variant, "{}", a.name);
            assert_eq!(a.size_class.is_some(), a.kind == Kind::Variant, "{}", a.name);
            assert_eq!(a.variants.is_some(), a.kind == Kind::Family, "{}", a.name);
            assert_eq!(a.alias_of.is_some(), a.kind == Kind::Alias, "{}", a.name);
            assert_eq!(a.otherwise.is_some(), a.kind == Kind::Policy, "{}", a.name);
            for v in a.resolves_to().into_iter().chain(a.substitute) {
                assert_eq!(find(v).map(|x| x.kind), Some(Kind::Variant), "{} refers to {v}", a.name);
            }
            if let Some(s) = a.substitute {
                let s = find(s).unwrap();
                assert!(s.halves && s.family == a.family || s.name == "ring", "{} -> {}", a.name, s.name);
            }
            if let Some((l, b)) = a.variants {
                assert_eq!(find(l).unwrap().size_class, Some(SizeClass::Latency));
                assert_eq!(find(b).unwrap().size_class, Some(SizeClass::Bandwidth));
                assert!(
                    find(l).unwrap().cost.is_some() && find(b).unwrap().cost.is_some(),
                    "{}: the choice needs closed forms",
                    a.name
                );
            }
        }
        assert_eq!(
            REGISTRY.iter().filter(|a| a.rank_ordered_1d).count(),
            1,
            "the MPI runtime needs one rank-ordered variant"
        );
    }

    const EVERY_COLLECTIVE: [Collective; 8] = [
        Collective::Allreduce,
        Collective::ReduceScatter,
        Collective::Allgather,
        Collective::Broadcast { root: 0 },
        Collective::Broadcast { root: 5 },
        Collective::Reduce { root: 0 },
        Collective::Reduce { root: 11 },
        Collective::Alltoall,
    ];

    /// Every variant builds exactly the collectives its entry says (its generator is asked for
    /// every collective, the entry's flags bypassed), under its own name, and the checker
    /// proves each schedule.
    #[test]
    fn every_variant_builds_what_its_entry_says_under_its_own_name() {
        let layout = Layout::new(vec![4, 4]).unwrap();
        for a in REGISTRY.iter().filter(|a| a.kind == Kind::Variant) {
            for c in EVERY_COLLECTIVE {
                let built = (a.build.unwrap())(c, &layout);
                assert_eq!(built.is_ok(), a.supports(c), "{} {c:?}: {:?}", a.name, built.as_ref().err());
                if let Ok(s) = built {
                    assert_eq!((s.algorithm.as_str(), s.collective), (a.name, c));
                    crate::check(&s).unwrap_or_else(|e| panic!("{} {c:?}: {e}", a.name));
                }
            }
            assert!(!a.collectives().is_empty(), "{} builds nothing", a.name);
        }
        let e = build("pairwise", Collective::Allreduce, &layout).unwrap_err();
        assert!(e.starts_with("pairwise builds alltoall, not allreduce (use ring, "), "{e}");
        let e = build("swing-latency", Collective::Allgather, &layout).unwrap_err();
        assert!(e.ends_with("not allgather (use swing-bandwidth)"), "{e}");
        assert_eq!(variants_for(Collective::Alltoall), ["pairwise", "bruck"]);
    }

    #[test]
    fn unknown_names_list_every_known_name() {
        let e = lookup("warp-drive").unwrap_err();
        for n in names() {
            assert!(e.contains(n), "{e} lacks {n}");
        }
        assert!(build("swing", Collective::Allreduce, &Layout::line(4))
            .unwrap_err()
            .contains("swing-latency, swing-bandwidth"));
    }

    #[test]
    fn resolution_by_kind() {
        let l = Layout::line(8);
        let c = Costs { alpha_s: 2e-6, beta_s_per_byte: 1.0 / 4e9, per_hop_s: 0.0 };
        let r = |n: &str, coll: Collective, b: u64, sub: bool| resolve(n, coll, &l, b, &c, sub).unwrap().name;
        assert_eq!(r("ring", Collective::Allreduce, 8, false), "ring");
        assert_eq!(r("rabenseifner", Collective::Allreduce, 8, false), "recursive-doubling-bandwidth");
        assert_eq!(r("swing", Collective::Allreduce, 8, false), "swing-latency");
        assert_eq!(r("swing", Collective::Allreduce, 1 << 30, false), "swing-bandwidth");
        assert_eq!(r("swing", Collective::ReduceScatter, 8, false), "swing-bandwidth");
        assert_eq!(r("auto", Collective::Allreduce, (64 << 10) - 1, false), "recursive-doubling-latency");
        assert_eq!(r("auto", Collective::Allreduce, 64 << 10, false), "recursive-doubling-bandwidth");
        assert_eq!(r("auto", Collective::Allgather, 8, false), "recursive-doubling-bandwidth");
        assert_eq!(r("auto", Collective::Allreduce, 2 << 20, false), "ring");
        assert_eq!(r("swing-latency", Collective::ReduceScatter, 8, false), "swing-latency");
        assert_eq!(r("swing-latency", Collective::ReduceScatter, 8, true), "swing-bandwidth");
        assert_eq!(r("hamiltonian-rings", Collective::Allgather, 8, true), "ring");
        assert_eq!(r("hamiltonian-rings", Collective::Allreduce, 8, true), "hamiltonian-rings");
        assert!(resolve("nope", Collective::Allreduce, &l, 8, &c, false).unwrap_err().contains("known: ring,"));
    }
}
