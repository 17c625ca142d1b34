//! C ABI over `reducelab_switch::Session` (header: `include/reducelab_innet.h`): an
//! application's vector reduced through running software switches (Canary, or the pool
//! protocols SwitchML and ATP, chosen by the scenario). Every entry point checks
//! its pointers and arguments and reports errors as a message, never a panic across the
//! boundary (a panic inside is caught and reported as an error).

use std::ffi::{c_char, c_void, CStr, CString};
use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use reducelab_switch::{EndpointSpec, HostOptions, Session};

pub const RL_INNET_INT32: i32 = 0;
pub const RL_INNET_FLOAT32: i32 = 1;

/// The opaque handle C holds.
pub struct RlInnet {
    session: Session,
    /// The session's protocol by its registry name, for `RL_Innet_protocol`.
    protocol: CString,
}

fn write_err(err: *mut c_char, errlen: usize, msg: &str) {
    if err.is_null() || errlen == 0 {
        return;
    }
    let b = msg.as_bytes();
    let n = b.len().min(errlen - 1);
    // SAFETY: the caller gives a writable buffer of `errlen` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), err as *mut u8, n);
        *err.add(n) = 0;
    }
}

fn open(
    path: *const c_char,
    endpoints: *const c_char,
    ranks: u32,
    rank: u32,
    timeout_s: f64,
) -> Result<RlInnet, String> {
    if path.is_null() {
        return Err("scenario_path: NULL".into());
    }
    // SAFETY: the caller passes NUL-terminated strings (checked non-null).
    let path = unsafe { CStr::from_ptr(path) }.to_str().map_err(|_| "scenario_path: not UTF-8".to_string())?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("scenario_path: {path}: {e}"))?;
    let ep = if endpoints.is_null() {
        EndpointSpec::Loopback(Ipv4Addr::new(127, 0, 100, 1), 47000)
    } else {
        // SAFETY: as above.
        EndpointSpec::parse(
            unsafe { CStr::from_ptr(endpoints) }.to_str().map_err(|_| "endpoints: not UTF-8".to_string())?,
        )?
    };
    let timeout = if timeout_s > 0.0 && timeout_s.is_finite() {
        Duration::from_secs_f64(timeout_s.min(86_400.0))
    } else {
        Duration::from_secs(10)
    };
    // No linger: the coordinator's release means every rank has every block (docs/switch.md).
    let opts = HostOptions { timeout, linger: Duration::ZERO, ..HostOptions::default() };
    let session = Session::open(&text, ep, ranks, rank, opts).map_err(|e| format!("{path}: {e}"))?;
    let protocol = CString::new(session.protocol()).map_err(|_| "protocol: a name with a NUL byte".to_string())?;
    Ok(RlInnet { session, protocol })
}

/// # Safety
/// Strings NUL-terminated (or NULL where allowed); `err` writable for `errlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn RL_Innet_open(
    scenario_path: *const c_char,
    endpoints: *const c_char,
    ranks: u32,
    rank: u32,
    timeout_s: f64,
    err: *mut c_char,
    errlen: usize,
) -> *mut RlInnet {
    match catch_unwind(AssertUnwindSafe(|| open(scenario_path, endpoints, ranks, rank, timeout_s))) {
        Ok(Ok(h)) => Box::into_raw(Box::new(h)),
        Ok(Err(e)) => {
            write_err(err, errlen, &e);
            std::ptr::null_mut()
        }
        Err(_) => {
            write_err(err, errlen, "RL_Innet_open: internal error (panic)");
            std::ptr::null_mut()
        }
    }
}

fn allreduce(h: &mut RlInnet, send: *const c_void, recv: *mut c_void, count: u64, ty: i32) -> Result<(), String> {
    if ty != RL_INNET_INT32 && ty != RL_INNET_FLOAT32 {
        return Err(format!("element_type: {ty} is neither RL_INNET_INT32 (0) nor RL_INNET_FLOAT32 (1)"));
    }
    if count == 0 {
        return Ok(());
    }
    if send.is_null() || recv.is_null() {
        return Err("send/recv: NULL buffer with count > 0".into());
    }
    let n = usize::try_from(count).map_err(|_| "count: too large".to_string())?;
    // SAFETY: the caller gives `count` readable 4-byte elements at `send` (they may alias
    // `recv`: they are copied out before anything is written).
    if ty == RL_INNET_INT32 {
        let data: Vec<i32> = unsafe { std::slice::from_raw_parts(send as *const i32, n) }.to_vec();
        let out = h.session.allreduce_i32(data)?;
        // SAFETY: `count` writable elements at `recv`.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), recv as *mut i32, n) };
    } else {
        // SAFETY: as above, f32 elements.
        let data: Vec<f32> = unsafe { std::slice::from_raw_parts(send as *const f32, n) }.to_vec();
        let out = h.session.allreduce_f32(&data)?;
        // SAFETY: `count` writable elements at `recv`.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), recv as *mut f32, n) };
    }
    Ok(())
}

/// # Safety
/// `h` from `RL_Innet_open`; buffers of `count` 4-byte elements; `err` as for open.
#[no_mangle]
pub unsafe extern "C" fn RL_Innet_allreduce(
    h: *mut RlInnet,
    send: *const c_void,
    recv: *mut c_void,
    count: u64,
    element_type: i32,
    err: *mut c_char,
    errlen: usize,
) -> i32 {
    let Some(h) = h.as_mut() else {
        write_err(err, errlen, "RL_Innet_allreduce: NULL handle");
        return -1;
    };
    match catch_unwind(AssertUnwindSafe(|| allreduce(h, send, recv, count, element_type))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            write_err(err, errlen, &e);
            -1
        }
        Err(_) => {
            write_err(err, errlen, "RL_Innet_allreduce: internal error (panic)");
            -1
        }
    }
}

/// # Safety
/// `h` from `RL_Innet_open` or NULL.
#[no_mangle]
pub unsafe extern "C" fn RL_Innet_elements_per_packet(h: *const RlInnet) -> u32 {
    h.as_ref().map_or(0, |h| h.session.elems_per_packet() as u32)
}

/// # Safety
/// `h` from `RL_Innet_open` or NULL. The string lives as long as the handle.
#[no_mangle]
pub unsafe extern "C" fn RL_Innet_protocol(h: *const RlInnet) -> *const c_char {
    match h.as_ref() {
        Some(h) => h.protocol.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// # Safety
/// `h` from `RL_Innet_open` (closed once) or NULL.
#[no_mangle]
pub unsafe extern "C" fn RL_Innet_close(h: *mut RlInnet) {
    if !h.is_null() {
        drop(Box::from_raw(h));
    }
}
