#include "wire/af_xdp.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "util/log.h"
#include "wire/netdev.h"

#ifndef XDP_MAX_TX_SKB_BUDGET
#define XDP_MAX_TX_SKB_BUDGET 9  // Linux 6.17, include/uapi/linux/if_xdp.h
#endif

namespace vl::wire {

/// One queue's socket, its UMEM and its four rings (libxdp's xsk.h: the rings' inline
/// functions are the whole datapath). Written by the queue's thread only.
struct alignas(64) AfXdpWire::Queue {
  xsk_ring_prod fill{}, tx{};
  xsk_ring_cons comp{}, rx{};
  xsk_umem* umem = nullptr;
  xsk_socket* xsk = nullptr;
  uint8_t* area = nullptr;  // kFrames * kFrameSize bytes, page-aligned (mmap)
  int fd = -1;              // the socket (libxdp's: xsk_umem__delete closes it)
  bool zero_copy = false;
  uint32_t nfree = 0;                   // free_tx[0..nfree): tx chunks that are ours
  std::unique_ptr<uint64_t[]> free_tx;  // kTxFrames UMEM offsets
  uint64_t rx_truncated = 0, rx_bad_desc = 0, tx_ring_full = 0, tx_bad_len = 0;
  uint64_t tx_bad_desc = 0, tx_kick_again = 0, tx_kick_errors = 0;
};

namespace {

constexpr size_t kUmemBytes = size_t{AfXdpWire::kFrames} * AfXdpWire::kFrameSize;
/// Receive chunks are the UMEM's [0, kRxEnd), transmit chunks the rest.
constexpr uint64_t kRxEnd = uint64_t{AfXdpWire::kRxFrames} * AfXdpWire::kFrameSize;
constexpr uint64_t kChunkMask = ~uint64_t{AfXdpWire::kFrameSize - 1};
/// How long open() waits for a queue the kernel still holds for a socket just closed (its
/// release is deferred to a work item: a few ms).
constexpr auto kBusyWait = std::chrono::milliseconds(200);

thread_local std::string t_warning;  // the last warning libxdp or libbpf printed (this thread)

/// libxdp's and libbpf's messages: to the log at debug (trace for their debug), the last
/// warning kept for open()'s error.
__attribute__((format(printf, 2, 0))) void note(int level, const char* format, va_list ap) {
  const auto lvl = level == 2 ? spdlog::level::trace : spdlog::level::debug;
  if (level != 0 && !spdlog::should_log(lvl)) return;
  char line[512];
  std::vsnprintf(line, sizeof line, format, ap);
  size_t n = std::strlen(line);
  while (n && line[n - 1] == '\n') line[--n] = 0;
  if (level == 0) t_warning = line;
  spdlog::log(lvl, "af-xdp: {}", line);
}
__attribute__((format(printf, 2, 0))) int xdp_print(libxdp_print_level l, const char* f,
                                                    va_list ap) {
  note(l == LIBXDP_WARN ? 0 : l == LIBXDP_INFO ? 1 : 2, f, ap);
  return 0;
}
__attribute__((format(printf, 2, 0))) int bpf_print(libbpf_print_level l, const char* f,
                                                    va_list ap) {
  note(l == LIBBPF_WARN ? 0 : l == LIBBPF_INFO ? 1 : 2, f, ap);
  return 0;
}
void hook_logs() {
  static const bool once = [] {
    libxdp_set_print(xdp_print);
    libbpf_set_print(bpf_print);
    return true;
  }();
  (void)once;
}

uint32_t xdp_flags(XdpMode mode) {
  return mode == XdpMode::kSkb ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
}

/// strerror of a negative errno, with libxdp's or libbpf's last warning.
std::string why(int r) {
  std::string s = std::strerror(-r);
  if (!t_warning.empty()) s += fmt::format(" ({})", t_warning);
  return s;
}

}  // namespace

AfXdpWire::AfXdpWire(std::string ifname, uint32_t queues, XdpMode mode)
    : name_(std::move(ifname)), nq_(queues), want_(mode) {}

AfXdpWire::~AfXdpWire() { close(); }

bool AfXdpWire::open(std::string* err) {
  close();
  hook_logs();
  ifindex_ = if_index(name_);
  if (!ifindex_) {
    *err = fmt::format("af-xdp {}: no such interface", name_);
    return false;
  }
  if (!nq_) {
    *err = fmt::format("af-xdp {}: no queue asked for", name_);
    return false;
  }
  if (!if_set_up(name_, err) || !load_program(err)) return false;
  std::string native_err, skb_err;
  if (!(want_ != XdpMode::kSkb && attach(XdpMode::kNative, &native_err)) &&
      !(want_ != XdpMode::kNative && attach(XdpMode::kSkb, &skb_err))) {
    if (want_ == XdpMode::kAuto) {
      *err = fmt::format("af-xdp {}: cannot attach XDP: native mode: {}; skb mode: {}", name_,
                         native_err, skb_err);
    } else {
      *err = fmt::format("af-xdp {}: cannot attach XDP: {}", name_, native_err + skb_err);
    }
    close();
    return false;
  }
  control_fd_.reset(open_send_socket(ifindex_, err));
  if (!control_fd_.valid()) {
    *err = fmt::format("af-xdp {}: {}", name_, *err);
    close();
    return false;
  }
  qs_ = std::make_unique<Queue[]>(nq_);
  bool zc = true;
  for (uint32_t q = 0; q < nq_; ++q) {
    std::string why_q;
    if (!open_queue(qs_[q], q, &why_q)) {
      *err = fmt::format("af-xdp {}: queue {}: {}", name_, q, why_q);
      close();  // the program and the queues before it
      return false;
    }
    zc = zc && qs_[q].zero_copy;
  }
  zero_copy_ = zc;
  info_ = WireInfo{};
  info_.queues = nq_;
  info_.vnet_hdr = false;
  info_.offloads = false;
  const uint32_t mtu = if_mtu(name_);
  info_.mtu = mtu ? mtu : 1500;
  info_.rx_interrupts = true;
  return true;
}

/// The XSKMAP (queue id -> socket, nq_ entries) and the program: libxdp's xsk_def_prog
/// (lib/libxdp/xsk_def_xdp_prog.c) without its reference count,
///   return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
/// so a queue without a socket passes its frames to the stack (the flags' low bits are the
/// action on a missing entry, Linux 5.3). Ours rather than libxdp's (xsk_socket__create
/// without XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD): libxdp 1.3.1 leaks a program and a map
/// descriptor per open and close, each keeping its object in the kernel, and two of the
/// program of someone else's that holds the interface per failed open (xdp-tools 48ad94b,
/// in 1.4.1, and 9484d6a, in none yet). Ours needs no bpffs either.
bool AfXdpWire::load_program(std::string* err) {
  t_warning.clear();
  map_.reset(
      bpf_map_create(BPF_MAP_TYPE_XSKMAP, "virtlink_xsks", sizeof(int), sizeof(int), nq_, nullptr));
  if (!map_.valid()) {
    *err = fmt::format("af-xdp {}: an XSKMAP of {} queues: {}", name_, nq_, why(-errno));
    return false;
  }
  const bpf_insn insns[] = {
      {BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, offsetof(xdp_md, rx_queue_index), 0},
      {BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map_.get()},
      {0, 0, 0, 0, 0},  // the second half of the 64-bit immediate
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, XDP_PASS},
      {BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_redirect_map},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  prog_.reset(bpf_prog_load(BPF_PROG_TYPE_XDP, "virtlink_xsk", "GPL", insns,
                            sizeof insns / sizeof insns[0], nullptr));
  if (!prog_.valid()) {
    *err = fmt::format("af-xdp {}: loading the XDP program: {}", name_, why(-errno));
    map_.reset();
    return false;
  }
  return true;
}

/// Attaches the program in `mode`, never over another (XDP_FLAGS_UPDATE_IF_NOEXIST).
bool AfXdpWire::attach(XdpMode mode, std::string* err) {
  t_warning.clear();
  const int r = bpf_xdp_attach(static_cast<int>(ifindex_), prog_.get(),
                               xdp_flags(mode) | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
  if (r) {
    *err = why(r);  // the kernel's extack comes as libbpf's warning
    return false;
  }
  attached_ = mode;
  return true;
}

/// The UMEM (its fill ring full of every receive chunk) and the socket, bound, in the
/// XSKMAP (`config`: an xsk_socket_config). A negative errno, `*step` naming what failed,
/// nothing left behind.
int AfXdpWire::make_socket(Queue& x, uint32_t q, const void* config, const char** step) {
  t_warning.clear();
  xsk_umem_config uc{};
  // Twice the chunks: the kernel publishes its consumer position of the fill ring (and of
  // the tx ring) lazily, one packet late, so a ring the size of the chunks could look full
  // while it holds one less (a chunk then lost, its frame dropped).
  uc.fill_size = 2 * kRxFrames;
  uc.comp_size = kTxFrames;
  uc.frame_size = kFrameSize;
  *step = "xsk_umem__create";
  int r = xsk_umem__create(&x.umem, x.area, kUmemBytes, &x.fill, &x.comp, &uc);
  if (r) {
    x.umem = nullptr;
    return r;
  }
  // Before the socket is in the map: no frame finds the fill ring empty.
  uint32_t idx = 0;
  xsk_ring_prod__reserve(&x.fill, kRxFrames, &idx);  // an empty ring of that size
  for (uint32_t i = 0; i < kRxFrames; ++i) {
    *xsk_ring_prod__fill_addr(&x.fill, idx + i) = uint64_t{i} * kFrameSize;
  }
  xsk_ring_prod__submit(&x.fill, kRxFrames);
  *step = "xsk_socket__create";
  r = xsk_socket__create(&x.xsk, name_.c_str(), q, x.umem, &x.rx, &x.tx,
                         static_cast<const xsk_socket_config*>(config));
  if (!r) {
    *step = "xsk_socket__update_xskmap";
    r = xsk_socket__update_xskmap(x.xsk, map_.get());
    if (r) xsk_socket__delete(x.xsk);
  }
  if (r) {
    x.xsk = nullptr;
    xsk_umem__delete(x.umem);
    x.umem = nullptr;
  }
  return r;
}

bool AfXdpWire::open_queue(Queue& x, uint32_t q, std::string* err) {
  void* m = mmap(nullptr, kUmemBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    *err = fmt::format("a UMEM of {} bytes: {}", kUmemBytes, std::strerror(errno));
    return false;
  }
  x.area = static_cast<uint8_t*>(m);
  // The kernel pins these pages; a child process must not share them copy-on-write.
  madvise(m, kUmemBytes, MADV_DONTFORK);
  xsk_socket_config sc{};
  sc.rx_size = kRxFrames;
  sc.tx_size = 2 * kTxFrames;  // (as the fill ring: room despite a late consumer position)
  sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;  // the program is ours
  // Native: zero-copy if the driver has it, else copy (the kernel's choice at bind).
  sc.bind_flags = XDP_USE_NEED_WAKEUP | (attached_ == XdpMode::kSkb ? XDP_COPY : 0);
  const auto give_up = std::chrono::steady_clock::now() + kBusyWait;
  for (;;) {
    const char* step = "";
    const int r = make_socket(x, q, &sc, &step);
    if (!r) break;
    // EBUSY: a socket holds the queue, maybe one just closed (its release is deferred).
    if (r != -EBUSY || std::chrono::steady_clock::now() > give_up) {
      *err = fmt::format("{}: {}{}", step, why(r),
                         r == -EBUSY    ? " (another AF_XDP socket on this queue?)"
                         : r == -EINVAL ? " (no such queue?)"
                                        : "");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  x.fd = xsk_socket__fd(x.xsk);
  fcntl(x.fd, F_SETFD, FD_CLOEXEC);  // libxdp's socket() has no SOCK_CLOEXEC
  unsigned budget = kTxBudget;       // older kernels: ENOPROTOOPT, 32 it stays
  setsockopt(x.fd, SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &budget, sizeof budget);
  xdp_options opt{};
  socklen_t len = sizeof opt;
  x.zero_copy =
      getsockopt(x.fd, SOL_XDP, XDP_OPTIONS, &opt, &len) == 0 && (opt.flags & XDP_OPTIONS_ZEROCOPY);
  x.free_tx = std::make_unique<uint64_t[]>(kTxFrames);
  for (uint32_t i = 0; i < kTxFrames; ++i) x.free_tx[i] = kRxEnd + uint64_t{i} * kFrameSize;
  x.nfree = kTxFrames;
  return true;
}

void AfXdpWire::close_queue(Queue& x) {
  if (x.xsk) xsk_socket__delete(x.xsk);  // out of the map too (the kernel's doing)
  if (x.umem) xsk_umem__delete(x.umem);  // closes the fd
  if (x.area) munmap(x.area, kUmemBytes);
  x.xsk = nullptr;
  x.umem = nullptr;
  x.area = nullptr;
  x.fd = -1;
}

void AfXdpWire::close() {
  if (attached_ != XdpMode::kAuto) {
    // Only if it is still ours (XDP_FLAGS_REPLACE); gone with the interface: ENODEV.
    bpf_xdp_attach_opts o{};
    o.sz = sizeof o;
    o.old_prog_fd = prog_.get();
    bpf_xdp_detach(static_cast<int>(ifindex_), xdp_flags(attached_), &o);
    attached_ = XdpMode::kAuto;
  }
  if (qs_) {
    for (uint32_t q = 0; q < nq_; ++q) close_queue(qs_[q]);
  }
  qs_.reset();
  prog_.reset();
  map_.reset();
  control_fd_.reset();
  zero_copy_ = false;
}

bool AfXdpWire::send_control(const uint8_t* frame, uint32_t len) {
  const bool ok = control_fd_.valid() &&
                  ::send(control_fd_.get(), frame, len, MSG_DONTWAIT) == static_cast<ssize_t>(len);
  __atomic_fetch_add(ok ? &tx_control_ : &tx_control_errors_, 1, __ATOMIC_RELAXED);
  return ok;
}

int AfXdpWire::rx_fd(uint32_t q) const { return qs_ && q < nq_ ? qs_[q].fd : -1; }

bool AfXdpWire::link_up() const { return qs_ && if_running(name_); }

uint32_t AfXdpWire::recv(uint32_t q, Buf* bufs, uint32_t n) {
  Queue& x = qs_[q];
  uint32_t idx = 0;
  const uint32_t k = xsk_ring_cons__peek(&x.rx, n, &idx);
  uint32_t got = 0, refill = 0;
  for (uint32_t i = 0; i < k; ++i) {
    // The kernel's word, read once and checked: a chunk of ours, the frame inside it.
    const xdp_desc* d = xsk_ring_cons__rx_desc(&x.rx, idx + i);
    const uint64_t addr = __atomic_load_n(&d->addr, __ATOMIC_RELAXED);
    const uint32_t len = __atomic_load_n(&d->len, __ATOMIC_RELAXED);
    const uint64_t chunk = addr & kChunkMask;
    uint32_t fi = 0;
    if (chunk >= kRxEnd || !len || addr - chunk + len > kFrameSize ||
        xsk_ring_prod__reserve(&x.fill, 1, &fi) != 1) {  // room for every chunk we hold
      bump(x.rx_bad_desc);
      continue;
    }
    if (kHdrLen + len <= bufs[got].cap) {  // no virtio-net header on AF_XDP: zeros
      std::memset(bufs[got].p, 0, kHdrLen);
      std::memcpy(bufs[got].p + kHdrLen, x.area + addr, len);
      bufs[got++].len = kHdrLen + len;
    } else {
      bump(x.rx_truncated);
    }
    *xsk_ring_prod__fill_addr(&x.fill, fi) = chunk;  // copied out: back to the kernel
    ++refill;
  }
  if (k) xsk_ring_cons__release(&x.rx, k);
  if (refill) xsk_ring_prod__submit(&x.fill, refill);
  // Zero-copy drivers may wait for a kick to read the fill ring; copy mode never asks.
  if (xsk_ring_prod__needs_wakeup(&x.fill)) {
    recvfrom(x.fd, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }
  return got;
}

uint32_t AfXdpWire::send(uint32_t q, const Buf* bufs, uint32_t n) {
  Queue& x = qs_[q];
  // Chunks the kernel is done with come back first.
  uint32_t ci = 0;
  const uint32_t c = xsk_ring_cons__peek(&x.comp, kTxFrames, &ci);
  for (uint32_t i = 0; i < c; ++i) {
    const uint64_t chunk =
        __atomic_load_n(xsk_ring_cons__comp_addr(&x.comp, ci + i), __ATOMIC_RELAXED) & kChunkMask;
    if (chunk < kRxEnd || chunk >= kUmemBytes || x.nfree == kTxFrames) {
      bump(x.tx_bad_desc);
    } else {
      x.free_tx[x.nfree++] = chunk;
    }
  }
  if (c) xsk_ring_cons__release(&x.comp, c);
  uint32_t queued = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = bufs[i].len > kHdrLen ? bufs[i].len - kHdrLen : 0;  // the frame
    if (!len || len > kFrameSize) {
      bump(x.tx_bad_len);
      continue;
    }
    uint32_t ti = 0;
    if (!x.nfree || xsk_ring_prod__reserve(&x.tx, 1, &ti) != 1) {
      bump(x.tx_ring_full, n - i);  // this one and the rest
      break;
    }
    const uint64_t chunk = x.free_tx[--x.nfree];
    std::memcpy(x.area + chunk, bufs[i].p + kHdrLen, len);
    xdp_desc* d = xsk_ring_prod__tx_desc(&x.tx, ti);
    d->addr = chunk;
    d->len = len;
    d->options = 0;
    ++queued;
  }
  if (queued) xsk_ring_prod__submit(&x.tx, queued);
  // Copy mode sends in sendto() itself (up to kTxBudget descriptors); zero-copy drivers
  // kick when they ask. Also with nothing queued now: descriptors a busy kernel left.
  if (n && (!x.zero_copy || xsk_ring_prod__needs_wakeup(&x.tx)) &&
      sendto(x.fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) < 0) {
    // EAGAIN: more than the budget, or the driver busy; ENETDOWN: the interface is down.
    // Either way the frames wait in the ring for the next kick.
    if (errno == EAGAIN) {
      bump(x.tx_kick_again);
    } else if (errno != EBUSY && errno != ENOBUFS) {
      bump(x.tx_kick_errors);
    }
  }
  return queued;
}

void AfXdpWire::counters(DeviceCounters* out) const {
  xdp_statistics sum{};
  uint64_t rx_truncated = 0, rx_bad_desc = 0, tx_ring_full = 0, tx_bad_len = 0;
  uint64_t tx_bad_desc = 0, tx_kick_again = 0, tx_kick_errors = 0;
  for (uint32_t q = 0; qs_ && q < nq_; ++q) {
    const Queue& x = qs_[q];
    xdp_statistics st{};
    socklen_t len = sizeof st;  // cumulative, not reset on read
    if (getsockopt(x.fd, SOL_XDP, XDP_STATISTICS, &st, &len) == 0) {
      sum.rx_dropped += st.rx_dropped;
      sum.rx_invalid_descs += st.rx_invalid_descs;
      sum.tx_invalid_descs += st.tx_invalid_descs;
      sum.rx_ring_full += st.rx_ring_full;
      sum.rx_fill_ring_empty_descs += st.rx_fill_ring_empty_descs;
      sum.tx_ring_empty_descs += st.tx_ring_empty_descs;
    }
    rx_truncated += peek(x.rx_truncated);
    rx_bad_desc += peek(x.rx_bad_desc);
    tx_ring_full += peek(x.tx_ring_full);
    tx_bad_len += peek(x.tx_bad_len);
    tx_bad_desc += peek(x.tx_bad_desc);
    tx_kick_again += peek(x.tx_kick_again);
    tx_kick_errors += peek(x.tx_kick_errors);
  }
  out->emplace_back("rx_dropped", sum.rx_dropped);
  out->emplace_back("rx_invalid_descs", sum.rx_invalid_descs);
  out->emplace_back("tx_invalid_descs", sum.tx_invalid_descs);
  out->emplace_back("rx_ring_full", sum.rx_ring_full);
  out->emplace_back("rx_fill_ring_empty_descs", sum.rx_fill_ring_empty_descs);
  out->emplace_back("tx_ring_empty_descs", sum.tx_ring_empty_descs);
  out->emplace_back("rx_truncated", rx_truncated);
  out->emplace_back("rx_bad_desc", rx_bad_desc);
  out->emplace_back("tx_ring_full", tx_ring_full);
  out->emplace_back("tx_bad_len", tx_bad_len);
  out->emplace_back("tx_bad_desc", tx_bad_desc);
  out->emplace_back("tx_kick_again", tx_kick_again);
  out->emplace_back("tx_kick_errors", tx_kick_errors);
  out->emplace_back("tx_control", peek(tx_control_));
  out->emplace_back("tx_control_errors", peek(tx_control_errors_));
}

}  // namespace vl::wire
