//! Malformed scenarios must be rejected with an error that names the offending field by its
//! exact dotted path and says why; every shipped scenario must load.

use reducelab_sim::{load_scenario_str, ScenarioError};
use std::path::{Path, PathBuf};

/// A valid 4-host two-level fat tree (2 leaves × 2 hosts, 2 spines): 8 nodes, 8 links.
const FT2: &str = r#"
[topology]
kind = "fat_tree_2"
leaves = 2
hosts_per_leaf = 2
spines = 2
bandwidth_gbps = 100
latency_ns = 500
"#;

/// A valid 4×4 torus (direct network: 16 hosts).
const TORUS: &str = r#"
[topology]
kind = "torus"
dims = [4, 4]
bandwidth_gbps = 100
latency_ns = 100
"#;

const PERM: &str = r#"
[[traffic]]
kind = "permutation"
bytes = 1000
"#;

/// `name = "t"` + the given sections.
fn sc(parts: &[&str]) -> String {
    let mut s = String::from("name = \"t\"\n");
    for p in parts {
        s.push_str(p);
        s.push('\n');
    }
    s
}

/// A topology table with the link parameters filled in.
fn topo(body: &str) -> String {
    format!("[topology]\nbandwidth_gbps = 100\nlatency_ns = 500\n{body}\n")
}

/// One [[traffic]] entry.
fn traffic(body: &str) -> String {
    format!("[[traffic]]\n{body}\n")
}

struct Case {
    what: &'static str,
    text: String,
    field: &'static str,
    reason: &'static str,
}

fn case(what: &'static str, text: impl Into<String>, field: &'static str, reason: &'static str) -> Case {
    Case { what, text: text.into(), field, reason }
}

fn cases() -> Vec<Case> {
    let ft3 = |extra: &str| topo(&format!("kind = \"fat_tree_3\"\nk = 4\n{extra}"));
    let star = |extra: &str| topo(&format!("kind = \"star\"\n{extra}"));
    vec![
        // ---- unknown keys -----------------------------------------------------------------
        case("unknown top-level key", format!("bogus = 1\n{}", sc(&[FT2, PERM])), "bogus", "unknown field `bogus`"),
        case("misspelled table", sc(&[FT2, "[netwrok]\nmtu_bytes = 4096", PERM]), "netwrok", "unknown field `netwrok`"),
        case("unknown key in [topology]", sc(&[FT2, "bogus = 1", PERM]), "topology.bogus", "unknown field `bogus`"),
        case("unknown key in [network]", sc(&[FT2, "[network]\nbogus = 1", PERM]), "network.bogus", "unknown field `bogus`"),
        case("unknown key in [[traffic]]", sc(&[FT2, PERM, "bogus = 1"]), "traffic[0].bogus", "unknown field `bogus`"),
        case(
            "unknown key in second [[traffic]]",
            sc(&[FT2, PERM, PERM, "sizes = 3"]),
            "traffic[1].sizes",
            "unknown field `sizes`",
        ),
        case(
            "unknown key in [[faults]]",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nlink = 0\nat_ns = 0\nbogus = 1"]),
            "faults[0].bogus",
            "unknown field `bogus`",
        ),
        case("unknown key in [noise]", sc(&[FT2, "[noise]\nbogus = 1", PERM]), "noise.bogus", "unknown field `bogus`"),
        case("unknown key in [run]", sc(&[FT2, "[run]\ntime_limit = 5", PERM]), "run.time_limit", "unknown field `time_limit`"),
        // ---- wrong types ------------------------------------------------------------------
        case("string for a number", sc(&[FT2, "[network]\nmtu_bytes = \"big\"", PERM]), "network.mtu_bytes", "invalid type: string"),
        case("negative for unsigned", sc(&[FT2, "[network]\nmtu_bytes = -5", PERM]), "network.mtu_bytes", "invalid value: integer `-5`"),
        case("float for int", sc(&[FT2, "[network]\nmtu_bytes = 4096.5", PERM]), "network.mtu_bytes", "invalid type: floating point"),
        case("integer too large for u32", sc(&[&topo("kind = \"star\"\nhosts = 99999999999"), PERM]), "topology.hosts", "expected u32"),
        case("string for a float", sc(&[&topo("kind = \"star\"\nhosts = 4").replace("100", "\"fast\""), PERM]), "topology.bandwidth_gbps", "invalid type: string"),
        case("negative bytes", sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = -1")]), "traffic[0].bytes", "invalid value: integer `-1`"),
        case("string inside dims", sc(&[&topo("kind = \"torus\"\ndims = [4, \"x\"]"), PERM]), "topology.dims[1]", "invalid type: string"),
        case("negative seed", format!("seed = -1\n{}", sc(&[FT2, PERM])), "seed", "invalid value: integer `-1`"),
        case("integer name", format!("name = 3\n{FT2}{PERM}"), "name", "invalid type: integer"),
        case("integer for an enum", sc(&[FT2, "[network]\nflow_control = 1", PERM]), "network.flow_control", "wanted string"),
        case(
            "negative host index",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = [0, -1]")]),
            "traffic[0].hosts[1]",
            "invalid value: integer `-1`",
        ),
        case(
            "number for hosts",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = 3")]),
            "traffic[0].hosts",
            "\"all\" or a list of host indices",
        ),
        case(
            "message entry with three numbers",
            sc(&[FT2, &traffic("kind = \"messages\"\nlist = [[0, 1, 2]]")]),
            "traffic[0].list[0]",
            "invalid length 3",
        ),
        // ---- unknown enum variants --------------------------------------------------------
        case("unknown topology kind", sc(&[&topo("kind = \"ring\""), PERM]), "topology.kind", "unknown variant `ring`"),
        case("unknown routing", sc(&[FT2, "[network]\nrouting = \"magic\"", PERM]), "network.routing", "unknown variant `magic`"),
        case("unknown flow control", sc(&[FT2, "[network]\nflow_control = \"xon_xoff\"", PERM]), "network.flow_control", "unknown variant `xon_xoff`"),
        case("spray with minimal routing", sc(&[FT2, "[network]\nrouting = \"minimal\"\nspray = \"packet\"", PERM]), "network.spray", "applies only with routing"),
        case("unknown spray", sc(&[FT2, "[network]\nspray = \"flowlet\"", PERM]), "network.spray", "unknown variant `flowlet`"),
        case("unknown traffic kind", sc(&[FT2, &traffic("kind = \"perm\"\nbytes = 1")]), "traffic[0].kind", "unknown variant `perm`"),
        case(
            "unknown fault kind",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"cable\"\nat_ns = 0"]),
            "faults[0].kind",
            "unknown variant `cable`",
        ),
        case("unknown hosts keyword", sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = \"some\"")]), "traffic[0].hosts", "got \"some\""),
        // ---- missing required fields ------------------------------------------------------
        case("missing name", format!("{FT2}{PERM}"), "name", "missing field `name`"),
        case("empty document", "", "name", "missing field `name`"),
        case("missing topology", sc(&[PERM]), "topology", "missing field `topology`"),
        case("a network table beside [pspin]", format!("name = \"p\"\n[pspin]\n[pspin.allreduce]\nhosts = 2\nbytes = 8\n{FT2}"), "topology", "one PsPIN switch with no network"),
        case("a renamed [pspin] key", "name = \"p\"\n[pspin]\n[pspin.allreduce]\nhosts = 2\nlink_gbps = 8\n".to_string(), "pspin.allreduce.link_gbps", "unknown field `link_gbps`"),
        case("empty name", format!("name = \"  \"\n{FT2}{PERM}"), "name", "must not be empty"),
        case("missing topology.kind", sc(&[&topo("hosts = 4"), PERM]), "topology.kind", "is required"),
        case(
            "missing bandwidth",
            sc(&["[topology]\nkind = \"star\"\nhosts = 4\nlatency_ns = 1", PERM]),
            "topology.bandwidth_gbps",
            "is required for kind = \"star\"",
        ),
        case(
            "missing latency",
            sc(&["[topology]\nkind = \"star\"\nhosts = 4\nbandwidth_gbps = 1", PERM]),
            "topology.latency_ns",
            "is required for kind = \"star\"",
        ),
        case("star without hosts", sc(&[&star(""), PERM]), "topology.hosts", "is required for kind = \"star\""),
        case(
            "fat_tree_2 without spines",
            sc(&[&topo("kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 2"), PERM]),
            "topology.spines",
            "is required for kind = \"fat_tree_2\"",
        ),
        case("fat_tree_3 without k", sc(&[&topo("kind = \"fat_tree_3\""), PERM]), "topology.k", "is required for kind = \"fat_tree_3\""),
        case("torus without dims", sc(&[&topo("kind = \"torus\""), PERM]), "topology.dims", "is required for kind = \"torus\""),
        case("hyperx without dims", sc(&[&topo("kind = \"hyperx\""), PERM]), "topology.dims", "is required for kind = \"hyperx\""),
        case(
            "hammingmesh without grid",
            sc(&[&topo("kind = \"hammingmesh\"\nboard = [2, 2]"), PERM]),
            "topology.grid",
            "is required for kind = \"hammingmesh\"",
        ),
        case(
            "dragonfly without global_per_router",
            sc(&[&topo("kind = \"dragonfly\"\ngroups = 3\nrouters_per_group = 2\nhosts_per_router = 2"), PERM]),
            "topology.global_per_router",
            "is required for kind = \"dragonfly\"",
        ),
        case("traffic without kind", sc(&[FT2, &traffic("bytes = 1")]), "traffic[0].kind", "is required"),
        case("permutation without bytes", sc(&[FT2, &traffic("kind = \"permutation\"")]), "traffic[0].bytes", "is required for kind = \"permutation\""),
        case("incast without receiver", sc(&[FT2, &traffic("kind = \"incast\"\nbytes = 1")]), "traffic[0].receiver", "is required for kind = \"incast\""),
        case("messages without list", sc(&[FT2, &traffic("kind = \"messages\"")]), "traffic[0].list", "is required for kind = \"messages\""),
        case("fault without at_ns", sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nlink = 0"]), "faults[0].at_ns", "is required for kind = \"link\""),
        case("fault without kind", sc(&[FT2, PERM, "[[faults]]\nlink = 0\nat_ns = 0"]), "faults[0].kind", "missing field `kind`"),
        case("loss fault without probability", sc(&[FT2, PERM, "[[faults]]\nkind = \"loss\"\nlink = 0"]), "faults[0].probability", "is required for kind = \"loss\""),
        case("loss fault probability above 1", sc(&[FT2, PERM, "[[faults]]\nkind = \"loss\"\nlink = 0\nprobability = 1.5"]), "faults[0].probability", "within [0, 1]"),
        case("loss fault with at_ns", sc(&[FT2, PERM, "[[faults]]\nkind = \"loss\"\nlink = 0\nprobability = 0.1\nat_ns = 3"]), "faults[0].at_ns", "is not used by kind = \"loss\""),
        case("link fault with probability", sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nlink = 0\nat_ns = 0\nprobability = 0.5"]), "faults[0].probability", "is not used"),
        case("collective without algorithm", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024")]), "traffic[0].algorithm", "is required for kind = \"collective\""),
        case("collective unknown algorithm", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"nope\"")]), "traffic[0].algorithm", "unknown algorithm"),
        case("collective root out of range", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"binomial\"\ncollective = \"broadcast\"\nroot = 16\nhosts = [0, 1, 2, 3]")]), "traffic[0].root", "16 is not a rank: 4 hosts take part"),
        case("collective root of an allreduce", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"ring\"\nroot = 1")]), "traffic[0].root", "applies to broadcast and reduce, not allreduce"),
        case("collective alltoall by ring", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"ring\"\ncollective = \"alltoall\"")]), "traffic[0].algorithm", "ring builds allreduce, reduce_scatter, allgather, not alltoall (use pairwise, bruck)"),
        case("collective unknown collective", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"ring\"\ncollective = \"bcast\"")]), "traffic[0].collective", "must be one of allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, got \"bcast\""),
        case("collective dims do not match hosts", sc(&[FT2, &traffic("kind = \"collective\"\nbytes = 1024\nalgorithm = \"ring\"\ndims = [3, 3]")]), "traffic[0].dims", "ranks but"),
        case("collective parameter on permutation", sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1024\nalgorithm = \"ring\"")]), "traffic[0].algorithm", "is not a parameter of kind = \"permutation\""),
        case("link fault without link", sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nat_ns = 0"]), "faults[0].link", "is required"),
        // ---- parameters the chosen kind does not use ---------------------------------------
        case("dims on fat_tree_3", sc(&[&ft3("dims = [4, 4]"), PERM]), "topology.dims", "is not a parameter of kind = \"fat_tree_3\""),
        case("k on star", sc(&[&star("hosts = 4\nk = 4"), PERM]), "topology.k", "is not a parameter of kind = \"star\""),
        case(
            "host links on a torus",
            sc(&[&topo("kind = \"torus\"\ndims = [4, 4]\nhost_latency_ns = 5"), PERM]),
            "topology.host_latency_ns",
            "direct network",
        ),
        case(
            "inflight on a permutation",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\ninflight = 2")]),
            "traffic[0].inflight",
            "is not a parameter of kind = \"permutation\"",
        ),
        case(
            "node on a link fault",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nlink = 0\nnode = 1\nat_ns = 0"]),
            "faults[0].node",
            "is not used by kind = \"link\"",
        ),
        // ---- impossible topologies --------------------------------------------------------
        case("odd k for fat_tree_3", sc(&[&topo("kind = \"fat_tree_3\"\nk = 5"), PERM]), "topology.k", "even"),
        case("torus dimension of size 1", sc(&[&topo("kind = \"torus\"\ndims = [4, 1]"), PERM]), "topology.dims[1]", "size ≥ 2"),
        case("torus without dimensions", sc(&[&topo("kind = \"torus\"\ndims = []"), PERM]), "topology.dims", "at least one dimension"),
        case("torus too large", sc(&[&topo("kind = \"torus\"\ndims = [4096, 4096]"), PERM]), "topology.dims", "more than the limit"),
        case(
            "dragonfly with too many groups",
            sc(&[&topo("kind = \"dragonfly\"\ngroups = 10\nrouters_per_group = 2\nhosts_per_router = 2\nglobal_per_router = 2"), PERM]),
            "topology.groups",
            "global ports",
        ),
        case(
            "fat_tree_2 exceeding radix",
            sc(&[&topo("kind = \"fat_tree_2\"\nleaves = 2\nhosts_per_leaf = 8\nspines = 8\nradix = 8"), PERM]),
            "topology.radix",
            "radix is 8",
        ),
        case(
            "hammingmesh board with 3 entries",
            sc(&[&topo("kind = \"hammingmesh\"\nboard = [2, 2, 2]\ngrid = [2, 2]"), PERM]),
            "topology.board",
            "two entries",
        ),
        case(
            "hammingmesh board of width 0",
            sc(&[&topo("kind = \"hammingmesh\"\nboard = [0, 2]\ngrid = [2, 2]"), PERM]),
            "topology.board[0]",
            "at least 1",
        ),
        case("hyperx with billions of links", sc(&[&topo("kind = \"hyperx\"\ndims = [2048, 2048]"), PERM]), "topology.dims", "links, more than the limit"),
        case(
            "dragonfly router with too many ports",
            sc(&[&topo("kind = \"dragonfly\"\ngroups = 3\nrouters_per_group = 1\nhosts_per_router = 1\nglobal_per_router = 70000"), PERM]),
            "topology.global_per_router",
            "more than 65535",
        ),
        case("star with no hosts", sc(&[&star("hosts = 0"), PERM]), "topology.hosts", "at least 1"),
        case("zero bandwidth", sc(&[&topo("kind = \"star\"\nhosts = 4").replace("bandwidth_gbps = 100", "bandwidth_gbps = 0"), PERM]), "topology.bandwidth_gbps", "positive"),
        case(
            "bandwidth in b/s instead of Gb/s",
            sc(&[&topo("kind = \"star\"\nhosts = 4").replace("bandwidth_gbps = 100", "bandwidth_gbps = 100e9"), PERM]),
            "topology.bandwidth_gbps",
            "the unit is Gb/s",
        ),
        case("negative latency", sc(&[&topo("kind = \"star\"\nhosts = 4").replace("latency_ns = 500", "latency_ns = -1"), PERM]), "topology.latency_ns", "non-negative"),
        // ---- network constraints ----------------------------------------------------------
        case("header_bytes == mtu", sc(&[FT2, "[network]\nmtu_bytes = 4096\nheader_bytes = 4096", PERM]), "network.header_bytes", "smaller than mtu_bytes"),
        case("header_bytes > mtu", sc(&[FT2, "[network]\nmtu_bytes = 1024\nheader_bytes = 2000", PERM]), "network.header_bytes", "smaller than mtu_bytes"),
        case(
            "buffer smaller than an MTU with credits",
            sc(&[FT2, "[network]\nflow_control = \"credit\"\nbuffer_bytes = 1000", PERM]),
            "network.buffer_bytes",
            "at least one MTU",
        ),
        case("zero buffer with drop_tail", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\nbuffer_bytes = 0", PERM]), "network.buffer_bytes", "> 0"),
        case("mtu too small", sc(&[FT2, "[network]\nmtu_bytes = 32\nheader_bytes = 8", PERM]), "network.mtu_bytes", "64..=65536"),
        case("loss_probability > 1", sc(&[FT2, "[network]\nloss_probability = 1.5", PERM]), "network.loss_probability", "within [0, 1]"),
        case("loss_probability NaN", sc(&[FT2, "[network]\nloss_probability = nan", PERM]), "network.loss_probability", "within [0, 1]"),
        case("noise.probability < 0", sc(&[FT2, "[noise]\nprobability = -0.1", PERM]), "noise.probability", "within [0, 1]"),
        case("duplicate_probability > 1", sc(&[FT2, "[network]\nduplicate_probability = 2", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.duplicate_probability", "within [0, 1]"),
        case("reorder_probability NaN", sc(&[FT2, "[network]\nreorder_probability = nan\nreorder_delay_ns = 100", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.reorder_probability", "within [0, 1]"),
        case("reordering without a delay", sc(&[FT2, "[network]\nreorder_probability = 0.1", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.reorder_delay_ns", "needed with"),
        case("a reordering delay without reordering", sc(&[FT2, "[network]\nreorder_delay_ns = 100", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.reorder_delay_ns", "applies only"),
        case("a zero reordering delay", sc(&[FT2, "[network]\nreorder_probability = 0.1\nreorder_delay_ns = 0", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.reorder_delay_ns", "must be > 0"),
        case("duplication without protocol packets", sc(&[FT2, "[network]\nduplicate_probability = 0.1", PERM]), "network.duplicate_probability", "protocol packets only"),
        case("reordering without protocol packets", sc(&[FT2, "[network]\nreorder_probability = 0.1\nreorder_delay_ns = 100", PERM]), "network.reorder_probability", "protocol packets only"),
        case("duplication with input buffers", sc(&[FT2, "[network]\nduplicate_probability = 0.1\nrouter = \"input_buffered\"", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "network.duplicate_probability", "input_buffered"),
        case("infinite noise delay", sc(&[FT2, "[noise]\nprobability = 0.1\ndelay_ns = inf", PERM]), "noise.delay_ns", "non-negative"),
        case("negative switch latency", sc(&[FT2, "[network]\nswitch_latency_ns = -3", PERM]), "network.switch_latency_ns", "non-negative"),
        case("ecmp on a lossless torus", sc(&[TORUS, "[network]\nrouting = \"ecmp\"", PERM]), "network.routing", "not deadlock-free"),
        case("canary on a lossless torus", sc(&[TORUS, "[network]\nrouting = \"canary\"", PERM]), "network.routing", "not deadlock-free"),
        // ---- PFC ------------------------------------------------------------------------------
        case("pfc key without pfc", sc(&[FT2, "[network]\npfc_xoff_bytes = 8192", PERM]), "network.pfc_xoff_bytes", "only with network.flow_control = \"pfc\""),
        case("pfc xon without pfc", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\npfc_xon_bytes = 0", PERM]), "network.pfc_xon_bytes", "only with"),
        case("pfc headroom without pfc", sc(&[FT2, "[network]\npfc_headroom_bytes = 50000", PERM]), "network.pfc_headroom_bytes", "only with"),
        case(
            "pfc buffer below headroom + xoff",
            sc(&[FT2, "[network]\nflow_control = \"pfc\"\nbuffer_bytes = 20000", PERM]),
            "network.buffer_bytes",
            "cannot hold the PFC headroom",
        ),
        case(
            "pfc xoff too big for the buffer",
            sc(&[FT2, "[network]\nflow_control = \"pfc\"\nbuffer_bytes = 65536\npfc_xoff_bytes = 60000", PERM]),
            "network.buffer_bytes",
            "plus XOFF (60000)",
        ),
        case("pfc headroom below the link's", sc(&[FT2, "[network]\nflow_control = \"pfc\"\npfc_headroom_bytes = 4096", PERM]), "network.pfc_headroom_bytes", "the buffer could overflow"),
        case("pfc xoff below an MTU", sc(&[FT2, "[network]\nflow_control = \"pfc\"\npfc_xoff_bytes = 100", PERM]), "network.pfc_xoff_bytes", "at least one MTU"),
        case("pfc xon above xoff", sc(&[FT2, "[network]\nflow_control = \"pfc\"\npfc_xoff_bytes = 8192\npfc_xon_bytes = 9000", PERM]), "network.pfc_xon_bytes", "must not exceed XOFF"),
        case("pfc negative xoff", sc(&[FT2, "[network]\nflow_control = \"pfc\"\npfc_xoff_bytes = -1", PERM]), "network.pfc_xoff_bytes", "invalid value"),
        case("pfc with duato on a torus", sc(&[TORUS, "[network]\nflow_control = \"pfc\"\nrouting = \"adaptive\"", PERM]), "network.routing", "Duato"),
        case("pfc with ecmp on a torus", sc(&[TORUS, "[network]\nflow_control = \"pfc\"\nrouting = \"ecmp\"", PERM]), "network.routing", "not deadlock-free"),
        case("ndp on pfc", sc(&[FT2, "[network]\nflow_control = \"pfc\"", "[transport]\nkind = \"ndp\"", PERM]), "transport.kind", "needs network.flow_control = \"drop_tail\""),
        case(
            "input_buffered with pfc",
            sc(&[FT2, "[network]\nflow_control = \"pfc\"\nrouter = \"input_buffered\"", PERM]),
            "network.router",
            "needs flow_control = \"credit\"",
        ),
        // ---- traffic ----------------------------------------------------------------------
        case(
            "host out of range",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = [0, 1, 2, 7]")]),
            "traffic[0].hosts[3]",
            "host 7 does not exist",
        ),
        case(
            "duplicate host",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = [0, 1, 1]")]),
            "traffic[0].hosts[2]",
            "listed twice",
        ),
        case(
            "incast receiver among senders",
            sc(&[FT2, &traffic("kind = \"incast\"\nbytes = 1\nreceiver = 2\nsenders = [0, 2]")]),
            "traffic[0].senders[1]",
            "receiver cannot be a sender",
        ),
        case(
            "incast receiver out of range",
            sc(&[FT2, &traffic("kind = \"incast\"\nbytes = 1\nreceiver = 4")]),
            "traffic[0].receiver",
            "host 4 does not exist",
        ),
        case(
            "permutation with one host",
            sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nhosts = [3]")]),
            "traffic[0].hosts",
            "at least two hosts",
        ),
        case(
            "background only without a time limit",
            sc(&[FT2, &traffic("kind = \"random_uniform\"\nbytes = 1000")]),
            "run.time_limit_us",
            "background",
        ),
        case("no traffic at all", sc(&[FT2]), "traffic", "at least one [[traffic]]"),
        case(
            "message to a missing host",
            sc(&[FT2, &traffic("kind = \"messages\"\nlist = [[0, 1, 10, 0], [1, 9, 10, 0]]")]),
            "traffic[0].list[1]",
            "host 9 does not exist",
        ),
        case("empty message list", sc(&[FT2, &traffic("kind = \"messages\"\nlist = []")]), "traffic[0].list", "must not be empty"),
        case(
            "zero inflight",
            sc(&[FT2, PERM, &traffic("kind = \"random_uniform\"\nbytes = 1000\ninflight = 0")]),
            "traffic[1].inflight",
            "within 1..=1024",
        ),
        case(
            "empty background messages",
            sc(&[FT2, PERM, &traffic("kind = \"random_uniform\"\nbytes = 0")]),
            "traffic[1].bytes",
            "at least one byte",
        ),
        case("message over 1 TiB", sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 2000000000000")]), "traffic[0].bytes", "more than 1 TiB"),
        case("negative start", sc(&[FT2, &traffic("kind = \"permutation\"\nbytes = 1\nstart_ns = -5")]), "traffic[0].start_ns", "non-negative"),
        case("zero time limit", sc(&[FT2, PERM, "[run]\ntime_limit_us = 0"]), "run.time_limit_us", "positive"),
        // ---- faults -----------------------------------------------------------------------
        case(
            "link fault out of range",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"link\"\nlink = 8\nat_ns = 0"]),
            "faults[0].link",
            "link 8 does not exist (the topology has 8 links)",
        ),
        case(
            "node fault out of range",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"node\"\nnode = 8\nat_ns = 0"]),
            "faults[0].node",
            "node 8 does not exist (the topology has 8 nodes)",
        ),
        case(
            "second fault with negative time",
            sc(&[FT2, PERM, "[[faults]]\nkind = \"node\"\nnode = 1\nat_ns = 0\n[[faults]]\nkind = \"link\"\nlink = 1\nat_ns = -1"]),
            "faults[1].at_ns",
            "non-negative",
        ),
        // ---- topology shorthand, buffers, backends (one door) -------------------------------
        case("shape with kind", sc(&[&topo("shape = \"torus:4x4\"\nkind = \"torus\""), PERM]), "topology.shape", "topology.kind is also set"),
        case("shape with dims", sc(&[&topo("shape = \"torus:4x4\"\ndims = [4, 4]"), PERM]), "topology.shape", "topology.dims is also set"),
        case("shape with grid", sc(&[&topo("shape = \"hammingmesh:2x2,2x2\"\ngrid = [2, 2]"), PERM]), "topology.shape", "topology.grid is also set"),
        case("unknown shape kind", sc(&[&topo("shape = \"ring:8\""), PERM]), "topology.shape", "unknown kind 'ring'"),
        case("shape without sizes", sc(&[&topo("shape = \"torus\""), PERM]), "topology.shape", "expected KIND:SHAPE"),
        case("zero in a shape", sc(&[&topo("shape = \"torus:4x0\""), PERM]), "topology.shape", "expected a positive integer"),
        case("hammingmesh shape without grid", sc(&[&topo("shape = \"hammingmesh:2x2\""), PERM]), "topology.shape", "board, grid"),
        case("too big a shape", sc(&[&topo("shape = \"torus:65536x65536\""), PERM]), "topology.shape", "nodes"),
        case("hyperx shape with billions of links", sc(&[&topo("shape = \"hyperx:2048x2048\""), PERM]), "topology.shape", "links"),
        case("hammingmesh shape overflowing", sc(&[&topo("shape = \"hammingmesh:65536x65536,131072x131072\""), PERM]), "topology.shape", "nodes"),
        case("bare shape string", sc(&["topology = \"hyperx:4x\"", PERM]), "topology.shape", "expected a positive integer"),
        case("number for topology", sc(&["topology = 4", PERM]), "topology", "a [topology] table or a topology spec string"),
        case("shape with a star key", sc(&[&topo("shape = \"torus:4x4\"\nhosts = 4"), PERM]), "topology.hosts", "is not a parameter of kind = \"torus\""),
        case("unknown buffer keyword", sc(&[FT2, "[network]\nbuffer_bytes = \"big\"", PERM]), "network.buffer_bytes", "\"line_rate\", got \"big\""),
        case("negative buffer", sc(&[FT2, "[network]\nbuffer_bytes = -1", PERM]), "network.buffer_bytes", "non-negative"),
        case("float buffer", sc(&[FT2, "[network]\nbuffer_bytes = 1.5", PERM]), "network.buffer_bytes", "a number of bytes or \"line_rate\""),
        case("unknown backend", sc(&[TORUS, PERM, "[run]\nbackend = \"fluid\""]), "run.backend", "unknown variant `fluid`"),
        case("backend as a number", sc(&[TORUS, PERM, "[run]\nbackend = 1"]), "run.backend", "wanted string"),
        case("negative flow_min_bytes", sc(&[TORUS, PERM, "[run]\nflow_min_bytes = -1"]), "run.flow_min_bytes", "invalid value: integer `-1`"),
        case("flow for a permutation", sc(&[TORUS, PERM, "[run]\nbackend = \"flow\""]), "run.backend", "traffic[0] is kind = \"permutation\""),
        case(
            "flow for two collectives",
            sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64"), &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64"), "[run]\nbackend = \"flow\""]),
            "run.backend",
            "2 traffic entries",
        ),
        case(
            "flow for a reduce-scatter",
            sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\ncollective = \"reduce_scatter\"\nbytes = 64"), "[run]\nbackend = \"flow\""]),
            "run.backend",
            "ReduceScatter",
        ),
        case(
            "flow on part of the hosts",
            sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64\nhosts = [0, 1, 2, 3]"), "[run]\nbackend = \"flow\""]),
            "run.backend",
            "not every host in order",
        ),
        case(
            "flow with a fault",
            sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64"), "[[faults]]\nkind = \"link\"\nlink = 0\nat_ns = 5", "[run]\nbackend = \"flow\""]),
            "run.backend",
            "[[faults]]",
        ),
        case(
            "flow with drop-tail",
            sc(&[TORUS, "[network]\nflow_control = \"drop_tail\"", &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64"), "[run]\nbackend = \"flow\""]),
            "run.backend",
            "drop_tail",
        ),
        case(
            "flow with a time limit",
            sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 64"), "[run]\nbackend = \"flow\"\ntime_limit_us = 5"]),
            "run.backend",
            "run.time_limit_us is set",
        ),
        case(
            "flow with a plan the algorithm cannot build",
            sc(&["topology = \"torus:2x2x2\"", &traffic("kind = \"collective\"\nalgorithm = \"hamiltonian-rings\"\nbytes = 64"), "[run]\nbackend = \"flow\""]),
            "traffic[0].algorithm",
            "needs a 2D torus",
        ),
        case("collective on too many ranks", sc(&["topology = \"torus:73658x2\"", &traffic("kind = \"collective\"\nalgorithm = \"swing\"\nbytes = 64")]), "traffic[0].hosts", "147316 ranks is more than the 16384"),
        case("empty collective", sc(&[TORUS, &traffic("kind = \"collective\"\nalgorithm = \"ring\"\nbytes = 0")]), "traffic[0].bytes", "at least one byte"),
        // ---- transport --------------------------------------------------------------------
        case("ndp on a lossless network", sc(&[FT2, "[transport]\nkind = \"ndp\"", PERM]), "transport.kind", "needs network.flow_control = \"drop_tail\""),
        case(
            "ndp with input round-robin",
            sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\narbitration = \"input_round_robin\"", "[transport]\nkind = \"ndp\"", PERM]),
            "transport.kind",
            "fifo",
        ),
        case(
            "ndp with rendezvous",
            sc(&[FT2, "[network]\nflow_control = \"drop_tail\"", "[endpoint]\nrendezvous_threshold_bytes = 4096", "[transport]\nkind = \"ndp\"", PERM]),
            "transport.kind",
            "rendezvous",
        ),
        case("ndp window 0", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"", "[transport]\nkind = \"ndp\"\ninitial_window_packets = 0", PERM]), "transport.initial_window_packets", ">= 1"),
        case("ndp data queue 0", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"", "[transport]\nkind = \"ndp\"\ndata_queue_packets = 0", PERM]), "transport.data_queue_packets", ">= 1"),
        case("ndp negative timeout", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"", "[transport]\nkind = \"ndp\"\nrto_us = -3", PERM]), "transport.rto_us", "must be a positive number"),
        case("ndp key without ndp", sc(&[FT2, "[transport]\nrto_us = 100", PERM]), "transport.rto_us", "only with kind = \"ndp\""),
        case("dctcp without ecn marking", sc(&[FT2, "[transport]\nkind = \"dctcp\"", PERM]), "transport.kind", "needs network.ecn_threshold_bytes"),
        case(
            "dctcp with rendezvous",
            sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[endpoint]\nrendezvous_threshold_bytes = 4096", "[transport]\nkind = \"dctcp\"", PERM]),
            "transport.kind",
            "rendezvous",
        ),
        case("dctcp window 0", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\ninitial_window_packets = 0", PERM]), "transport.initial_window_packets", ">= 1"),
        case("dctcp g 0", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\ng = 0.0", PERM]), "transport.g", "must be > 0 and <= 1"),
        case("dctcp g above 1", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\ng = 1.5", PERM]), "transport.g", "got 1.5"),
        case("dctcp g nan", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\ng = nan", PERM]), "transport.g", "must be > 0"),
        case("dctcp negative min rto", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\nmin_rto_us = -1", PERM]), "transport.min_rto_us", "must be a positive number"),
        case("dctcp zero min rto", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\nmin_rto_us = 0.0000001", PERM]), "transport.min_rto_us", "at least 1 ps"),
        case("ndp key with dctcp", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\nrto_us = 100", PERM]), "transport.rto_us", "only with kind = \"ndp\" (kind is \"dctcp\")"),
        case("dctcp key with ndp", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"", "[transport]\nkind = \"ndp\"\ng = 0.1", PERM]), "transport.g", "only with kind = \"dctcp\""),
        case("dctcp key without a transport", sc(&[FT2, "[transport]\nmin_rto_us = 100", PERM]), "transport.min_rto_us", "only with kind = \"dctcp\" (kind is \"none\")"),
        case("dcqcn on drop-tail", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"", PERM]), "transport.kind", "needs a lossless network"),
        case("dcqcn on lossy links", sc(&[FT2, "[network]\necn_threshold_bytes = 1000\nloss_probability = 0.01", "[transport]\nkind = \"dcqcn\"", PERM]), "transport.kind", "loss_probability = 0"),
        case(
            "dcqcn with a lossy link",
            sc(&[FT2, "[network]\necn_threshold_bytes = 1000", "[transport]\nkind = \"dcqcn\"", PERM, "[[faults]]\nkind = \"loss\"\nlink = 0\nprobability = 0.1"]),
            "faults[0].probability",
            "sends every packet once",
        ),
        case("dcqcn without ecn marking", sc(&[FT2, "[transport]\nkind = \"dcqcn\"", PERM]), "transport.kind", "needs network.ecn_threshold_bytes"),
        case("dcqcn g above 1", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\ng = 2.0", PERM]), "transport.g", "must be > 0 and <= 1"),
        case("dcqcn zero byte counter", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nbyte_counter_bytes = 0", PERM]), "transport.byte_counter_bytes", ">= 1"),
        case("dcqcn negative timer", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nincrease_interval_us = -5", PERM]), "transport.increase_interval_us", "must be a positive number"),
        case("dcqcn zero alpha interval", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nalpha_interval_us = 0", PERM]), "transport.alpha_interval_us", "must be a positive number"),
        case("dcqcn zero cnp interval", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\ncnp_interval_us = 0.0000001", PERM]), "transport.cnp_interval_us", "at least 1 ps"),
        case("dcqcn negative rai", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nrai_gbps = -1", PERM]), "transport.rai_gbps", "must be a positive number"),
        case("dcqcn min rate in b/s", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nmin_rate_gbps = 100000000", PERM]), "transport.min_rate_gbps", "the unit is Gb/s"),
        case("dcqcn key with dctcp", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"\nrai_gbps = 0.04", PERM]), "transport.rai_gbps", "only with kind = \"dcqcn\" (kind is \"dctcp\")"),
        case("dctcp key with dcqcn", sc(&[FT2, "[network]\necn_threshold_bytes = 20000", "[transport]\nkind = \"dcqcn\"\nmin_rto_us = 5", PERM]), "transport.min_rto_us", "only with kind = \"dctcp\" (kind is \"dcqcn\")"),
        case("red kmax without kmin", sc(&[FT2, "[network]\necn_kmax_bytes = 200000", PERM]), "network.ecn_kmax_bytes", "needs network.ecn_threshold_bytes"),
        case("red kmax below kmin", sc(&[FT2, "[network]\necn_threshold_bytes = 5000\necn_kmax_bytes = 5000", PERM]), "network.ecn_kmax_bytes", "must exceed"),
        case("red pmax above 1", sc(&[FT2, "[network]\necn_threshold_bytes = 5000\necn_kmax_bytes = 9000\necn_pmax = 1.5", PERM]), "network.ecn_pmax", "must be > 0 and <= 1"),
        case("red pmax zero", sc(&[FT2, "[network]\necn_threshold_bytes = 5000\necn_kmax_bytes = 9000\necn_pmax = 0.0", PERM]), "network.ecn_pmax", "got 0"),
        case("red pmax without kmax", sc(&[FT2, "[network]\necn_threshold_bytes = 5000\necn_pmax = 0.1", PERM]), "network.ecn_pmax", "only with network.ecn_kmax_bytes"),
        case(
            "two transports in one run",
            sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\necn_threshold_bytes = 20000", "[transport]\nkind = \"dctcp\"", PERM, "[[traffic]]\nkind = \"permutation\"\nbytes = 1000\ntransport = \"ndp\""]),
            "traffic[1].transport",
            "at most one transport besides \"none\"",
        ),
        case("traffic transport the network cannot carry", sc(&[FT2, PERM, "transport = \"ndp\""]), "traffic[0].transport", "needs network.flow_control = \"drop_tail\""),
        case("traffic dcqcn on drop-tail", sc(&[FT2, "[network]\nflow_control = \"drop_tail\"\necn_threshold_bytes = 1000", PERM, "transport = \"dcqcn\""]), "traffic[0].transport", "lossless"),
        case("traffic transport unknown", sc(&[FT2, PERM, "transport = \"tcp\""]), "traffic[0].transport", "unknown variant"),
        case("atp window of zero", sc(&[FT2, &traffic("kind = \"ina_allreduce\"\nbytes = 4096\nprotocol = \"atp\"\nwindow = 0")]), "traffic[0].window", "must be"),
        case("dsa key of another protocol", sc(&[FT2, &traffic("kind = \"ina_allreduce\"\nbytes = 4096\nprotocol = \"dsa\"\ntrees = 2")]), "traffic[0].trees", "is not used by protocol = \"dsa\""),
        case("ina traffic with a transport", sc(&[FT2, "[[traffic]]\nkind = \"ina_allreduce\"\nbytes = 4096\ntransport = \"dctcp\""]), "traffic[0].transport", "in-network protocol packets"),
        case("unknown transport", sc(&[FT2, "[transport]\nkind = \"tcp\"", PERM]), "transport.kind", "unknown variant"),
        case("unknown transport key", sc(&[FT2, "[transport]\nkind = \"ndp\"\nwindow = 3", PERM]), "transport.window", "unknown field"),
        // ---- training jobs (kind = "training") ----------------------------------------------
        case("training unknown protocol", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"ring\"")]), "traffic[0].protocol", "must be one of \"switchml\", \"atp\", \"dsa\" (shared pool) or \"canary\", \"static_trees\""),
        case("training pool key on an in-network protocol", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"canary\"\nwindow_bytes = 1000000")]), "traffic[0].window_bytes", "is a key of the shared-pool protocols (switchml, atp, dsa), not of protocol = \"canary\""),
        case("training switch memory in the traffic entry", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nswitch_memory_bytes = 1000000")]), "traffic[0].switch_memory_bytes", "is a switch resource, [ina] switch_memory_bytes"),
        case("switch memory in bytes and in slots", sc(&[FT2, "[ina]\ntable_size = 64\nswitch_memory_bytes = 100000", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "ina.switch_memory_bytes", "give one of them"),
        case("switch memory of no canary descriptor", sc(&[FT2, "[ina]\nswitch_memory_bytes = 100", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "ina.switch_memory_bytes", "100 B hold 0 canary slots of 1043 B"),
        case("switch memory with a static partition", sc(&[FT2, "[ina]\nswitch_memory_bytes = 100000\nslots_per_tenant = 4", &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "ina.slots_per_tenant", "use table_size"),
        case("training in-network key on a pool protocol", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"atp\"\nwindow = 4")]), "traffic[0].window", "is a key of the in-network allreduce protocols, not of protocol = \"atp\""),
        case("training protocol key checked by its registry entry", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"canary\"\nmax_failures = 15")]), "traffic[0].max_failures", "must be at most 14"),
        case("training in-network key another protocol owns", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"canary\"\ntrees = 2")]), "traffic[0].trees", "is not used by protocol = \"canary\""),
        case("training on canary above the mtu", sc(&[&topo("kind = \"star\"\nhosts = 20"), "[network]\nmtu_bytes = 300", &traffic("kind = \"training\"\nprotocol = \"canary\"\nworkers = 4")]), "network.mtu_bytes", "carry 62 values per packet (305 B with headers"),
        case("training on canary with too few hosts", sc(&[&topo("kind = \"star\"\nhosts = 8"), &traffic("kind = \"training\"\nprotocol = \"canary\"\njobs = 2\nworkers = 5")]), "traffic[0].jobs", "need 10 hosts; the topology has 8"),
        case("training on static trees beyond the table", sc(&[&topo("kind = \"star\"\nhosts = 20"), "[ina]\ntable_size = 100", &traffic("kind = \"training\"\nprotocol = \"static_trees\"\njobs = 2\nworkers = 4")]), "ina.table_size", "8 tenants"),
        case("training preemption on atp", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"atp\"\npreemption = \"always\"")]), "traffic[0].preemption", "is not used by protocol = \"atp\" (dsa only)"),
        case("training unknown preemption", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\npreemption = \"sometimes\"")]), "traffic[0].preemption", "must be \"priority\", \"always\" or \"coin\""),
        case("training zero jobs", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\njobs = 0")]), "traffic[0].jobs", "must be within 1..=4096"),
        case("training 65 workers", sc(&[&topo("kind = \"star\"\nhosts = 200"), &traffic("kind = \"training\"\nworkers = 65")]), "traffic[0].workers", "the aggregator bitmap has 64 bits"),
        case("training unknown model", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nmodels = [\"A\", \"C\"]")]), "traffic[0].models[1]", "must be \"A\" or \"B\""),
        case("training no model", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nmodels = []")]), "traffic[0].models", "at least one model"),
        case("training too few hosts", sc(&[&topo("kind = \"star\"\nhosts = 8"), &traffic("kind = \"training\"\njobs = 1\nworkers = 8")]), "traffic[0].jobs", "need 9 hosts; the topology has 8"),
        case("training memory holds no aggregator", sc(&[&topo("kind = \"star\"\nhosts = 20"), "[ina]\nswitch_memory_bytes = 100", &traffic("kind = \"training\"")]), "ina.switch_memory_bytes", "hold no aggregator"),
        case("switchml memory too small for its jobs", sc(&[&topo("kind = \"star\"\nhosts = 20"), "[ina]\nswitch_memory_bytes = 1000", &traffic("kind = \"training\"\nprotocol = \"switchml\"\njobs = 2\nworkers = 2")]), "ina.switch_memory_bytes", "two slots each"),
        case("switchml aggregators too few for its jobs", sc(&[&topo("kind = \"star\"\nhosts = 20"), "[ina]\ntable_size = 3", &traffic("kind = \"training\"\nprotocol = \"switchml\"\njobs = 2\nworkers = 2")]), "ina.table_size", "two slots each"),
        case("training window below a packet", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nwindow_bytes = 100")]), "traffic[0].window_bytes", "at least one 306 B packet"),
        case("training negative timeout", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nmin_rto_us = -1")]), "traffic[0].min_rto_us", "non-negative"),
        case("training zero timeout", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nmin_rto_us = 0")]), "traffic[0].min_rto_us", "must be a positive number"),
        case("switchml has no parameter server to restart", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nprotocol = \"switchml\"\nps_restart_us = 10")]), "traffic[0].ps_restart_us", "has no parameter server"),
        case("training model scale above 1", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\nmodel_scale = 2")]), "traffic[0].model_scale", "must be within (0, 1]"),
        case("training key on a permutation", sc(&[FT2, PERM, "jobs = 2"]), "traffic[0].jobs", "is not a parameter of kind = \"permutation\""),
        case("training unknown aggregation", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\naggregation = \"ring\"")]), "traffic[0].aggregation", "must be \"root\" or \"tree\""),
        case("tree aggregation over three tiers", sc(&[&topo("kind = \"fat_tree_3\"\nk = 4"), &traffic("kind = \"training\"\nprotocol = \"switchml\"\njobs = 1\nworkers = 8\naggregation = \"tree\"")]), "traffic[0].aggregation", "is not a neighbour of the job's root switch"),
        case("aggregation key on a permutation", sc(&[FT2, PERM, "aggregation = \"tree\""]), "traffic[0].aggregation", "is not a parameter of kind = \"permutation\""),
        case("ina key on training on dsa", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\ntrees = 2")]), "traffic[0].trees", "is a key of the in-network allreduce protocols, not of protocol = \"dsa\""),
        case("two training entries", sc(&[&topo("kind = \"star\"\nhosts = 40"), &traffic("kind = \"training\""), &traffic("kind = \"training\"")]), "traffic[1].kind", "one \"training\" entry per scenario"),
        case("training with ina_allreduce", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\""), &traffic("kind = \"ina_allreduce\"\nbytes = 4096")]), "traffic[0].kind", "do not run in one scenario"),
        case("training with a transport", sc(&[&topo("kind = \"star\"\nhosts = 20"), &traffic("kind = \"training\"\ntransport = \"ndp\"")]), "traffic[0].transport", "in-network protocol packets"),
        case("training on a torus", sc(&[TORUS, &traffic("kind = \"training\"\njobs = 1\nworkers = 2")]), "topology", "hosts of"),
        // ---- TOML syntax ------------------------------------------------------------------
        case("unterminated table header", "name = \"t\"\n[topology\n", "", "invalid table header"),
        case("missing value", "name = \n", "", "(line 1)"),
        case("duplicate key", format!("name = \"a\"\nname = \"b\"\n{FT2}{PERM}"), "", "duplicate key"),
        case("unterminated string", format!("name = \"t\n{FT2}{PERM}"), "", "(line 1)"),
        case("table defined twice", sc(&[FT2, FT2, PERM]), "", "duplicate key"),
    ]
}

#[test]
fn malformed_scenarios_name_the_field_and_the_cause() {
    let cases = cases();
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        match load_scenario_str(&c.text, None) {
            Ok(_) => failures.push(format!("[{}] loaded, expected an error at `{}`", c.what, c.field)),
            Err(ScenarioError { field, reason }) => {
                if field != c.field || !reason.to_lowercase().contains(&c.reason.to_lowercase()) {
                    failures.push(format!(
                        "[{}]\n    expected field `{}`, reason containing {:?}\n    got      field `{}`, reason {:?}",
                        c.what, c.field, c.reason, field, reason
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// The fixtures themselves are valid once the faulty part is removed: guards against a case
/// passing for the wrong reason because its base was broken.
#[test]
fn fixtures_are_valid() {
    for text in [sc(&[FT2, PERM]), sc(&[TORUS, PERM]), sc(&[&topo("kind = \"star\"\nhosts = 4"), PERM])] {
        if let Err(e) = load_scenario_str(&text, None) {
            panic!("fixture does not load: {e}\n{text}");
        }
    }
    // The PFC keys are taken as given (and the torus takes PFC with dimension order).
    let p = load_scenario_str(&sc(&[FT2, "[network]\nflow_control = \"pfc\"\npfc_xoff_bytes = 8192\npfc_xon_bytes = 4096\npfc_headroom_bytes = 40000", PERM]), None).unwrap();
    assert_eq!(p.net.flow_control, reducelab_net::FlowControl::Pfc);
    assert_eq!(
        p.net.pfc,
        reducelab_net::PfcConfig { xoff_bytes: Some(8192), xon_bytes: Some(4096), headroom_bytes: Some(40000) }
    );
    load_scenario_str(&sc(&[TORUS, "[network]\nflow_control = \"pfc\"\nrouting = \"minimal\"", PERM]), None).unwrap();
    let sc = load_scenario_str(&sc(&[FT2, PERM]), None).unwrap();
    assert_eq!(sc.topology.num_hosts(), 4);
    assert_eq!(sc.topology.links.len(), 8);
    assert_eq!(sc.topology.nodes.len(), 8);
}

#[test]
fn errors_display_as_field_colon_reason() {
    let err = |text: &str| load_scenario_str(text, None).err().expect("an error");
    let e = err(&sc(&[FT2, "[network]\nrouting = \"magic\"", PERM]));
    assert!(e.to_string().starts_with("network.routing: unknown variant `magic`"), "{e}");
    let e = err("name = \"t\"\n[topology\n");
    assert!(!e.to_string().starts_with(':'), "{e}");
}

fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            toml_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "toml") {
            out.push(path);
        }
    }
}

#[test]
fn every_shipped_scenario_loads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files = Vec::new();
    toml_files(&root, &mut files);
    files.sort();
    assert!(files.len() >= 4, "found only {files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // Figure files and their claims files (docs/reproductions.md) and sweep specs
        // (docs/sweeps.md) are not scenarios.
        let table: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if table.contains_key("figure") || table.contains_key("claim") || table.contains_key("sweep") {
            continue;
        }
        if table.contains_key("pspin") {
            // One Flare switch (docs/flare.md): the same door and parser, its own resolution.
            if let Err(e) = reducelab_sim::pspin_run::parse(&text, None) {
                panic!("{}: {e}", f.display());
            }
            assert_eq!(reducelab_sim::pspin_run::parse(&text, Some(77)).map(|s| s.seed).ok(), Some(77));
            continue;
        }
        // As a file: an example may name another file next to it (`msccl`).
        if let Err(e) = reducelab_sim::load_scenario_file(f, None) {
            panic!("{}: {e}", f.display());
        }
        // An explicit seed overrides the file's.
        assert_eq!(reducelab_sim::load_scenario_file(f, Some(77)).unwrap().seed, 77);
    }
}

/// The keys listed after `takes` in an unknown-key error.
fn listed_keys(reason: &str) -> Vec<String> {
    let after = reason.split(" takes ").nth(1).unwrap_or_else(|| panic!("no key list in {reason:?}"));
    after.split(" (line").next().unwrap().split(", ").map(|k| k.trim_matches('`').to_string()).collect()
}

#[test]
fn an_unknown_key_lists_the_keys_of_its_kind_only() {
    use reducelab_sim::scenario::{TrafficKind, TransportKindSpec};
    // [transport]: the kind's keys, none of another kind's.
    let err = load_scenario_str(&sc(&[FT2, "[transport]\nkind = \"ndp\"\nbogus = 3", PERM]), None).err().unwrap();
    assert_eq!(err.field, "transport.bogus");
    let keys = listed_keys(&err.reason);
    let mut want = vec!["kind".to_string()];
    want.extend(TransportKindSpec::Ndp.keys().iter().map(|k| k.to_string()));
    assert_eq!(keys, want, "{}", err.reason);
    assert!(!keys.iter().any(|k| k == "cnp_interval_us" || k == "min_rto_us"), "{}", err.reason);
    assert!(err.reason.ends_with("(line 13)"), "the line is kept: {}", err.reason);
    // Without [transport].kind, the kind the traffic names.
    let err =
        load_scenario_str(&sc(&[FT2, "[transport]\nbogus = 3", PERM, "transport = \"dctcp\""]), None).err().unwrap();
    assert!(
        err.reason.contains("kind = \"dctcp\" takes `kind`, `initial_window_packets`, `g`, `min_rto_us`"),
        "{}",
        err.reason
    );
    // [topology]: the kind's keys and the link parameters.
    let err = load_scenario_str(&sc(&[FT2, "bogus = 1", PERM]), None).err().unwrap();
    assert_eq!(err.field, "topology.bogus");
    let mut want: Vec<String> = ["kind", "bandwidth_gbps", "latency_ns"].iter().map(|k| k.to_string()).collect();
    want.extend(reducelab_sim::scenario::TopologyKind::FatTree2.keys().iter().map(|k| k.to_string()));
    assert_eq!(listed_keys(&err.reason), want, "{}", err.reason);
    assert!(!err.reason.contains("`dims`"), "{}", err.reason);
    // [[traffic]]: every kind's own keys (and `transport` for message traffic only).
    for (kind, body) in [
        ("permutation", "kind = \"permutation\"\nbytes = 1000"),
        ("collective", "kind = \"collective\"\nbytes = 1000"),
        ("ina_allreduce", "kind = \"ina_allreduce\"\nbytes = 4096"),
        ("training", "kind = \"training\""),
    ] {
        let err = load_scenario_str(&sc(&[FT2, &traffic(&format!("{body}\nbogus = 1"))]), None).err().unwrap();
        assert_eq!(err.field, "traffic[0].bogus", "{kind}");
        let keys = listed_keys(&err.reason);
        let k: TrafficKind = toml::Value::String(kind.into()).try_into().unwrap();
        let message = !matches!(k, TrafficKind::InaAllreduce | TrafficKind::Training);
        assert_eq!(keys.iter().any(|k| k == "transport"), message, "{kind}: {}", err.reason);
        let mut want = vec!["kind".to_string()];
        want.extend(k.keys_with(None).iter().map(|s| s.to_string()));
        assert_eq!(keys, want, "{kind}: {}", err.reason);
    }
    // An in-network entry lists the keys of the protocol it names, not another protocol's.
    let err = load_scenario_str(
        &sc(&[FT2, &traffic("kind = \"ina_allreduce\"\nbytes = 4096\nprotocol = \"static_trees\"\nbogus = 1")]),
        None,
    )
    .err()
    .unwrap();
    let keys = listed_keys(&err.reason);
    assert!(keys.iter().any(|k| k == "trees") && keys.iter().any(|k| k == "roots"), "{}", err.reason);
    assert!(!keys.iter().any(|k| k == "retransmit_timeout_us" || k == "hash_slots"), "{}", err.reason);
}

#[test]
fn every_listed_key_is_one_the_schema_reads() {
    use reducelab_sim::scenario::{TrafficKind, TransportKindSpec};
    // A key in a kind's list that the schema does not know would be listed as valid and then
    // refused as unknown: each one must get past the parser (it may be refused later, for its
    // value, but never as an unknown field).
    for kind in ["star", "fat_tree_2", "fat_tree_3", "torus", "hyperx", "hammingmesh", "dragonfly"] {
        let k: reducelab_sim::scenario::TopologyKind = toml::Value::String(kind.into()).try_into().unwrap();
        assert_eq!(k.name(), kind);
        for key in k.keys() {
            let text = sc(&[&topo(&format!("kind = \"{kind}\"\n{key} = 1")), PERM]);
            if let Err(e) = load_scenario_str(&text, None) {
                assert!(!e.reason.contains("unknown field"), "topology {kind}: {key}: {e}");
            }
        }
    }
    for kind in TransportKindSpec::ALL {
        for key in kind.keys() {
            let text = sc(&[FT2, &format!("[transport]\nkind = \"{}\"\n{key} = 1", kind.name()), PERM]);
            if let Err(e) = load_scenario_str(&text, None) {
                assert!(!e.reason.contains("unknown field"), "transport {}: {key}: {e}", kind.name());
            }
        }
    }
    for k in TrafficKind::ALL {
        let kind = k.name();
        assert_eq!(toml::Value::String(kind.into()).try_into::<TrafficKind>().unwrap(), k, "{kind} is read back");
        for key in k.keys() {
            let text = sc(&[FT2, &traffic(&format!("kind = \"{kind}\"\n{key} = 1"))]);
            if let Err(e) = load_scenario_str(&text, None) {
                assert!(!e.reason.contains("unknown field"), "traffic {kind}: {key}: {e}");
            }
        }
    }
}

/// The field names serde knows for a table type (from its unknown-field error).
fn schema_fields<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> std::collections::BTreeSet<String> {
    let e = toml::from_str::<T>("no_such_key_anywhere = 1").expect_err("an unknown key is refused").to_string();
    let list = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("{e}"));
    list.split(',').map(|x| x.split('`').nth(1).unwrap_or_else(|| panic!("{e}")).to_string()).collect()
}

#[test]
fn the_per_key_checks_cover_every_field_of_the_schema() {
    use reducelab_sim::scenario::TopologySpec;
    use std::collections::BTreeSet;
    // The lists behind "is not a parameter of kind" / "applies only with kind": a field the
    // schema reads but these lists miss would be taken silently by every kind. (A traffic
    // entry's or a transport's kind is its own struct: it has no such list.)
    let names = |keys: &[(&'static str, bool)], extra: &[&str]| -> BTreeSet<String> {
        keys.iter().map(|(k, _)| k.to_string()).chain(extra.iter().map(|k| k.to_string())).collect()
    };
    let topology_extra = ["shape", "kind", "bandwidth_gbps", "latency_ns", "host_bandwidth_gbps", "host_latency_ns"];
    assert_eq!(names(&TopologySpec::default().set_keys(), &topology_extra), schema_fields::<TopologySpec>());
}

/// `collective` traffic naming an MSCCL XML program: every refusal names the key and says why
/// (the importer's and the checker's reasons prefixed with the file).
#[test]
fn msccl_collective_errors_name_the_key() {
    let dir = std::env::temp_dir().join(format!("reducelab-msccl-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = reducelab_sched::msccl::allpairs_allreduce_xml(4).unwrap();
    std::fs::write(dir.join("ap4.xml"), &good).unwrap();
    // One reduction becomes a copy, so a contribution is lost: the checker refuses it.
    let forgot = good.replacen("type=\"rrc\"", "type=\"r\"", 1);
    std::fs::write(dir.join("forgot.xml"), &forgot).unwrap();
    std::fs::write(dir.join("broken.xml"), good.replacen("type=\"s\"", "type=\"xyz\"", 1)).unwrap();
    let scenario = |traffic: &str| {
        format!("name = \"m\"\n[topology]\nkind = \"star\"\nhosts = 4\nbandwidth_gbps = 100\nlatency_ns = 500\n[[traffic]]\nkind = \"collective\"\nbytes = 4096\n{traffic}\n")
    };
    let load = |traffic: &str| {
        let mut file = reducelab_sim::parse(&scenario(traffic)).unwrap();
        file.base_dir = Some(dir.clone());
        file.resolve(None).map(|_| ())
    };
    assert_eq!(load("msccl = \"ap4.xml\""), Ok(()));
    // An absolute name needs no base directory.
    let abs = format!("msccl = \"{}\"", dir.join("ap4.xml").display());
    assert!(load_scenario_str(&scenario(&abs), None).is_ok());
    let err = |traffic: &str| load(traffic).unwrap_err();
    let e = err("msccl = \"ap4.xml\"\nalgorithm = \"ring\"");
    assert_eq!(e.field, "traffic[0].msccl");
    assert_eq!(e.reason, "`msccl` and `algorithm` are mutually exclusive: the MSCCL program is the algorithm");
    let e = err("msccl = \"ap4.xml\"\nhosts = [0, 1, 2]");
    assert_eq!(
        (e.field.as_str(), e.reason.ends_with("has ngpus = 4 (rank r runs on hosts[r])")),
        ("traffic[0].hosts", true),
        "{e}"
    );
    assert!(e.reason.starts_with("3 hosts, but "), "{e}");
    let e = err("msccl = \"ap4.xml\"\ncollective = \"allgather\"");
    assert_eq!(e.field, "traffic[0].collective");
    assert!(e.reason.starts_with("is Allgather, but ") && e.reason.ends_with("ap4.xml computes Allreduce"), "{e}");
    let e = err("msccl = \"ap4.xml\"\ndims = [2, 2]");
    assert_eq!(e.field, "traffic[0].dims");
    let e = err("msccl = \"missing.xml\"");
    assert_eq!(e.field, "traffic[0].msccl");
    assert!(e.reason.starts_with(&format!("{}: cannot read: ", dir.join("missing.xml").display())), "{e}");
    let e = err("msccl = \"broken.xml\"");
    assert_eq!(e.field, "traffic[0].msccl");
    assert!(e.reason.starts_with(&format!("{}: line ", dir.join("broken.xml").display())), "{e}");
    assert!(e.reason.ends_with(": type \"xyz\" is not an MSCCL step type"), "{e}");
    let e = err("msccl = \"forgot.xml\"");
    assert_eq!(e.field, "traffic[0].msccl");
    assert!(
        e.reason.starts_with(&format!(
            "{}: the program does not compute its Allreduce: rank ",
            dir.join("forgot.xml").display()
        )),
        "{e}"
    );
    // Neither key: the error says both.
    let e = err("");
    assert_eq!(e.field, "traffic[0].algorithm");
    assert!(e.reason.ends_with("unless `msccl` names an MSCCL XML program"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
