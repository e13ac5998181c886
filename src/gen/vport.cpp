#include "gen/vport.h"

#include <fmt/format.h>

namespace vl::gen {

bool VPort::open(const VPortConfig& c, std::string* err) {
  cfg_ = c;
  const size_t bytes = size_t{c.queue_size} * 2 * (c.buf_size + 64) + (4u << 20);
  if (!mem_.create(bytes, "virtlink-" + c.name, err)) return false;
  if (!rxq_.init(mem_, c.queue_size, true, err) || !txq_.init(mem_, c.queue_size, true, err) ||
      !rx_pool_.init(mem_, c.queue_size, c.buf_size, err) ||
      !tx_pool_.init(mem_, c.queue_size, c.buf_size, err))
    return false;
  vhost::FrontendOptions o;
  o.path = c.path;
  o.server = c.server;
  o.timeout_ms = c.timeout_ms;
  o.features = vhost::FrontendOptions::default_features();
  if (!fe_.connect(o, err)) return false;
  if (!fe_.start(mem_, rxq_, txq_, err)) {
    *err = fmt::format("port {}: {}", c.name, *err);
    return false;
  }
  hdr_len_ = fe_.hdr_len();
  // Polling driver: no interrupts wanted.
  rxq_.set_interrupts(false);
  txq_.set_interrupts(false);
  for (uint32_t i = 0; i < c.queue_size; ++i) rx_release(i);
  rx_flush();
  return true;
}

void VPort::close() { fe_.stop(); }

uint32_t VPort::reclaim() {
  uint32_t n = 0, id, len;
  while (txq_.get_used(&id, &len)) {
    tx_pool_.put(id);
    ++n;
  }
  return n;
}

bool VPort::rx_next(const uint8_t** frame, uint32_t* len, uint32_t* idx) {
  for (;;) {
    uint32_t id, l;
    if (!rxq_.get_used(&id, &l)) return false;
    const uint8_t* p = rx_pool_.data(id);
    uint16_t nbufs = 1;
    if (hdr_len_ >= 12) __builtin_memcpy(&nbufs, p + 10, 2);
    if (l < hdr_len_ || l > rx_pool_.buf_size() || nbufs != 1) {
      // A frame over several buffers (or a bogus length): not reassembled here.
      ++fragmented_;
      rx_release(id);
      continue;
    }
    *frame = p + hdr_len_;
    *len = l - hdr_len_;
    *idx = id;
    return true;
  }
}

}  // namespace vl::gen
