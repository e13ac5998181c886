#include "gen/generator.h"

#include <time.h>

#include <algorithm>
#include <cmath>

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
    s.push_back({{"tx_port", r.tx_port},
                 {"rx_port", r.rx_port},
                 {"tx", r.tx},
                 {"rx", r.rx},
                 {"lost", r.lost},
                 {"duplicates", r.duplicates},
                 {"reordered", r.reordered},
                 {"latency_ns",
                  {{"min", r.latency.min()},
                   {"avg", r.latency.mean()},
                   {"max", r.latency.max()},
                   {"p50", r.latency.percentile(0.50)},
                   {"p99", r.latency.percentile(0.99)},
                   {"p999", r.latency.percentile(0.999)}}},
                 {"mean_interval_ns", r.mean_interval_ns},
                 {"schedule_error_ns_mean", r.schedule_error_ns_mean}});
  }
  return {{"streams", s},
          {"clock", {{"source", "TSC calibrated against CLOCK_MONOTONIC_RAW"},
                     {"hz", tsc_hz},
                     {"resolution_ns", 1e9 / tsc_hz}}},
          {"set_interval_ns", set_interval_ns},
          {"tx_cycles_per_packet", tx_cycles_per_packet},
          {"ceiling_mpps", ceiling_mpps},
          {"foreign_frames", foreign_frames},
          {"fragmented", fragmented},
          {"elapsed_s", elapsed_s}};
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
    if (!c.mac) c.mac = 0x020000000000ull | ((i + 1) << 8);
    c.buf_size = std::max<uint32_t>(c.buf_size, max_frame + 12 + 64);
    cfg_.ports[i] = c;
    if (!ports_[i].open(c, err)) return false;
  }
  clock_ = TscClock::calibrate();
  return true;
}

void Generator::close() {
  for (auto& p : ports_) p.close();
}

void Generator::learn() {
  // RFC 2889 address learning: each receiving port sends one frame from every address the
  // streams towards it will use as destination, so a bridge forwards instead of flooding.
  for (size_t rx = 0; rx < ports_.size(); ++rx) {
    const uint64_t base = cfg_.ports[rx].mac;
    for (uint32_t f = 0; f < cfg_.flows;) {
      ports_[rx].reclaim();
      uint32_t i;
      while (f < cfg_.flows && ports_[rx].tx_get(&i)) {
        build_learning_frame(ports_[rx].tx_frame(i), base + f);
        __builtin_memset(ports_[rx].tx_frame(i) - ports_[rx].hdr_len(), 0, ports_[rx].hdr_len());
        ports_[rx].tx_put(i, 64);
        ++f;
      }
      ports_[rx].tx_flush();
    }
  }
  // Let the switch take them, and discard what floods back.
  timespec d{0, 100 * 1000 * 1000};
  nanosleep(&d, nullptr);
  for (auto& p : ports_) {
    p.reclaim();
    const uint8_t* fr;
    uint32_t len, idx;
    while (p.rx_next(&fr, &len, &idx)) p.rx_release(idx);
    p.rx_flush();
  }
}

GenResult Generator::run() {
  if (cfg_.cpu >= 0) pin_current_thread(cfg_.cpu);
  if (cfg_.learn) learn();
  const size_t np = ports_.size();
  struct Tx {
    uint32_t port, peer;
    FlowSpec spec;
    uint64_t sent = 0;
    uint32_t flow = 0;
    double err_sum = 0;
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
  GenResult res;
  res.tsc_hz = clock_.hz();
  const double rate = cfg_.rate_pps;
  const double period = rate > 0 ? clock_.hz() / rate : 0;  // ticks per frame
  res.set_interval_ns = rate > 0 ? 1e9 / rate : 0;
  const uint64_t planned = rate > 0 ? static_cast<uint64_t>(rate * cfg_.duration_s) + 1
                                    : static_cast<uint64_t>(30e6 * cfg_.duration_s) + 1;
  std::vector<SequenceTracker> seq(tx.size());
  std::vector<LatencyHistogram> lat(tx.size());
  for (auto& s : seq) s.reset(planned);
  // stream id = index in tx; a stream is received on tx[s].peer.

  // Prefill every transmit buffer with its stream's frame template (flow 0).
  for (auto& t : tx) {
    VPort& vp = ports_[t.port];
    for (uint32_t i = 0; i < vp.config().queue_size; ++i) {
      __builtin_memset(vp.tx_frame(i) - vp.hdr_len(), 0, vp.hdr_len());
      build_frame(vp.tx_frame(i), cfg_.frame_size ? cfg_.frame_size : 1518, t.spec, 0,
                  static_cast<uint32_t>(&t - tx.data()));
    }
  }
  uint64_t foreign = 0;
  uint64_t tx_cycles = 0, tx_frames = 0;
  const uint64_t start = rdtsc();
  const uint64_t end = start + static_cast<uint64_t>(cfg_.duration_s * clock_.hz());
  const uint64_t drain_end = end + static_cast<uint64_t>(cfg_.drain_s * clock_.hz());
  for (;;) {
    const uint64_t now = rdtsc();
    if (now >= drain_end) break;
    if (now < end) {
      for (size_t s = 0; s < tx.size(); ++s) {
        Tx& t = tx[s];
        VPort& vp = ports_[t.port];
        const uint64_t t0 = rdtsc();
        vp.reclaim();
        uint64_t due = period > 0 ? static_cast<uint64_t>(static_cast<double>(now - start) / period) + 1
                                  : t.sent + cfg_.burst;
        if (due > planned) due = planned;
        uint32_t n = 0;
        uint32_t i;
        while (t.sent < due && n < cfg_.burst && vp.tx_get(&i)) {
          uint8_t* f = vp.tx_frame(i);
          uint32_t len = cfg_.frame_size;
          if (!len) {
            len = imix_size(t.sent);
            build_frame(f, len, t.spec, t.flow, static_cast<uint32_t>(s));
          } else if (cfg_.flows > 1) {
            patch_flow(f, t.spec, t.flow);
          }
          const uint64_t ts = rdtsc();
          stamp(f, t.sent, ts);
          if (period > 0) t.err_sum += static_cast<double>(ts) - (static_cast<double>(start) + static_cast<double>(t.sent) * period);
          if (!t.sent) t.first = ts;
          t.last = ts;
          vp.tx_put(i, len);
          ++t.sent;
          if (++t.flow == cfg_.flows) t.flow = 0;
          ++n;
        }
        if (n) {
          vp.tx_flush();
          tx_cycles += rdtsc() - t0;
          tx_frames += n;
        }
      }
    }
    // Receive on every port.
    const uint64_t rx_now = rdtsc();
    for (size_t p = 0; p < np; ++p) {
      VPort& vp = ports_[p];
      const uint8_t* fr;
      uint32_t len, idx;
      uint32_t got = 0;
      while (got < 64 && vp.rx_next(&fr, &len, &idx)) {
        Trailer tr;
        if (parse_trailer(fr, len, &tr) && tr.stream < tx.size() && tx[tr.stream].peer == p) {
          seq[tr.stream].on_frame(tr.seq);
          lat[tr.stream].record(rx_now > tr.tsc ? static_cast<uint64_t>(clock_.ns(rx_now - tr.tsc)) : 0);
        } else {
          ++foreign;
        }
        vp.rx_release(idx);
        ++got;
      }
      if (got) vp.rx_flush();
    }
  }
  res.elapsed_s = static_cast<double>(rdtsc() - start) / clock_.hz();
  for (size_t s = 0; s < tx.size(); ++s) {
    StreamResult r;
    r.tx_port = tx[s].port;
    r.rx_port = tx[s].peer;
    r.tx = tx[s].sent;
    r.rx = seq[s].unique();
    r.lost = r.tx > r.rx ? r.tx - r.rx : 0;
    r.duplicates = seq[s].duplicates();
    r.reordered = seq[s].reordered();
    r.latency = lat[s];
    r.first_tx_tsc = tx[s].first;
    r.last_tx_tsc = tx[s].last;
    r.schedule_error_ns_mean = r.tx ? tx[s].err_sum / static_cast<double>(r.tx) * 1e9 / clock_.hz() : 0;
    r.mean_interval_ns = r.tx > 1 ? clock_.ns(r.last_tx_tsc - r.first_tx_tsc) / static_cast<double>(r.tx - 1) : 0;
    res.streams.push_back(r);
  }
  res.foreign_frames = foreign;
  for (auto& p : ports_) res.fragmented += p.fragmented();
  res.tx_cycles_per_packet = tx_frames ? static_cast<double>(tx_cycles) / static_cast<double>(tx_frames) : 0;
  res.ceiling_mpps = res.tx_cycles_per_packet > 0 ? clock_.hz() / res.tx_cycles_per_packet / 1e6 : 0;
  return res;
}

}  // namespace vl::gen
