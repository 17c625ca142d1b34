//! The MSCCL XML import: the inverse of the export over the registry (round trip: the checker
//! passes and the same blocks move between the same ranks in the same order), and its errors.

use reducelab_sched::algos::{build, Layout};
use reducelab_sched::msccl::MscclOptions;
use reducelab_sched::*;
use std::collections::BTreeMap;

/// Per (sender, receiver), per step with a message between them: the blocks received and
/// whether each is reduced (sorted). Merging transfers of a step does not change it.
type Flow = BTreeMap<(u32, u32), Vec<Vec<(u32, bool)>>>;

fn flows(s: &Schedule) -> Flow {
    let mut f: Flow = BTreeMap::new();
    for (b, prog) in s.programs.iter().enumerate() {
        for st in &prog.steps {
            let mut here: BTreeMap<u32, Vec<(u32, bool)>> = BTreeMap::new();
            for t in &st.recvs {
                let reduce = t.op != Some(RecvOp::Copy);
                here.entry(t.peer).or_default().extend(t.blocks.iter().map(|x| (x, reduce)));
            }
            for (a, mut v) in here {
                v.sort_unstable();
                f.entry((a, b as u32)).or_default().push(v);
            }
        }
    }
    f
}

/// Whether each of `imported`'s step sets is the union of consecutive sets of `original` (the
/// import may run in one step what the original spread over several, when nothing orders
/// them).
fn coarsens(imported: &Flow, original: &Flow) -> Result<(), String> {
    if imported.keys().ne(original.keys()) {
        return Err("different pairs of ranks exchange messages".into());
    }
    for (pair, steps) in imported {
        let mut orig = original[pair].iter();
        for set in steps {
            let mut union: Vec<(u32, bool)> = Vec::new();
            while union.len() < set.len() {
                let Some(o) = orig.next() else { return Err(format!("{pair:?}: more blocks imported")) };
                union.extend(o);
            }
            union.sort_unstable();
            if &union != set {
                return Err(format!("{pair:?}: imported step moves {set:?}, the original {union:?}"));
            }
        }
        if orig.next().is_some() {
            return Err(format!("{pair:?}: fewer blocks imported"));
        }
    }
    Ok(())
}

/// Exports `s`, imports it back, and checks the round trip; returns (original, imported) steps.
fn round_trip(s: &Schedule) -> (usize, usize) {
    let what = format!("{} {:?} p={}", s.algorithm, s.collective, s.ranks);
    let opts = MscclOptions { enforce_limits: false, ..MscclOptions::default() };
    let xml = to_msccl_xml(s, &opts).unwrap_or_else(|e| panic!("{what}: export: {e}"));
    let back = from_msccl_xml(&xml).unwrap_or_else(|e| panic!("{what}: import: {e}"));
    assert_eq!(back.algorithm, format!("msccl:{}", s.algorithm));
    assert_eq!((back.ranks, back.blocks, back.collective), (s.ranks, s.blocks, s.collective), "{what}");
    assert_eq!(back.block_owner, s.block_owner, "{what}");
    coarsens(&flows(&back), &flows(s)).unwrap_or_else(|e| panic!("{what}: {e}"));
    // Plans need sends and receives matched within steps (the flow backend runs them).
    Plan::from_schedule(&back).unwrap_or_else(|e| panic!("{what}: plan: {e}"));
    (s.num_steps(), back.num_steps())
}

fn collectives() -> [Collective; 3] {
    [Collective::Allreduce, Collective::ReduceScatter, Collective::Allgather]
}

#[test]
fn every_exportable_registry_schedule_round_trips() {
    let layouts: &[&[u32]] = &[&[2], &[3], &[4], &[5], &[6], &[8], &[12], &[4, 4], &[2, 4], &[3, 4], &[2, 2, 2]];
    let (mut n, mut same_steps) = (0, 0);
    for alg in registry::variant_names() {
        for dims in layouts {
            for c in collectives() {
                let Ok(s) = build(alg, c, &Layout::new(dims.to_vec()).unwrap()) else { continue };
                if to_msccl_xml(&s, &MscclOptions { enforce_limits: false, ..MscclOptions::default() }).is_err() {
                    continue;
                }
                let (a, b) = round_trip(&s);
                assert!(b <= a, "{alg} {dims:?} {c:?}: {b} steps from {a}");
                same_steps += usize::from(a == b);
                n += 1;
            }
        }
    }
    eprintln!("{n} schedules round-tripped, {same_steps} with the same number of steps");
    assert!(n >= 150, "only {n}");
}

/// xorshift64*.
struct Xs(u64);
impl Xs {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// Random (algorithm, rank count, collective), including non-powers of two and 2D layouts.
#[test]
fn random_registry_schedules_round_trip() {
    let names = registry::variant_names();
    let mut rng = Xs(0x5eed_0f_15cc1);
    let mut n = 0;
    for _ in 0..200 {
        let alg = names[rng.below(names.len() as u64) as usize];
        let p = 2 + rng.below(31) as u32;
        let layout = if rng.below(3) == 0 && p % 2 == 0 { Layout::new(vec![2, p / 2]).unwrap() } else { Layout::line(p) };
        let c = collectives()[rng.below(3) as usize];
        let Ok(s) = build(alg, c, &layout) else { continue };
        if to_msccl_xml(&s, &MscclOptions { enforce_limits: false, ..MscclOptions::default() }).is_err() {
            continue;
        }
        round_trip(&s);
        n += 1;
    }
    assert!(n >= 100, "only {n} of 200 draws built and exported");
}

/// Direct allreduce (every rank sends everything to every other in one step): the export
/// stages the receives in scratch, the import takes them back into place.
#[test]
fn staged_receives_round_trip() {
    for p in [2, 3, 5] {
        let mut s = Schedule::new(Collective::Allreduce, "direct", p, 3);
        for a in 0..p {
            for b in (0..p).filter(|&b| b != a) {
                s.exchange(0, a, b, None, None, Blocks::range(0, 3), RecvOp::ReduceIncomingFirst);
            }
        }
        assert_eq!(round_trip(&s), (1, 1));
    }
}
