#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ (checked in; run again after changing an
input format). Each seed is a small, valid program in the target's input format (see the
comment at the top of each fuzz_*.cpp): the fuzzer starts from deep states (rings set up,
frames flowing) instead of having to discover the vhost-user handshake byte by byte."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def bit(n):
    return 1 << n


F_VERSION_1, F_MRG, F_INDIRECT, F_EVENT_IDX, F_PROTO, F_MTU = bit(32), bit(15), bit(28), bit(29), bit(30), bit(3)
P_MQ, P_RARP, P_REPLY_ACK, P_MTU = bit(0), bit(2), bit(3), bit(4)
P_LOG_SHMFD, F_LOG_ALL, F_MQ = bit(1), bit(26), bit(22)
VERSION, NEED_REPLY = 1, 1 << 3
(GET_FEATURES, SET_FEATURES, SET_OWNER, RESET_OWNER, SET_MEM_TABLE, SET_VRING_NUM, SET_VRING_ADDR,
 SET_VRING_BASE, GET_VRING_BASE, SET_VRING_KICK, SET_VRING_CALL, GET_PROTOCOL_FEATURES,
 SET_PROTOCOL_FEATURES, GET_QUEUE_NUM, SET_VRING_ENABLE, SEND_RARP, NET_SET_MTU) = (
    1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20)
SET_LOG_BASE = 6
D_NEXT, D_WRITE, D_INDIRECT = 1, 2, 4


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(n=64, tag=b"seed"):
    eth = bytes.fromhex("02000000000b02000000000a") + b"\x08\x00"
    body = tag + bytes(range(256)) * 40
    return (eth + body)[:n]


# ---------------------------------------------------------------------------- vhost backend
class Backend:
    """Builds a fuzz_vhost_backend input."""

    def __init__(self):
        self.b = b""

    def msg(self, req, payload=b"", flags=VERSION, fds=()):
        self.b += struct.pack("<BIIHB", 0, req, flags, len(payload), 0) + payload
        self.b += struct.pack("<B", len(fds))
        for kind, param in fds:
            self.b += struct.pack("<BI", kind, param)
        return self

    def u64(self, req, v, flags=VERSION, fds=()):
        return self.msg(req, struct.pack("<Q", v), flags, fds)

    def state(self, req, idx, num, flags=VERSION):
        return self.msg(req, struct.pack("<II", idx, num), flags)

    def raw(self, data):
        self.b += struct.pack("<BH", 1, len(data)) + data
        return self

    def run(self, rounds=4):
        self.b += struct.pack("<BB", 2, rounds)
        return self

    def poke(self, memfd, off, data):
        self.b += struct.pack("<BBIH", 3, memfd, off, len(data)) + data
        return self

    def close(self):
        self.b += b"\x04"
        return self


UVA = 0x7f0000000000
MEM = 64 << 10
NUM = 256
TXD, TXA, TXU, RXD, RXA, RXU, TXBUF, RXBUF = 0x0, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x8000, 0xa000


def negotiate(b, features, proto, flags=VERSION, nofd=False):
    b.msg(GET_FEATURES).u64(SET_FEATURES, features, flags)
    b.msg(GET_PROTOCOL_FEATURES).u64(SET_PROTOCOL_FEATURES, proto, flags)
    b.msg(SET_OWNER, flags=flags)
    table = struct.pack("<II", 1, 0) + struct.pack("<QQQQ", 0, MEM, UVA, 0)
    b.msg(SET_MEM_TABLE, table, flags, fds=[(0, MEM)])
    for idx, (d, a, u) in enumerate(((RXD, RXA, RXU), (TXD, TXA, TXU))):
        b.state(SET_VRING_NUM, idx, NUM, flags)
        b.msg(SET_VRING_ADDR, struct.pack("<IIQQQQ", idx, 0, UVA + d, UVA + u, UVA + a, 0), flags)
        b.state(SET_VRING_BASE, idx, 0, flags)
        if nofd:
            b.u64(SET_VRING_KICK, idx | 0x100, flags)
            b.u64(SET_VRING_CALL, idx | 0x100, flags)
        else:
            b.u64(SET_VRING_KICK, idx, flags, fds=[(1, 1)])
            b.u64(SET_VRING_CALL, idx, flags, fds=[(1, 1)])
        b.state(SET_VRING_ENABLE, idx, 1, flags)
    return b


def desc(addr, ln, flags=0, nxt=0):
    return struct.pack("<QIHH", addr, ln, flags, nxt)


def post_rx(b, n=8, size=2048):
    b.poke(0, RXD, b"".join(desc(RXBUF + i * size, size, D_WRITE) for i in range(n)))
    b.poke(0, RXA, struct.pack("<HH", 0, n) + b"".join(struct.pack("<H", i) for i in range(n)))


def send_tx(b, hdr_len=12, n=1, size=64):
    data = b"".join(bytes(hdr_len) + frame(size, b"tx%02d" % i) for i in range(n))
    b.poke(0, TXBUF, data)
    per = hdr_len + size
    b.poke(0, TXD, b"".join(desc(TXBUF + i * per, per) for i in range(n)))
    b.poke(0, TXA, struct.pack("<HH", 0, n) + b"".join(struct.pack("<H", i) for i in range(n)))


def backend_seeds():
    full = F_VERSION_1 | F_MRG | F_INDIRECT | F_EVENT_IDX | F_PROTO | F_MTU
    proto = P_MQ | P_RARP | P_REPLY_ACK | P_MTU
    b = negotiate(Backend(), full, proto)
    post_rx(b)
    send_tx(b, n=4)
    write("fuzz_vhost_backend", "negotiate_and_forward", b.run().b)

    b = negotiate(Backend(), full, proto, VERSION | NEED_REPLY)
    post_rx(b)
    send_tx(b, n=2, size=1500)
    b.run().state(GET_VRING_BASE, 1, 0, VERSION | NEED_REPLY).state(SET_VRING_BASE, 1, 2, VERSION | NEED_REPLY)
    b.u64(SET_VRING_KICK, 1, VERSION | NEED_REPLY, fds=[(1, 1)]).u64(NET_SET_MTU, 1500, VERSION | NEED_REPLY)
    b.u64(SEND_RARP, 0x0b00000002, VERSION | NEED_REPLY).msg(GET_QUEUE_NUM)
    b.msg(RESET_OWNER, flags=VERSION | NEED_REPLY)
    write("fuzz_vhost_backend", "reply_ack_reset_owner", b.b)

    # No protocol features, no event index, polling (no kick/call fds), 10-byte headers.
    b = negotiate(Backend(), F_INDIRECT, 0, nofd=True)
    post_rx(b, n=4, size=100)
    send_tx(b, hdr_len=10, n=1, size=300)
    write("fuzz_vhost_backend", "legacy_polling", b.run().close().b)

    # An indirect TX chain and a table swapped while running.
    b = negotiate(Backend(), full, proto)
    post_rx(b)
    b.poke(0, TXBUF, bytes(12) + frame(200))
    b.poke(0, 0xc000, desc(TXBUF, 12, D_NEXT, 1) + desc(TXBUF + 12, 200))
    b.poke(0, TXD, desc(0xc000, 32, D_INDIRECT))
    b.poke(0, TXA, struct.pack("<HHH", 0, 1, 0))
    b.run()
    table = struct.pack("<II", 2, 0) + struct.pack("<QQQQ", 0, MEM, UVA, 0) + \
        struct.pack("<QQQQ", 0x100000, 8192, UVA + 0x100000, 4096)
    b.msg(SET_MEM_TABLE, table, VERSION | NEED_REPLY, fds=[(6, 0), (0, 3 * 4096)])
    write("fuzz_vhost_backend", "indirect_and_new_table", b.run().b)

    # Live migration: LOG_SHMFD, a log in a second memfd, LOG_ALL on, the used rings' log
    # address (VHOST_VRING_F_LOG) set again mid-traffic, the log replaced (at an offset),
    # LOG_ALL off and on, then logs of hostile sizes and offsets and SEND_RARP.
    b = negotiate(Backend(), full, proto | P_LOG_SHMFD)
    post_rx(b)
    send_tx(b, n=2)
    b.msg(SET_LOG_BASE, struct.pack("<QQ", 4096, 0), fds=[(0, 8192)])
    b.u64(SET_FEATURES, full | F_LOG_ALL, VERSION | NEED_REPLY).run()
    for idx, (d, a, u) in enumerate(((RXD, RXA, RXU), (TXD, TXA, TXU))):
        b.msg(SET_VRING_ADDR, struct.pack("<IIQQQQ", idx, 1, UVA + d, UVA + u, UVA + a, u),
              VERSION | NEED_REPLY)
    post_rx(b)
    send_tx(b, n=2)
    b.run().msg(SET_LOG_BASE, struct.pack("<QQ", 2, 4095), fds=[(6, 1)])
    b.u64(SET_FEATURES, full, VERSION | NEED_REPLY).run().u64(SET_FEATURES, full | F_LOG_ALL).run()
    b.msg(SET_LOG_BASE, struct.pack("<QQ", 1, (1 << 64) - 1), VERSION | NEED_REPLY, fds=[(0, 4096)])
    b.msg(SET_LOG_BASE, struct.pack("<QQ", 1 << 40, 0), VERSION | NEED_REPLY, fds=[(4, 0)])
    b.u64(SEND_RARP, 0xffffffffffff, VERSION | NEED_REPLY)
    write("fuzz_vhost_backend", "migration_logging", b.run().b)

    # Multiqueue: vring messages and SET_VRING_ENABLE for queue pairs 1..7 and beyond,
    # indexes with upper bits set; GET_QUEUE_NUM before and after the features.
    b = Backend().msg(GET_QUEUE_NUM).msg(GET_FEATURES).u64(SET_FEATURES, full | F_MQ)
    b.msg(GET_PROTOCOL_FEATURES).u64(SET_PROTOCOL_FEATURES, proto).msg(GET_QUEUE_NUM)
    negotiate(b, full | F_MQ, proto, VERSION | NEED_REPLY)
    for idx in (2, 3, 4, 15, 16, 255, 256, 0x10002, 0xffffffff):
        b.state(SET_VRING_ENABLE, idx, 1, VERSION | NEED_REPLY)
        b.state(SET_VRING_NUM, idx, NUM, VERSION | NEED_REPLY)
        b.msg(SET_VRING_ADDR, struct.pack("<IIQQQQ", idx, 0, UVA + RXD, UVA + RXU, UVA + RXA, 0),
              VERSION | NEED_REPLY)
        b.u64(SET_VRING_KICK, idx & 0xff | 0x100, VERSION | NEED_REPLY)
        b.state(GET_VRING_BASE, idx, 0, VERSION | NEED_REPLY)
    post_rx(b)
    send_tx(b, n=2)
    b.run().state(SET_VRING_ENABLE, 0, 0).run().state(SET_VRING_ENABLE, 0, 1).run()
    write("fuzz_vhost_backend", "multiqueue_indexes", b.b)

    # Framing garbage: a header cut short, an oversized size field, fds on GET_FEATURES.
    b = Backend().raw(struct.pack("<II", GET_FEATURES, VERSION)).raw(struct.pack("<I", 0))
    b.msg(GET_FEATURES, fds=[(1, 0)]).msg(SET_FEATURES, b"\0" * 4)
    b.b += struct.pack("<BIIHBI", 0, SET_MEM_TABLE, VERSION, 0, 1, 100000) + b"\0"
    write("fuzz_vhost_backend", "framing", b.b)


# ------------------------------------------------------------------------------- device queue
class Queue:
    def __init__(self, log2num=8, features=0xf):
        self.b = struct.pack("<BB", log2num, features)

    def chain(self, ring, first, descs):
        self.b += struct.pack("<BBHB", 4, ring, first, len(descs) - 1)
        for region, off, ln, flags in descs:
            self.b += struct.pack("<BIHB", region, off, ln, flags)
        return self

    def mem(self, region, off, data):
        self.b += struct.pack("<BBIH", 3, region, off, len(data)) + data
        return self

    def table(self, region, off, entries):
        self.b += struct.pack("<BBIB", 5, region, off, len(entries) - 1)
        for r, o, ln, flags, nxt in entries:
            self.b += struct.pack("<BIHHH", r, o, ln, flags, nxt)
        return self

    def burst(self):
        self.b += b"\x06"
        return self

    def frame(self, n):
        self.b += struct.pack("<BH", 7, n)
        return self

    def event(self, ring, v):
        self.b += struct.pack("<BBH", 8, ring, v)
        return self


def queue_seeds():
    q = Queue(8, 0xf)  # EVENT_IDX, INDIRECT, MRG_RXBUF, VERSION_1: 12-byte header
    q.mem(0, 0x8000, bytes(12) + frame(64))
    q.chain(1, 0, [(0, 0xa000, 1024, D_WRITE)]).chain(1, 1, [(1, 0, 1024, D_WRITE), (2, 0, 1024, D_WRITE)])
    q.chain(0, 0, [(0, 0x8000, 76, 0)]).burst()
    write("fuzz_device_queue", "tx_to_rx_mergeable", q.frame(1500).event(1, 3).frame(60).b)

    q = Queue(4, 0x2)  # INDIRECT only: 10-byte header, no mergeable buffers
    q.mem(1, 0x100, bytes(10) + frame(100))
    q.table(1, 0, [(1, 0x100, 10, D_NEXT, 1), (1, 0x10a, 100, 0, 0)])
    q.chain(0, 3, [(1, 0, 32, D_INDIRECT)])
    q.chain(1, 0, [(2, 0, 2000, D_WRITE)]).burst()
    write("fuzz_device_queue", "indirect_tx", q.b)

    # A buffer across the region 0 / region 1 boundary (contiguous in guest-physical space).
    q = Queue(8, 0x9)
    q.mem(0, 0x10000 - 30, bytes(12) + frame(18)).mem(1, 0, frame(64)[18:])
    q.chain(0, 5, [(0, 0x10000 - 30, 76, 0)]).chain(1, 7, [(0, 0xf000, 200, D_WRITE)]).burst()
    write("fuzz_device_queue", "across_regions", q.b)

    # Header split over three descriptors, then a cycle and a bad head.
    q = Queue(3, 0x8)
    q.mem(2, 0, bytes(12) + frame(64))
    q.chain(0, 0, [(2, 0, 4, 0), (2, 4, 4, 0), (2, 8, 68, 0)]).chain(1, 4, [(2, 0x1000, 100, D_WRITE)])
    q.b += struct.pack("<BBHQIHH", 0, 0, 6, 0x100, 16, D_NEXT, 6)  # self-loop
    q.b += struct.pack("<BBHH", 1, 0, 1, 6) + struct.pack("<BBH", 2, 0, 2)
    write("fuzz_device_queue", "split_header_and_cycle", q.burst().b)


# ------------------------------------------------------------------------------------ packet
def packet_seeds():
    data = bytes(12) + frame(64)
    seg = [5, 9, len(data) - 14]
    b = struct.pack("<BB", 1, len(seg) - 1) + b"".join(struct.pack("<H", s) for s in seg) + data
    for i in range(12):
        b += struct.pack("<BBH", 0, i % 3, 1) + bytes([2, 0, 0, 0, 0, i])
    b += struct.pack("<BBH", 2, 0, 20) + bytes(6) + struct.pack("<BBH", 3, 1, 0) + bytes(6)
    write("fuzz_packet", "split_and_learn", b)
    mac = b"02:00:00:00:00:0a"
    data = bytes(10) + mac + b"\0" + bytes(50)
    write("fuzz_packet", "mac_text", struct.pack("<BBH", 0, 0, len(data)) + data)


# ----------------------------------------------------------------------------------- offload
def tcp_frame(payload_len, v6=False, vlan=False):
    eth = bytes.fromhex("02000000000b02000000000a")
    if vlan:
        eth += b"\x81\x00\x00\x05"
    tcp = struct.pack(">HHIIBBHHH", 1234, 5201, 1000, 0, 5 << 4, 0x18, 65535, 0, 0)
    payload = bytes((i * 13) & 0xff for i in range(payload_len))
    if v6:
        ip = struct.pack(">IHBB", 6 << 28, len(tcp) + payload_len, 6, 64) + bytes(range(32))
        eth += b"\x86\xdd"
    else:
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + payload_len, 7, 0x4000, 64, 6, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
        eth += b"\x08\x00"
    return eth + ip + tcp + payload, len(eth), len(eth) + len(ip)


def offload_seed(name, txsel, rxsel, nbufs, bufsize, frame, flags, gso_type, hdr_len, gso_size,
                 csum_start, csum_offset):
    hdr = struct.pack("<BBHHHHH", flags, gso_type, hdr_len, gso_size, csum_start, csum_offset, 0)
    b = struct.pack("<HHBHH", txsel, rxsel, nbufs - 1, bufsize - 1, 65535 - 64) + hdr
    b += struct.pack("<H", len(frame)) + frame
    write("fuzz_offload", name, b)


def offload_seeds():
    CSUM, GCSUM, HTSO4, HTSO6, HECN, GTSO4, GTSO6, GECN, MRG, V1 = (1 << i for i in range(10))
    f, l3, l4 = tcp_frame(4000)
    # TSO4 from a sender with CSUM/HOST_TSO4 to a receiver without offloads: software GSO.
    offload_seed("tso4_soft", CSUM | HTSO4 | V1, MRG | V1, 8, 2048, f, 1, 1, l4 + 20, 1448, l4, 16)
    # The same to a receiver that takes it whole (GUEST_TSO4 + GUEST_CSUM, mergeable buffers).
    offload_seed("tso4_pass", CSUM | HTSO4 | V1, GCSUM | GTSO4 | MRG | V1, 8, 2048, f, 1, 1, l4 + 20, 1448, l4, 16)
    f, l3, l4 = tcp_frame(3000, v6=True, vlan=True)
    offload_seed("tso6_vlan_soft", CSUM | HTSO6 | V1, MRG | V1, 8, 2048, f, 1, 4, l4 + 20, 1000, l4, 16)
    f, l3, l4 = tcp_frame(500)
    # NEEDS_CSUM only, to a receiver without GUEST_CSUM: the checksum is filled in here.
    offload_seed("csum_soft", CSUM | V1, V1, 2, 2048, f, 1, 0, 0, 0, l4, 16)
    offload_seed("plain", 0, 0, 1, 1600, f, 0, 0, 0, 0, 0, 0)


# ----------------------------------------------------------------------------------- control
def req(cmd, *argv, args=None):
    """One control request line: {"cmd": cmd, "args": {"argv": [...]}} (args as given if set)."""
    if args is None:
        args = {"argv": list(argv)} if argv else {}
    return json.dumps({"cmd": cmd, "args": args}, separators=(",", ":")).encode() + b"\n"


def control_seeds():
    """fuzz_control: lines of requests, each on its own connection, against ports a, b, c.
    One seed per command of src/control/command_table.cpp, with valid and invalid arguments,
    then sequences whose state the next requests read, then malformed requests."""
    bad_count = [req("stats", "x"), req("version", "1", "2")]
    seeds = {
        "stats": [req("stats"), req("stats", args={}), req("stats", args={"argv": []})] + bad_count,
        "ports": [req("ports"), req("ports", "a"), req("ports", args={"argv": None})],
        "fdb": [req("fdb"), req("fdb", "a"), req("fdb", "all"), req("fdb", "b", "all"),
                req("fdb", "all", "all"), req("fdb", "zz"), req("fdb", "a", "b"),
                req("fdb", "a", "all", "x"), req("fdb", args={"argv": [1]}),
                req("fdb", args={"argv": "a"})],
        "pmd_stats": [req("pmd-stats"), req("pmd-stats", "0")],
        "pmd_rxq_show": [req("pmd-rxq-show"), req("pmd-rxq-show", args={"argv": {}})],
        "pmd_rebalance": [req("pmd-rebalance"), req("pmd-rxq-show"), req("pmd-rebalance", "now")],
        "set_flush": [req("set-flush", "a", "immediate"), req("set-flush", "all", "interval=30"),
                      req("set-flush", "b", "budget=5"), req("set-flush", "c", "rx-batch"),
                      req("stats"), req("set-flush", "a", "budget=0"),
                      req("set-flush", "a", "interval=1000001"), req("set-flush", "a", "interval="),
                      req("set-flush", "a", "interval=+5"), req("set-flush", "zz", "immediate"),
                      req("set-flush", "b"), req("set-flush", "a", "immediate", "x"),
                      req("set-flush", args={"argv": ["a", 5]}), req("stats")],
        "links": [req("links"), req("links", "a")],
        "link": [req("link", "a", "b"), req("link", "a", "b"), req("link", "b", "a"),
                 req("link", "a", "c"), req("link", "c", "c"), req("link", "zz", "a"),
                 req("link", "a"), req("links"), req("stats"), req("ports")],
        "unlink": [req("link", "a", "b"), req("link", "c", "b"), req("unlink", "b", "a"),
                   req("unlink", "a", "b"), req("unlink", "a", "b"), req("link", "c", "a"),
                   req("links"), req("unlink", "c"), req("unlink", "zz", "a")],
        "version": [req("version"), req("version", "x")],
        "show": [req("show"), req("set-flush", "b", "immediate"), req("link", "a", "b"),
                 req("show"), req("show", "x")],
        "log_level": [req("log-level"), req("log-level", "debug"), req("log-level", "off"),
                      req("log-level", "warning"), req("log-level", "info", "x"),
                      req("log-level", "")],
        # Ports at run time: "$D/" is the harness's socket directory; a tap and a path
        # elsewhere are not sent (the harness opens vhost-user sockets in its directory only).
        "add_port": [req("add-port", "d", "vhost-user", "$D/d.sock", "external-id:vm=1", "mtu=2000"),
                     req("add-port", "d", "vhost-user", "$D/d.sock"),
                     req("add-port", "--may-exist", "d", "vhost-user", "$D/d.sock"),
                     req("add-port", "--may-exist", "d", "vhost-user-client", "$D/d.sock"),
                     req("add-port", "e", "vhost-user", "$D/d.sock"),
                     req("add-port", "e", "vhost-user-client", "$D/e.sock", "flush=immediate"),
                     req("add-port", "f", "vhost-user", "$D/f.sock", "flush=bogus"),
                     req("add-port", "f", "vhost-user", "$D/f.sock", "nosuch=1"),
                     req("add-port", "f", "vhost-user", "$D/f.sock", "socket_group=nosuchgroup"),
                     req("add-port", "f:x", "vhost-user", "$D/f.sock"),
                     req("add-port", "f", "nosuchtype", "$D/f.sock"),
                     req("add-port", "t", "tap", "vltap0"), req("add-port", "g", "vhost-user", "/tmp/g.sock"),
                     req("add-port", "d", "vhost-user"), req("stats"), req("ports"), req("show")],
        "del_port": [req("add-port", "d", "vhost-user", "$D/d.sock"), req("link", "a", "d"),
                     req("del-port", "d"), req("del-port", "d"), req("del-port", "--if-exists", "d"),
                     req("del-port", "a"), req("add-port", "x", "vhost-user", "$D/x.sock"),
                     req("del-port"), req("del-port", "a", "b"), req("links"), req("ports")],
        "set_port": [req("set-port", "a", "mtu=3000"), req("set-flush", "b", "immediate"),
                     req("set-port", "b", "max_queues=2"), req("set-port", "c", "flush=interval=20"),
                     req("set-port", "c", "flush=default", "external-id:k=v"),
                     req("set-port", "a", "socket_group=nosuchgroup"), req("set-port", "zz", "mtu=1"),
                     req("set-port", "a", "mtu"), req("link", "a", "b"), req("set-port", "a", "mtu=4000"),
                     req("stats"), req("ports")],
        "stats_clear": [req("stats-clear"), req("stats-clear", "x"), req("stats")],
        "reload": [req("reload"), req("reload", "now")],
        # A trace changes nothing; on this harness no port is active, so every frame that
        # gets past the ingress checks is dropped as no_destination (fuzz_control.cpp).
        "trace": [req("trace", "a", "ffffffffffff02000000000a0806" + "00" * 46),
                  req("trace", "b", "02000000000b02000000000b88b5"),
                  req("trace", "c", "ff:ff:ff:ff:ff:ff:02:00:00:00:00:0c:08:00", "1500"),
                  req("trace", "a", "0000"), req("trace", "a", "ffffffffffff02000000000a0800", "64"),
                  req("trace", "a", "f"), req("trace", "a", "zz"), req("trace", "a", ""),
                  req("trace", "zz", "ffff"), req("trace", "a", "ffff", "x"), req("trace", "a"),
                  req("trace", "a", "ff" * 64, "70000"), req("fdb"), req("stats")],
    }
    for name, lines in seeds.items():
        write("fuzz_control", name, b"".join(lines))
    deep = b'{"cmd":"stats","args":{"argv":' + b"[" * 20 + b"]" * 20 + b"}}\n"
    write("fuzz_control", "malformed", b"".join([
        b"\n", b"not json\n", b"[]\n", b"42\n", b'"stats"\n', b"{}\n", b'{"cmd":5}\n',
        b'{"cmd":null,"args":{}}\n', b'{"cmd":"stats","args":[]}\n', b'{"cmd":"stats","args":"x"}\n',
        b'{"cmd":"stat"}\n', b'{"cmd":"STATS"}\n', b'{"cmd":"stats\\u0000"}\n', deep,
        b'{"cmd":"stats","args":{"argv":["\\ud800"]}}\n', b'{"cmd":"fdb","args":{"argv":["\xff"]}}\n',
        b'{"cmd":"version","cmd":"stats"}\n', b'{"cmd":"version"} trailing\n',
        b'{"cmd":"version"}']))  # the last line without its newline: answered at EOF


if __name__ == "__main__":
    control_seeds()
    offload_seeds()
    backend_seeds()
    queue_seeds()
    packet_seeds()
