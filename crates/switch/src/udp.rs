//! The few socket calls std does not offer: a large receive buffer and `ppoll(2)` over a
//! handful of non-blocking UDP sockets.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Receive buffer asked of the kernel (capped by `net.core.rmem_max`): bursts of a few
/// thousand packets wait in the socket rather than being dropped.
pub const RCVBUF_BYTES: i32 = 4 << 20;

/// A non-blocking UDP socket bound to `addr` with a large receive buffer.
pub fn bind(addr: SocketAddrV4) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    s.set_nonblocking(true).map_err(|e| format!("{addr}: {e}"))?;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        let v: libc::c_int = RCVBUF_BYTES;
        // SAFETY: a valid socket fd and a pointer to a c_int of the size passed.
        unsafe {
            libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, opt, &v as *const libc::c_int as *const libc::c_void, std::mem::size_of::<libc::c_int>() as libc::socklen_t);
        }
    }
    Ok(s)
}

/// Waits until one of `socks` is readable or `timeout` passes; returns a readiness flag per
/// socket (all false on timeout or interruption).
pub fn poll_readable(socks: &[UdpSocket], timeout: Duration, ready: &mut Vec<bool>) {
    let mut fds: Vec<libc::pollfd> = socks.iter().map(|s| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    // ppoll: nanosecond timeouts, so microsecond switch timers are not rounded up to 1 ms.
    let ts = libc::timespec { tv_sec: timeout.as_secs().min(86_400) as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs; `ts` outlives the call.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    ready.clear();
    ready.extend(fds.iter().map(|f| n > 0 && f.revents & (libc::POLLIN | libc::POLLERR) != 0));
}
