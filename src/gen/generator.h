#pragma once
// `virtlink gen`: transmits paced test frames on its ports and receives them back, counting
// per stream (loss, duplicates, reordering from sequence numbers) and measuring one-way
// latency from the TSC timestamp each frame carries (sender and receiver share the clock:
// one process).
//
// Streams: ports are paired in the order given (0<->1, 2<->3, ...); each port of a pair
// transmits one stream to its partner (or only the first of the pair, unidirectional).
// Pacing (gen/pacer.h): departures follow a schedule of one frame every 1/rate s from the
// trial start (slot k at start + k/rate); each pass sends what is due (at most a burst), so
// bursts stay small and the mean interval matches the rate. The schedule error (actual minus
// planned departure) is kept.
// Offered load without back-pressure, as on a wire: a due frame that finds no free transmit
// descriptor (the device under test has not taken the earlier ones: its receive ring
// overflowed) is dropped there and counted as lost (`tx_ring_full`); it still uses its
// sequence number. A slot the generator itself reaches too late (more than `max_lag_slots`
// slots after its time, e.g. because it was preempted) is skipped (`late_skipped`): not
// offered, not lost; a trial with skipped slots offered less than the rate asked for.
// With --rate 0 (as fast as possible) the transmit ring does back-pressure the sender.
// Rings and queues (VPortConfig::packed, ::queues, the same for every vhost-user port):
// flow f of a stream leaves on transmit queue f % (its port's queues); every receive queue
// is polled (one thread). A due frame whose queue has no free descriptor drops the rest of
// that pass's due frames (as with one queue).
// Ports (gen/port.h): vhost-user, or a wire of one of the switch's uplink types (a veth
// through a packet socket or AF_XDP, a tap, a DPDK ethdev), mixed freely. A wire takes
// posted frames a batch per call; frames it refuses (its own device full) were never
// offered: they count in `tx_refused`, like late slots not in `offered`. The trial loop is
// instantiated per port kind and ring layout, chosen once per batch.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gen/frame.h"
#include "gen/latency.h"
#include "gen/port.h"
#include "util/clock.h"

namespace vl::gen {

struct GenConfig {
  std::vector<VPortConfig> ports;
  double rate_pps = 1e6;     ///< per stream; 0 = as fast as possible
  uint32_t frame_size = 64;  ///< bytes without FCS, kMinFrame..kMaxFrame; 0 = IMIX
  uint32_t flows = 1;
  double duration_s = 1.0;
  double drain_s = 0.2;  ///< receive-only time after the last departure
  bool unidirectional = false;
  bool learn = true;  ///< RFC 2889 address learning before the trial
  uint32_t burst = 32;
  /// Slots the generator may be behind schedule before it skips them (0: queue size / 4).
  uint32_t max_lag_slots = 0;
  double learn_timeout_s = 2.0;
  int cpu = -1;
  /// Verify every received frame of ours (gen/frame.h payload_intact); costs receive time.
  bool check_payload = false;
};

struct StreamResult {
  uint32_t tx_port = 0, rx_port = 0;
  uint64_t planned = 0;       ///< slots in the schedule (rate x duration)
  uint64_t offered = 0;       ///< frames that departed: tx + tx_ring_full
  uint64_t tx = 0;            ///< frames posted on the transmit ring (a wire: that it took)
  uint64_t tx_ring_full = 0;  ///< due frames dropped: no free transmit descriptor (counted lost)
  uint64_t late_skipped = 0;  ///< slots skipped because the generator was late (not offered)
  uint64_t tx_refused = 0;    ///< frames the port's wire refused (its own device full: not offered)
  uint64_t rx = 0;            ///< unique frames of this stream received
  uint64_t lost = 0;          ///< offered - rx
  uint64_t duplicates = 0, reordered = 0, out_of_range = 0;
  LatencyHistogram latency;
  uint64_t first_tx_tsc = 0, last_tx_tsc = 0;
  double schedule_error_ns_mean = 0;  ///< mean of (departure - planned departure)
  double schedule_error_ns_max = 0;
  double mean_interval_ns = 0;  ///< (last - first departure) / (offered - 1)
  /// Longest time between two receive bursts that brought new frames of this stream (ns):
  /// an outage of the path, next to mean_interval_ns (`virtlink bench upgrade`).
  double max_rx_gap_ns = 0;
};

/// A port as a trial saw it: what it is, and a wire's counters over the port's life.
struct PortResult {
  std::string name;
  std::string type;    ///< as --port spells it (the one in use after an af-xdp fallback)
  std::string target;  ///< the socket path, interface or DEVARGS
  uint32_t queues = 1;
  bool wire = false;
  WirePortCounters wire_counters;     ///< wire ports
  wire::DeviceCounters device;        ///< wire ports: the device's own counters
};

struct GenResult {
  std::vector<StreamResult> streams;
  std::vector<PortResult> ports;
  double tsc_hz = 0;
  double set_interval_ns = 0;
  double tx_cycles_per_packet = 0;  ///< TSC cycles of the TX work per frame sent
  double ceiling_mpps = 0;          ///< one core's rate at that cost
  double rx_cycles_per_packet = 0;  ///< TSC cycles of the RX work per frame received
  /// One core's rate when it both sends and receives every frame (TX + RX cycles): the
  /// generator's own limit in a loop such as p2p.
  double loop_ceiling_mpps = 0;
  uint64_t foreign_frames = 0;      ///< received frames without our trailer (e.g. flooding)
  uint64_t fragmented = 0;
  bool payload_checked = false;
  uint64_t corrupted = 0;  ///< frames of ours whose payload check failed (check_payload)
  uint64_t learn_incomplete = 0;  ///< learning frames the switch did not take in time
  double duration_s = 0;          ///< the transmission period asked for
  double elapsed_s = 0;
  std::string ring = "split";  ///< the virtqueue layout of every vhost-user port: split | packed
  uint32_t queues = 1;         ///< queue pairs per vhost-user port (flow f on queue f % queues)
  nlohmann::json to_json() const;
};

/// IMIX (Simple IMIX, 7:4:1 of 64, 570, 1518 bytes): the size of frame number `seq`.
uint32_t imix_size(uint64_t seq);

/// Most slots one trial may plan per stream (rate x duration; at --rate 0 the plan assumes
/// 30 Mpps): the loss tracker keeps a bit per slot, so this bounds it at 512 MiB a stream.
inline constexpr double kMaxPlannedSlots = 4.0e9;

/// Checks a trial's rate (pps, 0: as fast as possible) and duration (s): false with `*err`
/// for a negative rate, a duration not above 0, or more than kMaxPlannedSlots slots.
bool check_trial(double rate_pps, double duration_s, std::string* err);

class Generator {
 public:
  explicit Generator(GenConfig c) : cfg_(std::move(c)) {}
  /// Opens the ports (vhost-user negotiation, wires). False with `*err` on failure.
  bool open(std::string* err);
  /// Runs one trial. Ports stay open for the next; each trial tags its frames (the high 16
  /// bits of the trailer's stream field), so late frames of an earlier trial are foreign.
  GenResult run();
  /// Changes rate, frame size, flows and duration for the next run(). False with `*err`
  /// when the frame size does not fit the buffers opened (sized for the configured size).
  bool set_trial(double rate_pps, uint32_t frame_size, uint32_t flows, double duration_s,
                 std::string* err);
  /// The MAC of port `i` when none is configured: 02:00:0<i+1>:00:00:00, so the flows of
  /// different ports (base + 0..flows-1, up to 2^24) never share an address.
  static uint64_t default_mac(size_t i) { return 0x020000000000ull | (uint64_t{i + 1} << 24); }
  void close();

 private:
  uint64_t learn();
  GenConfig cfg_;
  std::vector<GenPort> ports_;
  TscClock clock_;
  uint32_t trial_ = 0;
};

}  // namespace vl::gen
