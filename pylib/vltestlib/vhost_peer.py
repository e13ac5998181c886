"""A raw vhost-user front-end (driver side), Python 3 standard library only.

It speaks the wire protocol (QEMU docs/interop/vhost-user.rst) over the switch's Unix
socket, passing fds with SCM_RIGHTS; its "guest memory" is memfds it maps itself, in which
it lays out split virtqueues (virtio 1.2 §2.7) and writes whatever descriptors it likes. It
can negotiate like QEMU (Guest.negotiate) and then misbehave in any way (Guest.raw_bytes,
Guest.send, the Ring methods).

    g = vhost_peer.Guest(tb.sock("c")).negotiate()     # features, memory, both rings
    g.rx.post()                                         # offer every receive buffer
    g.tx.send_frame(vhost_peer.frame(dst, src, b"hi"))  # one frame, kicked
    frames = g.rx.take()                                # what the switch delivered

The request codes, protocol feature bits and header/vring flags mirror src/vhost/protocol.h
(checked by tests/consistency/test_protocol_codes.py, ctest consistency_vhost_request_codes;
it reads the request-code block below up to its first blank line). Users: the
hostile-peer suite (tests/hostile), tests/interop/test_direct_link.py, bench/soak_bench.py.
"""
import ctypes
import mmap
import os
import select
import socket
import struct
import time

# ---- vhost-user request codes (src/vhost/protocol.h) -------------------------------------
GET_FEATURES = 1
SET_FEATURES = 2
SET_OWNER = 3
RESET_OWNER = 4
SET_MEM_TABLE = 5
SET_LOG_BASE = 6
SET_LOG_FD = 7
SET_VRING_NUM = 8
SET_VRING_ADDR = 9
SET_VRING_BASE = 10
GET_VRING_BASE = 11
SET_VRING_KICK = 12
SET_VRING_CALL = 13
SET_VRING_ERR = 14
GET_PROTOCOL_FEATURES = 15
SET_PROTOCOL_FEATURES = 16
GET_QUEUE_NUM = 17
SET_VRING_ENABLE = 18
SEND_RARP = 19
NET_SET_MTU = 20
SET_BACKEND_REQ_FD = 21
GET_CONFIG = 24
ADD_MEM_REG = 37

VERSION = 0x1
F_REPLY = 1 << 2
F_NEED_REPLY = 1 << 3
NOFD = 1 << 8
VRING_F_LOG = 1  # VHOST_VRING_F_LOG: SET_VRING_ADDR's log_guest_addr is valid

# ---- feature bits ------------------------------------------------------------------------
VIRTIO_NET_F_CSUM = 1 << 0
VIRTIO_NET_F_MTU = 1 << 3
VIRTIO_NET_F_HOST_TSO4 = 1 << 11
VIRTIO_NET_F_MRG_RXBUF = 1 << 15
VIRTIO_NET_F_MQ = 1 << 22
VHOST_F_LOG_ALL = 1 << 26
VIRTIO_RING_F_INDIRECT_DESC = 1 << 28
VIRTIO_RING_F_EVENT_IDX = 1 << 29
VHOST_USER_F_PROTOCOL_FEATURES = 1 << 30
VIRTIO_F_VERSION_1 = 1 << 32
PROTO_MQ = 1 << 0
PROTO_LOG_SHMFD = 1 << 1
PROTO_RARP = 1 << 2
PROTO_REPLY_ACK = 1 << 3
PROTO_MTU = 1 << 4

DEFAULT_FEATURES = (VIRTIO_F_VERSION_1 | VIRTIO_NET_F_MRG_RXBUF | VIRTIO_RING_F_INDIRECT_DESC |
                    VHOST_USER_F_PROTOCOL_FEATURES)
DEFAULT_PROTOCOL = PROTO_MQ | PROTO_REPLY_ACK

DESC_NEXT = 1
DESC_WRITE = 2
DESC_INDIRECT = 4
AVAIL_NO_INTERRUPT = 1

RX, TX = 0, 1  # vring 0 = receiveq1 (the switch writes), 1 = transmitq1 (the switch reads)
HDR_LEN = 12   # virtio-net header with VERSION_1


class Closed(Exception):
    """The switch closed the connection."""


def eventfd(initval=0, nonblock=True):
    flags = os.EFD_CLOEXEC | (os.EFD_NONBLOCK if nonblock else 0)
    return os.eventfd(initval, flags)


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def mac_str(m):
    """aa:bb:cc:dd:ee:ff as `ctl fdb` prints it."""
    return ":".join("%02x" % b for b in m)


def frame(dst, src, payload=b"", ethertype=0x88b5, size=64):
    """An Ethernet frame (no FCS) of at least `size` bytes."""
    f = dst + src + struct.pack(">H", ethertype) + payload
    return f + b"\0" * max(0, size - len(f))


def inet_csum(data):
    """RFC 1071 checksum (inverted) of `data`."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(">%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def tcp4_frame(dst, src, payload, seq=1000):
    """Ethernet / IPv4 / TCP (PSH ACK) carrying `payload`, as a TSO sender leaves it: IP
    and TCP checksums not filled in (the switch computes them)."""
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 7, 0x4000, 64, 6, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    tcp = struct.pack(">HHIIBBHHH", 40000, 5201, seq, 1, 5 << 4, 0x18, 512, 0, 0)
    return dst + src + b"\x08\x00" + ip + tcp + payload


def tcp4_valid(f):
    """True if the IPv4 header and TCP checksums of frame `f` verify."""
    ip, l4 = f[14:34], f[34:]
    pseudo = ip[12:20] + struct.pack(">BBH", 0, 6, len(l4))
    return inet_csum(ip) == 0 and inet_csum(pseudo + l4) == 0


# ---- guest memory --------------------------------------------------------------------------
class Region:
    """One memfd-backed region: [gpa, gpa+size) guest-physical, [uva, uva+size) front-end
    virtual, file offset `offset` (the fd may be larger than offset + size)."""

    def __init__(self, size, gpa, uva, offset=0, file_size=None, name="vhu-guest", fd=None):
        self.size, self.gpa, self.uva, self.offset = size, gpa, uva, offset
        if fd is None:
            fd = os.memfd_create(name, os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 2))
            os.ftruncate(fd, file_size if file_size is not None else offset + size)
        self.fd = fd
        self.mm = mmap.mmap(fd, offset + size) if offset + size <= os.fstat(fd).st_size else None

    def desc(self):
        """The SET_MEM_TABLE description (gpa, size, uva, mmap offset)."""
        return (self.gpa, self.size, self.uva, self.offset)

    def contains(self, gpa, n=1):
        return self.gpa <= gpa and gpa + n <= self.gpa + self.size

    def close(self):
        if self.mm is not None:
            try:
                self.mm.close()
            except (BufferError, ValueError):
                pass
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Memory:
    """The front-end's address space: regions plus a bump allocator for buffers."""

    def __init__(self, regions):
        self.regions = list(regions)
        self._next = {id(r): 0 for r in self.regions}

    @staticmethod
    def simple(size=4 << 20, gpa=0x40000000, uva=0x7f1200000000):
        return Memory([Region(size, gpa, uva)])

    def _find(self, gpa, n):
        for r in self.regions:
            if r.contains(gpa, max(n, 1)):
                return r
        raise ValueError("gpa %#x+%d not in one region" % (gpa, n))

    def write(self, gpa, data):
        r = self._find(gpa, len(data))
        o = r.offset + gpa - r.gpa
        r.mm[o:o + len(data)] = data

    def read(self, gpa, n):
        r = self._find(gpa, n)
        o = r.offset + gpa - r.gpa
        return bytes(r.mm[o:o + n])

    # Ring indexes and flags are read and written with one aligned load or store, as a
    # driver must (the device reads them concurrently). A slice of an mmap is not: CPython
    # may copy it a byte at a time, and a 16-bit index read while the switch stores it can
    # tear (0x13fb -> 0x1400 read as 0x14fb: 256 used entries that were never written).
    # That tear, about once in 5000 reads under constant stores, made the healthy port b
    # consume stale used entries and re-post buffers it had already posted, until the
    # switch stopped its receive ring as more than a queue ahead (MultiQueue.test_05).
    def _scalar(self, ctype, gpa):
        r = self._find(gpa, ctypes.sizeof(ctype))
        return ctype.from_buffer(r.mm, r.offset + gpa - r.gpa)

    def w16(self, gpa, v):
        self._scalar(ctypes.c_uint16, gpa).value = v & 0xffff

    def r16(self, gpa):
        return self._scalar(ctypes.c_uint16, gpa).value

    def r32(self, gpa):
        return self._scalar(ctypes.c_uint32, gpa).value

    def uva(self, gpa):
        r = self._find(gpa, 1)
        return r.uva + gpa - r.gpa

    def alloc(self, n, align=64, region=0):
        r = self.regions[region]
        off = (self._next[id(r)] + align - 1) & ~(align - 1)
        if off + n > r.size:
            raise MemoryError("region %d full" % region)
        self._next[id(r)] = off + n
        return r.gpa + off

    def close(self):
        for r in self.regions:
            r.close()


# ---- split virtqueue (driver side) ---------------------------------------------------------
class Ring:
    """A split ring laid out in `mem`: desc table, avail ring, used ring (virtio 1.2 §2.7)."""

    def __init__(self, mem, num, region=0, desc=None, avail=None, used=None):
        self.mem, self.num = mem, num
        self.desc = desc if desc is not None else mem.alloc(16 * num, 64, region)
        self.avail = avail if avail is not None else mem.alloc(6 + 2 * num, 64, region)
        self.used = used if used is not None else mem.alloc(6 + 8 * num, 64, region)
        self.avail_idx = 0   # our next avail index
        self.used_seen = 0   # used entries consumed
        self.kick_fd = None  # set by Guest.start_vring; kicked when the device asks for it
        self.free = list(range(num))
        self.bufs = {}       # head -> (gpa, len) of the chain's first buffer
        for a, n in ((self.desc, 16 * num), (self.avail, 6 + 2 * num), (self.used, 6 + 8 * num)):
            mem.write(a, b"\0" * n)

    # raw access
    def set_desc(self, i, addr, length, flags=0, nxt=0, table=None):
        base = self.desc if table is None else table
        self.mem.write(base + 16 * i, struct.pack("<QIHH", addr, length & 0xffffffff, flags, nxt))

    def get_desc(self, i):
        return struct.unpack("<QIHH", self.mem.read(self.desc + 16 * i, 16))

    def put_avail(self, head, publish=True):
        self.mem.w16(self.avail + 4 + 2 * (self.avail_idx % self.num), head)
        self.avail_idx = (self.avail_idx + 1) & 0xffff
        if publish:
            self.publish()

    def publish(self, idx=None):
        self.mem.w16(self.avail + 2, self.avail_idx if idx is None else idx)
        # Kick unless the device said it polls (VRING_USED_F_NO_NOTIFY; no EVENT_IDX here).
        if self.kick_fd is not None and not self.mem.r16(self.used) & 1:
            try:
                os.eventfd_write(self.kick_fd, 1)
            except OSError:
                pass

    def set_avail_flags(self, v):
        self.mem.w16(self.avail, v)

    def used_idx(self):
        return self.mem.r16(self.used + 2)

    def used_elem(self, i):
        return struct.unpack("<II", self.mem.read(self.used + 4 + 8 * (i % self.num), 8))

    def take_used(self):
        """Used elements (id, len) not yet consumed."""
        out = []
        idx = self.used_idx()
        if ((idx - self.used_seen) & 0xffff) > self.num:  # a device bug, or a torn read
            raise AssertionError("used index %d is more than a queue (%d) past the %d consumed"
                                 % (idx, self.num, self.used_seen))
        while self.used_seen != idx:
            out.append(self.used_elem(self.used_seen))
            self.used_seen = (self.used_seen + 1) & 0xffff
        return out

    def addr_msg(self, index):
        m = self.mem
        return struct.pack("<IIQQQQ", index, 0, m.uva(self.desc), m.uva(self.used),
                           m.uva(self.avail), 0)


class TxQueue(Ring):
    """Well-behaved transmit: one buffer per frame (header + frame), recycled on used."""

    BUF = 2048

    def __init__(self, mem, num, region=0, **kw):
        super().__init__(mem, num, region, **kw)
        self.buf_of = [mem.alloc(self.BUF, 64, region) for _ in range(min(num, 64))]
        self.free = list(range(len(self.buf_of)))
        self.sent = 0

    def reclaim(self):
        for head, _ in self.take_used():
            if 0 <= head < len(self.buf_of) and head not in self.free:
                self.free.append(head)

    def send_frame(self, fr, hdr=None, wait=True, timeout=5.0):
        """Queues one frame; with `wait`, until a descriptor is free."""
        deadline = time.monotonic() + timeout
        while True:
            self.reclaim()
            if self.free:
                break
            if not wait or time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        i = self.free.pop(0)
        data = (hdr if hdr is not None else b"\0" * HDR_LEN) + fr
        self.mem.write(self.buf_of[i], data)
        self.set_desc(i, self.buf_of[i], len(data), 0, 0)
        self.put_avail(i)
        self.sent += 1
        return True

    def wait_done(self, timeout=5.0):
        """Waits until the switch returned every queued chain."""
        deadline = time.monotonic() + timeout
        while self.used_idx() != self.avail_idx:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        self.reclaim()
        return True


class RxQueue(Ring):
    """Well-behaved receive: `n` buffers of BUF bytes, one descriptor each (mergeable)."""

    BUF = 2048

    def __init__(self, mem, num, region=0, **kw):
        super().__init__(mem, num, region, **kw)
        self.buf_of = [mem.alloc(self.BUF, 64, region) for _ in range(min(num, 128))]
        self.posted = set()

    def post(self, n=None):
        for i in range(len(self.buf_of)):
            if n is not None and n <= 0:
                break
            if i in self.posted:
                continue
            self.set_desc(i, self.buf_of[i], self.BUF, DESC_WRITE, 0)
            self.put_avail(i, publish=False)
            self.posted.add(i)
            if n is not None:
                n -= 1
        self.publish()

    def take(self, repost=True):
        """Frames received since the last call (virtio-net header stripped), in order.
        Mergeable frames spread over several buffers are reassembled."""
        frames = []
        pending = None
        for head, ln in self.take_used():
            if head not in self.posted:
                continue
            self.posted.discard(head)
            data = self.mem.read(self.buf_of[head], min(ln, self.BUF))
            if pending is None:
                nbufs = struct.unpack("<H", data[10:12])[0] if len(data) >= 12 else 1
                pending = [max(nbufs, 1), data[HDR_LEN:]]
            else:
                pending[1] += data
            pending[0] -= 1
            if pending[0] == 0:
                frames.append(pending[1])
                pending = None
        if repost:
            self.post()
        return frames


# ---- the connection ------------------------------------------------------------------------
class Guest:
    """One vhost-user connection plus its memory and queue pair."""

    def __init__(self, path, timeout=5.0, connect_timeout=5.0):
        self.path = path
        self.timeout = timeout
        self.sock = None
        deadline = time.monotonic() + connect_timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                s.connect(path)
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.sock = s
        self.features = 0
        self.protocol = 0
        self.mem = None
        self.rx = self.tx = None
        self.kick = [None, None]
        self.call = [None, None]
        self.owned_fds = []

    # -- wire -----------------------------------------------------------------------------
    def raw_bytes(self, data, fds=()):
        """Sends raw bytes (anything) with optional fds."""
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise Closed(str(e))

    def send(self, req, payload=b"", fds=(), flags=VERSION, size=None):
        hdr = struct.pack("<III", req, flags, len(payload) if size is None else size)
        self.raw_bytes(hdr + payload, fds)

    def _recv_exact(self, n, timeout):
        buf = b""
        deadline = time.monotonic() + timeout
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply within %.1f s" % timeout)
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed("switch closed the connection")
            buf += chunk
        return buf

    def recv(self, timeout=None):
        """One message from the switch: (request, flags, payload)."""
        t = self.timeout if timeout is None else timeout
        req, flags, size = struct.unpack("<III", self._recv_exact(12, t))
        return req, flags, self._recv_exact(size, t) if size else b""

    def request(self, req, payload=b"", fds=(), reply=False, ack=None):
        """Sends a request. reply=True: returns the reply payload. Otherwise, when REPLY_ACK
        is negotiated (or ack=True), asks for an ack and returns its u64 (0 = success);
        returns None when no ack was asked for."""
        if ack is None:
            ack = bool(self.protocol & PROTO_REPLY_ACK) and not reply
        self.send(req, payload, fds, VERSION | (F_NEED_REPLY if ack else 0))
        if not reply and not ack:
            return None
        r, flags, p = self.recv()
        if r != req or not flags & F_REPLY:
            raise AssertionError("unexpected reply %d/%#x to %d" % (r, flags, req))
        if reply:
            return p
        return struct.unpack("<Q", p)[0]

    def refused(self, req, payload=b"", fds=(), size=None, flags=None, timeout=3.0):
        """Sends a request that must be refused. Returns "nack" (error ack), "closed"
        (the switch closed the connection) or "accepted" (ack 0: a bug)."""
        f = VERSION | F_NEED_REPLY if flags is None else flags
        try:
            self.send(req, payload, fds, f, size)
            r, rf, p = self.recv(timeout)
        except Closed:
            return "closed"
        except TimeoutError:
            return "timeout"
        if len(p) == 8 and struct.unpack("<Q", p)[0] != 0:
            return "nack"
        return "accepted"

    def closed_by_peer(self, timeout=3.0):
        """True once the switch has closed the connection (reads and discards)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.sock], [], [], 0.05)
            if r:
                try:
                    if not self.sock.recv(4096):
                        return True
                except (ConnectionResetError, OSError):
                    return True
        return False

    # -- helpers ----------------------------------------------------------------------------
    def u64(self, req, v, fds=()):
        return self.request(req, struct.pack("<Q", v), fds)

    def state(self, req, index, num):
        return self.request(req, struct.pack("<II", index, num))

    def mem_table(self, regions, fds=None, nregions=None, pad_to=None):
        descs = [r.desc() if isinstance(r, Region) else r for r in regions]
        payload = struct.pack("<II", len(descs) if nregions is None else nregions, 0)
        for d in descs:
            payload += struct.pack("<QQQQ", *d)
        if pad_to:
            payload += b"\0" * (pad_to - len(payload))
        if fds is None:
            fds = [r.fd for r in regions]
        return payload, fds

    def set_mem_table(self, regions, **kw):
        payload, fds = self.mem_table(regions, **kw)
        return self.request(SET_MEM_TABLE, payload, fds)

    def vring_fd(self, req, index, fd):
        if fd is None:
            return self.u64(req, index | NOFD)
        return self.u64(req, index, [fd])

    def negotiate(self, features=DEFAULT_FEATURES, protocol=DEFAULT_PROTOCOL, num=256,
                  mem=None, enable=True, call=True, kick=True, rings=True):
        """The QEMU order (vhost-user.rst "Starting and stopping rings")."""
        offered = struct.unpack("<Q", self.request(GET_FEATURES, reply=True))[0]
        self.features = features & offered
        if self.features & VHOST_USER_F_PROTOCOL_FEATURES:
            poff = struct.unpack("<Q", self.request(GET_PROTOCOL_FEATURES, reply=True))[0]
            self.protocol = protocol & poff
            self.send(SET_PROTOCOL_FEATURES, struct.pack("<Q", self.protocol))
        self.check(self.u64(SET_FEATURES, self.features), "SET_FEATURES")
        self.check(self.request(SET_OWNER), "SET_OWNER")
        self.mem = mem if mem is not None else Memory.simple()
        self.check(self.set_mem_table(self.mem.regions), "SET_MEM_TABLE")
        if not rings:
            return self
        self.rx = RxQueue(self.mem, num)
        self.tx = TxQueue(self.mem, num)
        for i, q in ((RX, self.rx), (TX, self.tx)):
            self.start_vring(i, q, call=call, kick=kick)
        if enable and self.features & VHOST_USER_F_PROTOCOL_FEATURES:
            for i in (RX, TX):
                self.check(self.state(SET_VRING_ENABLE, i, 1), "SET_VRING_ENABLE")
        return self

    def start_vring(self, i, q, call=True, kick=True, base=0):
        q.kick_fd = None
        self.check(self.state(SET_VRING_NUM, i, q.num), "SET_VRING_NUM")
        self.check(self.state(SET_VRING_BASE, i, base), "SET_VRING_BASE")
        self.check(self.request(SET_VRING_ADDR, q.addr_msg(i)), "SET_VRING_ADDR")
        if call:
            if self.call[i] is None:
                self.call[i] = eventfd()
            self.check(self.vring_fd(SET_VRING_CALL, i, self.call[i]), "SET_VRING_CALL")
        if kick:
            if self.kick[i] is None:
                self.kick[i] = eventfd()
            self.check(self.vring_fd(SET_VRING_KICK, i, self.kick[i]), "SET_VRING_KICK")
            q.kick_fd = self.kick[i]
        else:
            self.check(self.vring_fd(SET_VRING_KICK, i, None), "SET_VRING_KICK")

    @staticmethod
    def check(ack, what):
        if ack not in (None, 0):
            raise AssertionError("%s refused (ack %s)" % (what, ack))

    def kick_tx(self):
        if self.kick[TX] is not None:
            try:
                os.eventfd_write(self.kick[TX], 1)
            except OSError:
                pass

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        for q in (self.rx, self.tx):
            if q is not None:
                q.kick_fd = None
        for fd in self.kick + self.call + self.owned_fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.kick = [None, None]
        self.call = [None, None]
        self.owned_fds = []
        if self.mem is not None:
            self.mem.close()
            self.mem = None


# ---- the control socket (INTERFACES.md: one JSON line each way) ----------------------------
def ctl(path, cmd, timeout=5.0, args=None):
    import json
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        t_conn = time.monotonic()
        req = {"cmd": cmd} if args is None else {"cmd": cmd, "args": args}
        try:
            s.sendall((json.dumps(req) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError) as e:
            raise AssertionError("ctl %s: the switch closed the control connection before the "
                                 "request was sent, %.0f ms after connect (%s)" % (
                                     cmd, 1e3 * (time.monotonic() - t_conn), e)) from e
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    r = json.loads(buf)
    if not r.get("ok"):
        raise AssertionError("ctl %s: %s" % (cmd, r.get("error")))
    return r["result"]


# =========================================================================================
# The harness: one switch (ASan build under ctest -L asan), two well-behaved front-ends on
# ports a and b, hostile front-ends on the other ports.


# ---- attack material: fds of other kinds, memory spanning regions, dirty logs, queue pairs
def fresh_fd(kind):
    """An fd of a given kind for fd-type attacks."""
    if kind == "eventfd":
        return eventfd()
    if kind == "pipe":
        r, w = os.pipe()
        os.close(r)
        return w
    if kind == "devnull":
        return os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    if kind == "memfd":
        fd = os.memfd_create("vhu-small", os.MFD_CLOEXEC)
        os.ftruncate(fd, 4096)
        return fd
    raise ValueError(kind)


def two_region_memory(size=1 << 20, gpa=0x40000000, uva0=0x7f1200000000, uva1=0x7f5600000000):
    """Two memfds, contiguous in guest-physical space, far apart in front-end virtual space
    (so never contiguous in the switch's mappings either)."""
    return Memory([Region(size, gpa, uva0, name="vhu-r0"), Region(size, gpa + size, uva1, name="vhu-r1")])


def span_write(mem, gpa, data):
    while data:
        r = mem._find(gpa, 1)
        n = min(len(data), r.gpa + r.size - gpa)
        mem.write(gpa, data[:n])
        gpa, data = gpa + n, data[n:]


def span_read(mem, gpa, n):
    out = b""
    while n:
        r = mem._find(gpa, 1)
        k = min(n, r.gpa + r.size - gpa)
        out += mem.read(gpa, k)
        gpa, n = gpa + k, n - k
    return out


def log_fd(size):
    fd = os.memfd_create("vhu-log", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


LOG_PAGE = 4096


def log_bytes_for(end):
    """Bytes of dirty log covering guest-physical [0, end) (one bit per 4 KiB page)."""
    return ((end + LOG_PAGE - 1) // LOG_PAGE + 7) // 8


class DirtyLogFd:
    """A dirty log as QEMU makes one: a memfd of `size` bytes at `offset`, with `slack`
    bytes of guard after it whose contents must stay untouched."""

    def __init__(self, size, offset=0, slack=4096, file_size=None):
        self.size, self.offset = size, offset
        self.fd = os.memfd_create("vhu-log", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 2))
        self.file_size = file_size if file_size is not None else offset + size + slack
        os.ftruncate(self.fd, self.file_size)
        self.mm = mmap.mmap(self.fd, self.file_size) if self.file_size else None

    def payload(self, size=None, offset=None):
        return struct.pack("<QQ", self.size if size is None else size,
                           self.offset if offset is None else offset)

    def bit(self, gpa):
        page = gpa // LOG_PAGE
        return bool(self.mm[self.offset + page // 8] >> (page % 8) & 1)

    def outside_untouched(self):
        """True if no byte before the log or after its end was written."""
        return (not any(self.mm[:self.offset]) and
                not any(self.mm[self.offset + self.size:self.file_size]))

    def clear(self):
        self.mm[self.offset:self.offset + self.size] = bytes(self.size)

    def close(self):
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def flow_frame(dst, src, tag, i):
    """A frame of flow i (IPv4 ethertype; bytes 12-19 of the payload are the addresses the
    flow hash reads, dp/flow_hash.h), tagged `tag` + i."""
    body = (tag + struct.pack(">I", i)).ljust(12, b"\0") + struct.pack(">II", 0x0a000000 + i, 0x0a800000)
    return frame(dst, src, body, ethertype=0x0800)


def start_pair(g, q, num=64, enable=True, kick=True):
    """Sets up queue pair q (vrings 2q, 2q+1) of an already negotiated Guest in its memory:
    returns (RxQueue, TxQueue); each ring's call eventfd is its call_fd. kick: True an
    eventfd, None the no-fd flag (the switch must poll), False no SET_VRING_KICK (the ring
    never starts). The fds are closed with the Guest."""
    rx, tx = RxQueue(g.mem, num), TxQueue(g.mem, num)
    kicks = []
    for i, ring in ((2 * q, rx), (2 * q + 1, tx)):
        call, k = eventfd(), eventfd()
        g.owned_fds += [call, k]
        ring.call_fd = call
        Guest.check(g.state(SET_VRING_NUM, i, num), "SET_VRING_NUM %d" % i)
        Guest.check(g.state(SET_VRING_BASE, i, 0), "SET_VRING_BASE %d" % i)
        Guest.check(g.request(SET_VRING_ADDR, ring.addr_msg(i)), "SET_VRING_ADDR %d" % i)
        Guest.check(g.vring_fd(SET_VRING_CALL, i, call), "SET_VRING_CALL %d" % i)
        if kick:
            Guest.check(g.vring_fd(SET_VRING_KICK, i, k), "SET_VRING_KICK %d" % i)
            ring.kick_fd = k
        elif kick is None:  # polling: SET_VRING_KICK with the no-fd flag
            Guest.check(g.vring_fd(SET_VRING_KICK, i, None), "SET_VRING_KICK %d" % i)
        if enable:
            Guest.check(g.state(SET_VRING_ENABLE, i, 1), "SET_VRING_ENABLE %d" % i)
        kicks.append(k)
    return rx, tx


class BigRxQueue(RxQueue):
    """A receive queue of 64 KiB buffers (a 64 KiB frame in one buffer)."""
    BUF = 65536 + 64
