//! LogGOPSim's binary schedule form: read and written. (`scripts/loggopsim-compare.sh` checks
//! both against `txt2bin` and LogGOPSim themselves: the same bytes, the same times.)

mod common;

use common::{burst_trace, random_trace, Xs};
use reducelab_goal::binary::{is_binary, MAGIC};
use reducelab_goal::{check, parse_binary, parse_file, parse_str, simulate, write_binary, LogGpParams, Trace};

/// The text's trace without what the binary form does not keep (labels and lines), by a round
/// trip through the builder's view: every operation and every successor row, in order.
fn same_but_names(a: &Trace, b: &Trace) -> bool {
    a.num_ranks() == b.num_ranks()
        && a.num_ops() == b.num_ops()
        && (0..a.num_ops() as u32)
            .map(reducelab_goal::OpId)
            .all(|o| a.op(o) == b.op(o) && a.successors(o).collect::<Vec<_>>() == b.successors(o).collect::<Vec<_>>())
        && a.cpus() == b.cpus()
        && a.nics() == b.nics()
}

/// A small text trace with every field: any source and tag, cpu and nic, irequires, an empty rank.
const TEXT: &str = "num_ranks 3\nrank 0 {\nl1: calc 100\nl2: send 8b to 1 tag 3\nl3: recv 16b from 1 tag 4 nic 1\n\
l2 requires l1\nl3 irequires l2\n}\nrank 1 {\nl1: recv 8b from -1 tag -1 cpu 1\nl2: send 16b to 0 tag 4\nl2 requires l1\n}\n";

/// What `txt2bin -i TEXT` writes, byte for byte (checked against txt2bin by the script; here
/// the layout is spelled out so that a change of the writer shows).
#[test]
fn the_layout_is_txt2bins() {
    let t = parse_str(TEXT).unwrap();
    let b = write_binary(&t);
    assert!(is_binary(&b) && !is_binary(TEXT.as_bytes()));
    assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), MAGIC);
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 3);
    assert_eq!((b[12], b[13]), (1, 1), "highest cpu and nic index");
    // Rank 0's block: 4 + 4 + one independent op (4) + 3 records of 39 + 2 appendix entries.
    let start0 = u64::from_le_bytes(b[14..22].try_into().unwrap());
    let end0 = u64::from_le_bytes(b[22..30].try_into().unwrap());
    assert_eq!((start0, end0), (6 + 16 * 3, 6 + 16 * 3 + 8 + 4 + 3 * 39 + 2 * 4));
    // Rank 2 has no operations: 8 bytes of counts.
    let start2 = u64::from_le_bytes(b[46..54].try_into().unwrap());
    let end2 = u64::from_le_bytes(b[54..62].try_into().unwrap());
    assert_eq!(end2 - start2, 8);
    assert_eq!(end2 as usize + 8, b.len());
    let back = parse_binary(&b).unwrap();
    assert!(same_but_names(&t, &back));
    assert_eq!(back.describe(reducelab_goal::OpId(2)), "rank 0: recv #2");
}

/// Random traces (dependency graphs with calc, irequires, wildcards; bursts on two CPUs and NICs):
/// written and read back they are the same trace, and they simulate to the same times and
/// critical path as their text.
#[test]
fn random_traces_round_trip_and_simulate_alike() {
    let mut rng = Xs(0xB1_7E57);
    for case in 0..300 {
        let text = if case % 3 == 2 { burst_trace(&mut rng) } else { random_trace(&mut rng, case % 2 == 0).text() };
        let t = parse_str(&text).unwrap();
        let b = write_binary(&t);
        let back = parse_binary(&b).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(same_but_names(&t, &back), "{text}");
        assert_eq!(write_binary(&back), b, "writing is not stable:\n{text}");
        let p = LogGpParams::default();
        let (Ok(c1), Ok(c2)) = (check(&t), check(&back)) else {
            assert_eq!(check(&t).is_ok(), check(&back).is_ok(), "{text}");
            continue;
        };
        let (r1, r2) = (simulate(&c1, &p, true).unwrap(), simulate(&c2, &p, true).unwrap());
        assert_eq!((r1.rank_end_ns, r1.critical_path_ns), (r2.rank_end_ns, r2.critical_path_ns), "{text}");
    }
}

#[test]
fn a_file_is_read_in_either_form() {
    let dir = std::env::temp_dir().join(format!("reducelab-goal-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = parse_str(TEXT).unwrap();
    let (text, bin) = (dir.join("t.goal"), dir.join("t.bin"));
    std::fs::write(&text, TEXT).unwrap();
    std::fs::write(&bin, write_binary(&t)).unwrap();
    assert!(same_but_names(&parse_file(&text).unwrap(), &parse_file(&bin).unwrap()));
    let mut broken = write_binary(&t);
    broken.truncate(broken.len() - 3);
    std::fs::write(&bin, &broken).unwrap();
    let e = parse_file(&bin).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: ", bin.display())) && e.contains("rank 2"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Byte-level damage is an error naming the rank, the operation and the field; never a panic.
#[test]
fn damage_is_an_error_naming_what() {
    let t = parse_str(TEXT).unwrap();
    let good = write_binary(&t);
    let rec0 = 8 + 6 + 16 * 3 + 8 + 4; // rank 0's first record
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Damage, &str)> = vec![
        (Box::new(|b| b[..8].copy_from_slice(&2342u64.to_le_bytes())), "did not finish"),
        (Box::new(|b| b[..8].copy_from_slice(&4223u64.to_be_bytes())), "big-endian"),
        (Box::new(|b| b[..8].copy_from_slice(&7u64.to_le_bytes())), "cookie 7"),
        (Box::new(|b| b[8..12].copy_from_slice(&0u32.to_le_bytes())), "num_ranks 0"),
        (Box::new(|b| b.truncate(30)), "jump table"),
        (Box::new(|b| b[22..30].copy_from_slice(&u64::MAX.to_le_bytes())), "rank 0: block"),
        (Box::new(move |b| b[rec0 + 4] = 9), "rank 0: #0: type 9"),
        (Box::new(move |b| b[rec0 + 39 + 5..rec0 + 39 + 9].copy_from_slice(&5u32.to_le_bytes())), "#1: send to 5"),
        (Box::new(move |b| b[rec0 + 39 + 17..rec0 + 39 + 21].copy_from_slice(&u32::MAX.to_le_bytes())), "send tag -1"),
        (Box::new(move |b| b[rec0..rec0 + 4].copy_from_slice(&1u32.to_le_bytes())), "#0: its dependencies count is 1"),
        (Box::new(move |b| b[rec0 + 23..rec0 + 27].copy_from_slice(&9u32.to_le_bytes())), "outside the appendix"),
        (Box::new(move |b| b[rec0 - 4..rec0].copy_from_slice(&1u32.to_le_bytes())), "independent operation 0 is #1"),
    ];
    for (damage, says) in cases {
        let mut b = good.clone();
        damage(&mut b);
        let e = parse_binary(&b).unwrap_err();
        assert!(e.message.contains(says), "{says}: {e}");
        assert_eq!(e.line, 0);
    }
}

/// Every byte of a file flipped, one at a time, and every truncation: an error or a trace, no
/// panic; a trace read from damaged bytes still checks and simulates or says why.
#[test]
fn every_single_byte_damage_and_truncation_is_handled() {
    let mut rng = Xs(0xDA3A6E);
    let text = random_trace(&mut rng, false).text();
    let good = write_binary(&parse_str(&text).unwrap());
    for i in 0..good.len() {
        for v in [0u8, 1, 0xff, good[i] ^ 0x10] {
            let mut b = good.clone();
            b[i] = v;
            if let Ok(t) = parse_binary(&b) {
                if let Ok(c) = check(&t) {
                    let _ = simulate(&c, &LogGpParams::default(), false);
                }
            }
        }
        assert!(parse_binary(&good[..i]).is_err(), "truncated to {i} bytes");
    }
}
