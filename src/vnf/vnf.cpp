#include "vnf/vnf.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>

#include <cstring>

#include <fmt/format.h>

#include "util/cpuset.h"

namespace vl::vnf {

using namespace vl::virtio;

namespace {
void put_mac(uint8_t* p, uint64_t mac) {
  for (int i = 0; i < 6; ++i) p[i] = static_cast<uint8_t>(mac >> (40 - 8 * i));
}
}  // namespace

bool Vnf::open(std::string* err) {
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
    if (!fe_[p].connect(o, err) || !fe_[p].start(mem_, rxq_[p], txq_[p], err)) {
      *err = fmt::format("port {}: {}", p, *err);
      return false;
    }
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
  for (auto& f : fe_) f.stop();
}

uint32_t Vnf::forward(uint32_t in) {
  const uint32_t out = in ^ 1;
  DriverQueue& rx = rxq_[in];
  DriverQueue& tx = txq_[out];
  VnfCounters& c = c_[in];
  // Buffers the other side has sent go back to the pool, then to our receive queue.
  uint32_t b = 0, len = 0;
  while (tx.get_used(&b, &len)) pool_.put(b);
  uint32_t got = 0;
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
    uint8_t* f = p + hdr_len_;
    switch (cfg_.mode) {
      case Mode::kIo: break;
      case Mode::kMacswap: {
        uint8_t t[6];
        std::memcpy(t, f, 6);
        std::memmove(f, f + 6, 6);
        std::memcpy(f + 6, t, 6);
        break;
      }
      case Mode::kL2fwd:
        put_mac(f, cfg_.ports[out].peer_mac);
        put_mac(f + 6, cfg_.ports[out].mac);
        break;
    }
    std::memset(p, 0, hdr_len_);  // no offloads requested on transmit
    if (!tx.add(pool_.gpa(b), len, false, b)) {
      ++c.drop_tx_full;
      pool_.put(b);
      continue;
    }
    ++c.tx;
  }
  c.rx += got;
  tx.publish();
  // Refill our receive queue from the pool.
  uint32_t refilled = 0;
  while (rx.free_descs() && pool_.get(&b)) {
    rx.add(pool_.gpa(b), pool_.buf_size(), true, b);
    ++refilled;
  }
  if (refilled) rx.publish();
  return got;
}

bool Vnf::sleep_until_traffic() {
  for (int p = 0; p < 2; ++p) rxq_[p].set_interrupts(true);
  if (rxq_[0].has_used() || rxq_[1].has_used()) {
    for (int p = 0; p < 2; ++p) rxq_[p].set_interrupts(false);
    return false;
  }
  pollfd fds[2] = {{rxq_[0].call_fd(), POLLIN, 0}, {rxq_[1].call_fd(), POLLIN, 0}};
  poll(fds, 2, 100);
  uint64_t v;
  for (auto& f : fds)
    if (f.revents & POLLIN) eventfd_read(f.fd, &v);
  ++sleeps_;
  for (int p = 0; p < 2; ++p) rxq_[p].set_interrupts(false);
  return true;
}

void Vnf::run() {
  if (cfg_.cpu >= 0) pin_current_thread(cfg_.cpu);
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t idle = 0;
  for (uint64_t pass = 0; !stop_.load(std::memory_order_relaxed); ++pass) {
    const uint32_t got = forward(0) + forward(1);
    idle = got ? 0 : idle + 1;
    const bool slept = cfg_.interrupt && idle > 64 && sleep_until_traffic();
    // The clock is read every 4096 passes, and after every sleep (an idle VNF in interrupt
    // mode makes a pass per wake-up, up to 100 ms each).
    if (cfg_.duration_s > 0 && ((pass & 4095) == 0 || slept)) {
      timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      if (static_cast<double>(t.tv_sec - t0.tv_sec) + static_cast<double>(t.tv_nsec - t0.tv_nsec) * 1e-9 >=
          cfg_.duration_s)
        break;
    }
  }
}

nlohmann::json Vnf::stats() const {
  nlohmann::json ports = nlohmann::json::array();
  for (int p = 0; p < 2; ++p) {
    ports.push_back({{"port", p},
                     {"rx", c_[p].rx},
                     {"forwarded", c_[p].tx},
                     {"drop_tx_full", c_[p].drop_tx_full},
                     {"drop_fragmented", c_[p].drop_fragmented}});
  }
  return {{"ports", ports}, {"sleeps", sleeps_}};
}

}  // namespace vl::vnf
