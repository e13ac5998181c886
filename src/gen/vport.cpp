#include "gen/vport.h"

#include <fmt/format.h>

namespace vl::gen {

using virtio::bit;

template <class Q>
bool VPort::setup(std::vector<Q>& rx, std::vector<Q>& tx, std::string* err) {
  const uint32_t n = cfg_.queues;
  rx = std::vector<Q>(n);
  tx = std::vector<Q>(n);
  rx_pool_ = std::vector<virtio::BufferPool>(n);
  tx_pool_ = std::vector<virtio::BufferPool>(n);
  for (uint32_t k = 0; k < n; ++k) {
    if (!rx[k].init(mem_, cfg_.queue_size, true, err) ||
        !tx[k].init(mem_, cfg_.queue_size, true, err) ||
        !rx_pool_[k].init(mem_, cfg_.queue_size, cfg_.buf_size, err) ||
        !tx_pool_[k].init(mem_, cfg_.queue_size, cfg_.buf_size, err))
      return false;
  }
  std::vector<vhost::VringSetup> v;
  for (uint32_t k = 0; k < n; ++k) {
    v.push_back(vhost::VringSetup::of(rx[k]));
    v.push_back(vhost::VringSetup::of(tx[k]));
  }
  if (!fe_.start(mem_, v, err)) return false;
  if (cfg_.packed != virtio::has(fe_.features(), virtio::kFRingPacked)) {
    *err = "the back-end does not offer packed virtqueues (VIRTIO_F_RING_PACKED)";
    return false;
  }
  for (uint32_t k = 0; k < n; ++k) {
    rx[k].set_kick_fd(fe_.kick_fd(2 * k));
    rx[k].set_call_fd(fe_.call_fd(2 * k));
    tx[k].set_kick_fd(fe_.kick_fd(2 * k + 1));
    tx[k].set_call_fd(fe_.call_fd(2 * k + 1));
    // Polling driver: no interrupts wanted.
    rx[k].set_interrupts(false);
    tx[k].set_interrupts(false);
  }
  hdr_len_ = fe_.hdr_len();
  for (uint32_t k = 0; k < n; ++k) {
    for (uint32_t i = 0; i < cfg_.queue_size; ++i) rx_release_on<Q>(k, i);
    rx_flush_on<Q>(k);
  }
  return true;
}

bool VPort::open(const VPortConfig& c, std::string* err) {
  cfg_ = c;
  if (c.queues < 1 || c.queues > 64) {
    *err = fmt::format("port {}: {} queue pairs (1..64)", c.name, c.queues);
    return false;
  }
  const size_t bytes =
      size_t{c.queues} * (size_t{c.queue_size} * 2 * (c.buf_size + 64) + (1u << 20)) + (4u << 20);
  if (!mem_.create(bytes, "virtlink-" + c.name, err)) return false;
  vhost::FrontendOptions o;
  o.path = c.path;
  o.server = c.server;
  o.timeout_ms = c.timeout_ms;
  o.features = vhost::FrontendOptions::default_features();
  if (c.packed) o.features |= bit(virtio::kFRingPacked);
  if (c.queues > 1) o.features |= bit(virtio::kNetFMq);
  if (!fe_.connect(o, err)) return false;
  const bool ok = c.packed ? setup(prx_, ptx_, err) : setup(srx_, stx_, err);
  if (!ok) {
    *err = fmt::format("port {}: {}", c.name, *err);
    return false;
  }
  return true;
}

void VPort::close() { fe_.stop(); }

bool VPort::broken() const {
  for (uint32_t k = 0; k < cfg_.queues; ++k) {
    if (packed() ? (prx_[k].broken() || ptx_[k].broken()) : (srx_[k].broken() || stx_[k].broken()))
      return true;
  }
  return false;
}

uint32_t VPort::tx_free_all() const {
  uint32_t n = 0;
  for (const auto& p : tx_pool_) n += p.available();
  return n;
}

uint32_t VPort::reclaim() {
  uint32_t n = 0;
  for (uint32_t k = 0; k < cfg_.queues; ++k)
    n += packed() ? reclaim_on<Packed>(k) : reclaim_on<Split>(k);
  return n;
}

void VPort::tx_flush() {
  for (uint32_t k = 0; k < cfg_.queues; ++k) packed() ? tx_flush_on<Packed>(k) : tx_flush_on<Split>(k);
}

uint32_t VPort::rx_discard() {
  const auto drain = [&]<class Q>(uint32_t k) {
    uint32_t n = 0;
    const uint8_t* fr;
    uint32_t len, idx;
    while (rx_next_on<Q>(k, &fr, &len, &idx)) {
      rx_release_on<Q>(k, idx);
      ++n;
    }
    rx_flush_on<Q>(k);
    return n;
  };
  uint32_t n = 0;
  for (uint32_t k = 0; k < cfg_.queues; ++k)
    n += packed() ? drain.template operator()<Packed>(k) : drain.template operator()<Split>(k);
  return n;
}

}  // namespace vl::gen
