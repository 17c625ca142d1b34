//! Allreduce algorithms (and their reduce-scatter / allgather halves) as schedule generators.
//!
//! Every generator takes a [`Layout`]: the rank count and the torus shape the ranks are laid
//! on (linearly, dimension 0 fastest, as in the Swing paper §2.2). Non-torus networks use a
//! 1D layout `[p]`. Ports follow the torus convention: `2i` = `+1` in dimension `i`, `2i+1` =
//! `−1`.

pub mod bucket;
mod chunks;
pub mod hamiltonian;
pub mod recursive_doubling;
pub mod ring;
pub mod swing;

use crate::ir::{Collective, Schedule};

/// Ranks laid out on a torus of shape `dims` (product = ranks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub dims: Vec<u32>,
}

impl Layout {
    pub fn new(dims: Vec<u32>) -> Result<Layout, String> {
        if dims.is_empty() || dims.iter().any(|&d| d == 0) {
            return Err(format!("invalid torus shape {dims:?}"));
        }
        Ok(Layout { dims })
    }
    pub fn line(p: u32) -> Layout {
        Layout { dims: vec![p] }
    }
    pub fn ranks(&self) -> u32 {
        self.dims.iter().product()
    }
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }
    pub fn coords(&self, r: u32) -> Vec<u32> {
        let mut r = r;
        self.dims
            .iter()
            .map(|&d| {
                let c = r % d;
                r /= d;
                c
            })
            .collect()
    }
    pub fn rank(&self, c: &[u32]) -> u32 {
        let mut r = 0;
        for i in (0..self.dims.len()).rev() {
            r = r * self.dims[i] + c[i];
        }
        r
    }
    /// The rank `delta` steps away from `r` along dimension `dim` (with wrap-around).
    pub fn shift(&self, r: u32, dim: usize, delta: i64) -> u32 {
        let mut c = self.coords(r);
        let d = self.dims[dim] as i64;
        c[dim] = (((c[dim] as i64 + delta) % d + d) % d) as u32;
        self.rank(&c)
    }
    /// Port to use from `r` towards a peer `delta` away in `dim` (the minimal direction;
    /// `+` on a tie).
    pub fn port_towards(&self, dim: usize, delta: i64) -> u16 {
        let d = self.dims[dim] as i64;
        let fwd = ((delta % d) + d) % d;
        if fwd <= d - fwd {
            2 * dim as u16
        } else {
            2 * dim as u16 + 1
        }
    }
}

/// Builds the schedule of the variant `algorithm` (a name of [`crate::registry`]) for
/// `collective` on `layout`.
pub fn build(algorithm: &str, collective: Collective, layout: &Layout) -> Result<Schedule, String> {
    crate::registry::build(algorithm, collective, layout)
}
