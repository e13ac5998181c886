#include "app/capture.h"

#include <pcap/pcap.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iterator>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/clock.h"
#include "util/log.h"

namespace vl::app {

namespace {

constexpr size_t kMaxBpfInsns = 4096;  // the kernel's BPF_MAXINSNS (classic BPF)

bool parse_u64(const std::string& s, uint64_t* v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

/// "CODE:JT:JF:K,..." into instructions; false on any malformed one.
bool parse_bpf(const std::string& text, std::vector<bpf_insn>* out) {
  if (text.empty() || text.back() == ',') return false;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string one = text.substr(at, end - at);
    uint64_t f[4];
    size_t from = 0;
    for (int i = 0; i < 4; ++i) {
      size_t to = i < 3 ? one.find(':', from) : one.size();
      if (to == std::string::npos || !parse_u64(one.substr(from, to - from), &f[i])) return false;
      from = to + 1;
    }
    if (f[0] > 0xffff || f[1] > 0xff || f[2] > 0xff || f[3] > 0xffffffff) return false;
    out->push_back(bpf_insn{static_cast<u_short>(f[0]), static_cast<u_char>(f[1]),
                            static_cast<u_char>(f[2]), static_cast<bpf_u_int32>(f[3])});
    if (out->size() > kMaxBpfInsns) return false;
    at = end + 1;
  }
  return true;
}

/// What libpcap's bpf_validate() leaves to bpf_filter(), which the capture thread runs on
/// frames: in userland it accepts opcodes bpf_filter() does not implement (bpf_filter then
/// calls abort(): the whole switch) and a BPF_JA whose offset wraps around (k = -1: a jump
/// to itself, the capture thread looping for ever; libpcap allows backward jumps there for
/// `protochain`). So only the opcodes bpf_filter() runs, and only forward jumps, as the
/// kernel's classic BPF checker requires. False with `*why`.
bool runs_safely(const std::vector<bpf_insn>& prog, std::string* why) {
  static constexpr uint16_t kRuns[] = {
      BPF_RET | BPF_K, BPF_RET | BPF_A,
      BPF_LD | BPF_W | BPF_ABS, BPF_LD | BPF_H | BPF_ABS, BPF_LD | BPF_B | BPF_ABS,
      BPF_LD | BPF_W | BPF_LEN, BPF_LDX | BPF_W | BPF_LEN,
      BPF_LD | BPF_W | BPF_IND, BPF_LD | BPF_H | BPF_IND, BPF_LD | BPF_B | BPF_IND,
      BPF_LDX | BPF_MSH | BPF_B, BPF_LD | BPF_IMM, BPF_LDX | BPF_IMM,
      BPF_LD | BPF_MEM, BPF_LDX | BPF_MEM, BPF_ST, BPF_STX,
      BPF_JMP | BPF_JA,
      BPF_JMP | BPF_JGT | BPF_K, BPF_JMP | BPF_JGE | BPF_K, BPF_JMP | BPF_JEQ | BPF_K,
      BPF_JMP | BPF_JSET | BPF_K, BPF_JMP | BPF_JGT | BPF_X, BPF_JMP | BPF_JGE | BPF_X,
      BPF_JMP | BPF_JEQ | BPF_X, BPF_JMP | BPF_JSET | BPF_X,
      BPF_ALU | BPF_ADD | BPF_X, BPF_ALU | BPF_SUB | BPF_X, BPF_ALU | BPF_MUL | BPF_X,
      BPF_ALU | BPF_DIV | BPF_X, BPF_ALU | BPF_MOD | BPF_X, BPF_ALU | BPF_AND | BPF_X,
      BPF_ALU | BPF_OR | BPF_X, BPF_ALU | BPF_XOR | BPF_X, BPF_ALU | BPF_LSH | BPF_X,
      BPF_ALU | BPF_RSH | BPF_X,
      BPF_ALU | BPF_ADD | BPF_K, BPF_ALU | BPF_SUB | BPF_K, BPF_ALU | BPF_MUL | BPF_K,
      BPF_ALU | BPF_DIV | BPF_K, BPF_ALU | BPF_MOD | BPF_K, BPF_ALU | BPF_AND | BPF_K,
      BPF_ALU | BPF_OR | BPF_K, BPF_ALU | BPF_XOR | BPF_K, BPF_ALU | BPF_LSH | BPF_K,
      BPF_ALU | BPF_RSH | BPF_K,
      BPF_ALU | BPF_NEG, BPF_MISC | BPF_TAX, BPF_MISC | BPF_TXA};
  for (size_t i = 0; i < prog.size(); ++i) {
    const bpf_insn& x = prog[i];
    if (std::find(std::begin(kRuns), std::end(kRuns), x.code) == std::end(kRuns)) {
      *why = fmt::format("instruction {} has an opcode BPF does not run ({:#x})", i, x.code);
      return false;
    }
    // bpf_validate() checked the conditional jumps (8-bit offsets, forward); BPF_JA's
    // 32-bit offset: forward and inside the program, with no wrap-around.
    if (x.code == (BPF_JMP | BPF_JA) && uint64_t{x.k} >= prog.size() - (i + 1)) {
      *why = fmt::format("instruction {} jumps out of the program or backwards "
                         "(protochain filters are not supported)", i);
      return false;
    }
  }
  return true;
}

int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

constexpr uint32_t kMaxSnaplen = 262144;


}  // namespace

bool parse_capture_options(const std::vector<std::string>& words, CaptureRequest* r,
                           std::string* err) {
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::string& k = words[i];
    if (i + 1 >= words.size()) {
      *err = fmt::format("usage: {} needs a value", k);
      return false;
    }
    const std::string& v = words[i + 1];
    uint64_t n = 0;
    if (k == "--count" && parse_u64(v, &n)) {
      r->count = n;
    } else if (k == "--snaplen" && parse_u64(v, &n) && n >= 14 && n <= kMaxSnaplen) {
      r->snaplen = static_cast<uint32_t>(n);
    } else if (k == "--duration" && parse_u64(v, &n) && n <= 86400u * 365) {
      r->duration_ns = n * 1000000000ull;
    } else if (k == "--bpf") {
      r->filter.clear();
      if (!parse_bpf(v, &r->filter) || r->filter.empty() ||
          !bpf_validate(r->filter.data(), static_cast<int>(r->filter.size()))) {
        *err = "usage: the filter program is not a valid BPF program";
        return false;
      }
      if (std::string why; !runs_safely(r->filter, &why)) {
        *err = fmt::format("capture: the filter program is not a valid BPF program: {}", why);
        return false;
      }
    } else {
      *err = fmt::format("usage: bad option '{}' '{}' (--count N, --snaplen 14..{}, "
                         "--duration S, --bpf PROGRAM)",
                         k, v, kMaxSnaplen);
      return false;
    }
  }
  return true;
}

struct CaptureService::Session {
  CaptureRequest req;
  UniqueFd conn;
  std::string out;        // bytes not yet taken by the client, from off
  size_t off = 0;
  uint64_t id = 0;
  uint64_t captured = 0, filtered = 0, missed_client = 0, gso = 0;
  uint64_t missed_base[2] = {};  // Observe::missed_total at the start
  uint64_t deadline_ns = 0;      // tsc_now_ns() at which it ends (0: none)
  uint64_t drain_until_ns = 0;   // finishing: the client has until then to take the end
  const char* reason = nullptr;  // finishing: why
  bool closed = false;
};

CaptureService::CaptureService(dp::SwitchTables* tables, uint32_t pmd_threads)
    : tables_(tables),
      threads_(std::min<uint32_t>(pmd_threads, port::kMaxPmdThreads)),
      wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  // The rings' pages are touched only as records pass (dp/handoff.h).
  for (uint32_t t = 0; t < threads_; ++t)
    tables_->obs.ring[t].store(new dp::HandoffRing(), std::memory_order_release);
  real_minus_mono_ns_ = realtime_ns() - static_cast<int64_t>(tsc_now_ns());
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { run(); });
}

CaptureService::~CaptureService() {
  stop_.store(true);
  eventfd_write(wake_.get(), 1);
  thread_.join();
  // Only after the PMD threads stopped (the Switch destroys its PmdSet first).
  for (uint32_t t = 0; t < threads_; ++t) delete tables_->obs.ring[t].exchange(nullptr);
}

bool CaptureService::can_start(std::string* err) const {
  std::lock_guard g(mu_);
  if (running_ + pending_.size() < kMaxSessions) return true;
  *err = fmt::format("{} captures are running already (at most {})", running_,
                     kMaxSessions);
  return false;
}

void CaptureService::start(CaptureRequest req, UniqueFd conn) {
  auto s = std::make_unique<Session>();
  s->req = std::move(req);
  s->conn = std::move(conn);
  s->id = started_.fetch_add(1) + 1;
  {
    std::lock_guard g(mu_);
    pending_.push_back(std::move(s));
  }
  eventfd_write(wake_.get(), 1);
}

void CaptureService::port_gone(uint32_t port) {
  {
    std::lock_guard g(mu_);
    gone_ |= uint64_t{1} << port;
  }
  eventfd_write(wake_.get(), 1);
}

nlohmann::json CaptureService::stats() const {
  std::lock_guard g(mu_);
  return {{"sessions", running_}, {"started", started_.load()}, {"frames", frames_.load()}};
}

void CaptureService::run() {
  pthread_setname_np(pthread_self(), "vl-capture");
  epoll_event evs[8];
  while (!stop_.load()) {
    take_new();
    drain_rings();
    service_sessions();
    // While sessions run, the rings are looked at every ms (2 MiB per PMD thread: about a
    // ms of 64-byte frames at 14 Mpps); the PMD threads never wake this thread.
    if (epoll_wait(epoll_.get(), evs, 8, sessions_.empty() ? 1000 : 1) > 0) {
      eventfd_t v;
      eventfd_read(wake_.get(), &v);
    }
  }
  drain_rings();
  for (auto& s : sessions_)
    if (!s->reason) finish(*s, "switch stopping");
  // The end records of a stopping switch: what the clients take within a second (a client
  // reading, but a socket buffer behind the frames, got a cut stream and no summary).
  const uint64_t until = tsc_now_ns() + 1000000000ull;
  for (;;) {
    std::vector<pollfd> wait;
    for (auto& s : sessions_) {
      while (!s->closed && s->off < s->out.size()) {
        const ssize_t n = send(s->conn.get(), s->out.data() + s->off, s->out.size() - s->off,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          s->off += static_cast<size_t>(n);
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            wait.push_back(pollfd{s->conn.get(), POLLOUT, 0});
          else
            s->closed = true;
          break;
        }
      }
    }
    const uint64_t now = tsc_now_ns();
    if (wait.empty() || now >= until) break;
    (void)poll(wait.data(), wait.size(), static_cast<int>(std::min<uint64_t>((until - now) / 1000000 + 1, 100)));
  }
  sessions_.clear();
  update_taps();
}

void CaptureService::take_new() {
  std::vector<std::unique_ptr<Session>> fresh;
  uint64_t gone;
  {
    std::lock_guard g(mu_);
    fresh.swap(pending_);
    gone = std::exchange(gone_, 0);
    running_ += fresh.size();
  }
  for (auto& s : fresh) {
    for (uint32_t d = 0; d < 2; ++d) s->missed_base[d] = tables_->obs.missed_total(s->req.port, d);
    if (s->req.duration_ns) s->deadline_ns = tsc_now_ns() + s->req.duration_ns;
    // (Its connection is not in epoll_: it is looked at every ms, as the rings are.)
    sessions_.push_back(std::move(s));
  }
  if (gone) {
    for (auto& s : sessions_)
      if (!s->reason && ((gone >> s->req.port) & 1)) finish(*s, "port deleted");
  }
  if (!fresh.empty() || gone) update_taps();
}

void CaptureService::update_taps() {
  uint64_t rx = 0, tx = 0;
  uint32_t snap[port::kMaxPorts] = {};
  for (const auto& s : sessions_) {
    if (s->reason) continue;
    const uint32_t p = s->req.port;
    if (s->req.dirs & (1u << dp::kTapRx)) rx |= uint64_t{1} << p;
    if (s->req.dirs & (1u << dp::kTapTx)) tx |= uint64_t{1} << p;
    snap[p] = std::max(snap[p], s->req.snaplen);
  }
  dp::Observe& obs = tables_->obs;
  std::lock_guard g(obs.lock);
  // Snaplens before the masks that make PMD threads read them.
  for (uint32_t p = 0; p < port::kMaxPorts; ++p)
    if (snap[p]) obs.snaplen[p].store(snap[p], std::memory_order_relaxed);
  obs.tap_tx.store(tx, std::memory_order_release);
  obs.tap_rx.store(rx, std::memory_order_release);
  obs.update_rx();
}

void CaptureService::drain_rings() {
  for (uint32_t t = 0; t < threads_; ++t) {
    dp::HandoffRing* ring = tables_->obs.ring[t].load(std::memory_order_acquire);
    if (!ring || !ring->has_records()) continue;
    ring->visit([this](const dp::HandoffRecord& r, const uint8_t* data) { dispatch(r, data); });
    ring->release();
  }
}

void CaptureService::dispatch(const dp::HandoffRecord& r, const uint8_t* data) {
  for (auto& sp : sessions_) {
    Session& s = *sp;
    if (s.reason || s.req.port != r.port || !((s.req.dirs >> r.queue) & 1)) continue;
    if (s.req.count && s.captured >= s.req.count) continue;
    // r.gen: the frame's length; r.len: the bytes captured (dp/observe.h).
    if (!s.req.filter.empty() && !bpf_filter(s.req.filter.data(), data, r.gen, r.len)) {
      ++s.filtered;
      continue;
    }
    const uint32_t caplen = std::min(r.len, s.req.snaplen);
    if (s.out.size() - s.off + sizeof(CaptureRecord) + caplen > kSessionBytes) {
      ++s.missed_client;
      continue;
    }
    CaptureRecord rec{};
    rec.type = CaptureRecord::kFrame;
    rec.caplen = caplen;
    rec.len = r.gen;
    rec.dir = r.queue;
    rec.gso = r.hdr.gso_type;
    rec.ts_ns = static_cast<uint64_t>(static_cast<int64_t>(r.t_ns) + real_minus_mono_ns_);
    s.out.append(reinterpret_cast<const char*>(&rec), sizeof rec);
    s.out.append(reinterpret_cast<const char*>(data), caplen);
    ++s.captured;
    if (rec.gso) ++s.gso;
    frames_.fetch_add(1, std::memory_order_relaxed);
    if (s.req.count && s.captured == s.req.count) finish(s, "count");
  }
}

void CaptureService::finish(Session& s, const char* reason) {
  s.reason = reason;
  uint64_t missed = 0;
  for (uint32_t d = 0; d < 2; ++d)
    if ((s.req.dirs >> d) & 1) missed += tables_->obs.missed_total(s.req.port, d) - s.missed_base[d];
  const std::string end = nlohmann::json{{"captured", s.captured},
                                         {"filtered", s.filtered},
                                         {"missed_ring", missed},
                                         {"missed_client", s.missed_client},
                                         {"gso_frames", s.gso},
                                         {"reason", reason}}
                              .dump();
  CaptureRecord rec{};
  rec.type = CaptureRecord::kEnd;
  rec.caplen = static_cast<uint32_t>(end.size());
  s.out.append(reinterpret_cast<const char*>(&rec), sizeof rec);
  s.out += end;
  s.drain_until_ns = tsc_now_ns() + 2000000000ull;
  update_taps();
}

void CaptureService::service_sessions() {
  const uint64_t now = tsc_now_ns();
  for (auto& sp : sessions_) {
    Session& s = *sp;
    while (s.off < s.out.size()) {
      const ssize_t n = send(s.conn.get(), s.out.data() + s.off, s.out.size() - s.off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        s.off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      s.closed = true;  // the client went away
      break;
    }
    if (s.off == s.out.size()) {
      s.out.clear();
      s.off = 0;
    } else if (s.off > kSessionBytes / 2) {
      s.out.erase(0, s.off);
      s.off = 0;
    }
    // The client ends a capture by shutting down its side (ctl on SIGINT) or closing. What
    // else it sends is read and dropped, up to 64 KiB a turn (a byte a turn let 30 KB sent
    // before a shutdown hold the stop back 30 s, the session streaming on).
    char junk[4096];
    for (int k = 0; k < 16; ++k) {
      const ssize_t r = recv(s.conn.get(), junk, sizeof junk, MSG_DONTWAIT);
      if (r == 0 && !s.reason) finish(s, "stopped by the client");
      if (r < static_cast<ssize_t>(sizeof junk)) break;  // EOF, EAGAIN, an error (send sees it)
    }
    if (!s.reason && s.deadline_ns && now >= s.deadline_ns) finish(s, "duration");
    if (s.reason && (s.out.empty() || now >= s.drain_until_ns)) s.closed = true;
  }
  // (partition, not remove_if: the closed ones are looked at below.)
  const auto gone = std::stable_partition(sessions_.begin(), sessions_.end(),
                                          [](const auto& s) { return !s->closed; });
  const size_t ended = static_cast<size_t>(sessions_.end() - gone);
  if (!ended) return;
  for (auto it = gone; it != sessions_.end(); ++it) {
    Session& s = **it;
    if (!s.reason) finish(s, "client gone");
    spdlog::info("capture {} of port {}: {} frames, reason {}", s.id, s.req.port_name,
                 s.captured, s.reason);
  }
  sessions_.erase(gone, sessions_.end());
  std::lock_guard g(mu_);
  running_ -= ended;
}

}  // namespace vl::app
