#include "app/port_rates.h"

namespace vl::app {

namespace {
/// Per second: `delta` over `ns`; 0 when the counter went back.
double per_s(uint64_t now, uint64_t before, uint64_t ns) {
  return now >= before ? static_cast<double>(now - before) * 1e9 / static_cast<double>(ns) : 0.0;
}
}  // namespace

void PortRates::sample(uint64_t now_ns, std::span<const Totals> totals) {
  const bool had = sampled_ns_ != 0 && now_ns > sampled_ns_;
  const uint64_t ns = had ? now_ns - sampled_ns_ : 0;
  rates_.assign(totals.size(), Rate{});
  for (size_t i = 0; had && i < totals.size() && i < last_.size(); ++i) {
    const Totals& a = last_[i];
    const Totals& b = totals[i];
    if (b.rx_packets < a.rx_packets || b.tx_packets < a.tx_packets) continue;  // a new port
    rates_[i] = {per_s(b.rx_packets, a.rx_packets, ns), per_s(b.tx_packets, a.tx_packets, ns),
                 8 * per_s(b.rx_bytes, a.rx_bytes, ns), 8 * per_s(b.tx_bytes, a.tx_bytes, ns)};
  }
  last_.assign(totals.begin(), totals.end());
  interval_ns_ = ns;
  sampled_ns_ = now_ns;
}

}  // namespace vl::app
