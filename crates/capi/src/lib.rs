//! C ABI over `reducelab-sched`: the MPI runtime (`mpi/`) asks for one rank's program of a
//! schedule and gets it as flat arrays ([`RlProgram`]). The schedules themselves are built
//! only by `reducelab_sched::algos` (one definition of each algorithm) and, for up to
//! [`CHECK_MAX_RANKS`] ranks, proven by the symbolic checker before they are handed out.
//!
//! Every function is safe to call with bad arguments: null pointers, unknown names and
//! invalid shapes return an error code and an error message, never a panic across the
//! FFI boundary (panics are caught and reported as errors).

use reducelab_sched::algos::{self, Layout};
use reducelab_sched::registry::{self, Costs};
use reducelab_sched::{check, select, Collective, RecvOp, Schedule};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// Schedules for at most this many ranks are checked before use (the check costs
/// O(steps · blocks · ranks); above this size the generators' own tests are relied on).
pub const CHECK_MAX_RANKS: u32 = 512;

pub const RL_OK: i32 = 0;
pub const RL_ERR_ARG: i32 = 1;
pub const RL_ERR_ALGORITHM: i32 = 2;
pub const RL_ERR_INTERNAL: i32 = 3;

pub const RL_COLL_ALLREDUCE: i32 = 0;
pub const RL_COLL_REDUCE_SCATTER: i32 = 1;
pub const RL_COLL_ALLGATHER: i32 = 2;

/// Transfer kinds in [`RlTransfer::op`].
pub const RL_SEND: u32 = 0;
pub const RL_RECV_COPY: u32 = 1;
/// `local = incoming ⊕ local`.
pub const RL_RECV_REDUCE_INCOMING_FIRST: u32 = 2;
/// `local = local ⊕ incoming`.
pub const RL_RECV_REDUCE_LOCAL_FIRST: u32 = 3;

/// One send or receive of one rank: `nranges` block ranges starting at `ranges[first_range]`
/// (each range is two `u32`: first block, one past the last block).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlTransfer {
    pub peer: u32,
    pub op: u32,
    pub first_range: u32,
    pub nranges: u32,
    /// Number of blocks (sum of the ranges' lengths).
    pub nblocks: u32,
    /// Receive only: 1 if the receive may land directly in the user buffer (a copy of one
    /// contiguous range that no send or other receive of the same step touches).
    pub direct: u32,
}

/// One step: sends are `transfers[first .. first + nsends]`, receives follow them
/// (`transfers[first + nsends .. first + nsends + nrecvs]`, in the order to apply them).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlStep {
    pub first: u32,
    pub nsends: u32,
    pub nrecvs: u32,
}

/// One rank's program. Owned by Rust; free with [`rl_program_free`].
#[repr(C)]
pub struct RlProgram {
    pub ranks: u32,
    pub rank: u32,
    pub blocks: u32,
    pub nsteps: u32,
    /// 1 if the checker proved every reduction combines contributions in rank order.
    pub noncommutative_safe: u32,
    pub steps: *const RlStep,
    pub transfers: *const RlTransfer,
    pub ranges: *const u32,
    /// `blocks` owners for reduce-scatter / allgather, null otherwise.
    pub block_owner: *const u32,
    /// NUL-terminated algorithm name the schedule was built by.
    pub algorithm: *const c_char,
}

struct Owned {
    header: RlProgram,
    _steps: Vec<RlStep>,
    _transfers: Vec<RlTransfer>,
    _ranges: Vec<u32>,
    _owner: Vec<u32>,
    _name: Vec<u8>,
}

fn collective_of(c: i32) -> Result<Collective, String> {
    match c {
        RL_COLL_ALLREDUCE => Ok(Collective::Allreduce),
        RL_COLL_REDUCE_SCATTER => Ok(Collective::ReduceScatter),
        RL_COLL_ALLGATHER => Ok(Collective::Allgather),
        _ => Err(format!("unknown collective {c}")),
    }
}

fn overlaps(a: &[(u32, u32)], b: &[(u32, u32)]) -> bool {
    a.iter().any(|&(s, e)| b.iter().any(|&(t, f)| s < f && t < e))
}

/// A flat program: steps, transfers and block ranges (two `u32` each).
pub type Flat = (Vec<RlStep>, Vec<RlTransfer>, Vec<u32>);

/// Flattens rank `rank`'s program of `s`.
pub fn flatten(s: &Schedule, rank: u32) -> Result<Flat, String> {
    let prog = s
        .programs
        .get(rank as usize)
        .ok_or_else(|| format!("rank {rank} out of range (schedule has {} ranks)", s.ranks))?;
    let (mut steps, mut xfers, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
    for st in &prog.steps {
        let first = xfers.len() as u32;
        let mut push = |t: &reducelab_sched::Transfer, op: u32, direct: bool| {
            let first_range = (ranges.len() / 2) as u32;
            for &(a, b) in &t.blocks.0 {
                ranges.push(a);
                ranges.push(b);
            }
            xfers.push(RlTransfer {
                peer: t.peer,
                op,
                first_range,
                nranges: t.blocks.0.len() as u32,
                nblocks: t.blocks.len(),
                direct: direct as u32,
            });
        };
        for t in &st.sends {
            push(t, RL_SEND, false);
        }
        for (i, t) in st.recvs.iter().enumerate() {
            let op = match t.op {
                Some(RecvOp::Copy) => RL_RECV_COPY,
                Some(RecvOp::ReduceIncomingFirst) => RL_RECV_REDUCE_INCOMING_FIRST,
                Some(RecvOp::ReduceLocalFirst) => RL_RECV_REDUCE_LOCAL_FIRST,
                None => return Err(format!("rank {rank}: receive without an op")),
            };
            let direct = op == RL_RECV_COPY
                && t.blocks.runs() == 1
                && !st.sends.iter().any(|x| overlaps(&x.blocks.0, &t.blocks.0))
                && !st.recvs.iter().enumerate().any(|(j, x)| j != i && overlaps(&x.blocks.0, &t.blocks.0));
            push(t, op, direct);
        }
        steps.push(RlStep { first, nsends: st.sends.len() as u32, nrecvs: st.recvs.len() as u32 });
    }
    Ok((steps, xfers, ranges))
}

/// Builds `algorithm`'s schedule for `collective` on a torus of shape `dims` and returns
/// rank `rank`'s program (checked when the schedule has at most [`CHECK_MAX_RANKS`] ranks).
fn program(algorithm: &str, collective: i32, dims: &[u32], rank: u32) -> Result<Box<Owned>, (i32, String)> {
    let coll = collective_of(collective).map_err(|e| (RL_ERR_ARG, e))?;
    let layout = Layout::new(dims.to_vec()).map_err(|e| (RL_ERR_ARG, e))?;
    if rank >= layout.ranks() {
        return Err((RL_ERR_ARG, format!("rank {rank} out of range for shape {dims:?}")));
    }
    let s = algos::build(algorithm, coll, &layout).map_err(|e| (RL_ERR_ALGORITHM, e))?;
    if s.ranks <= CHECK_MAX_RANKS {
        check(&s).map_err(|e| (RL_ERR_INTERNAL, format!("schedule {algorithm} on {dims:?} fails the checker: {e}")))?;
    }
    let (steps, transfers, ranges) = flatten(&s, rank).map_err(|e| (RL_ERR_INTERNAL, e))?;
    let owner = s.block_owner.clone();
    let mut name = s.algorithm.clone().into_bytes();
    name.retain(|&b| b != 0);
    name.push(0);
    let header = RlProgram {
        ranks: s.ranks,
        rank,
        blocks: s.blocks,
        nsteps: steps.len() as u32,
        noncommutative_safe: s.noncommutative_safe as u32,
        steps: steps.as_ptr(),
        transfers: transfers.as_ptr(),
        ranges: ranges.as_ptr(),
        block_owner: if owner.is_empty() { std::ptr::null() } else { owner.as_ptr() },
        algorithm: name.as_ptr() as *const c_char,
    };
    Ok(Box::new(Owned { header, _steps: steps, _transfers: transfers, _ranges: ranges, _owner: owner, _name: name }))
}

/// Runs `f` with panics caught: on success hands its value to `store` and returns `RL_OK`;
/// on an error or a panic writes the message to `err` and returns the error code.
fn guarded<T>(
    err: *mut c_char,
    errlen: usize,
    what: &str,
    f: impl FnOnce() -> Result<T, (i32, String)>,
    store: impl FnOnce(T),
) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => {
            store(v);
            RL_OK
        }
        Ok(Err((code, msg))) => {
            write_err(err, errlen, &msg);
            code
        }
        Err(_) => {
            write_err(err, errlen, &format!("internal error (panic) {what}"));
            RL_ERR_INTERNAL
        }
    }
}

fn write_err(err: *mut c_char, errlen: usize, msg: &str) {
    if err.is_null() || errlen == 0 {
        return;
    }
    let bytes = msg.as_bytes();
    let n = bytes.len().min(errlen - 1);
    // SAFETY: the caller promises `err` has room for `errlen` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

unsafe fn str_arg<'a>(p: *const c_char) -> Result<&'a str, String> {
    if p.is_null() {
        return Err("null algorithm name".into());
    }
    CStr::from_ptr(p).to_str().map_err(|_| "algorithm name is not UTF-8".to_string())
}

unsafe fn dims_arg<'a>(dims: *const u32, ndims: usize) -> Result<&'a [u32], String> {
    if dims.is_null() || ndims == 0 || ndims > 16 {
        return Err(format!("invalid torus shape (ndims = {ndims})"));
    }
    Ok(std::slice::from_raw_parts(dims, ndims))
}

/// Builds rank `rank`'s program; on success stores it in `*out` and returns [`RL_OK`], else
/// returns an `RL_ERR_*` code and writes a message into `err` (`errlen` bytes, may be null).
///
/// # Safety
/// `algorithm` is a NUL-terminated string, `dims` points to `ndims` values, `out` is valid
/// for a write and `err` (if not null) for `errlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn rl_program_build(
    algorithm: *const c_char,
    collective: i32,
    dims: *const u32,
    ndims: usize,
    rank: u32,
    out: *mut *const RlProgram,
    err: *mut c_char,
    errlen: usize,
) -> i32 {
    if out.is_null() {
        write_err(err, errlen, "null output pointer");
        return RL_ERR_ARG;
    }
    *out = std::ptr::null();
    guarded(
        err,
        errlen,
        "while building the schedule",
        || {
            let name = str_arg(algorithm).map_err(|e| (RL_ERR_ARG, e))?;
            let dims = dims_arg(dims, ndims).map_err(|e| (RL_ERR_ARG, e))?;
            program(name, collective, dims, rank)
        },
        |owned| *out = &Box::leak(owned).header as *const RlProgram,
    )
}

/// Frees a program returned by [`rl_program_build`] (null is ignored).
///
/// # Safety
/// `p` was returned by [`rl_program_build`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rl_program_free(p: *const RlProgram) {
    if !p.is_null() {
        // `header` is the first field of the leaked `Owned` (repr(Rust) does not promise
        // that, so recover the box through the field offset).
        let off = std::mem::offset_of!(Owned, header);
        drop(Box::from_raw((p as *const u8).sub(off) as *mut Owned));
    }
}

/// For a family with latency- and bandwidth-optimal variants (`swing`, `recursive-doubling`):
/// the smallest vector size in bytes from which the bandwidth variant is cheaper in the α-β
/// model (`alpha_s` per message, `beta_s_per_byte` per byte), written to `*out`.
///
/// # Safety
/// As for [`rl_program_build`].
#[no_mangle]
pub unsafe extern "C" fn rl_crossover_bytes(
    family: *const c_char,
    dims: *const u32,
    ndims: usize,
    alpha_s: f64,
    beta_s_per_byte: f64,
    out: *mut u64,
    err: *mut c_char,
    errlen: usize,
) -> i32 {
    if out.is_null() {
        write_err(err, errlen, "null output pointer");
        return RL_ERR_ARG;
    }
    guarded(
        err,
        errlen,
        "in the crossover computation",
        || {
            let name = str_arg(family).map_err(|e| (RL_ERR_ARG, e))?;
            let dims = dims_arg(dims, ndims).map_err(|e| (RL_ERR_ARG, e))?;
            let layout = Layout::new(dims.to_vec()).map_err(|e| (RL_ERR_ARG, e))?;
            select::try_crossover_bytes(name, &layout, alpha_s, beta_s_per_byte, 0.0).map_err(|e| (RL_ERR_ALGORITHM, e))
        },
        |v| *out = v,
    )
}

/// One entry of the algorithm registry (`reducelab_sched::registry`), as C strings that live
/// as long as the process. Fields that do not apply to the entry's kind are `""` / 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RlAlgorithmInfo {
    pub name: *const c_char,
    pub family: *const c_char,
    /// `variant`, `family`, `alias` or `policy`.
    pub kind: *const c_char,
    /// Variant: `latency` or `bandwidth`.
    pub size_class: *const c_char,
    /// The variants the name may resolve to, comma-separated (a variant: itself).
    pub resolves_to: *const c_char,
    /// Variant: what the interposition library runs instead for reduce-scatter / allgather.
    pub substitute: *const c_char,
    pub summary: *const c_char,
    /// Variant: most ranks of a schedule.
    pub max_ranks: u32,
    /// Variant: 1 if its timing plan is built directly.
    pub direct_plan: u32,
    /// Variant: 1 if the Swing paper's Table 2 has a row for it.
    pub model_row: u32,
    /// Variant: 1 if its 1D schedules are proven rank-ordered (non-commutative operators).
    pub rank_ordered_1d: u32,
    /// Variant: 1 if it builds reduce-scatter and allgather.
    pub halves: u32,
    /// Variant: fewest torus dimensions it builds on.
    pub min_dims: u32,
    /// The collectives the name runs, comma-separated (`allreduce,reduce_scatter,…`; a family,
    /// alias or policy: those of the variants it resolves to).
    pub collectives: *const c_char,
}

// SAFETY: the pointers point into `TABLE`, immutable `CString`s that are never freed.
unsafe impl Send for RlAlgorithmInfo {}
unsafe impl Sync for RlAlgorithmInfo {}

struct Table {
    infos: Vec<RlAlgorithmInfo>,
    _strings: Vec<CString>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut strings = Vec::new();
        let mut c = |s: &str| -> *const c_char {
            let cs = CString::new(s.replace('\0', "")).expect("no NUL");
            let p = cs.as_ptr();
            strings.push(cs);
            p
        };
        let infos = registry::all()
            .iter()
            .map(|a| RlAlgorithmInfo {
                name: c(a.name),
                family: c(a.family),
                kind: c(a.kind.as_str()),
                size_class: c(a.size_class.map_or("", |s| s.as_str())),
                resolves_to: c(&a.resolves_to().join(",")),
                substitute: c(a.substitute.unwrap_or("")),
                summary: c(a.summary),
                max_ranks: a.max_ranks,
                direct_plan: a.direct_plan.is_some() as u32,
                model_row: a.model_row.is_some() as u32,
                rank_ordered_1d: a.rank_ordered_1d as u32,
                halves: a.halves as u32,
                min_dims: a.min_dims,
                collectives: c(&a.collectives().join(",")),
            })
            .collect();
        Table { infos, _strings: strings }
    })
}

/// Number of entries of the algorithm registry.
#[no_mangle]
pub extern "C" fn rl_algorithm_count() -> usize {
    registry::all().len()
}

/// Entry `i` of the registry (`0 <= i < rl_algorithm_count()`) into `*out`; [`RL_ERR_ARG`] if
/// `i` is out of range or `out` is null.
///
/// # Safety
/// `out` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rl_algorithm_info(i: usize, out: *mut RlAlgorithmInfo) -> i32 {
    let r = catch_unwind(|| table().infos.get(i).copied());
    match (r, out.is_null()) {
        (Ok(Some(info)), false) => {
            *out = info;
            RL_OK
        }
        (Err(_), _) => RL_ERR_INTERNAL,
        _ => RL_ERR_ARG,
    }
}

/// The registry's name `name` (not owned by the caller), if there is one.
fn registry_name(name: &str) -> Option<*const c_char> {
    let t = table();
    registry::all().iter().position(|a| a.name == name).map(|i| t.infos[i].name)
}

/// Resolves any registry name (variant, family, alias, policy) to the variant that runs
/// `collective` of `bytes` bytes on a torus of shape `dims` (`reducelab_sched::registry::resolve`:
/// families by the α-β model with `alpha_s` per step and `beta_s_per_byte` per byte; with
/// `substitute` != 0 the interposition library's reduce-scatter / allgather substitutes). On
/// success `*out` is the variant's name (static, NUL-terminated). An unknown name is
/// [`RL_ERR_ALGORITHM`] with a message listing every known name.
///
/// # Safety
/// As for [`rl_program_build`]; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rl_algorithm_resolve(
    name: *const c_char,
    collective: i32,
    dims: *const u32,
    ndims: usize,
    bytes: u64,
    alpha_s: f64,
    beta_s_per_byte: f64,
    substitute: i32,
    out: *mut *const c_char,
    err: *mut c_char,
    errlen: usize,
) -> i32 {
    if out.is_null() {
        write_err(err, errlen, "null output pointer");
        return RL_ERR_ARG;
    }
    *out = std::ptr::null();
    guarded(
        err,
        errlen,
        "while resolving the algorithm",
        || {
            let name = str_arg(name).map_err(|e| (RL_ERR_ARG, e))?;
            let coll = collective_of(collective).map_err(|e| (RL_ERR_ARG, e))?;
            registry::lookup(name).map_err(|e| (RL_ERR_ALGORITHM, e))?;
            let dims = dims_arg(dims, ndims).map_err(|e| (RL_ERR_ARG, e))?;
            let layout = Layout::new(dims.to_vec()).map_err(|e| (RL_ERR_ARG, e))?;
            let costs = Costs { alpha_s, beta_s_per_byte, per_hop_s: 0.0 };
            let v = registry::resolve(name, coll, &layout, bytes, &costs, substitute != 0)
                .map_err(|e| (RL_ERR_ALGORITHM, e))?;
            Ok(registry_name(v.name).expect("a registry variant"))
        },
        |p| *out = p,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn build(name: &str, coll: i32, dims: &[u32], rank: u32) -> Result<*const RlProgram, (i32, String)> {
        let n = CString::new(name).unwrap();
        let mut out = std::ptr::null();
        let mut err = [0 as c_char; 256];
        let rc = unsafe {
            rl_program_build(n.as_ptr(), coll, dims.as_ptr(), dims.len(), rank, &mut out, err.as_mut_ptr(), err.len())
        };
        if rc == RL_OK {
            Ok(out)
        } else {
            Err((rc, unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned()))
        }
    }

    /// The flat program has exactly the schedule's transfers, in order, for every rank.
    #[test]
    fn flat_program_matches_schedule() {
        for (name, dims) in [
            ("ring", vec![5]),
            ("swing-bandwidth", vec![6]),
            ("swing-bandwidth", vec![4, 2]),
            ("recursive-doubling-latency", vec![7]),
            ("bucket", vec![3, 2]),
        ] {
            let s = algos::build(name, Collective::Allreduce, &Layout::new(dims.clone()).unwrap()).unwrap();
            for r in 0..s.ranks {
                let p = build(name, RL_COLL_ALLREDUCE, &dims, r).unwrap();
                let h = unsafe { &*p };
                assert_eq!((h.ranks, h.rank, h.blocks), (s.ranks, r, s.blocks));
                let prog = &s.programs[r as usize];
                assert_eq!(h.nsteps as usize, prog.steps.len());
                let steps = unsafe { std::slice::from_raw_parts(h.steps, h.nsteps as usize) };
                for (st, want) in steps.iter().zip(&prog.steps) {
                    assert_eq!((st.nsends as usize, st.nrecvs as usize), (want.sends.len(), want.recvs.len()));
                    let all: Vec<_> = want.sends.iter().chain(&want.recvs).collect();
                    for (k, t) in all.iter().enumerate() {
                        let x = unsafe { *h.transfers.add(st.first as usize + k) };
                        assert_eq!(x.peer, t.peer);
                        assert_eq!(x.nblocks, t.blocks.len());
                        let rs: Vec<(u32, u32)> = (0..x.nranges as usize)
                            .map(|i| unsafe {
                                (
                                    *h.ranges.add(2 * (x.first_range as usize + i)),
                                    *h.ranges.add(2 * (x.first_range as usize + i) + 1),
                                )
                            })
                            .collect();
                        assert_eq!(rs, t.blocks.0);
                        assert_eq!(x.op == RL_SEND, k < want.sends.len());
                    }
                }
                assert_eq!(unsafe { CStr::from_ptr(h.algorithm) }.to_str().unwrap(), s.algorithm);
                unsafe { rl_program_free(p) };
            }
        }
    }

    #[test]
    fn only_rank_order_schedules_claim_noncommutative_safety() {
        let rd = build("recursive-doubling-latency", RL_COLL_ALLREDUCE, &[6], 0).unwrap();
        assert_eq!(unsafe { (*rd).noncommutative_safe }, 1);
        let sw = build("swing-bandwidth", RL_COLL_ALLREDUCE, &[8], 0).unwrap();
        assert_eq!(unsafe { (*sw).noncommutative_safe }, 0);
        unsafe {
            rl_program_free(rd);
            rl_program_free(sw)
        };
    }

    #[test]
    fn reduce_scatter_has_owners() {
        let p = build("ring", RL_COLL_REDUCE_SCATTER, &[4], 1).unwrap();
        let h = unsafe { &*p };
        assert!(!h.block_owner.is_null());
        let owners = unsafe { std::slice::from_raw_parts(h.block_owner, h.blocks as usize) };
        // Each rank's blocks are contiguous and in rank order (MPI reduce-scatter layout).
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
        unsafe { rl_program_free(p) };
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert_eq!(build("nope", RL_COLL_ALLREDUCE, &[4], 0).unwrap_err().0, RL_ERR_ALGORITHM);
        assert_eq!(build("ring", RL_COLL_ALLREDUCE, &[4], 4).unwrap_err().0, RL_ERR_ARG);
        assert_eq!(build("ring", 9, &[4], 0).unwrap_err().0, RL_ERR_ARG);
        assert_eq!(build("ring", RL_COLL_ALLREDUCE, &[0], 0).unwrap_err().0, RL_ERR_ARG);
        let e = build("hamiltonian-rings", RL_COLL_ALLREDUCE, &[3, 2], 0).unwrap_err();
        assert!(!e.1.is_empty());
        let mut out = std::ptr::null();
        let rc =
            unsafe { rl_program_build(std::ptr::null(), 0, [4u32].as_ptr(), 1, 0, &mut out, std::ptr::null_mut(), 0) };
        assert_eq!(rc, RL_ERR_ARG);
        let rc =
            unsafe { rl_program_build(c"ring".as_ptr(), 0, std::ptr::null(), 1, 0, &mut out, std::ptr::null_mut(), 0) };
        assert_eq!(rc, RL_ERR_ARG);
    }

    fn resolve(name: &str, coll: i32, dims: &[u32], bytes: u64, substitute: bool) -> Result<String, (i32, String)> {
        let n = CString::new(name).unwrap();
        let mut out = std::ptr::null();
        let mut err = [0 as c_char; 1024];
        let rc = unsafe {
            rl_algorithm_resolve(
                n.as_ptr(),
                coll,
                dims.as_ptr(),
                dims.len(),
                bytes,
                2e-6,
                1.0 / 4e9,
                substitute as i32,
                &mut out,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc == RL_OK {
            Ok(unsafe { CStr::from_ptr(out) }.to_str().unwrap().to_string())
        } else {
            Err((rc, unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned()))
        }
    }

    /// The C view of the registry is the registry, entry by entry.
    #[test]
    fn registry_is_exported_entry_by_entry() {
        let n = rl_algorithm_count();
        assert_eq!(n, registry::all().len());
        let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
        for (i, a) in registry::all().iter().enumerate() {
            let mut info = std::mem::MaybeUninit::<RlAlgorithmInfo>::uninit();
            assert_eq!(unsafe { rl_algorithm_info(i, info.as_mut_ptr()) }, RL_OK);
            let info = unsafe { info.assume_init() };
            assert_eq!(s(info.name), a.name);
            assert_eq!(s(info.family), a.family);
            assert_eq!(s(info.kind), a.kind.as_str());
            assert_eq!(s(info.resolves_to), a.resolves_to().join(","));
            assert_eq!(info.max_ranks, a.max_ranks);
            assert_eq!(s(info.collectives), a.collectives().join(","));
            // Every name resolves through the C ABI to a variant that builds on a 4x2 torus: an
            // allreduce, except for the all-to-all algorithms, which the C ABI refuses to build
            // as one with the registry's reason.
            let v = resolve(a.name, RL_COLL_ALLREDUCE, &[4, 2], 1024, false).unwrap();
            assert!(a.resolves_to().contains(&v.as_str()), "{} -> {v}", a.name);
            if !a.supports(Collective::Allreduce) && a.kind == registry::Kind::Variant {
                let (rc, e) = build(&v, RL_COLL_ALLREDUCE, &[4, 2], 0).unwrap_err();
                assert!(rc == RL_ERR_ALGORITHM && e.contains("builds alltoall, not allreduce"), "{rc} {e}");
                continue;
            }
            let p = build(&v, RL_COLL_ALLREDUCE, &[4, 2], 0).unwrap();
            assert_eq!(unsafe { CStr::from_ptr((*p).algorithm) }.to_str().unwrap(), v);
            unsafe { rl_program_free(p) };
        }
        assert_eq!(unsafe { rl_algorithm_info(n, std::ptr::null_mut()) }, RL_ERR_ARG);
        let mut info = std::mem::MaybeUninit::<RlAlgorithmInfo>::uninit();
        assert_eq!(unsafe { rl_algorithm_info(n, info.as_mut_ptr()) }, RL_ERR_ARG);
    }

    #[test]
    fn resolution_matches_the_registry() {
        assert_eq!(resolve("swing", RL_COLL_ALLREDUCE, &[8], 8, false).unwrap(), "swing-latency");
        assert_eq!(resolve("swing", RL_COLL_ALLREDUCE, &[8], 1 << 30, false).unwrap(), "swing-bandwidth");
        assert_eq!(resolve("swing-latency", RL_COLL_ALLGATHER, &[8], 8, true).unwrap(), "swing-bandwidth");
        assert_eq!(resolve("rabenseifner", RL_COLL_ALLREDUCE, &[5], 8, false).unwrap(), "recursive-doubling-bandwidth");
        assert_eq!(resolve("auto", RL_COLL_ALLREDUCE, &[5], 8, false).unwrap(), "recursive-doubling-latency");
        let (rc, msg) = resolve("warp-drive", RL_COLL_ALLREDUCE, &[4], 8, false).unwrap_err();
        assert_eq!(rc, RL_ERR_ALGORITHM);
        for a in registry::names() {
            assert!(msg.contains(a), "{msg}");
        }
        assert_eq!(resolve("ring", 7, &[4], 8, false).unwrap_err().0, RL_ERR_ARG);
        assert_eq!(resolve("ring", RL_COLL_ALLREDUCE, &[0], 8, false).unwrap_err().0, RL_ERR_ARG);
    }

    #[test]
    fn crossover_is_between_the_extremes() {
        let mut v = 0u64;
        let rc = unsafe {
            rl_crossover_bytes(c"swing".as_ptr(), [8u32].as_ptr(), 1, 2e-6, 1.0 / 5e9, &mut v, std::ptr::null_mut(), 0)
        };
        assert_eq!(rc, RL_OK);
        assert!(v > 32 && v < 1 << 32, "{v}");
        let rc = unsafe {
            rl_crossover_bytes(c"ring".as_ptr(), [8u32].as_ptr(), 1, 2e-6, 1.0 / 5e9, &mut v, std::ptr::null_mut(), 0)
        };
        assert_eq!(rc, RL_ERR_ALGORITHM);
    }
}
