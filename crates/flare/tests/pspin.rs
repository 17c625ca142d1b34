//! The PsPIN switch model with Flare's designs: data results (bitwise reproducibility of tree
//! aggregation, order dependence of single-buffer f32 sums, every type and operator against a
//! plain reference), the mechanisms (spinning, remote L1, drops, backpressure, L1 overflow),
//! the model of §4–6 against the simulated switch, and the int8 example handler set.

use reducelab_flare::pspin::designs::Design;
use reducelab_flare::pspin::examples::QuantisedInt8Sum;
use reducelab_flare::pspin::model::ModelInput;
use reducelab_flare::pspin::workload::splitmix;
use reducelab_flare::pspin::*;

fn small_switch() -> SwitchConfig {
    SwitchConfig { clusters: 4, hpus_per_cluster: 8, subset_cores: 8, ..SwitchConfig::default() }
}

fn data_workload(hosts: u32, kib: u64, dtype: DataType, op: Operator) -> Workload {
    let mut w = Workload::new(hosts, kib << 10);
    w.dtype = dtype;
    w.op = op;
    w.carry_data = true;
    w
}

/// The result of block `b` combined in the tree's fixed order (ports paired 2m, 2m+1, level by
/// level; an unpaired last node moves up unchanged).
fn reference_tree(w: &Workload, b: u32) -> Vec<u8> {
    let mut level: Vec<Vec<u8>> = (0..w.hosts).map(|h| w.host_block(h, b)).collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| {
                let mut acc = pair[0].clone();
                if let Some(r) = pair.get(1) {
                    w.op.combine(w.dtype, &mut acc, r);
                }
                acc
            })
            .collect();
    }
    level.pop().unwrap()
}

/// The result of block `b` combined host 0, 1, 2, … in turn.
fn reference_in_order(w: &Workload, b: u32) -> Vec<u8> {
    let mut acc = w.host_block(0, b);
    for h in 1..w.hosts {
        w.op.combine(w.dtype, &mut acc, &w.host_block(h, b));
    }
    acc
}

fn results(cfg: &SwitchConfig, w: &Workload, d: Design) -> (SwitchReport, Vec<Vec<u8>>) {
    let r = run(cfg, w, &mut d.handlers(w.dtype, w.op)).unwrap();
    assert_eq!(r.status, "completed", "{}: {r:?}", d.name());
    let data = r.results.iter().map(|x| x.clone().expect("every block has a result")).collect();
    (r, data)
}

/// A random arrival order: jitter seed and mean, staggering, scheduling subset, window.
fn random_order(i: u64, cfg: &mut SwitchConfig, w: &mut Workload) {
    let r = splitmix(0xA11 + i);
    w.seed = r;
    w.jitter_ns = [0.0, 5.0, 50.0, 400.0][(r >> 8) as usize % 4];
    w.staggered = (r >> 12) & 1 == 1;
    w.window_blocks = [0, 1, 2, 5][(r >> 16) as usize % 4];
    cfg.subset_cores = [1, 2, 8, 16, 32][(r >> 20) as usize % 5];
}

#[test]
fn tree_aggregation_gives_bitwise_identical_f32_results_over_random_arrival_orders() {
    // 60 random arrival orders (jitter seeds and means, staggering, windows, subset sizes) of
    // one f32 vector from 13 hosts (an odd count: unpaired nodes move up): every block's result
    // has the same bits, those of the tree's fixed order.
    let base = data_workload(13, 24, DataType::F32, Operator::Sum);
    let want: Vec<Vec<u8>> = (0..base.blocks()).map(|b| reference_tree(&base, b)).collect();
    let mut orders_seen = std::collections::BTreeSet::new();
    for i in 0..60 {
        let (mut cfg, mut w) = (small_switch(), base);
        random_order(i, &mut cfg, &mut w);
        let (r, got) = results(&cfg, &w, Design::Tree);
        assert!(got == want, "order {i}: tree result differs from the fixed-order tree");
        orders_seen.insert((r.busy_cycles, r.spin_cycles, r.last_completion_ps));
    }
    assert!(orders_seen.len() > 40, "the random orders should differ in timing: {}", orders_seen.len());
}

#[test]
fn single_buffer_f32_sums_depend_on_the_arrival_order() {
    // The same f32 data from 16 hosts, arriving in two orders: in host order (no staggering,
    // no jitter) and with exponential jitter. Single-buffer aggregation adds packets as their
    // handlers enter the critical section, so the two runs' bits differ, while each stays
    // within rounding of the exact sum.
    let mut w = data_workload(16, 8, DataType::F32, Operator::Sum);
    w.staggered = false;
    let cfg = small_switch();
    let (_, in_order) = results(&cfg, &w, Design::SingleBuffer);
    w.jitter_ns = 100.0;
    w.seed = 7;
    let (_, jittered) = results(&cfg, &w, Design::SingleBuffer);
    assert!(in_order != jittered, "single-buffer results should depend on the arrival order");
    let differing: usize =
        in_order.iter().zip(&jittered).map(|(a, b)| a.chunks(4).zip(b.chunks(4)).filter(|(x, y)| x != y).count()).sum();
    assert!(differing > 10, "only {differing} elements differ");
    // Both are within rounding of the exact (f64) sum.
    for b in 0..w.blocks() {
        let blocks: Vec<Vec<u8>> = (0..w.hosts).map(|h| w.host_block(h, b)).collect();
        for i in 0..(w.block_bytes(b) / 4) as usize {
            let exact: f64 = blocks.iter().map(|x| DataType::F32.get(x, i)).sum();
            let mag: f64 = blocks.iter().map(|x| DataType::F32.get(x, i).abs()).sum();
            for r in [&in_order[b as usize], &jittered[b as usize]] {
                assert!((DataType::F32.get(r, i) - exact).abs() <= mag * 1e-6, "block {b} element {i}");
            }
        }
    }
    w.jitter_ns = 0.0;
    let (_, again) = results(&cfg, &w, Design::SingleBuffer);
    assert_eq!(again, in_order, "the same inputs give the same bits (determinism)");
}

#[test]
fn every_design_type_and_operator_matches_the_reference() {
    // Integer types and min/max: order does not matter, so every design must give exactly the
    // reference. f32/f16 sums and products: the tree gives the fixed-order tree's bits.
    for dtype in DataType::ALL {
        for op in [Operator::Sum, Operator::Min, Operator::Max, Operator::Prod] {
            let mut w = data_workload(6, 3, dtype, op);
            w.jitter_ns = 30.0;
            let exact = !dtype.is_float() || matches!(op, Operator::Min | Operator::Max);
            for d in [Design::SingleBuffer, Design::MultiBuffer(2), Design::MultiBuffer(4), Design::Tree] {
                if !exact && d != Design::Tree {
                    continue;
                }
                let (_, got) = results(&small_switch(), &w, d);
                for b in 0..w.blocks() {
                    let want = if exact { reference_in_order(&w, b) } else { reference_tree(&w, b) };
                    assert_eq!(got[b as usize], want, "{dtype} {} {} block {b}", op.name(), d.name());
                }
            }
        }
    }
}

#[test]
fn a_user_defined_operator_runs_and_is_charged_its_own_cycles() {
    // The largest magnitude: |a| max |b|.
    fn absmax(d: DataType, acc: &mut [u8], other: &[u8]) {
        for i in 0..acc.len() / d.bytes() as usize {
            let v = d.get(acc, i).abs().max(d.get(other, i).abs());
            d.set(acc, i, v);
        }
    }
    let user = Operator::User(UserOperator { name: "absmax", combine: absmax, cycles_per_vector_op: 8 });
    let w = data_workload(4, 2, DataType::Int32, user);
    let (r_user, got) = results(&small_switch(), &w, Design::SingleBuffer);
    for b in 0..2 {
        for i in 0..256 {
            let want = (0..4).map(|h| DataType::Int32.get(&w.host_block(h, b), i).abs()).fold(0.0, f64::max);
            assert_eq!(DataType::Int32.get(&got[b as usize], i), want, "block {b} element {i}");
        }
    }
    let (r_sum, _) = results(&small_switch(), &Workload { op: Operator::Sum, ..w }, Design::SingleBuffer);
    // 3 of 4 packets per block combine: 256 elements × (8 − 4) more cycles each.
    assert_eq!(r_user.busy_cycles - r_sum.busy_cycles, 2 * 3 * 256 * 4);
}

#[test]
fn smaller_types_aggregate_more_elements_per_second() {
    // Same bytes, same cycles per vector op: int16 and int8 carry 2× and 4× the elements.
    let cfg = SwitchConfig { backpressure: true, ..SwitchConfig::default() };
    let mut rates = Vec::new();
    for dtype in [DataType::Int32, DataType::Int16, DataType::Int8, DataType::F32] {
        let mut w = Workload::new(64, 1 << 20);
        w.dtype = dtype;
        let r = run(&cfg, &w, &mut Design::SingleBuffer.handlers(dtype, w.op)).unwrap();
        rates.push(r.bandwidth_gbps / 8.0 / dtype.bytes() as f64);
    }
    assert!((rates[1] / rates[0] - 2.0).abs() < 0.05 && (rates[2] / rates[0] - 4.0).abs() < 0.1, "{rates:?}");
    assert!((rates[3] / rates[0] - 1.0).abs() < 0.01, "{rates:?}");
}

#[test]
fn runs_are_deterministic() {
    let mut w = data_workload(9, 16, DataType::F32, Operator::Sum);
    w.jitter_ns = 20.0;
    let cfg = small_switch();
    for d in [Design::SingleBuffer, Design::MultiBuffer(4), Design::Tree] {
        let a = run(&cfg, &w, &mut d.handlers(w.dtype, w.op)).unwrap();
        let b = run(&cfg, &w, &mut d.handlers(w.dtype, w.op)).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
}

#[test]
fn waiting_handlers_spin_and_single_core_subsets_never_do() {
    // 8 hosts sending block b together (no staggering) on subsets of 8 cores: their handlers
    // meet in the block's critical section and spin; with S = 1 every packet of a block runs on
    // one core in turn, and with the tree no handler waits for a buffer.
    let mut w = Workload::new(8, 64 << 10);
    w.staggered = false;
    let cfg = small_switch();
    let spin = |cfg: &SwitchConfig, d: Design| run(cfg, &w, &mut d.handlers(w.dtype, w.op)).unwrap().spin_cycles;
    let single = spin(&cfg, Design::SingleBuffer);
    assert!(single > 100_000, "{single}");
    assert!(spin(&cfg, Design::MultiBuffer(4)) < single / 2);
    assert_eq!(spin(&SwitchConfig { subset_cores: 1, ..cfg }, Design::SingleBuffer), 0);
    // The tree's only lock guards a few cycles of bookkeeping.
    assert!(spin(&cfg, Design::Tree) < single / 50);
}

#[test]
fn subsets_spanning_clusters_pay_for_remote_l1() {
    // The 16 packets of a block reach a subset of 16 cores together. With 16-core clusters every
    // access is local; with 8-core clusters half the handlers aggregate into a buffer in the
    // other cluster's L1, 25× slower, and τ rises accordingly.
    let mut w = Workload::new(16, 64 << 10);
    w.staggered = false;
    w.bandwidth_gbps = 10.0;
    let local_cfg = SwitchConfig { clusters: 2, hpus_per_cluster: 16, subset_cores: 16, ..SwitchConfig::default() };
    let remote_cfg = SwitchConfig { clusters: 4, hpus_per_cluster: 8, subset_cores: 16, ..SwitchConfig::default() };
    let local = run(&local_cfg, &w, &mut Design::SingleBuffer.handlers(w.dtype, w.op)).unwrap();
    let remote = run(&remote_cfg, &w, &mut Design::SingleBuffer.handlers(w.dtype, w.op)).unwrap();
    assert!(remote.tau_cycles > 5.0 * local.tau_cycles, "{} vs {}", remote.tau_cycles, local.tau_cycles);
}

#[test]
fn a_full_packet_memory_drops_or_pauses() {
    // 64 ports at 400 Gb/s into 32 cores: the switch cannot keep up and its 64 KiB L2 fills.
    let cfg = SwitchConfig { l2_packet_bytes: 64 << 10, ..small_switch() };
    let mut w = Workload::new(64, 64 << 10);
    w.bandwidth_gbps = 400.0;
    let dropped = run(&cfg, &w, &mut Design::Tree.handlers(w.dtype, w.op)).unwrap();
    assert_eq!(dropped.status, "stalled");
    assert!(dropped.drops > 0 && dropped.blocks_completed < dropped.blocks);
    assert!(dropped.peak_l2_bytes <= 64 << 10);
    let paused =
        run(&SwitchConfig { backpressure: true, ..cfg }, &w, &mut Design::Tree.handlers(w.dtype, w.op)).unwrap();
    assert_eq!((paused.status, paused.drops), ("completed", 0));
    assert_eq!(paused.peak_l2_bytes, 64 << 10);
}

#[test]
fn working_memory_beyond_l1_is_reported() {
    let cfg = SwitchConfig { l1_bytes_per_cluster: 16 << 10, clusters: 1, subset_cores: 8, ..small_switch() };
    let w = Workload::new(8, 256 << 10); // every block in flight, a buffer each
    let r = run(&cfg, &w, &mut Design::SingleBuffer.handlers(w.dtype, w.op)).unwrap();
    assert_eq!(r.status, "l1_overflow");
    assert!(r.peak_cluster_l1_bytes > 16 << 10);
}

#[test]
fn flare_policy_follows_the_size_thresholds() {
    let kib = |k: u64| k << 10;
    assert_eq!(Design::flare_policy(kib(2048), false), Design::SingleBuffer);
    assert_eq!(Design::flare_policy(kib(513), false), Design::SingleBuffer);
    assert_eq!(Design::flare_policy(kib(512), false), Design::MultiBuffer(4));
    assert_eq!(Design::flare_policy(kib(257), false), Design::MultiBuffer(4));
    assert_eq!(Design::flare_policy(kib(256), false), Design::MultiBuffer(2));
    assert_eq!(Design::flare_policy(kib(129), false), Design::MultiBuffer(2));
    assert_eq!(Design::flare_policy(kib(128), false), Design::Tree);
    assert_eq!(Design::flare_policy(kib(2048), true), Design::Tree);
    assert_eq!(Design::from_name("multi-4"), Some(Design::MultiBuffer(4)));
    assert_eq!(Design::from_name("multi-1"), None);
}

#[test]
fn bad_parameters_are_refused_with_their_field() {
    let w = Workload::new(4, 4096);
    let bad = SwitchConfig { subset_cores: 3, ..small_switch() };
    assert_eq!(run(&bad, &w, &mut Design::Tree.handlers(w.dtype, w.op)).unwrap_err().field, "pspin.subset_cores");
    let bad = SwitchConfig { clock_mhz: 3, ..small_switch() };
    assert_eq!(run(&bad, &w, &mut Design::Tree.handlers(w.dtype, w.op)).unwrap_err().field, "pspin.clock_mhz");
}

// ---- The model of §4–6 against the simulated switch. ------------------------------------

fn model_and_sim(cfg: &SwitchConfig, w: &Workload, d: Design) -> (model::ModelOutput, SwitchReport) {
    let m = ModelInput::new(cfg, w, d).evaluate();
    let r = run(cfg, w, &mut d.handlers(w.dtype, w.op)).unwrap();
    assert_eq!(r.status, "completed");
    (m, r)
}

fn within(measured: f64, model: f64, tol: f64) -> bool {
    (measured - model).abs() <= tol * model.abs()
}

#[test]
fn service_time_and_bandwidth_match_the_model_when_the_switch_is_the_bottleneck() {
    // 64 ports at 100 Gb/s offer 6.4 Tb/s to 512 cores (K/τ ≈ 4 Tb/s): ℬ = K/τ. With full
    // staggering of 1 MiB (δc ≥ L), single and B buffers are uncontended. The simulated τ adds
    // the handler overhead, the lock and the first packet's DMA copy (≤ 10%).
    let cfg = SwitchConfig { backpressure: true, ..SwitchConfig::default() };
    let w = Workload::new(64, 1 << 20);
    for d in [Design::SingleBuffer, Design::MultiBuffer(2), Design::MultiBuffer(4), Design::Tree] {
        let (m, r) = model_and_sim(&cfg, &w, d);
        assert!(within(r.tau_cycles, m.tau_cycles, 0.10), "{}: τ {} vs model {}", d.name(), r.tau_cycles, m.tau_cycles);
        assert!(
            within(r.bandwidth_gbps, m.bandwidth_gbps, 0.12),
            "{}: ℬ {} vs model {}",
            d.name(),
            r.bandwidth_gbps,
            m.bandwidth_gbps
        );
    }
}

#[test]
fn contention_in_one_buffer_matches_equation_2() {
    // No staggering: the 8 packets of a block reach one 8-core subset together, and the next
    // block reaches that subset only after this one is done (5 Gb/s ports), so each burst meets
    // in the critical section on its own: eq. 2's contended τ, L(C − 1)/2 (the first handler
    // only copies its packet; the i-th waits for i − 2 aggregations and does one), plus the
    // overheads.
    let cfg = SwitchConfig { clusters: 8, ..small_switch() };
    let mut w = Workload::new(8, 512 << 10);
    w.staggered = false;
    w.bandwidth_gbps = 5.0;
    let (m, r) = model_and_sim(&cfg, &w, Design::SingleBuffer);
    assert_eq!(m.tau_cycles, 3.5 * 1024.0);
    assert!(within(r.tau_cycles, m.tau_cycles, 0.05), "τ {} vs model {}", r.tau_cycles, m.tau_cycles);
}

#[test]
fn input_buffer_occupancy_matches_equation_1() {
    // Fig. 5 B at switch scale: S = 1, bursts of P = 16 packets of one block to one core, the
    // system sized so that K/τ ≈ 1/δ. The longest queue in front of a core is eq. 1's Q; eq. 1's
    // 𝒬 = (Q + 1)K counts every core at its peak at once, while the bursts reach the K cores one
    // after the other, so the simulated peak lies between half of 𝒬 and 𝒬.
    let cfg = SwitchConfig { clusters: 2, hpus_per_cluster: 8, subset_cores: 1, ..SwitchConfig::default() };
    let mut w = Workload::new(16, 256 << 10);
    w.staggered = false;
    w.bandwidth_gbps = 1024.0 * 8.0 / 1100.0;
    let (m, r) = model_and_sim(&cfg, &w, Design::SingleBuffer);
    assert!(within(r.max_subset_queue as f64, m.queue, 0.10), "Q {} vs model {}", r.max_subset_queue, m.queue);
    let peak = r.peak_packets as f64;
    assert!(
        peak <= m.packets_in_switch && peak >= 0.45 * m.packets_in_switch,
        "𝒬 {} vs model {}",
        peak,
        m.packets_in_switch
    );
    // With staggering (δc = δ·Z/N ≫ τ/S) the bursts vanish: the model has Q = 0 and 𝒬 = K. The
    // simulated ports send in lockstep (16 packets of 16 blocks at once), so at most one packet
    // waits per core: Q ≤ 1 and 𝒬 ≤ 2K, against 16 waiting per core without staggering.
    w.staggered = true;
    let (m, r) = model_and_sim(&cfg, &w, Design::SingleBuffer);
    assert_eq!((m.queue, m.packets_in_switch), (0.0, 16.0));
    assert!(r.max_subset_queue <= 1 && r.peak_packets <= 32, "Q {} 𝒬 {}", r.max_subset_queue, r.peak_packets);
}

#[test]
fn block_latency_and_working_memory_follow_littles_law() {
    // Staggered 1 MiB at line rate below the switch's capacity: ℒ ≈ (P − 1)δc + τ and the
    // working memory ≈ M·(ℬ/P)·ℒ buffers.
    let cfg = SwitchConfig::default();
    let mut w = Workload::new(32, 1 << 20);
    w.bandwidth_gbps = 100.0; // 3.2 Tb/s < K/τ
    for d in [Design::SingleBuffer, Design::MultiBuffer(4)] {
        let (m, r) = model_and_sim(&cfg, &w, d);
        assert!(
            within(r.block_latency_cycles, m.block_latency_cycles, 0.10),
            "{}: ℒ {} vs {}",
            d.name(),
            r.block_latency_cycles,
            m.block_latency_cycles
        );
        assert!(
            within(r.peak_working_bytes as f64, m.working_bytes, 0.15),
            "{}: ℛ {} vs {}",
            d.name(),
            r.peak_working_bytes,
            m.working_bytes
        );
    }
}

// ---- The example handler set. -------------------------------------------------------------

#[test]
fn quantised_int8_sum_matches_the_dequantised_sum_within_half_a_step() {
    let mut w = data_workload(12, 4, DataType::Int8, Operator::Sum);
    w.header_scales = true;
    w.jitter_ns = 10.0;
    let r = run(&small_switch(), &w, &mut QuantisedInt8Sum::new()).unwrap();
    assert_eq!(r.status, "completed");
    let mut exact_steps = 0;
    for b in 0..w.blocks() {
        let got = QuantisedInt8Sum::dequantise(r.results[b as usize].as_ref().unwrap(), r.result_words[b as usize]);
        let step = f32::from_bits(r.result_words[b as usize] as u32);
        for (i, g) in got.iter().enumerate() {
            let exact: f64 =
                (0..w.hosts).map(|h| DataType::Int8.get(&w.host_block(h, b), i) * w.scale(h, b) as f64).sum();
            assert!((*g as f64 - exact).abs() <= step as f64 * 0.5 + 1e-4, "block {b} element {i}: {g} vs {exact}");
            exact_steps += ((*g as f64 - exact).abs() < 1e-6) as u32;
        }
    }
    assert!(exact_steps > 0);
    // A dequantise + accumulate costs 5 cycles per element: more than the int8 sum's 1 cycle
    // per vector of 4.
    let plain = run(&small_switch(), &w, &mut Design::SingleBuffer.handlers(DataType::Int8, Operator::Sum)).unwrap();
    assert!(r.busy_cycles > 10 * plain.busy_cycles / 2, "{} vs {}", r.busy_cycles, plain.busy_cycles);
}
