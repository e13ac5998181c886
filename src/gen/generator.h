#pragma once
// `virtlink gen`: transmits paced test frames on its ports and receives them back, counting
// per stream (loss, duplicates, reordering from sequence numbers) and measuring one-way
// latency from the TSC timestamp each frame carries (sender and receiver share the clock:
// one process).
//
// Streams: ports are paired in the order given (0<->1, 2<->3, ...); each port of a pair
// transmits one stream to its partner (or only the first of the pair, unidirectional).
// Pacing: departures follow a schedule of one frame every 1/rate s from the trial start;
// each pass sends what is due (at most a burst), so bursts stay small and the mean
// interval matches the rate. The schedule error (actual minus planned departure) is kept.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gen/frame.h"
#include "gen/latency.h"
#include "gen/tsc_clock.h"
#include "gen/vport.h"

namespace vl::gen {

struct GenConfig {
  std::vector<VPortConfig> ports;
  double rate_pps = 1e6;      ///< per stream; 0 = as fast as possible
  uint32_t frame_size = 64;   ///< bytes without FCS, kMinFrame..kMaxFrame; 0 = IMIX
  uint32_t flows = 1;
  double duration_s = 1.0;
  double drain_s = 0.2;       ///< receive-only time after the last departure
  bool unidirectional = false;
  bool learn = true;          ///< RFC 2889 address learning before the trial
  uint32_t burst = 32;
  int cpu = -1;
};

struct StreamResult {
  uint32_t tx_port = 0, rx_port = 0;
  uint64_t tx = 0, rx = 0, lost = 0, duplicates = 0, reordered = 0;
  LatencyHistogram latency;
  uint64_t first_tx_tsc = 0, last_tx_tsc = 0;
  double schedule_error_ns_mean = 0;  ///< mean of (departure - planned departure)
  double mean_interval_ns = 0;        ///< (last - first departure) / (tx - 1)
};

struct GenResult {
  std::vector<StreamResult> streams;
  double tsc_hz = 0;
  double set_interval_ns = 0;
  double tx_cycles_per_packet = 0;  ///< TSC cycles of the TX work per frame sent
  double ceiling_mpps = 0;          ///< one core's rate at that cost
  uint64_t foreign_frames = 0;      ///< received frames without our trailer (e.g. flooding)
  uint64_t fragmented = 0;
  double elapsed_s = 0;
  nlohmann::json to_json() const;
};

/// IMIX (Simple IMIX, 7:4:1 of 64, 570, 1518 bytes): the size of frame number `seq`.
uint32_t imix_size(uint64_t seq);

class Generator {
 public:
  explicit Generator(GenConfig c) : cfg_(std::move(c)) {}
  /// Opens the ports (vhost-user negotiation). False with `*err` on failure.
  bool open(std::string* err);
  /// Runs one trial. Ports stay open for the next.
  GenResult run();
  void close();

 private:
  void learn();
  GenConfig cfg_;
  std::vector<VPort> ports_;
  TscClock clock_;
};

}  // namespace vl::gen
