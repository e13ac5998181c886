// app::PortRates: the rates of `ctl stats` from the tick's samples, over the time the
// program measured between them (a simulated clock here), never an assumed second.
#include "app/port_rates.h"

#include <gtest/gtest.h>

#include <vector>

namespace vl::app {
namespace {

using T = PortRates::Totals;

TEST(PortRates, NoneBeforeTwoSamples) {
  PortRates r;
  EXPECT_EQ(r.interval_ns(), 0u);
  EXPECT_EQ(r.sampled_ns(), 0u);
  EXPECT_EQ(r.rate(0).rx_pps, 0.0);
  const std::vector<T> t{{100, 6400, 50, 3200}};
  r.sample(5'000'000'000, t);
  EXPECT_EQ(r.sampled_ns(), 5'000'000'000u);
  EXPECT_EQ(r.interval_ns(), 0u);
  EXPECT_EQ(r.rate(0).rx_pps, 0.0);  // counters since start are not a rate
  EXPECT_EQ(r.last(0).rx_bytes, 6400u);
}

// The interval is the measured one: a tick 1.25 s after the last (a late timer) divides by
// 1.25 s; bits are 8 per counted byte.
TEST(PortRates, DeltaOverTheMeasuredInterval) {
  PortRates r;
  r.sample(1'000'000'000, std::vector<T>{{1000, 64000, 2000, 128000}, {0, 0, 0, 0}});
  r.sample(2'250'000'000, std::vector<T>{{2250, 144000, 2000, 128000}, {10, 15140, 5, 320}});
  EXPECT_EQ(r.interval_ns(), 1'250'000'000u);
  EXPECT_DOUBLE_EQ(r.rate(0).rx_pps, 1000.0);
  EXPECT_DOUBLE_EQ(r.rate(0).rx_bps, 80000.0 * 8 / 1.25);
  EXPECT_DOUBLE_EQ(r.rate(0).tx_pps, 0.0);
  EXPECT_DOUBLE_EQ(r.rate(0).tx_bps, 0.0);
  EXPECT_DOUBLE_EQ(r.rate(1).rx_pps, 8.0);
  EXPECT_DOUBLE_EQ(r.rate(1).rx_bps, 15140.0 * 8 / 1.25);
  EXPECT_DOUBLE_EQ(r.rate(1).tx_pps, 4.0);
  EXPECT_EQ(r.rate(7).rx_pps, 0.0);  // no such port
  // The next interval only: a quiet second is 0 whatever came before.
  r.sample(3'250'000'000, std::vector<T>{{2250, 144000, 2000, 128000}, {10, 15140, 5, 320}});
  EXPECT_EQ(r.interval_ns(), 1'000'000'000u);
  EXPECT_EQ(r.rate(0).rx_pps, 0.0);
  EXPECT_EQ(r.rate(1).tx_bps, 0.0);
}

// A port added since the last sample, or one whose counters went back (a new port at a
// removed one's index), has no rate until its next sample; the others keep theirs.
TEST(PortRates, NewPortsAndCountersThatWentBack) {
  PortRates r;
  r.sample(1'000'000'000, std::vector<T>{{500, 0, 500, 0}});
  r.sample(2'000'000'000, std::vector<T>{{600, 0, 600, 0}, {900, 0, 900, 0}});
  EXPECT_DOUBLE_EQ(r.rate(0).rx_pps, 100.0);
  EXPECT_EQ(r.rate(1).rx_pps, 0.0);
  r.sample(3'000'000'000, std::vector<T>{{10, 0, 10, 0}, {1000, 0, 950, 0}});
  EXPECT_EQ(r.rate(0).rx_pps, 0.0);
  EXPECT_EQ(r.rate(0).tx_pps, 0.0);
  EXPECT_DOUBLE_EQ(r.rate(1).rx_pps, 100.0);
  EXPECT_DOUBLE_EQ(r.rate(1).tx_pps, 50.0);
  // A clock that did not move gives no rate (no division by zero).
  r.sample(3'000'000'000, std::vector<T>{{20, 0, 20, 0}, {1100, 0, 1000, 0}});
  EXPECT_EQ(r.interval_ns(), 0u);
  EXPECT_EQ(r.rate(1).rx_pps, 0.0);
}

}  // namespace
}  // namespace vl::app
