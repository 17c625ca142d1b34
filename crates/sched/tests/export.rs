//! `reducelab schedule export`: JSON round-trips, MSCCL XML is well-formed with the expected
//! counts, GOAL parses under the LogGOPSim grammar with matched messages and defined labels —
//! for several algorithms and topologies, including non-powers-of-two.

use reducelab_sched::export::{export, schedule_for, to_goal, ExportOptions, Format, GoalOptions};
use reducelab_sched::registry::{self, Costs};
use reducelab_sched::{check, Collective, Schedule};
use std::collections::{BTreeMap, BTreeSet};

const CASES: &[(&str, &str)] = &[
    ("ring", "torus:5"),
    ("ring-bidirectional", "torus:6"),
    ("hamiltonian-rings", "torus:4x4"),
    ("recursive-doubling-latency", "torus:7"),
    ("recursive-doubling-bandwidth", "torus:3x4"),
    ("recursive-doubling-mirrored", "hyperx:3x3"),
    ("bucket", "torus:3x5"),
    ("swing-bandwidth", "torus:6x4"),
    ("swing-latency", "torus:5x3"),
    ("swing", "hammingmesh:2x2,2x2"),
    ("rabenseifner", "torus:12"),
    ("auto", "torus:9"),
    ("recursive-doubling", "torus:10"),
];

/// The cases above, plus every other registry name on a 4x4 torus and a 6-rank line (so a new
/// algorithm is exported and checked without editing this file).
fn cases() -> Vec<(&'static str, &'static str)> {
    let mut v = CASES.to_vec();
    for name in registry::names() {
        if !CASES.iter().any(|c| c.0 == name) {
            v.push((name, "torus:4x4"));
            v.push((name, "torus:6"));
        }
    }
    v
}

/// The collective a name is exported for: allreduce, or the first one a variant that builds no
/// allreduce builds (the all-to-all algorithms).
fn collective_of(name: &str) -> Collective {
    match registry::find(name) {
        Some(a) if a.kind == registry::Kind::Variant && !a.supports(Collective::Allreduce) => {
            Collective::parse(a.collectives()[0], 0).unwrap()
        }
        _ => Collective::Allreduce,
    }
}

#[test]
fn cases_cover_every_registry_name() {
    let covered: BTreeSet<&str> = cases().iter().map(|c| c.0).collect();
    let all: BTreeSet<&str> = registry::names().into_iter().collect();
    assert_eq!(covered, all);
}

#[test]
fn json_round_trips_and_passes_the_checker() {
    for (alg, topo) in cases() {
        let s = schedule_for(alg, topo, collective_of(alg), 1 << 20, &Costs::default()).unwrap();
        let text = export(&s, Format::Json, &ExportOptions::default()).unwrap();
        let back = Schedule::from_json(&text).unwrap();
        assert_eq!(back, s, "{alg} on {topo}");
        check(&back).unwrap_or_else(|e| panic!("{alg} on {topo}: {e}"));
        assert!(registry::find(&back.algorithm).is_some());
    }
}

/// A minimal well-formedness check of the exporter's XML (no text nodes, no declaration):
/// every tag closes in order; returns the count of each element name.
fn xml_elements(xml: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut counts = BTreeMap::new();
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        if !rest[..i].trim().is_empty() {
            return Err(format!("text outside tags: {:?}", &rest[..i]));
        }
        let j = rest[i..].find('>').ok_or("unclosed '<'")? + i;
        let tag = &rest[i + 1..j];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().ok_or_else(|| format!("</{name}> without an open tag"))?;
            if open != name {
                return Err(format!("</{name}> closes <{open}>"));
            }
        } else {
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body.split_whitespace().next().ok_or("empty tag")?.to_string();
            // attributes: name="value" pairs, every quote closed
            let attrs = body[name.len()..].trim();
            if attrs.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in <{name}>"));
            }
            *counts.entry(name.clone()).or_insert(0) += 1;
            if !self_closing {
                stack.push(name);
            }
        }
        rest = &rest[j + 1..];
    }
    if !rest.trim().is_empty() || !stack.is_empty() {
        return Err(format!("unclosed elements {stack:?}"));
    }
    Ok(counts)
}

#[test]
fn msccl_xml_is_well_formed_with_one_gpu_per_rank() {
    for (alg, topo) in cases() {
        let s = schedule_for(alg, topo, collective_of(alg), 1 << 20, &Costs::default()).unwrap();
        if s.collective == Collective::Alltoall {
            // MSCCL's all-to-all is out of place; the IR's is in place on one vector.
            let e = export(&s, Format::Msccl, &ExportOptions::default()).unwrap_err();
            assert!(e.contains("supports allreduce, reduce-scatter and allgather"), "{e}");
            continue;
        }
        let xml = export(&s, Format::Msccl, &ExportOptions::default()).unwrap();
        let counts = xml_elements(&xml).unwrap_or_else(|e| panic!("{alg} on {topo}: {e}"));
        assert_eq!(counts["algo"], 1);
        assert_eq!(counts["gpu"], s.ranks as usize, "{alg} on {topo}");
        assert!(
            xml.contains(&format!("ngpus=\"{}\"", s.ranks))
                && xml.contains(&format!("nchunksperloop=\"{}\"", s.blocks))
        );
        // Every transfer of the schedule is at least one send/receive step.
        let transfers: usize = s.programs.iter().flat_map(|p| &p.steps).map(|st| st.sends.len() + st.recvs.len()).sum();
        let sr =
            xml.matches("type=\"s\"").count() + xml.matches("type=\"r\"").count() + xml.matches("type=\"rrc\"").count();
        assert!(sr >= transfers, "{alg} on {topo}: {sr} send/recv steps for {transfers} transfers");
    }
}

/// One parsed GOAL operation.
#[derive(Debug)]
enum Op {
    Send { bytes: u64, peer: u32, tag: u32 },
    Recv { bytes: u64, peer: u32, tag: u32 },
    Calc,
}

/// Per rank, its operations by label.
type GoalRanks = BTreeMap<u32, BTreeMap<String, Op>>;

/// LogGOPSim's GOAL grammar (txt2bin): `num_ranks N`, `rank R { ... }`, lines
/// `LABEL: send Nb to R [tag T] [cpu C] [nic N]`, `LABEL: recv Nb from R [tag T] ...`,
/// `LABEL: calc N [cpu C]`, `LABEL requires LABEL`, `LABEL irequires LABEL`, `//` comments.
/// Returns per rank the operations by label; errors on any other line, a redefined label or
/// a dependency on an undefined one.
fn parse_goal(text: &str) -> Result<(u32, GoalRanks), String> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().next().unwrap().is_ascii_alphabetic()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let num = |s: &str| s.parse::<u64>().map_err(|_| format!("'{s}' is not an integer"));
    let mut ranks = None;
    let mut out: BTreeMap<u32, BTreeMap<String, Op>> = BTreeMap::new();
    let mut cur: Option<u32> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap().trim();
        let err = |m: String| format!("line {}: {m}: {raw:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        match (cur, w.as_slice()) {
            (None, ["num_ranks", v]) => ranks = Some(num(v).map_err(err)? as u32),
            (None, ["rank", r, "{"]) => {
                let r = num(r).map_err(err)? as u32;
                if out.insert(r, BTreeMap::new()).is_some() {
                    return Err(err(format!("rank {r} twice")));
                }
                cur = Some(r);
            }
            (Some(_), ["}"]) => cur = None,
            (Some(r), [a, dep @ ("requires" | "irequires"), b]) => {
                let ops = &out[&r];
                for l in [a, b] {
                    if !ops.contains_key(*l) {
                        return Err(err(format!("{dep} names undefined label {l}")));
                    }
                }
            }
            (Some(r), [label, rest @ ..]) if label.ends_with(':') && ident(&label[..label.len() - 1]) => {
                let op = match rest {
                    ["calc", v, ..] => {
                        num(v).map_err(err)?;
                        Op::Calc
                    }
                    [verb @ ("send" | "recv"), size, dir, peer, opt @ ..] => {
                        let bytes =
                            num(size.strip_suffix('b').ok_or_else(|| err("size without 'b'".into()))?).map_err(err)?;
                        if (*verb == "send") != (*dir == "to") || !matches!(*dir, "to" | "from") {
                            return Err(err(format!("{verb} with '{dir}'")));
                        }
                        let peer = num(peer).map_err(err)? as u32;
                        let tag = match opt {
                            ["tag", t, ..] => num(t).map_err(err)? as u32,
                            [] => 0,
                            _ => return Err(err("unexpected options".into())),
                        };
                        if *verb == "send" {
                            Op::Send { bytes, peer, tag }
                        } else {
                            Op::Recv { bytes, peer, tag }
                        }
                    }
                    _ => return Err(err("not an operation".into())),
                };
                let l = label[..label.len() - 1].to_string();
                if out.get_mut(&r).unwrap().insert(l.clone(), op).is_some() {
                    return Err(err(format!("label {l} defined twice")));
                }
            }
            _ => return Err(err("unexpected line".into())),
        }
    }
    if cur.is_some() {
        return Err("a rank block is not closed".into());
    }
    Ok((ranks.ok_or("no num_ranks")?, out))
}

#[test]
fn goal_parses_with_matched_messages_and_defined_labels() {
    for (alg, topo) in cases() {
        for size in [1u64 << 20, 12] {
            let s = schedule_for(alg, topo, collective_of(alg), size, &Costs::default()).unwrap();
            let g = to_goal(&s, &GoalOptions { size_bytes: size, elem_bytes: 4, calc_ns_per_byte: 0.25 }).unwrap();
            let (n, ranks) = parse_goal(&g).unwrap_or_else(|e| panic!("{alg} on {topo}: {e}"));
            assert_eq!(n, s.ranks);
            assert_eq!(ranks.len() as u32, s.ranks, "{alg} on {topo}");
            // Per (from, to, tag): the multiset of sizes sent equals the multiset received.
            let mut sent: BTreeMap<(u32, u32, u32), Vec<u64>> = BTreeMap::new();
            let mut recvd: BTreeMap<(u32, u32, u32), Vec<u64>> = BTreeMap::new();
            let mut total = 0u64;
            for (&r, ops) in &ranks {
                for op in ops.values() {
                    match *op {
                        Op::Send { bytes, peer, tag } => {
                            sent.entry((r, peer, tag)).or_default().push(bytes);
                            total += bytes;
                        }
                        Op::Recv { bytes, peer, tag } => recvd.entry((peer, r, tag)).or_default().push(bytes),
                        Op::Calc => {}
                    }
                }
            }
            for v in sent.values_mut().chain(recvd.values_mut()) {
                v.sort_unstable();
            }
            assert_eq!(sent, recvd, "{alg} on {topo}, {size} B");
            // The bytes are the schedule's.
            let want: u64 = s
                .programs
                .iter()
                .flat_map(|p| &p.steps)
                .flat_map(|st| &st.sends)
                .map(|t| s.blocks_bytes(&t.blocks, s.collective.vector_bytes(size, s.ranks), 4))
                .sum();
            assert_eq!(total, want, "{alg} on {topo}, {size} B");
        }
    }
}

#[test]
fn the_goal_checker_catches_broken_files() {
    let ok = "num_ranks 2\nrank 0 {\na: send 4b to 1 tag 0\n}\nrank 1 {\nb: recv 4b from 0 tag 0\n}\n";
    assert!(parse_goal(ok).is_ok());
    assert!(parse_goal(&ok.replace("}\nrank 1", "a requires zz\n}\nrank 1"))
        .unwrap_err()
        .contains("undefined label zz"));
    assert!(parse_goal(&ok.replace("4b to", "4 to")).unwrap_err().contains("size without 'b'"));
    assert!(parse_goal(&ok.replace("send 4b to", "send 4b from")).is_err());
}

#[test]
fn unknown_names_and_formats_are_clear_errors() {
    let e = schedule_for("warp", "torus:4", Collective::Allreduce, 64, &Costs::default()).unwrap_err();
    assert!(e.contains("unknown algorithm 'warp'") && e.contains("swing-bandwidth"), "{e}");
    assert!(schedule_for("ring", "ring:4", Collective::Allreduce, 64, &Costs::default())
        .unwrap_err()
        .contains("unknown kind"));
    assert!(Format::parse("dot").unwrap_err().contains("json, msccl, goal"));
}
