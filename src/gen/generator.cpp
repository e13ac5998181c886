#include "gen/generator.h"

#include <time.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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
                 {"schedule_error_ns_mean", r.schedule_error_ns_mean},
                 {"schedule_error_ns_max", r.schedule_error_ns_max}});
  }
  return {{"streams", s},
          {"clock",
           {{"source", "TSC calibrated against CLOCK_MONOTONIC_RAW"},
            {"hz", tsc_hz},
            {"resolution_ns", 1e9 / tsc_hz}}},
          {"set_interval_ns", set_interval_ns},
          {"duration_s", duration_s},
          {"tx_cycles_per_packet", tx_cycles_per_packet},
          {"ceiling_mpps", ceiling_mpps},
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
  ports_ = std::vector<VPort>(cfg_.ports.size());
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
    const uint64_t base = cfg_.ports[rx].mac;
    uint32_t f = 0;
    while (f < cfg_.flows) {
      VPort& vp = ports_[rx];
      vp.reclaim();
      uint32_t i;
      // Flow f's learning frame leaves on the queue its stream's flow f uses.
      while (f < cfg_.flows && vp.tx_get(f % vp.queues(), &i)) {
        const uint32_t k = f % vp.queues();
        build_learning_frame(vp.tx_frame(k, i), base + f);
        __builtin_memset(vp.tx_frame(k, i) - vp.hdr_len(), 0, vp.hdr_len());
        vp.tx_put(k, i, 64);
        ++f;
      }
      vp.tx_flush();
      if (f < cfg_.flows && rdtsc() > deadline) break;
    }
    missing += cfg_.flows - f;
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

GenResult Generator::run() {
  if (cfg_.cpu >= 0) pin_current_thread(cfg_.cpu);
  GenResult res;
  if (cfg_.learn) res.learn_incomplete = learn();
  const size_t np = ports_.size();
  struct Tx {
    uint32_t port, peer;
    FlowSpec spec;
    uint64_t slot = 0;  // next schedule slot
    uint64_t seq = 0;   // sequence numbers used: frames offered (posted or dropped at the ring)
    uint64_t posted = 0, ring_full = 0, skipped = 0;
    uint32_t flow = 0;
    double err_sum = 0, err_max = 0;
    uint64_t first = 0, last = 0;
  };
  std::vector<Tx> tx;
  for (uint32_t p = 0; p < np; ++p) {
    const uint32_t peer = p ^ 1;
    if (cfg_.unidirectional && (p & 1)) continue;
    Tx t{p, peer, {}};
    t.spec.src_mac = cfg_.ports[p].mac;
    t.spec.dst_mac_base = cfg_.ports[peer].mac;
    t.spec.flows = cfg_.flows;
    t.spec.src_ip_base += p << 20;
    tx.push_back(t);
  }
  res.tsc_hz = clock_.hz();
  res.ring = ports_[0].packed() ? "packed" : "split";
  res.queues = ports_[0].queues();
  res.duration_s = cfg_.duration_s;
  const double rate = cfg_.rate_pps;
  const bool paced = rate > 0;
  const double period = paced ? clock_.hz() / rate : 0;  // ticks per frame
  res.set_interval_ns = paced ? 1e9 / rate : 0;
  const uint64_t planned = paced ? static_cast<uint64_t>(rate * cfg_.duration_s) + 1
                                 : static_cast<uint64_t>(30e6 * cfg_.duration_s) + 1;
  const uint32_t lag_slots =
      cfg_.max_lag_slots ? cfg_.max_lag_slots
                         : std::max<uint32_t>(cfg_.burst, ports_[0].config().queue_size / 4);
  const double max_lag = static_cast<double>(lag_slots) * period;  // ticks
  const uint32_t tag = (++trial_ & 0xffffu) << 16;  // this trial's frames: stream = tag | index
  std::vector<SequenceTracker> seq(tx.size());
  std::vector<LatencyHistogram> lat(tx.size());
  for (auto& s : seq) s.reset(planned);
  // stream id = index in tx; a stream is received on tx[s].peer.

  // Prefill every transmit buffer with its stream's frame template (flow 0). A switch that
  // batches output may still hold frames of the learning phase or of an earlier trial (their
  // buffers in flight): wait for them (up to 2 s) instead of rewriting a buffer it will read.
  {
    const uint64_t wait_end = rdtsc() + static_cast<uint64_t>(2.0 * clock_.hz());
    for (;;) {
      bool all_back = true;
      for (auto& p : ports_) {
        p.reclaim();
        if (p.tx_free_all() < p.config().queue_size * p.queues()) all_back = false;
      }
      if (all_back) break;
      if (rdtsc() > wait_end) {
        spdlog::warn("gen: transmit buffers still in flight after 2 s; rewriting them");
        break;
      }
      timespec d{0, 100 * 1000};
      nanosleep(&d, nullptr);
    }
  }
  for (auto& t : tx) {
    VPort& vp = ports_[t.port];
    for (uint32_t k = 0; k < vp.queues(); ++k) {
      for (uint32_t i = 0; i < vp.config().queue_size; ++i) {
        __builtin_memset(vp.tx_frame(k, i) - vp.hdr_len(), 0, vp.hdr_len());
        build_frame(vp.tx_frame(k, i), cfg_.frame_size ? cfg_.frame_size : 1518, t.spec, 0,
                    tag | static_cast<uint32_t>(&t - tx.data()));
      }
    }
  }
  uint64_t foreign = 0, corrupted = 0;
  uint64_t tx_cycles = 0, tx_frames = 0;
  const uint64_t start = rdtsc();
  const uint64_t end = start + static_cast<uint64_t>(cfg_.duration_s * clock_.hz());
  const uint64_t drain_end = end + static_cast<uint64_t>(cfg_.drain_s * clock_.hz());
  const auto advance_flow = [&](Tx& t, uint64_t n) {
    t.flow = static_cast<uint32_t>((t.flow + n) % cfg_.flows);
  };
  // The trial loop, instantiated per ring type (chosen once for all ports at open): no
  // branch or virtual call per packet on the ring type.
  const uint32_t nq = ports_[0].queues();
  const auto trial_loop = [&]<class Q>() {
  for (;;) {
    const uint64_t now = rdtsc();
    if (now >= drain_end) break;
    if (now < end) {
      for (size_t s = 0; s < tx.size(); ++s) {
        Tx& t = tx[s];
        VPort& vp = ports_[t.port];
        const uint64_t t0 = rdtsc();
        for (uint32_t k = 0; k < nq; ++k) vp.template reclaim_on<Q>(k);
        uint64_t due;
        if (paced) {
          const double elapsed = static_cast<double>(t0 - start);
          due = std::min<uint64_t>(planned, static_cast<uint64_t>(elapsed / period) + 1);
          // Slots older than the lag bound: the generator missed them (not offered).
          if (elapsed > max_lag) {
            const uint64_t oldest = std::min<uint64_t>(
                due, static_cast<uint64_t>(std::ceil((elapsed - max_lag) / period)));
            if (oldest > t.slot) {
              t.skipped += oldest - t.slot;
              t.slot = oldest;
            }
          }
        } else {
          due = std::min<uint64_t>(planned, t.slot + cfg_.burst);
        }
        uint32_t n = 0;
        while (t.slot < due && n < cfg_.burst) {
          // Flow f leaves on transmit queue f % queues (one queue: always 0).
          const uint32_t k = nq == 1 ? 0 : t.flow % nq;
          uint32_t i;
          if (!vp.tx_get(k, &i)) {
            if (!paced) break;  // as fast as possible: wait for the ring
            // No free descriptor when these frames are due: the device under test has not
            // taken the earlier ones. They depart into a full ring: dropped, counted lost.
            const uint64_t ts = rdtsc();
            const uint64_t k = due - t.slot;
            if (!t.seq) t.first = ts;
            t.last = ts;
            t.ring_full += k;
            t.seq += k;
            t.slot = due;
            advance_flow(t, k);
            break;
          }
          uint8_t* f = vp.tx_frame(k, i);
          uint32_t len = cfg_.frame_size;
          if (!len) {
            len = imix_size(t.seq);
            build_frame(f, len, t.spec, t.flow, tag | static_cast<uint32_t>(s));
          } else if (cfg_.flows > 1) {
            patch_flow(f, t.spec, t.flow);
          }
          const uint64_t ts = rdtsc();
          stamp(f, t.seq, ts);
          if (paced) {
            const double e = static_cast<double>(ts) -
                             (static_cast<double>(start) + static_cast<double>(t.slot) * period);
            t.err_sum += e;
            t.err_max = std::max(t.err_max, e);
          }
          if (!t.seq) t.first = ts;
          t.last = ts;
          vp.template tx_put_on<Q>(k, i, len);
          ++t.seq;
          ++t.slot;
          ++t.posted;
          advance_flow(t, 1);
          ++n;
        }
        if (n) {
          for (uint32_t k = 0; k < nq; ++k) vp.template tx_flush_on<Q>(k);
          tx_cycles += rdtsc() - t0;
          tx_frames += n;
        }
      }
    }
    // Receive on every port. Arrival time: when this pass saw the frame in the used ring
    // (taken after reading the used index, so never before the frame was there).
    for (size_t p = 0; p < np; ++p) {
     VPort& vp = ports_[p];
     for (uint32_t k = 0; k < nq; ++k) {
      const uint32_t ready = std::min<uint32_t>(vp.template rx_ready_on<Q>(k), 64);
      if (!ready) continue;
      const uint64_t rx_now = rdtsc();
      const uint8_t* fr;
      uint32_t len, idx;
      uint32_t got = 0;
      while (got < ready && vp.template rx_next_on<Q>(k, &fr, &len, &idx)) {
        Trailer tr;
        uint32_t si = 0;
        if (parse_trailer(fr, len, &tr) && (tr.stream & ~0xffffu) == tag &&
            (si = tr.stream & 0xffffu) < tx.size() && tx[si].peer == p) {
          if (cfg_.check_payload && !payload_intact(fr, len)) [[unlikely]] {
            ++corrupted;
          } else if (seq[si].on_frame(tr.seq))
            lat[si].record(rx_now > tr.tsc ? static_cast<uint64_t>(clock_.ns(rx_now - tr.tsc)) : 0);
        } else {
          ++foreign;
        }
        vp.template rx_release_on<Q>(k, idx);
        ++got;
      }
      if (got) vp.template rx_flush_on<Q>(k);
     }
    }
  }
  };
  if (ports_[0].packed())
    trial_loop.template operator()<VPort::Packed>();
  else
    trial_loop.template operator()<VPort::Split>();
  res.elapsed_s = static_cast<double>(rdtsc() - start) / clock_.hz();
  for (size_t s = 0; s < tx.size(); ++s) {
    const Tx& t = tx[s];
    StreamResult r;
    r.tx_port = t.port;
    r.rx_port = t.peer;
    r.planned = paced ? planned : t.seq;
    r.offered = t.seq;
    r.tx = t.posted;
    r.tx_ring_full = t.ring_full;
    r.late_skipped = t.skipped;
    r.rx = seq[s].unique();
    r.lost = r.offered > r.rx ? r.offered - r.rx : 0;
    r.duplicates = seq[s].duplicates();
    r.reordered = seq[s].reordered();
    r.out_of_range = seq[s].out_of_range();
    r.latency = lat[s];
    r.first_tx_tsc = t.first;
    r.last_tx_tsc = t.last;
    r.schedule_error_ns_mean =
        t.posted ? t.err_sum / static_cast<double>(t.posted) * 1e9 / clock_.hz() : 0;
    r.schedule_error_ns_max = t.err_max * 1e9 / clock_.hz();
    r.mean_interval_ns = r.offered > 1 ? clock_.ns(r.last_tx_tsc - r.first_tx_tsc) /
                                             static_cast<double>(r.offered - 1)
                                       : 0;
    res.streams.push_back(r);
  }
  res.foreign_frames = foreign;
  res.payload_checked = cfg_.check_payload;
  res.corrupted = corrupted;
  for (auto& p : ports_) res.fragmented += p.fragmented();
  res.tx_cycles_per_packet =
      tx_frames ? static_cast<double>(tx_cycles) / static_cast<double>(tx_frames) : 0;
  res.ceiling_mpps =
      res.tx_cycles_per_packet > 0 ? clock_.hz() / res.tx_cycles_per_packet / 1e6 : 0;
  return res;
}

}  // namespace vl::gen
