#include "gen/generator.h"

#include <time.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "gen/pacer.h"
#include "util/cpuset.h"

namespace vl::gen {

uint32_t imix_size(uint64_t seq) {
  const uint32_t k = static_cast<uint32_t>(seq % 12);
  return k < 7 ? 64 : (k < 11 ? 570 : 1518);
}

nlohmann::json GenResult::to_json() const {
  nlohmann::json s = nlohmann::json::array();
  for (const auto& r : streams) {
    nlohmann::json hist = nlohmann::json::array();
    for (const auto& [edge, n] : r.latency.buckets()) hist.push_back({edge, n});
    s.push_back({{"tx_port", r.tx_port},
                 {"rx_port", r.rx_port},
                 {"planned", r.planned},
                 {"offered", r.offered},
                 {"tx", r.tx},
                 {"tx_ring_full", r.tx_ring_full},
                 {"late_skipped", r.late_skipped},
                 {"tx_refused", r.tx_refused},
                 {"rx", r.rx},
                 {"lost", r.lost},
                 {"duplicates", r.duplicates},
                 {"reordered", r.reordered},
                 {"out_of_range", r.out_of_range},
                 {"latency_ns",
                  {{"min", r.latency.min()},
                   {"avg", r.latency.mean()},
                   {"max", r.latency.max()},
                   {"p50", r.latency.percentile(0.50)},
                   {"p99", r.latency.percentile(0.99)},
                   {"p999", r.latency.percentile(0.999)}}},
                 {"latency_histogram", hist},
                 {"mean_interval_ns", r.mean_interval_ns},
                 {"max_rx_gap_ns", r.max_rx_gap_ns},
                 {"schedule_error_ns_mean", r.schedule_error_ns_mean},
                 {"schedule_error_ns_max", r.schedule_error_ns_max}});
  }
  nlohmann::json ports = nlohmann::json::array();
  for (const auto& p : this->ports) {
    // A wire port's counters; null for a vhost-user port.
    nlohmann::json dev = nullptr, wtx = nullptr, wref = nullptr, wrx = nullptr;
    if (p.wire) {
      dev = nlohmann::json::object();
      for (const auto& [k, v] : p.device) dev[k] = v;
      wtx = p.wire_counters.tx_packets;
      wref = p.wire_counters.tx_refused;
      wrx = p.wire_counters.rx_packets;
    }
    ports.push_back({{"name", p.name},
                     {"type", p.type},
                     {"target", p.target},
                     {"queues", p.queues},
                     {"wire_tx_packets", wtx},
                     {"wire_tx_refused", wref},
                     {"wire_rx_packets", wrx},
                     {"device", dev}});
  }
  return {{"streams", s},
          {"ports", ports},
          {"clock",
           {{"source", "TSC calibrated against CLOCK_MONOTONIC_RAW"},
            {"hz", tsc_hz},
            {"resolution_ns", 1e9 / tsc_hz}}},
          {"set_interval_ns", set_interval_ns},
          {"duration_s", duration_s},
          {"tx_cycles_per_packet", tx_cycles_per_packet},
          {"ceiling_mpps", ceiling_mpps},
          {"rx_cycles_per_packet", rx_cycles_per_packet},
          {"loop_ceiling_mpps", loop_ceiling_mpps},
          {"foreign_frames", foreign_frames},
          {"fragmented", fragmented},
          {"payload_checked", payload_checked},
          {"corrupted", corrupted},
          {"learn_incomplete", learn_incomplete},
          {"elapsed_s", elapsed_s},
          {"ring", ring},
          {"queues", queues}};
}

bool Generator::open(std::string* err) {
  if (cfg_.ports.empty() || cfg_.ports.size() % 2) {
    *err = "gen needs an even number of ports (paired 1<->2, 3<->4, ...)";
    return false;
  }
  const uint32_t max_frame = cfg_.frame_size ? cfg_.frame_size : 1518;
  ports_ = std::vector<GenPort>(cfg_.ports.size());
  for (size_t i = 0; i < cfg_.ports.size(); ++i) {
    VPortConfig c = cfg_.ports[i];
    if (!c.mac) c.mac = default_mac(i);
    c.buf_size = std::max<uint32_t>(c.buf_size, max_frame + 12 + 64);
    cfg_.ports[i] = c;
    if (!ports_[i].open(c, err)) return false;
  }
  clock_ = TscClock::calibrate();
  return true;
}

bool check_trial(double rate_pps, double duration_s, std::string* err) {
  if (!(rate_pps >= 0) || !(duration_s > 0)) {
    *err = "rate must be >= 0 and duration > 0";
    return false;
  }
  const double slots = (rate_pps > 0 ? rate_pps : 30e6) * duration_s;
  if (slots > kMaxPlannedSlots) {
    *err = fmt::format("{:.3g} frames per stream planned (rate x duration{}): at most {:.3g}; "
                       "shorten the duration or lower the rate",
                       slots, rate_pps > 0 ? "" : ", at 30 Mpps for rate 0", kMaxPlannedSlots);
    return false;
  }
  return true;
}

bool Generator::set_trial(double rate_pps, uint32_t frame_size, uint32_t flows, double duration_s,
                          std::string* err) {
  const uint32_t need = (frame_size ? frame_size : 1518) + 12;
  for (const auto& c : cfg_.ports) {
    if (need > c.buf_size) {
      *err = fmt::format(
          "frame size {} does not fit the {}-byte buffers (start gen with --size {} or larger)",
          frame_size ? frame_size : 1518, c.buf_size, frame_size ? frame_size : 1518);
      return false;
    }
  }
  if (frame_size && (frame_size < kMinFrame || frame_size > kMaxFrame)) {
    *err = fmt::format("frame size {} outside {}..{}", frame_size, kMinFrame, kMaxFrame);
    return false;
  }
  if (flows < 1) {
    *err = "flows must be >= 1";
    return false;
  }
  if (!check_trial(rate_pps, duration_s, err)) return false;
  cfg_.rate_pps = rate_pps;
  cfg_.frame_size = frame_size;
  cfg_.flows = flows;
  cfg_.duration_s = duration_s;
  return true;
}

void Generator::close() {
  for (auto& p : ports_) p.close();
}

uint64_t Generator::learn() {
  // RFC 2889 address learning: each receiving port sends one frame from every address the
  // streams towards it will use as destination, so a bridge forwards instead of flooding.
  // A switch that does not take them (a port not forwarding) stops this after a timeout.
  const uint64_t deadline = rdtsc() + static_cast<uint64_t>(cfg_.learn_timeout_s * clock_.hz());
  uint64_t missing = 0;
  for (size_t rx = 0; rx < ports_.size(); ++rx) {
    GenPort& gp = ports_[rx];
    const uint64_t base = cfg_.ports[rx].mac;
    const uint32_t nq = gp.queues(), hdr = gp.hdr_len(), flows = cfg_.flows;
    uint32_t f = 0, refused = 0;
    gp.with_ops([&](auto& vp) {
      while (f < flows) {
        for (uint32_t k = 0; k < nq; ++k) vp.reclaim(k);
        uint32_t i;
        // Flow f's learning frame leaves on the queue its stream's flow f uses.
        while (f < flows && vp.tx_get(f % nq, &i)) {
          const uint32_t k = f % nq;
          build_learning_frame(vp.tx_frame(k, i), base + f);
          __builtin_memset(vp.tx_frame(k, i) - hdr, 0, hdr);
          vp.tx_put(k, i, 64);
          ++f;
        }
        for (uint32_t k = 0; k < nq; ++k) refused += vp.tx_flush(k);
        if (f < flows && rdtsc() > deadline) break;
      }
    });
    missing += flows - f + refused;
  }
  if (missing) spdlog::warn("gen: address learning: {} frames not taken by the switch", missing);
  // Let the switch take them, and discard what floods back.
  timespec d{0, 100 * 1000 * 1000};
  nanosleep(&d, nullptr);
  for (auto& p : ports_) {
    p.reclaim();
    p.rx_discard();
  }
  return missing;
}

namespace {

// One stream's transmit side (the stream's id is its index in Trial::tx_).
struct TxStream {
  uint32_t port, peer;  // transmitted on `port`, received on `peer`
  FlowSpec spec;
  PaceState pace;
  uint64_t seq = 0;  // sequence numbers used: frames offered (posted or dropped at the ring)
  uint64_t posted = 0, ring_full = 0, refused = 0;
  uint32_t flow = 0;
  double err_sum = 0, err_max = 0;  // schedule error, ticks
  uint64_t first = 0, last = 0;     // departures (TSC)
};

// One stream's receive side.
struct RxStream {
  SequenceTracker seq;
  LatencyHistogram lat;
  uint64_t last_rx = 0;  ///< TSC of the burst the last new frame came in
  uint64_t max_gap = 0;  ///< longest TSC interval between two bursts with new frames
};

// One trial of Generator::run(): its streams, schedule and counters, and the steps of the
// trial loop. The steps are instantiated per port kind (P: a PortOps of gen/port.h, chosen
// by GenPort::with_ops once per batch): no branch or virtual call per frame on the kind.
class Trial {
 public:
  Trial(const GenConfig& cfg, std::vector<GenPort>& ports, const TscClock& clock, uint32_t tag);
  /// Waits for every transmit buffer to come back (up to 2 s), then writes each stream's
  /// frame template (flow 0) into its port's transmit buffers.
  void prefill();
  /// Runs the transmission period and the drain that follows (duration_s + drain_s).
  void loop();
  GenResult report() const;

 private:
  template <class P>
  void send(size_t s, P& vp);
  void drop_due(TxStream& t, uint64_t due);
  template <class P>
  void receive(uint32_t p, uint32_t k, P& vp);
  void account(const uint8_t* fr, uint32_t len, uint32_t p, uint64_t rx_now);
  StreamResult stream_result(size_t s) const;

  const GenConfig& cfg_;
  std::vector<GenPort>& ports_;
  const TscClock& clock_;
  const uint32_t tag_;  // this trial's frames: stream = tag | index
  Pacer pacer_;
  uint64_t drain_end_ = 0, stop_ = 0;  // TSC
  std::vector<TxStream> tx_;
  std::vector<RxStream> rx_;
  uint64_t foreign_ = 0, corrupted_ = 0;
  uint64_t tx_cycles_ = 0, tx_frames_ = 0;
  uint64_t rx_cycles_ = 0, rx_frames_ = 0;
};

// The lag bound: GenConfig::max_lag_slots, or by default a quarter of the queue (at least
// a burst).
uint32_t lag_slots(const GenConfig& cfg, const GenPort& p) {
  return cfg.max_lag_slots ? cfg.max_lag_slots
                           : std::max<uint32_t>(cfg.burst, p.queue_size() / 4);
}

Trial::Trial(const GenConfig& cfg, std::vector<GenPort>& ports, const TscClock& clock,
             uint32_t tag)
    : cfg_(cfg), ports_(ports), clock_(clock), tag_(tag),
      pacer_(cfg.rate_pps, clock.hz(), cfg.duration_s, cfg.burst, lag_slots(cfg, ports[0])) {
  for (uint32_t p = 0; p < ports_.size(); ++p) {
    const uint32_t peer = p ^ 1;
    if (cfg_.unidirectional && (p & 1)) continue;
    TxStream t{p, peer, {}};
    t.spec.src_mac = cfg_.ports[p].mac;
    t.spec.dst_mac_base = cfg_.ports[peer].mac;
    t.spec.flows = cfg_.flows;
    t.spec.src_ip_base += p << 20;
    tx_.push_back(t);
  }
  rx_.resize(tx_.size());
  for (auto& r : rx_) r.seq.reset(pacer_.planned());
}

void Trial::prefill() {
  // A switch that batches output may still hold frames of the learning phase or of an
  // earlier trial (their buffers in flight): wait for them instead of rewriting a buffer it
  // will read.
  const uint64_t wait_end = rdtsc() + static_cast<uint64_t>(2.0 * clock_.hz());
  for (;;) {
    bool all_back = true;
    for (auto& p : ports_) {
      p.reclaim();
      if (p.tx_free_all() < p.queue_size() * p.queues()) all_back = false;
    }
    if (all_back) break;
    if (rdtsc() > wait_end) {
      spdlog::warn("gen: transmit buffers still in flight after 2 s; rewriting them");
      break;
    }
    timespec d{0, 100 * 1000};
    nanosleep(&d, nullptr);
  }
  for (auto& t : tx_) {
    GenPort& vp = ports_[t.port];
    for (uint32_t k = 0; k < vp.queues(); ++k) {
      for (uint32_t i = 0; i < vp.queue_size(); ++i) {
        __builtin_memset(vp.tx_frame(k, i) - vp.hdr_len(), 0, vp.hdr_len());
        build_frame(vp.tx_frame(k, i), cfg_.frame_size ? cfg_.frame_size : 1518, t.spec, 0,
                    tag_ | static_cast<uint32_t>(&t - tx_.data()));
      }
    }
  }
}

void Trial::loop() {
  pacer_.start_at(rdtsc());
  drain_end_ = pacer_.end() + static_cast<uint64_t>(cfg_.drain_s * clock_.hz());
  const uint32_t np = static_cast<uint32_t>(ports_.size());
  const size_t ns = tx_.size();
  for (;;) {
    const uint64_t now = rdtsc();
    if (now >= drain_end_) break;
    if (pacer_.transmitting(now)) {
      for (size_t s = 0; s < ns; ++s)
        ports_[tx_[s].port].with_ops([&](auto& vp) { send(s, vp); });
    }
    for (uint32_t p = 0; p < np; ++p) {
      const uint32_t nq = ports_[p].queues();
      ports_[p].with_ops([&](auto& vp) {
        for (uint32_t k = 0; k < nq; ++k) receive(p, k, vp);
      });
    }
  }
  stop_ = rdtsc();
}

// One pass of stream s: reclaims its port's transmitted buffers and posts the frames due
// (at most a burst), then publishes them.
template <class P>
void Trial::send(size_t s, P& vp) {
  TxStream& t = tx_[s];
  const uint32_t nq = ports_[t.port].queues();
  const uint64_t t0 = rdtsc();
  for (uint32_t k = 0; k < nq; ++k) vp.reclaim(k);
  const uint64_t due = pacer_.begin_pass(&t.pace, t0);
  // Per-frame constants in locals: the frame writes below may alias any member.
  const bool paced = pacer_.paced();
  const uint32_t burst = pacer_.burst(), size = cfg_.frame_size, flows = cfg_.flows;
  const uint32_t stream = tag_ | static_cast<uint32_t>(s);
  uint32_t n = 0;
  while (t.pace.slot < due && n < burst) {
    // Flow f leaves on transmit queue f % queues (one queue: always 0).
    const uint32_t k = nq == 1 ? 0 : t.flow % nq;
    uint32_t i;
    if (!vp.tx_get(k, &i)) {
      if (paced) drop_due(t, due);  // as fast as possible: wait for the ring instead
      break;
    }
    uint8_t* f = vp.tx_frame(k, i);
    uint32_t len = size;
    if (!len) {
      len = imix_size(t.seq);
      build_frame(f, len, t.spec, t.flow, stream);
    } else if (flows > 1) {
      patch_flow(f, t.spec, t.flow);
    }
    const uint64_t ts = rdtsc();
    stamp(f, t.seq, ts);
    if (paced) {
      const double e = static_cast<double>(ts) - pacer_.slot_time(t.pace.slot);
      t.err_sum += e;
      t.err_max = std::max(t.err_max, e);
    }
    if (!t.seq) t.first = ts;
    t.last = ts;
    vp.tx_put(k, i, len);
    ++t.seq;
    ++t.pace.slot;
    ++t.posted;
    t.flow = t.flow + 1 == flows ? 0 : t.flow + 1;
    ++n;
  }
  if (n) {
    uint32_t refused = 0;
    for (uint32_t k = 0; k < nq; ++k) refused += vp.tx_flush(k);
    if (refused) [[unlikely]] {  // a wire's own device was full: these never left
      t.posted -= refused;
      t.refused += refused;
    }
    tx_cycles_ += rdtsc() - t0;
    tx_frames_ += n;
  }
}

// No free descriptor when the frames [slot, due) are due: the device under test has not
// taken the earlier ones. They depart into a full ring: dropped, counted lost.
void Trial::drop_due(TxStream& t, uint64_t due) {
  const uint64_t ts = rdtsc();
  const uint64_t k = due - t.pace.slot;
  if (!t.seq) t.first = ts;
  t.last = ts;
  t.ring_full += k;
  t.seq += k;
  t.pace.slot = due;
  t.flow = static_cast<uint32_t>((t.flow + k) % cfg_.flows);
}

// Receives on queue k of port p. Arrival time: when this pass saw the frame in the used
// ring (taken after reading the used index, so never before the frame was there).
template <class P>
void Trial::receive(uint32_t p, uint32_t k, P& vp) {
  const uint32_t ready = std::min<uint32_t>(vp.rx_ready(k), 64);
  if (!ready) return;
  const uint64_t rx_now = rdtsc();
  const uint8_t* fr;
  uint32_t len, idx;
  uint32_t got = 0;
  while (got < ready && vp.rx_next(k, &fr, &len, &idx)) {
    account(fr, len, p, rx_now);
    vp.rx_release(k, idx);
    ++got;
  }
  if (got) vp.rx_flush(k);
  rx_cycles_ += rdtsc() - rx_now;
  rx_frames_ += got;
}

// Counts a frame received on port p at rx_now: one of this trial's streams towards p goes
// to its sequence tracker and (first copies) latency histogram; anything else is foreign.
inline void Trial::account(const uint8_t* fr, uint32_t len, uint32_t p, uint64_t rx_now) {
  Trailer tr;
  uint32_t si = 0;
  if (parse_trailer(fr, len, &tr) && (tr.stream & ~0xffffu) == tag_ &&
      (si = tr.stream & 0xffffu) < tx_.size() && tx_[si].peer == p) {
    if (cfg_.check_payload && !payload_intact(fr, len)) [[unlikely]] {
      ++corrupted_;
    } else if (RxStream& rs = rx_[si]; rs.seq.on_frame(tr.seq)) {
      rs.lat.record(rx_now > tr.tsc ? static_cast<uint64_t>(clock_.ns(rx_now - tr.tsc)) : 0);
      if (rs.last_rx && rx_now - rs.last_rx > rs.max_gap) rs.max_gap = rx_now - rs.last_rx;
      rs.last_rx = rx_now;
    }
  } else {
    ++foreign_;
  }
}

StreamResult Trial::stream_result(size_t s) const {
  const TxStream& t = tx_[s];
  const SequenceTracker& sq = rx_[s].seq;
  StreamResult r;
  r.tx_port = t.port;
  r.rx_port = t.peer;
  r.planned = pacer_.paced() ? pacer_.planned() : t.seq;
  r.offered = t.seq - t.refused;
  r.tx = t.posted;
  r.tx_refused = t.refused;
  r.tx_ring_full = t.ring_full;
  r.late_skipped = t.pace.skipped;
  r.rx = sq.unique();
  r.lost = r.offered > r.rx ? r.offered - r.rx : 0;
  r.duplicates = sq.duplicates();
  r.reordered = sq.reordered();
  r.out_of_range = sq.out_of_range();
  r.latency = rx_[s].lat;
  r.max_rx_gap_ns = clock_.ns(rx_[s].max_gap);
  r.first_tx_tsc = t.first;
  r.last_tx_tsc = t.last;
  r.schedule_error_ns_mean =
      t.posted ? t.err_sum / static_cast<double>(t.posted) * 1e9 / clock_.hz() : 0;
  r.schedule_error_ns_max = t.err_max * 1e9 / clock_.hz();
  r.mean_interval_ns = r.offered > 1 ? clock_.ns(r.last_tx_tsc - r.first_tx_tsc) /
                                           static_cast<double>(r.offered - 1)
                                     : 0;
  return r;
}

GenResult Trial::report() const {
  GenResult res;
  res.elapsed_s = static_cast<double>(stop_ - pacer_.start()) / clock_.hz();
  res.tsc_hz = clock_.hz();
  for (const auto& p : ports_) {  // the vhost-user ports' layout and queues (all alike)
    if (!p.vport()) continue;
    res.ring = p.vport()->packed() ? "packed" : "split";
    res.queues = p.queues();
    break;
  }
  for (const auto& p : ports_) {
    PortResult pr;
    pr.name = p.config().name;
    pr.type = p.type();
    pr.target = p.config().path;
    pr.queues = p.queues();
    if (const WirePort* w = p.wire()) {
      pr.wire = true;
      pr.wire_counters = w->counters();
      if (w->wire()) w->wire()->counters(&pr.device);
    }
    res.ports.push_back(std::move(pr));
  }
  res.duration_s = cfg_.duration_s;
  res.set_interval_ns = pacer_.paced() ? 1e9 / cfg_.rate_pps : 0;
  for (size_t s = 0; s < tx_.size(); ++s) res.streams.push_back(stream_result(s));
  res.foreign_frames = foreign_;
  res.payload_checked = cfg_.check_payload;
  res.corrupted = corrupted_;
  for (auto& p : ports_) res.fragmented += p.fragmented();
  res.tx_cycles_per_packet =
      tx_frames_ ? static_cast<double>(tx_cycles_) / static_cast<double>(tx_frames_) : 0;
  res.ceiling_mpps =
      res.tx_cycles_per_packet > 0 ? clock_.hz() / res.tx_cycles_per_packet / 1e6 : 0;
  res.rx_cycles_per_packet =
      rx_frames_ ? static_cast<double>(rx_cycles_) / static_cast<double>(rx_frames_) : 0;
  const double loop = res.tx_cycles_per_packet + res.rx_cycles_per_packet;
  res.loop_ceiling_mpps = loop > 0 ? clock_.hz() / loop / 1e6 : 0;
  return res;
}

}  // namespace

GenResult Generator::run() {
  if (cfg_.cpu >= 0) pin_current_thread(cfg_.cpu);
  const uint64_t learn_incomplete = cfg_.learn ? learn() : 0;
  Trial t(cfg_, ports_, clock_, (++trial_ & 0xffffu) << 16);
  t.prefill();
  t.loop();
  GenResult res = t.report();
  res.learn_incomplete = learn_incomplete;
  return res;
}

}  // namespace vl::gen
