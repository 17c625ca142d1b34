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

fn sockaddr_of(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

fn addr_of(s: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(std::net::Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)), u16::from_be(s.sin_port))
}

/// Datagrams of one `recvmmsg(2)` call: up to `batch` at once into fixed-size slots.
pub struct RxBatch {
    slot: usize,
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_in>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    count: usize,
}

impl RxBatch {
    /// `batch` slots of `slot` bytes (a datagram longer than `slot` is reported truncated).
    pub fn new(batch: usize, slot: usize) -> RxBatch {
        let zero = sockaddr_of(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));
        RxBatch { slot, bufs: vec![0; batch * slot], names: vec![zero; batch], lens: vec![0; batch], truncated: vec![false; batch], count: 0 }
    }

    /// Reads what is waiting on `sock` (non-blocking); returns how many datagrams.
    pub fn recv(&mut self, sock: &UdpSocket) -> usize {
        let n = self.names.len();
        let mut iov: Vec<libc::iovec> = (0..n).map(|i| libc::iovec { iov_base: self.bufs[i * self.slot..].as_mut_ptr() as *mut libc::c_void, iov_len: self.slot }).collect();
        // SAFETY: mmsghdr is plain data; all-zero is a valid value, filled in below.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for i in 0..n {
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = &mut self.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        // SAFETY: every mmsghdr points at a live iovec, buffer slot and sockaddr of this batch.
        let got = unsafe { libc::recvmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        self.count = got.max(0) as usize;
        for i in 0..self.count {
            self.lens[i] = msgs[i].msg_len as usize;
            self.truncated[i] = msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        }
        self.count
    }

    /// Datagram `i` of the last `recv`: (sender, bytes, whether it was cut to the slot size).
    pub fn get(&self, i: usize) -> (SocketAddrV4, &[u8], bool) {
        (addr_of(&self.names[i]), &self.bufs[i * self.slot..i * self.slot + self.lens[i].min(self.slot)], self.truncated[i])
    }
}

/// Frames queued for one destination, sent with `sendmmsg(2)`.
#[derive(Default)]
pub struct TxQueue {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl TxQueue {
    pub fn push(&mut self, frame: &[u8]) {
        self.bytes.extend_from_slice(frame);
        self.ends.push(self.bytes.len());
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    /// Sends every queued frame to `to`; returns (sent, bytes sent, failed). Frames the kernel
    /// refuses (a full send buffer) are dropped and counted as failed.
    pub fn flush(&mut self, sock: &UdpSocket, to: SocketAddrV4) -> (u64, u64, u64) {
        let mut name = sockaddr_of(to);
        let mut start = 0;
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(self.ends.len());
        for &e in &self.ends {
            iov.push(libc::iovec { iov_base: self.bytes[start..].as_mut_ptr() as *mut libc::c_void, iov_len: e - start });
            start = e;
        }
        // SAFETY: as in `RxBatch::recv`.
        let mut msgs: Vec<libc::mmsghdr> = (0..iov.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_name = &mut name as *mut libc::sockaddr_in as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let (mut done, mut bytes, mut failed) = (0usize, 0u64, 0u64);
        while done < msgs.len() {
            // SAFETY: the remaining mmsghdrs point at live iovecs into `self.bytes` and `name`.
            let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs[done..].as_mut_ptr(), (msgs.len() - done) as libc::c_uint, libc::MSG_DONTWAIT) };
            if r <= 0 {
                // The first remaining frame is refused: drop it and go on with the rest.
                failed += 1;
                done += 1;
                continue;
            }
            for m in &msgs[done..done + r as usize] {
                bytes += m.msg_len as u64;
            }
            done += r as usize;
        }
        self.bytes.clear();
        self.ends.clear();
        ((msgs.len() as u64 - failed), bytes, failed)
    }
}
