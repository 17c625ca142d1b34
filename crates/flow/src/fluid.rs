//! Max-min fair sharing of link capacity among fluid flows (progressive filling).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A fair share in bytes/ps, totally ordered (shares are never NaN).
#[derive(Clone, Copy, PartialEq)]
struct Share(f64);
impl Eq for Share {}
impl PartialOrd for Share {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Share {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// A set of directed links with capacities and the active flows crossing them. Flow paths
/// are ranges of a shared arena of link ids (no allocation per flow).
pub struct Fluid<'a> {
    cap: Vec<f64>,
    arena: &'a [u32],
    /// Per flow: links crossed (range of `arena`), remaining bytes, current rate (bytes/ps).
    paths: Vec<(u32, u32)>,
    remaining: Vec<f64>,
    rate: Vec<f64>,
    active: Vec<u32>,
    // Scratch for the solver (kept to avoid reallocating per recomputation).
    residual: Vec<f64>,
    count: Vec<u32>,
    touched: Vec<u32>,
    frozen: Vec<bool>,
    /// Flows per link among the active ones (rebuilt on each solve).
    link_flows: Vec<Vec<u32>>,
}

/// Relative tolerance under which two completion times are treated as simultaneous, so
/// symmetric collectives do not re-solve once per flow.
pub const SAME_TIME_REL: f64 = 1e-9;

impl<'a> Fluid<'a> {
    /// `cap[l]` in bytes per picosecond; flow paths are ranges of `arena`.
    pub fn new(cap: Vec<f64>, arena: &'a [u32]) -> Self {
        let n = cap.len();
        Fluid {
            cap,
            arena,
            paths: Vec::new(),
            remaining: Vec::new(),
            rate: Vec::new(),
            active: Vec::new(),
            residual: vec![0.0; n],
            count: vec![0; n],
            touched: Vec::new(),
            frozen: Vec::new(),
            link_flows: vec![Vec::new(); n],
        }
    }

    /// Adds a flow over the links `arena[path.0 .. path.0 + path.1]`; returns its id. Call
    /// [`Fluid::solve`] before reading rates.
    pub fn add(&mut self, path: (u32, u32), bytes: f64) -> u32 {
        let id = self.paths.len() as u32;
        self.paths.push(path);
        self.remaining.push(bytes.max(0.0));
        self.rate.push(0.0);
        self.frozen.push(false);
        self.active.push(id);
        id
    }

    pub fn active(&self) -> &[u32] {
        &self.active
    }

    pub fn rate(&self, f: u32) -> f64 {
        self.rate[f as usize]
    }

    fn path(&self, f: u32) -> &'a [u32] {
        let (start, len) = self.paths[f as usize];
        &self.arena[start as usize..(start + len) as usize]
    }

    /// Max-min fair rates for the active flows (progressive filling): repeatedly find the
    /// most constrained link (smallest residual capacity per unfrozen flow), give its
    /// unfrozen flows that share, and remove them.
    pub fn solve(&mut self) {
        for &l in &self.touched {
            self.link_flows[l as usize].clear();
            self.count[l as usize] = 0;
        }
        self.touched.clear();
        for &f in &self.active {
            self.frozen[f as usize] = false;
            self.rate[f as usize] = 0.0;
            for &l in self.path(f) {
                let li = l as usize;
                if self.link_flows[li].is_empty() {
                    self.touched.push(l);
                    self.residual[li] = self.cap[li];
                }
                self.link_flows[li].push(f);
                self.count[li] += 1;
            }
        }
        // Flows with an empty path (same-node transfers) get an infinite rate.
        for &f in &self.active {
            if self.paths[f as usize].1 == 0 {
                self.rate[f as usize] = f64::INFINITY;
                self.frozen[f as usize] = true;
            }
        }
        // Min-heap of (fair share, link), each link at most once. Freezing a flow at the
        // smallest share never lowers another link's share ((R − s)/(n − 1) ≥ R/n when
        // s ≤ R/n), so a stored share is a lower bound: a popped entry whose link's share has
        // grown is pushed back with the current value instead of being updated on every
        // change (that made the heap O(Σ path lengths) and dominated the solve).
        let mut heap: BinaryHeap<Reverse<(Share, u32)>> = BinaryHeap::with_capacity(self.touched.len());
        for &l in &self.touched {
            let li = l as usize;
            heap.push(Reverse((Share(self.residual[li] / self.count[li] as f64), l)));
        }
        while let Some(Reverse((Share(share), l))) = heap.pop() {
            let li = l as usize;
            if self.count[li] == 0 {
                continue;
            }
            let current = self.residual[li] / self.count[li] as f64;
            if current != share {
                heap.push(Reverse((Share(current), l)));
                continue;
            }
            let share = share.max(0.0);
            let flows = std::mem::take(&mut self.link_flows[li]);
            for &f in &flows {
                if self.frozen[f as usize] {
                    continue;
                }
                self.frozen[f as usize] = true;
                self.rate[f as usize] = share;
                for &m in self.path(f) {
                    let mi = m as usize;
                    self.residual[mi] -= share;
                    self.count[mi] -= 1;
                }
            }
            self.link_flows[li] = flows;
        }
    }

    /// Time (ps, from now) until the next active flow finishes, at current rates.
    pub fn next_completion(&self) -> Option<f64> {
        self.active
            .iter()
            .map(|&f| if self.rate[f as usize] > 0.0 { self.remaining[f as usize] / self.rate[f as usize] } else { f64::INFINITY })
            .fold(None, |acc: Option<f64>, t| Some(acc.map_or(t, |a| a.min(t))))
    }

    /// Advances every active flow by `dt` ps and removes those that finished (within the
    /// same-time tolerance); returns them in id order.
    pub fn advance(&mut self, dt: f64, done: &mut Vec<u32>) {
        done.clear();
        for &f in &self.active {
            let fi = f as usize;
            let r = self.rate[fi];
            self.remaining[fi] -= r * dt;
            let left_time = if r > 0.0 { self.remaining[fi] / r } else { f64::INFINITY };
            if self.remaining[fi] <= 1e-6 || left_time <= dt.max(1.0) * SAME_TIME_REL {
                done.push(f);
            }
        }
        if !done.is_empty() {
            done.sort_unstable();
            self.active.retain(|f| done.binary_search(f).is_err());
        }
    }
}
