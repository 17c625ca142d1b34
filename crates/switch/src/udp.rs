//! The socket calls std does not offer: large socket buffers, `ppoll(2)` over a handful of
//! non-blocking UDP sockets, and batched datagram I/O: `recvmmsg(2)` with UDP GRO on receive
//! and `sendmmsg(2)` with UDP GSO (`UDP_SEGMENT`) on send.
//!
//! GSO/GRO is where the switch's speed comes from (docs/switch.md, "I/O design"): a run of
//! equal-sized frames to one peer leaves in one `sendmsg` as one kernel buffer (one route
//! lookup, one pass through the IP and loopback paths), and a receiving socket with `UDP_GRO`
//! takes it off the queue whole with its segment size, so one system call and one socket-buffer
//! operation carry up to [`MAX_SEGMENTS`] datagrams each way. A receiver without `UDP_GRO`
//! still gets ordinary datagrams (the kernel splits the buffer on delivery), so peers that do
//! not batch interoperate. `REDUCELAB_SWITCH_GSO=0` turns both off (one datagram per message),
//! for comparison.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::Duration;

/// Socket buffers asked of the kernel (capped by `net.core.rmem_max`/`wmem_max`): bursts of a
/// few thousand packets wait in the socket rather than being dropped.
pub const RCVBUF_BYTES: i32 = 4 << 20;

const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// A busy switch loop (some socket had datagrams last turn) looks at every socket with a
/// ppoll that does not wait once per this many turns, so no port starves behind busy ones.
pub const BUSY_POLL_TURNS: u32 = 8;

/// Datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on older kernels, 128 now).
pub const MAX_SEGMENTS: usize = 64;
/// Payload bytes of one GSO send (an IP packet's 64 KiB, less headers, with margin).
const MAX_GSO_BYTES: usize = 60_000;
/// A receive slot holds one GRO buffer (up to 64 KiB) or one datagram.
const SLOT_BYTES: usize = 65_536;
/// Control space per message: one cmsg carrying an int (GRO) or a u16 (GSO), 8-byte aligned.
const CONTROL_WORDS: usize = 8;

/// Whether batched segments are used: on unless `REDUCELAB_SWITCH_GSO=0`, and only where the
/// kernel accepts `UDP_SEGMENT` (probed once).
pub fn gso_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if std::env::var_os("REDUCELAB_SWITCH_GSO").is_some_and(|v| v == "0") {
            return false;
        }
        let Ok(s) = UdpSocket::bind("127.0.0.1:0") else { return false };
        let v: libc::c_int = 0;
        // SAFETY: a valid socket fd and a pointer to a c_int of the size passed.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                SOL_UDP,
                UDP_SEGMENT,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        r == 0
    })
}

fn setsockopt_int(s: &UdpSocket, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: a valid socket fd and a pointer to a c_int of the size passed.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A non-blocking UDP socket bound to `addr` with large buffers and (where enabled) UDP GRO.
pub fn bind(addr: SocketAddrV4) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    s.set_nonblocking(true).map_err(|e| format!("{addr}: {e}"))?;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        setsockopt_int(&s, libc::SOL_SOCKET, opt, RCVBUF_BYTES);
    }
    if gso_enabled() {
        setsockopt_int(&s, SOL_UDP, UDP_GRO, 1);
    }
    Ok(s)
}

/// Waits until one of `socks` is readable or `timeout` passes; returns a readiness flag per
/// socket (all false on timeout or interruption).
pub fn poll_readable<S: std::borrow::Borrow<UdpSocket>>(socks: &[S], timeout: Duration, ready: &mut Vec<bool>) {
    let mut fds: Vec<libc::pollfd> =
        socks.iter().map(|s| libc::pollfd { fd: s.borrow().as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    // ppoll: nanosecond timeouts, so microsecond switch timers are not rounded up to 1 ms.
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(86_400) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
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

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain data; all-zero is a valid value (null pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

/// Messages of one `recvmmsg(2)` call: up to `batch` into fixed 64 KiB slots, each a datagram
/// or a GRO buffer of several. Everything is allocated once; a call allocates nothing.
pub struct RxBatch {
    bufs: Vec<u8>,
    names: Vec<libc::sockaddr_in>,
    control: Vec<[u64; CONTROL_WORDS]>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Per message: bytes received, segment size (= bytes when not coalesced).
    lens: Vec<(usize, usize)>,
    count: usize,
}

// SAFETY: the raw pointers in `iov`/`msgs` point only into this struct's own heap buffers and
// are rewritten before every system call; nothing is shared.
unsafe impl Send for RxBatch {}

impl RxBatch {
    pub fn new(batch: usize) -> RxBatch {
        let zero = sockaddr_of(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));
        RxBatch {
            bufs: vec![0; batch * SLOT_BYTES],
            names: vec![zero; batch],
            control: vec![[0; CONTROL_WORDS]; batch],
            iov: vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; batch],
            msgs: (0..batch).map(|_| zeroed_mmsghdr()).collect(),
            lens: vec![(0, 0); batch],
            count: 0,
        }
    }

    /// Reads what is waiting on `sock` (non-blocking); returns how many messages (each holds
    /// one datagram or, coalesced by GRO, several from one sender).
    pub fn recv(&mut self, sock: &UdpSocket) -> usize {
        let n = self.msgs.len();
        for i in 0..n {
            self.iov[i] = libc::iovec {
                iov_base: self.bufs[i * SLOT_BYTES..].as_mut_ptr() as *mut libc::c_void,
                iov_len: SLOT_BYTES,
            };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = &mut self.names[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = self.control[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CONTROL_WORDS * 8;
            h.msg_flags = 0;
        }
        // SAFETY: every mmsghdr points at a live iovec, buffer slot, sockaddr and control
        // buffer of this batch.
        let got = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        self.count = got.max(0) as usize;
        for i in 0..self.count {
            let len = (self.msgs[i].msg_len as usize).min(SLOT_BYTES);
            let mut seg = len;
            let h = &self.msgs[i].msg_hdr;
            // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; the CMSG macros
            // walk within it.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                        let s = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                        if s > 0 {
                            seg = s as usize;
                        }
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            self.lens[i] = (len, seg.max(1));
        }
        self.count
    }

    /// Message `i` of the last `recv`: its sender and its datagrams (a GRO buffer is cut at
    /// its segment size, the last one possibly shorter).
    pub fn get(&self, i: usize) -> (SocketAddrV4, std::slice::Chunks<'_, u8>) {
        let (len, seg) = self.lens[i];
        (addr_of(&self.names[i]), self.bufs[i * SLOT_BYTES..i * SLOT_BYTES + len].chunks(seg))
    }
}

/// Frames queued for one destination, sent with one `sendmmsg(2)`: each run of equal-sized
/// frames (at most [`MAX_SEGMENTS`], the last of a run may be shorter) is one message with a
/// `UDP_SEGMENT` control message, so the kernel handles it as one buffer. The buffers grow to
/// the largest burst and are reused.
#[derive(Default)]
pub struct TxQueue {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    control: Vec<[u64; CONTROL_WORDS]>,
    /// Frames in each message, and their segment size.
    frames: Vec<usize>,
    segs: Vec<u16>,
}

// SAFETY: as for `RxBatch`: the raw pointers point into this queue's own buffers and are
// rebuilt before every call.
unsafe impl Send for TxQueue {}

impl TxQueue {
    pub fn push(&mut self, frame: &[u8]) {
        self.bytes.extend_from_slice(frame);
        self.ends.push(self.bytes.len());
    }
    /// The queue's bytes, for a caller to append one frame to in place (the switch emits
    /// straight into its egress queue: no intermediate frame to copy). What it appends is
    /// [`Self::pending`] until [`Self::commit`] queues it or [`Self::discard`] drops it.
    pub fn open(&mut self) -> &mut Vec<u8> {
        self.discard();
        &mut self.bytes
    }
    /// The bytes appended since the last queued frame.
    pub fn pending(&self) -> &[u8] {
        &self.bytes[self.ends.last().copied().unwrap_or(0)..]
    }
    /// Queues the pending bytes as one frame; `copies` > 1 queues copies of it after it.
    pub fn commit(&mut self, copies: usize) {
        let start = self.ends.last().copied().unwrap_or(0);
        let end = self.bytes.len();
        self.ends.push(end);
        for _ in 1..copies {
            self.bytes.extend_from_within(start..end);
            self.ends.push(self.bytes.len());
        }
    }
    /// Drops the pending bytes.
    pub fn discard(&mut self) {
        self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    /// Bytes queued (and pending).
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Sends every queued frame to `to`; returns (frames sent, bytes sent, frames failed).
    /// A message the kernel refuses (a full send buffer) is dropped and its frames counted as
    /// failed: to the protocol they are lost packets.
    pub fn flush(&mut self, sock: &UdpSocket, to: SocketAddrV4) -> (u64, u64, u64) {
        let mut name = sockaddr_of(to);
        let gso = gso_enabled();
        self.iov.clear();
        self.frames.clear();
        self.segs.clear();
        let (mut i, mut start) = (0, 0);
        while i < self.ends.len() {
            let seg = self.ends[i] - start;
            let mut j = i + 1;
            if gso {
                while j < self.ends.len() && j - i < MAX_SEGMENTS && self.ends[j] - start <= MAX_GSO_BYTES {
                    let l = self.ends[j] - self.ends[j - 1];
                    if l > seg {
                        break;
                    }
                    j += 1;
                    if l < seg {
                        break; // a shorter frame ends the run
                    }
                }
            }
            let end = self.ends[j - 1];
            self.iov.push(libc::iovec {
                iov_base: self.bytes[start..].as_mut_ptr() as *mut libc::c_void,
                iov_len: end - start,
            });
            self.frames.push(j - i);
            self.segs.push(seg as u16);
            start = end;
            i = j;
        }
        let m = self.iov.len();
        self.msgs.resize_with(m, zeroed_mmsghdr);
        self.control.resize(m, [0; CONTROL_WORDS]);
        for k in 0..m {
            let h = &mut self.msgs[k].msg_hdr;
            *h = zeroed_mmsghdr().msg_hdr;
            h.msg_name = &mut name as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[k];
            h.msg_iovlen = 1;
            if self.frames[k] > 1 {
                h.msg_control = self.control[k].as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE/LEN are pure size computations; the control buffer
                // (64 bytes) holds one cmsg with a u16, which CMSG_FIRSTHDR points into.
                unsafe {
                    h.msg_controllen = libc::CMSG_SPACE(2) as usize;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, self.segs[k]);
                }
            }
        }
        let (mut done, mut sent, mut bytes, mut failed) = (0usize, 0u64, 0u64, 0u64);
        while done < m {
            // SAFETY: the remaining mmsghdrs point at live iovecs into `self.bytes`, their
            // control buffers and `name`.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.msgs[done..].as_mut_ptr(),
                    (m - done) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                // The first remaining message is refused: drop it and go on with the rest.
                failed += self.frames[done] as u64;
                done += 1;
                continue;
            }
            for k in done..done + r as usize {
                sent += self.frames[k] as u64;
                bytes += self.msgs[k].msg_len as u64;
            }
            done += r as usize;
        }
        self.bytes.clear();
        self.ends.clear();
        (sent, bytes, failed)
    }
}
