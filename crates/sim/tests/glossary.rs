//! docs/glossary.md names every in-network protocol of the registries and every transport kind
//! the scenario schema accepts, and nothing else, in the rows that list them.

use reducelab_ina::pool::POOL_PROTOCOLS;
use reducelab_ina::PROTOCOLS;
use reducelab_sim::load_scenario_str;
use std::collections::BTreeSet;

fn glossary_row(starts: &str) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/glossary.md")).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("| {starts}"))).collect();
    assert_eq!(rows.len(), 1, "docs/glossary.md: one row starting {starts:?}, got {rows:?}");
    rows[0].to_string()
}

/// The quoted names after `key = ` in the row's second column: `protocol = "a" \| "b"` → {a, b}.
fn listed(row: &str, key: &str) -> BTreeSet<String> {
    let cell = row.split(" | ").nth(1).unwrap();
    let after = cell.split(&format!("{key} = ")).nth(1).unwrap_or_else(|| panic!("no `{key} = ` in {cell}"));
    let list = after.split('`').next().unwrap();
    list.split("\\|").map(|x| x.trim().trim_matches('"').to_string()).collect()
}

#[test]
fn the_glossary_lists_every_registered_protocol() {
    let ina: BTreeSet<String> = PROTOCOLS.iter().map(|p| p.name.to_string()).collect();
    assert_eq!(listed(&glossary_row("in-network protocol"), "protocol"), ina);
    let pool: BTreeSet<String> = POOL_PROTOCOLS.iter().map(|p| p.name.to_string()).collect();
    assert_eq!(listed(&glossary_row("shared-pool protocol"), "protocol"), pool);
}

#[test]
fn the_glossary_lists_every_transport_kind_of_the_schema() {
    let scenario = |kind: &str| {
        format!(
            "name = \"t\"\n[topology]\nkind = \"star\"\nhosts = 2\nbandwidth_gbps = 100\nlatency_ns = 100\n\
             [transport]\nkind = \"{kind}\"\n[[traffic]]\nkind = \"permutation\"\nbytes = 1000\n"
        )
    };
    // The schema's own list, from its error for an unknown kind.
    let err =
        load_scenario_str(&scenario("no_such_transport"), None).err().expect("an unknown kind is refused").to_string();
    let expected: BTreeSet<String> = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("{err}"))
        .split(',')
        .map(|x| x.trim().trim_matches(|c: char| c == '`' || c.is_whitespace() || c == '.').to_string())
        .filter(|x| !x.is_empty())
        .map(|x| x.split('`').next().unwrap().to_string())
        .collect();
    let glossary = listed(&glossary_row("end-to-end transport of messages"), "[transport] kind");
    assert_eq!(glossary, expected, "{err}");
}

#[test]
fn the_scenario_format_documents_every_key_of_every_traffic_kind() {
    use reducelab_sim::scenario::TrafficKind;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/scenario-format.md")).unwrap();
    let section = text.split("## `[[traffic]]`").nth(1).unwrap().split("\n## ").next().unwrap();
    for kind in TrafficKind::ALL {
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with(&format!("| `{}` |", kind.name()))).collect();
        assert_eq!(rows.len(), 1, "docs/scenario-format.md: one [[traffic]] row for {}, got {rows:?}", kind.name());
        for key in kind.keys() {
            let documented = rows[0].contains(&format!("`{key}`")) || rows[0].contains(&format!("`{key} = "));
            assert!(documented, "the {} row does not document `{key}`", kind.name());
        }
    }
}
