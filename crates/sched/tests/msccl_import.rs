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
    let mut rng = Xs(0x05ee_d0f1_5cc1);
    let mut n = 0;
    for _ in 0..200 {
        let alg = names[rng.below(names.len() as u64) as usize];
        let p = 2 + rng.below(31) as u32;
        let layout =
            if rng.below(3) == 0 && p % 2 == 0 { Layout::new(vec![2, p / 2]).unwrap() } else { Layout::line(p) };
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

/// A hand-written 2-rank allreduce of 2 chunks: each rank reduces the other's chunk, then
/// sends it back.
const TWO: &str = r#"<algo name="two" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1">
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrc" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="3" type="r" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;

#[test]
fn a_hand_written_program_imports() {
    let s = from_msccl_xml(TWO).unwrap();
    assert_eq!(s.algorithm, "msccl:two");
    assert_eq!(s.num_steps(), 2);
}

/// Replaces the `n`-th (from 0) occurrence of `from`.
fn nth(text: &str, n: usize, from: &str, to: &str) -> String {
    let at = text.match_indices(from).nth(n).unwrap_or_else(|| panic!("no {from}")).0;
    format!("{}{to}{}", &text[..at], &text[at + from.len()..])
}

#[test]
fn bad_programs_are_refused_with_the_line_and_the_reason() {
    let step0 = r#"<step s="0" type="s" srcbuf="i" srcoff="1""#;
    let cases: Vec<(String, &str)> = vec![
        (TWO.replace("</algo>\n", ""), "line 1: <algo> is not closed"),
        (TWO.replace("    </tb>\n  </gpu>\n  <gpu id=\"1\"", "  </gpu>\n  <gpu id=\"1\""), "line 8: </gpu> closes <tb> opened at line 3"),
        (TWO.replacen("cnt=\"1\"", "cnt=\"x\"", 1), "line 4: <step s=\"0\">: cnt=\"x\" is not an integer"),
        (TWO.replacen(" srcoff=\"1\"", "", 1), "line 4: <step s=\"0\">: missing attribute srcoff"),
        (TWO.replacen("type=\"rrc\"", "type=\"xyz\"", 1), "line 5: <step s=\"1\">: type \"xyz\" is not an MSCCL step type"),
        (TWO.replacen("send=\"1\"", "send=\"5\"", 1), "line 3: <tb id=\"0\">: send=\"5\" is not within -1..=1"),
        (TWO.replacen(step0, r#"<step s="0" type="s" srcbuf="i" srcoff="2""#, 1), "line 4: <step s=\"0\">: srcoff=\"2\" cnt=\"1\" is beyond the 2 chunks of buffer i"),
        (TWO.replacen("coll=\"allreduce\"", "coll=\"allsort\"", 1), "line 1: <algo>: coll=\"allsort\" is not a collective the IR has (allreduce, reducescatter, allgather, broadcast, reduce, alltoall)"),
        (TWO.replacen("coll=\"allreduce\"", "coll=\"alltoall\"", 1), "line 1: <algo>: inplace=\"1\": an in-place all-to-all overwrites a rank's outgoing chunks with incoming ones; the IR keeps every (sender, receiver) block apart, as MSCCL's out-of-place all-to-all does"),
        (TWO.replacen("inplace=\"1\"", "inplace=\"0\"", 1), "line 1: <algo>: inplace=\"0\": out-of-place programs are supported for alltoall only (the IR runs the other collectives in place on one vector)"),
        // A send no receive matches.
        (
            nth(TWO, 0, "    </tb>", "      <step s=\"4\" type=\"s\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"i\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n    </tb>"),
            "line 8: <step s=\"4\">: sends a message that gpu 1 never receives on chan=\"0\" (no matching receive)",
        ),
        // A receive no send matches.
        (
            nth(TWO, 0, "    </tb>", "      <step s=\"4\" type=\"r\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"i\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n    </tb>"),
            "line 8: <step s=\"4\">: deadlock: gpu 0 <tb id=\"0\"> waits here forever for a message from gpu 1 on chan=\"0\" (a dependency cycle, or a receive no send matches)",
        ),
        // Two threadblocks waiting for each other.
        (
            nth(
                &TWO.replacen(r#"cnt="1" depid="-1" deps="-1" hasdep="0"/>"#, r#"cnt="1" depid="1" deps="0" hasdep="1"/>"#, 1),
                0,
                "  </gpu>",
                "    <tb id=\"1\" send=\"-1\" recv=\"-1\" chan=\"0\">\n      <step s=\"0\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"0\" deps=\"0\" hasdep=\"1\"/>\n    </tb>\n  </gpu>",
            ),
            "line 4: <step s=\"0\">: deadlock: gpu 0 <tb id=\"0\"> waits here forever for step 0 of <tb id=\"1\"> (a dependency cycle, or a receive no send matches)",
        ),
        (
            TWO.replacen(r#"depid="-1" deps="-1" hasdep="0"/>"#, r#"depid="3" deps="0" hasdep="0"/>"#, 1),
            "line 4: <step s=\"0\">: depid=\"3\" deps=\"0\" names no step of this <gpu>",
        ),
        // A chunk received at another index.
        (
            nth(TWO, 0, r#"type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1""#, r#"type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="0""#),
            "line 7: <step s=\"3\">: puts chunk 1 sent by gpu 1 (line 14: <step s=\"2\">) at chunk 0; the IR keeps a block at its index",
        ),
        // Forgets rank 0's own contribution to chunk 0: the checker refuses it.
        (
            TWO.replacen(r#"type="rrc" srcbuf="i" srcoff="0""#, r#"type="r" srcbuf="i" srcoff="0""#, 1),
            "the program does not compute its Allreduce: rank 0: ends with block 0 missing contributions of ranks [0]",
        ),
    ];
    for (xml, want) in cases {
        let got = from_msccl_xml(&xml).map(|_| ()).unwrap_err();
        assert_eq!(got, want);
    }
}

/// An all-to-all (out of place, msccl-tools' `alltoall_allpairs` shape) imports for every rank
/// count and chunk factor as one step of p(p−1) messages and is proven by the checker: every
/// rank ends with every block sent to it. The same block map as the registry's all-to-all.
#[test]
fn an_out_of_place_all_to_all_imports_and_is_proven() {
    use reducelab_sched::msccl::allpairs_alltoall_xml;
    for p in 1..=9u32 {
        for c in 1..=3u32 {
            let s = from_msccl_xml(&allpairs_alltoall_xml(p, c)).unwrap_or_else(|e| panic!("p {p} c {c}: {e}"));
            assert_eq!(s.collective, Collective::Alltoall);
            assert_eq!((s.ranks, s.blocks), (p, p * p * c));
            assert_eq!(s.num_steps(), usize::from(p > 1));
            let msgs: usize = s.programs.iter().map(|pr| pr.steps.iter().map(|st| st.sends.len()).sum::<usize>()).sum();
            assert_eq!(msgs, (p * (p - 1)) as usize, "p {p} c {c}");
            // Rank a sends b exactly the blocks of the pair (a, b).
            for (a, pr) in s.programs.iter().enumerate() {
                for t in pr.steps.iter().flat_map(|st| &st.sends) {
                    let ids: Vec<u32> = t.blocks.iter().collect();
                    assert!(ids.iter().all(|&b| s.alltoall_pair(b) == (a as u32, t.peer)), "p {p} c {c}: {ids:?}");
                    assert_eq!(ids.len() as u32, c);
                }
            }
        }
    }
}

#[test]
fn all_to_all_programs_that_break_its_rules_are_refused() {
    use reducelab_sched::msccl::allpairs_alltoall_xml;
    let x = allpairs_alltoall_xml(3, 2);
    let own = r#"<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" hasdep="0"/>"#;
    assert!(x.contains(own));
    let cases: Vec<(String, &str)> = vec![
        (x.replacen(own, r#"<step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="-1" deps="-1" hasdep="0"/>"#, 1),
         "gpu 0 never copies its own input chunk 0 to output chunk 0 (an all-to-all's output holds the rank's own data too)"),
        (x.replacen(own, &own.replace(r#"dstoff="0""#, r#"dstoff="2""#), 1),
         "line 4: <step s=\"0\">: copies input chunks to another rank's place in the output; only a rank's own chunks are copied locally in an all-to-all"),
        // Rank 0 receives rank 1's chunks into rank 2's place in its output.
        (nth(&x, 0, r#"type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="2""#, r#"type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="4""#),
         "line 8: <step s=\"1\">: puts chunk 6 sent by gpu 1 (line 20: <step s=\"0\">) at chunk 12; the IR keeps a block at its index"),
        // An output run across two senders' chunks.
        (nth(&x, 0, r#"type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="2" cnt="2""#, r#"type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="3" cnt="2""#),
         "line 8: <step s=\"1\">: dst output chunks 3..5 hold the data of more than one sender (2 chunks each); the IR moves one sender's blocks at a time"),
    ];
    for (xml, want) in cases {
        assert_eq!(from_msccl_xml(&xml).map(|_| ()).unwrap_err(), want);
    }
}
