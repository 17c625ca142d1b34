//! Bad input: every error names its line and says why, word for word.

use reducelab_goal::{check, parse_file, parse_str, simulate, GoalError, LogGpParams};

fn parse_err(text: &str) -> String {
    parse_str(text).expect_err("must not parse").to_string()
}

fn check_err(text: &str) -> String {
    let t = parse_str(text).expect("parses");
    check(&t).expect_err("must not check").to_string()
}

#[test]
fn unknown_ranks() {
    let text = "num_ranks 8\n".to_string() + &"\n".repeat(9) + "rank 3 {\nrecv 8b from 9 tag 0\n}\n";
    assert_eq!(parse_err(&text), "line 12: rank 3: recv from 9: no such rank (num_ranks 8)");
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: send 8b to 2\n}\n"),
        "line 3: rank 0: send to 2: no such rank (num_ranks 2)"
    );
    assert_eq!(parse_err("num_ranks 2\nrank 2 {\n}\n"), "line 2: rank 2: no such rank (num_ranks 2)");
    assert_eq!(parse_err("rank 0 {\n}\n"), "line 1: rank 0: no num_ranks before the first rank block");
    assert_eq!(
        parse_err("num_ranks 4\nrank 2 {\n}\nrank 1 {\n}\n"),
        "line 4: rank 1 after rank 2: rank blocks must come in increasing rank order, each once"
    );
    assert_eq!(
        parse_err("num_ranks 4\nrank 1 {\n}\nrank 1 {\n}\n"),
        "line 4: rank 1 after rank 1: rank blocks must come in increasing rank order, each once"
    );
    assert_eq!(parse_err("num_ranks 0\n"), "line 1: num_ranks 0: must be 1 … 16777216");
}

#[test]
fn numbers_that_do_not_fit() {
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nsend 99999999999999999999b to 1\n}\n"),
        "line 3: rank 0: size 99999999999999999999 does not fit in 64 bits"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nsend 8b to 1 tag 4294967295\n}\n"),
        "line 3: rank 0: send tag 4294967295 does not fit (tags are 0 … 4294967294)"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\ncalc 5 cpu 256\n}\n"),
        "line 3: rank 0: calc cpu 256 does not fit (0 … 255)"
    );
    assert_eq!(parse_err("num_ranks 99999999999\n"), "line 1: num_ranks 99999999999: must be 1 … 16777216");
}

#[test]
fn malformed_statements() {
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: send 8 to 1\n}\n"),
        "line 3: rank 0: send: expected 'b' after the size, found \"to\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: recv 8b to 1\n}\n"),
        "line 3: rank 0: recv: expected \"from\", found \"to\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: send 8b to 1 tag 1 tag 2\n}\n"),
        "line 3: rank 0: send: expected \"tag\", \"cpu\", \"nic\" or the end of the line (each once), found \"tag\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: send 8b to 1 tag -1\n}\n"),
        "line 3: rank 0: send tag -1: only a receive may take any tag"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: recv 8b from -2\n}\n"),
        "line 3: rank 0: recv from -2: the only negative value is -1 (any)"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nsend: calc 4\n}\n"),
        "line 3: rank 0: size: expected a number, found \":\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1 calc 4\n}\n"),
        "line 3: rank 0: after l1: expected ':', \"requires\" or \"irequires\", found \"calc\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: calc 4 nic 1\n}\n"),
        "line 3: rank 0: calc: expected \"cpu\" or the end of the line, found \"nic\""
    );
    assert_eq!(parse_err("num_ranks 2\nrank 0 {\nl1: calc 4 $\n}\n"), "line 3: rank 0: unexpected '$'");
    assert_eq!(parse_err("num_ranks 2\nl1: calc 4\n"), "line 2: an operation outside a rank block");
    assert_eq!(parse_err("num_ranks 2\n}\n"), "line 2: '}' outside a rank block");
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nrank 1 {\n"),
        "line 3: rank 0: rank 1: rank 0's block (line 2) is still open"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: calc 4\n"),
        "line 3: end of input inside rank 0's block (line 2): missing '}'"
    );
    assert_eq!(parse_err("num_ranks 2\n/* comment\n"), "line 2: end of input inside the /* comment opened on line 2");
    assert_eq!(parse_err("// nothing\n"), "line 1: no num_ranks: the input declares no ranks");
    assert_eq!(parse_err(""), "line 1: no num_ranks: the input declares no ranks");
}

#[test]
fn labels() {
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: calc 4\nl1: calc 5\n}\n"),
        "line 4: rank 0: label l1 already defined on line 3"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: calc 4\nl1 requires l9\n}\n"),
        "line 4: rank 0: l1 requires l9: no operation labelled l9 on rank 0"
    );
    // Labels are per rank: rank 1 cannot name rank 0's.
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nl1: calc 4\n}\nrank 1 {\nl2: calc 4\nl2 irequires l1\n}\n"),
        "line 7: rank 1: l2 irequires l1: no operation labelled l1 on rank 1"
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\nrank: calc 4\n}\n"),
        "line 3: rank 0: rank: expected a number, found \":\""
    );
    assert_eq!(
        parse_err("num_ranks 2\nrank 0 {\ncalc: calc 4\n}\n"),
        "line 3: rank 0: calc time: expected a number, found \":\""
    );
    // A label used before its definition is fine (txt2bin wants it defined first).
    assert!(parse_str("num_ranks 1\nrank 0 {\nl2 requires l1\nl1: calc 4\nl2: calc 5\n}\n").is_ok());
}

#[test]
fn cycles_name_rank_and_labels() {
    assert_eq!(
        check_err("num_ranks 2\nrank 0 {\n}\nrank 1 {\na: calc 1\nb: calc 2\nc: calc 3\nb requires a\nc requires b\nb irequires c\n}\n"),
        "line 6: rank 1: dependency cycle: b irequires c, c requires b"
    );
    assert_eq!(
        check_err("num_ranks 1\nrank 0 {\na: calc 1\na requires a\n}\n"),
        "line 3: rank 0: dependency cycle: a requires a"
    );
}

#[test]
fn unmatched_operations_name_rank_and_label() {
    assert_eq!(
        check_err("num_ranks 2\nrank 0 {\ns1: send 8b to 1 tag 5\ns2: send 8b to 1 tag 5\n}\nrank 1 {\nr1: recv 8b from 0 tag 5\n}\n"),
        "line 4: rank 0: send s2 to 1 tag 5: no matching recv (rank 1 posts 1 recv from 0 tag 5 for 2 sends)"
    );
    assert_eq!(
        check_err("num_ranks 2\nrank 0 {\ns1: send 8b to 1 tag 5\n}\nrank 1 {\nr1: recv 8b from 0 tag 6\n}\n"),
        "line 3: rank 0: send s1 to 1 tag 5: no matching recv (rank 1 posts 0 recv from 0 tag 5 for 1 sends)"
    );
    assert_eq!(
        check_err("num_ranks 2\nrank 0 {\n}\nrank 1 {\nr1: recv 8b from 0 tag 6\n}\n"),
        "line 5: rank 1: recv r1 from 0 tag 6: no matching send (rank 0 sends 0 message to 1 tag 6 for 1 recvs)"
    );
    assert_eq!(
        check_err("num_ranks 3\nrank 0 {\ns: send 8b to 2\n}\nrank 1 {\n}\nrank 2 {\na: recv 8b from -1\nb: recv 8b from -1 tag -1\n}\n"),
        "line 9: rank 2: recv b from -1 (any) tag -1 (any): rank 2 is sent 1 messages but posts 2 receives (some from any source or with any tag)"
    );
}

#[test]
fn time_that_overflows_64_bits_is_an_error() {
    let t = parse_str("num_ranks 1\nrank 0 {\na: calc 18446744073709551615\nb: calc 1\nb requires a\n}\n").unwrap();
    let e = simulate(&check(&t).unwrap(), &LogGpParams::default(), false).unwrap_err();
    assert_eq!(e.to_string(), "simulated time overflows 64 bits of nanoseconds (sizes × G or calc times too large)");
}

#[test]
fn a_deadlock_across_ranks_is_an_error_not_a_hang() {
    // Each rank waits for the other's message before sending its own.
    let text = "num_ranks 2\nrank 0 {\nr: recv 8b from 1\ns: send 8b to 1\ns requires r\n}\nrank 1 {\nr: recv 8b from 0\ns: send 8b to 0\ns requires r\n}\n";
    let t = parse_str(text).unwrap();
    let c = check(&t).unwrap();
    let e = simulate(&c, &LogGpParams::default(), false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3: rank 0: recv r from 1 tag 0: posted, but no message ever matched it (3 more operations never completed: a deadlock across ranks?)"
    );
    // Rendezvous head to head: both messages wait unexpected, nobody posts a receive.
    let text = "num_ranks 2\nrank 0 {\ns: send 100000b to 1\nr: recv 100000b from 1\nr requires s\n}\nrank 1 {\ns: send 100000b to 0\nr: recv 100000b from 0\nr requires s\n}\n";
    let t = parse_str(text).unwrap();
    let e = simulate(&check(&t).unwrap(), &LogGpParams::default(), false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3: rank 0: send s to 1 tag 0: its message was never received (3 more operations never completed: a deadlock across ranks?)"
    );
}

#[test]
fn file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("reducelab-goal-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.goal");
    std::fs::write(&f, "num_ranks 2\nrank 0 {\nl1: send 8b to 7\n}\n").unwrap();
    let e: GoalError = parse_file(&f).unwrap_err();
    assert_eq!(e.to_string(), format!("{}: line 3: rank 0: send to 7: no such rank (num_ranks 2)", f.display()));
    assert_eq!(e.line, 3);
    let e = parse_file(&dir.join("missing.goal")).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{}: cannot open: ", dir.join("missing.goal").display())), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
