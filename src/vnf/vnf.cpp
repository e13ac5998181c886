#include "vnf/vnf.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/clock.h"
#include "util/cpuset.h"

namespace vl::vnf {

using namespace vl::virtio;

namespace {
void put_mac(uint8_t* p, uint64_t mac) {
  for (int i = 0; i < 6; ++i) p[i] = static_cast<uint8_t>(mac >> (40 - 8 * i));
}
}  // namespace

bool Vnf::open(std::string* err) {
  tsc_hz_ = TscClock::calibrate(20).hz();
  if (cfg_.burst > kMaxVnfBurst) cfg_.burst = kMaxVnfBurst;
  const uint32_t n = cfg_.queue_size;
  // Both receive queues full, both transmit queues full, and slack.
  const uint32_t bufs = 4 * n + 64;
  if (!mem_.create(size_t{bufs} * (cfg_.buf_size + 64) + (4u << 20), "virtlink-vnf", err) ||
      !pool_.init(mem_, bufs, cfg_.buf_size, err))
    return false;
  for (int p = 0; p < 2; ++p) {
    if (!rxq_[p].init(mem_, n, true, err) || !txq_[p].init(mem_, n, true, err)) return false;
    vhost::FrontendOptions o;
    o.path = cfg_.ports[p].path;
    o.server = cfg_.ports[p].server;
    o.features = vhost::FrontendOptions::default_features();
    o.direct_link = cfg_.direct_link;
    if (!fe_[p].connect(o, err) || !fe_[p].start(mem_, rxq_[p], txq_[p], err)) {
      *err = fmt::format("port {}: {}", p, *err);
      return false;
    }
    link_[p].set_channel(fe_[p].take_link_channel());
    // Buffers go out of the other port as they came in: both need the same header size.
    if (p == 1 && fe_[1].hdr_len() != hdr_len_) {
      *err = fmt::format("the ports negotiated different virtio-net header sizes ({} and {})",
                         hdr_len_, fe_[1].hdr_len());
      return false;
    }
    hdr_len_ = fe_[p].hdr_len();
    rxq_[p].set_interrupts(false);
    txq_[p].set_interrupts(false);
    uint32_t b = 0;
    for (uint32_t i = 0; i < n && pool_.get(&b); ++i) rxq_[p].add(pool_.gpa(b), pool_.buf_size(), true, b);
    rxq_[p].publish();
  }
  return true;
}

void Vnf::close() {
  // Links first: unmap the peers' memory and close the channels (the switch sees them close
  // and resumes switching the peers) before our own rings stop.
  for (auto& l : link_) {
    l.stop();
    l.set_channel(UniqueFd());
  }
  for (auto& f : fe_) f.stop();
}

namespace {
void rewrite(Mode mode, uint8_t* f, const VnfPortConfig& out) {
  switch (mode) {
    case Mode::kIo: break;
    case Mode::kMacswap: {
      uint8_t t[6];
      std::memcpy(t, f, 6);
      std::memmove(f, f + 6, 6);
      std::memcpy(f + 6, t, 6);
      break;
    }
    case Mode::kL2fwd:
      put_mac(f, out.peer_mac);
      put_mac(f + 6, out.mac);
      break;
  }
}
}  // namespace

void Vnf::send(uint32_t in, uint32_t out, const uint32_t* bufs, const uint32_t* lens, uint32_t n) {
  VnfCounters& c = c_[in];
  if (link_[out].active()) {
    // Port `out` serves a direct link: one copy, from our buffer into the peer's receive
    // buffer (the switch is not involved).
    for (uint32_t i = 0; i < n; ++i) {
      if (link_[out].deliver(pool_.data(bufs[i]) + hdr_len_, lens[i] - hdr_len_)) ++c.tx;
      else ++c.drop_link;
      pool_.put(bufs[i]);
    }
    link_[out].flush();
    return;
  }
  SplitDriverQueue& tx = txq_[out];
  for (uint32_t i = 0; i < n; ++i) {
    if (!tx.add(pool_.gpa(bufs[i]), lens[i], false, bufs[i])) {
      ++c.drop_tx_full;
      pool_.put(bufs[i]);
      continue;
    }
    ++c.tx;
  }
  tx.publish();
}

uint32_t Vnf::forward(uint32_t in) {
  const uint32_t out = in ^ 1;
  SplitDriverQueue& rx = rxq_[in];
  SplitDriverQueue& tx = txq_[out];
  VnfCounters& c = c_[in];
  // Buffers the other side has sent go back to the pool, then to our receive queue.
  uint32_t b = 0, len = 0;
  while (tx.get_used(&b, &len)) pool_.put(b);
  uint32_t got = 0, n = 0;
  uint32_t bufs[kMaxVnfBurst], lens[kMaxVnfBurst];
  while (got < cfg_.burst && rx.get_used(&b, &len)) {
    ++got;
    uint8_t* p = pool_.data(b);
    uint16_t nbufs = 1;
    if (hdr_len_ >= 12) std::memcpy(&nbufs, p + 10, 2);
    if (nbufs != 1 || len < hdr_len_ + 14 || len > pool_.buf_size()) {
      ++c.drop_fragmented;
      pool_.put(b);
      continue;
    }
    rewrite(cfg_.mode, p + hdr_len_, cfg_.ports[out]);
    std::memset(p, 0, hdr_len_);  // no offloads requested on transmit
    bufs[n] = b;
    lens[n] = len;
    ++n;
  }
  c.rx += got;
  if (n) send(in, out, bufs, lens, n);
  // Refill our receive queue from the pool.
  uint32_t refilled = 0;
  while (rx.free_descs() && pool_.get(&b)) {
    rx.add(pool_.gpa(b), pool_.buf_size(), true, b);
    ++refilled;
  }
  if (refilled) rx.publish();
  if (link_[in].active()) got += forward_from_link(in);
  return got;
}

uint32_t Vnf::forward_from_link(uint32_t in) {
  const uint32_t out = in ^ 1;
  uint32_t bufs[kMaxVnfBurst], lens[kMaxVnfBurst];
  const uint32_t n = link_[in].receive(pool_, hdr_len_, bufs, lens, cfg_.burst);
  for (uint32_t i = 0; i < n; ++i) rewrite(cfg_.mode, pool_.data(bufs[i]) + hdr_len_, cfg_.ports[out]);
  c_[in].rx += n;
  if (n) send(in, out, bufs, lens, n);
  return n;
}

bool Vnf::sleep_until_traffic() {
  for (int p = 0; p < 2; ++p) {
    rxq_[p].set_interrupts(true);
    link_[p].set_tx_kicks(true);
  }
  auto quiet = [&] {
    for (int p = 0; p < 2; ++p) {
      rxq_[p].set_interrupts(false);
      link_[p].set_tx_kicks(false);
    }
  };
  if (rxq_[0].has_used() || rxq_[1].has_used() || link_[0].tx_pending() || link_[1].tx_pending()) {
    quiet();
    return false;
  }
  pollfd fds[6];
  nfds_t nf = 0;
  for (int p = 0; p < 2; ++p) {
    fds[nf++] = {rxq_[p].call_fd(), POLLIN, 0};
    if (link_[p].kick_fd() >= 0) fds[nf++] = {link_[p].kick_fd(), POLLIN, 0};
    if (link_[p].has_channel()) fds[nf++] = {link_[p].channel_fd(), POLLIN, 0};
  }
  poll(fds, nf, 100);
  uint64_t v;
  for (nfds_t i = 0; i < nf; ++i) {
    const bool chan = fds[i].fd == link_[0].channel_fd() || fds[i].fd == link_[1].channel_fd();
    if ((fds[i].revents & POLLIN) && !chan) eventfd_read(fds[i].fd, &v);
  }
  ++sleeps_;
  quiet();
  return true;
}

void Vnf::run() {
  if (cfg_.cpu >= 0) pin_current_thread(cfg_.cpu);
  const uint64_t t0 = mono_ns();
  uint64_t idle = 0;
  // SIGURG: ignored by default, so a stray one is harmless (the switch uses it likewise).
  if (cfg_.direct_link && !watchdog_.start(pthread_self(), &progress_, SIGURG))
    spdlog::warn("vnf: no watchdog thread: a direct link's peer could block this thread");
  for (uint64_t pass = 0; !stop_.load(std::memory_order_relaxed); ++pass) {
    progress_.store(pass, std::memory_order_relaxed);
    const uint64_t c0 = rdtsc();
    const uint32_t got = forward(0) + forward(1);
    if (got) {
      busy_cycles_ += rdtsc() - c0;
      busy_packets_ += got;
    }
    ++passes_;
    idle = got ? 0 : idle + 1;
    const bool slept = cfg_.interrupt && idle > 64 && sleep_until_traffic();
    // Link requests from the switch: looked at every 256 passes and after every sleep (one
    // non-blocking read; the switch waits up to a second for a reply).
    if ((pass & 255) == 0 || slept) {
      for (auto& l : link_) {
        if (l.has_channel()) l.service();
      }
    }
    if (stats_requested_.load(std::memory_order_relaxed)) [[unlikely]] {
      stats_requested_.store(false, std::memory_order_relaxed);
      fmt::print("{}\n", stats().dump());
      std::fflush(stdout);
    }
    // The clock is read every 4096 passes, and after every sleep (an idle VNF in interrupt
    // mode makes a pass per wake-up, up to 100 ms each).
    if (cfg_.duration_s > 0 && ((pass & 4095) == 0 || slept)) {
      if (static_cast<double>(mono_ns() - t0) * 1e-9 >= cfg_.duration_s) break;
    }
  }
  watchdog_.stop();
}

nlohmann::json Vnf::stats() const {
  nlohmann::json ports = nlohmann::json::array();
  for (int p = 0; p < 2; ++p) {
    ports.push_back({{"port", p},
                     {"rx", c_[p].rx},
                     {"forwarded", c_[p].tx},
                     {"drop_tx_full", c_[p].drop_tx_full},
                     {"drop_fragmented", c_[p].drop_fragmented},
                     {"drop_link", c_[p].drop_link}});
  }
  nlohmann::json links = nlohmann::json::array();
  auto counters = [](const vhost::LinkCounters& k) {
    nlohmann::json drops = nlohmann::json::object();
    for (uint32_t d = 0; d < vhost::kLinkDrops; ++d)
      drops[vhost::link_drop_name(static_cast<vhost::LinkDrop>(d))] = k.drops[d];
    // The switch's other reasons never occur on a link; kept at 0 so the keys stay those
    // of `ctl stats --json`.
    for (const char* never : {"bad_csum", "bad_gso", "handoff_full"}) drops[never] = 0;
    return nlohmann::json{{"rx_packets", k.rx_packets}, {"rx_bytes", k.rx_bytes},
                          {"tx_packets", k.tx_packets}, {"tx_bytes", k.tx_bytes},
                          {"drops", drops}};
  };
  for (int p = 0; p < 2; ++p) {
    links.push_back({{"port", p},
                     {"channel", link_[p].has_channel()},
                     {"active", link_[p].active()},
                     {"links_served", link_[p].links()},
                     {"current", counters(link_[p].counters())},
                     {"total", counters(link_[p].totals())}});
  }
  return {{"ports", ports},
          {"sleeps", sleeps_},
          {"passes", passes_},
          {"busy_cycles", busy_cycles_},
          {"packets", busy_packets_},
          {"cycles_per_packet",
           busy_packets_ ? static_cast<double>(busy_cycles_) / static_cast<double>(busy_packets_) : 0.0},
          {"tsc_hz", tsc_hz_},
          {"watchdog_interrupts", watchdog_.interrupts()},
          {"direct_links", links}};
}

}  // namespace vl::vnf
