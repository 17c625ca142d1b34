use reducelab_sim::load_scenario_str;
const FT2: &str = "name = \"t\"\n[topology]\nkind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 2\nbandwidth_gbps = 100\nlatency_ns = 500\n";
const PERM: &str = "[[traffic]]\nkind = \"permutation\"\nbytes = 1000\n";
#[test]
fn probe() {
    let cases: Vec<String> = vec![
        format!("{FT2}{PERM}"),
        format!("bogus = 1\n{FT2}{PERM}"),
        format!("{FT2}bogus = 1\n{PERM}"),
        format!("{FT2}{PERM}bogus = 1\n"),
        format!("{FT2}[network]\nbogus = 1\n{PERM}"),
        format!("{FT2}[noise]\nbogus = 1\n{PERM}"),
        format!("{FT2}[run]\nbogus = 1\n{PERM}"),
        format!("{FT2}{PERM}[[faults]]\nkind=\"link\"\nat_ns=0\nbogus = 1\n"),
        format!("{FT2}[network]\nmtu_bytes = \"big\"\n{PERM}"),
        format!("{FT2}[network]\nmtu_bytes = -5\n{PERM}"),
        format!("{FT2}[network]\nmtu_bytes = 4096.5\n{PERM}"),
        format!("{FT2}[network]\nrouting = \"magic\"\n{PERM}"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"perm\"\n"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"permutation\"\nbytes = -1\n"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"permutation\"\nhosts = [0, -1]\n"),
        format!("{FT2}{PERM}[[faults]]\nkind=\"cable\"\nat_ns=0\n"),
        format!("name = \"t\"\n[topology]\nkind = \"torus\"\ndims = [4, \"x\"]\nbandwidth_gbps = 1\nlatency_ns=1\n{PERM}"),
        format!("name = \"t\"\n[topology]\nkind = \"ring\"\n{PERM}"),
        format!("name = \"t\"\n[topology\n"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"messages\"\nlist = [[0, 1, 2]]\n"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"permutation\"\nhosts = \"some\"\n"),
        format!("{FT2}{PERM}[[traffic]]\nkind = \"permutation\"\nhosts = 3\n"),
        format!("{PERM}"),
        format!("name = 3\n"),
        format!("{FT2}[network]\nloss_probability = nan\n{PERM}"),
        format!("{FT2}[network]\nloss_probability = \"x\"\n{PERM}"),
        format!("{FT2}seed = -1\n{PERM}"),
    ];
    for c in cases {
        match load_scenario_str(&c, None) {
            Ok(_) => println!("OK"),
            Err(e) => println!("field={:?} reason={:?}", e.field, e.reason),
        }
    }
}
