#pragma once
// Per-port rates for `ctl stats` (rx_pps, tx_pps, rx_bps, tx_bps): the control thread's
// 1 s tick samples every port's counters with the time it read them, and a rate is the
// difference of the last two samples over the time between them as the program measured
// it (CLOCK_MONOTONIC, util/clock.h), never an assumed second. Control thread only.
#include <cstdint>
#include <span>
#include <vector>

namespace vl::app {

class PortRates {
 public:
  /// A port's counters as `ctl stats` reports them (packets, bytes; the switch's view).
  struct Totals {
    uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  };
  /// Per second over the last sampling interval: packets (pps) and bits (bps) of the
  /// frames' bytes as counted in rx_bytes/tx_bytes.
  struct Rate {
    double rx_pps = 0, tx_pps = 0, rx_bps = 0, tx_bps = 0;
  };

  /// Takes a sample at `now_ns` (CLOCK_MONOTONIC, ns): `totals[i]` is port i's counters
  /// read then. A port beyond the previous sample's count, or whose counters went back (a
  /// port that took the index of a removed one), has no rate until its next sample.
  void sample(uint64_t now_ns, std::span<const Totals> totals);
  /// The rate of port `i` over the last interval (zeros before two samples of it).
  Rate rate(uint32_t i) const { return i < rates_.size() ? rates_[i] : Rate{}; }
  /// The counters of port `i` at the last sample (zeros before one).
  Totals last(uint32_t i) const { return i < last_.size() ? last_[i] : Totals{}; }
  /// The time between the last two samples (ns); 0 before two.
  uint64_t interval_ns() const { return interval_ns_; }
  /// When the last sample was taken (CLOCK_MONOTONIC ns); 0 before one.
  uint64_t sampled_ns() const { return sampled_ns_; }

 private:
  std::vector<Totals> last_;
  std::vector<Rate> rates_;
  uint64_t sampled_ns_ = 0;
  uint64_t interval_ns_ = 0;
};

}  // namespace vl::app
