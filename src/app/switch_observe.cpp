// Switch: packet capture sessions and port mirrors at run time (docs/architecture.md
// "Capture and mirroring").
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/switch.h"

namespace vl::app {

namespace {

/// "rx", "tx", "both" as bits of dp::TapDir; 0 for anything else.
uint8_t parse_dirs(const std::string& s) {
  if (s == "rx") return 1u << dp::kTapRx;
  if (s == "tx") return 1u << dp::kTapTx;
  if (s == "both") return (1u << dp::kTapRx) | (1u << dp::kTapTx);
  return 0;
}

const char* dirs_name(uint8_t d) {
  return d == 3 ? "both" : d == (1u << dp::kTapRx) ? "rx" : "tx";
}

constexpr uint64_t bit(uint32_t i) { return uint64_t{1} << i; }

}  // namespace

bool Switch::capture(const std::vector<std::string>& argv, control::Json* out,
                     control::Takeover* take, std::string* err) {
  CaptureRequest req;
  const auto i = port_index(argv[0]);
  if (!i) {
    *err = fmt::format("no port named '{}'", argv[0]);
    return false;
  }
  req.port = *i;
  req.port_name = argv[0];
  req.dirs = parse_dirs(argv[1]);
  if (!req.dirs) {
    *err = fmt::format("usage: direction '{}' is not rx, tx or both", argv[1]);
    return false;
  }
  if (!parse_capture_options({argv.begin() + 2, argv.end()}, &req, err)) return false;
  if (!capture_) capture_ = std::make_unique<CaptureService>(&tables_, tables_.pmd_threads);
  if (!capture_->can_start(err)) return false;
  *out = {{"port", req.port_name},
          {"direction", dirs_name(req.dirs)},
          {"snaplen", req.snaplen},
          {"count", req.count},
          {"duration_s", req.duration_ns / 1000000000},
          {"filter_instructions", req.filter.size()}};
  spdlog::info("capture of port {} ({}) starts", req.port_name, dirs_name(req.dirs));
  CaptureService* svc = capture_.get();
  *take = [svc, req](UniqueFd conn) mutable { svc->start(std::move(req), std::move(conn)); };
  return true;
}

bool Switch::mirror(const std::vector<std::string>& argv, control::Json* out, std::string* err) {
  const auto src = port_index(argv[0]);
  if (!src) {
    *err = fmt::format("no port named '{}'", argv[0]);
    return false;
  }
  dp::Observe& obs = tables_.obs;
  std::lock_guard g(obs.lock);
  const uint32_t s = *src;
  if (argv.size() == 2 && argv[1] == "off") {
    obs.mirror_rx.fetch_and(~bit(s), std::memory_order_relaxed);
    obs.mirror_tx.fetch_and(~bit(s), std::memory_order_release);
    obs.update_rx();
    spdlog::info("mirror of port {}: off", argv[0]);
    *out = {{"port", argv[0]}, {"mirror", nullptr}};
    return true;
  }
  const uint8_t dirs = argv.size() == 4 && argv[2] == "to" ? parse_dirs(argv[1]) : 0;
  if (!dirs) {
    *err = "usage: mirror PORT rx|tx|both to OUTPORT, or mirror PORT off";
    return false;
  }
  const auto dst = port_index(argv[3]);
  if (!dst || *dst == s) {
    *err = dst ? "mirror: a port cannot be its own mirror" : fmt::format("no port named '{}'", argv[3]);
    return false;
  }
  const uint64_t sources = obs.mirror_rx.load() | obs.mirror_tx.load();
  bool is_dst = false;
  for (uint32_t p = 0; p < port::kMaxPorts; ++p)
    if ((((obs.mirror_rx.load() >> p) & 1) && obs.mirror_rx_to[p].load() == s) ||
        (((obs.mirror_tx.load() >> p) & 1) && obs.mirror_tx_to[p].load() == s))
      is_dst = true;
  if (tables_.vlans || ((sources >> *dst) & 1) || is_dst) {
    *err = tables_.vlans ? "mirror: not on a switch with VLANs (not done yet)"
                         : fmt::format("mirror: '{}' mirrors a port already, or is mirrored: a "
                                       "mirror's frames are not mirrored again",
                                       is_dst ? argv[0] : argv[3]);
    return false;
  }
  // Destinations before the masks that make PMD threads read them.
  if (dirs & (1u << dp::kTapRx)) obs.mirror_rx_to[s].store(static_cast<uint8_t>(*dst));
  if (dirs & (1u << dp::kTapTx)) obs.mirror_tx_to[s].store(static_cast<uint8_t>(*dst));
  if (dirs & (1u << dp::kTapRx)) obs.mirror_rx.fetch_or(bit(s), std::memory_order_release);
  if (dirs & (1u << dp::kTapTx)) obs.mirror_tx.fetch_or(bit(s), std::memory_order_release);
  obs.update_rx();
  spdlog::info("mirror of port {} ({}) to {}", argv[0], dirs_name(dirs), argv[3]);
  *out = {{"port", argv[0]}, {"direction", dirs_name(dirs)}, {"to", argv[3]}};
  return true;
}

control::Json Switch::mirrors() const {
  const dp::Observe& obs = tables_.obs;
  control::Json list = control::Json::array();
  const uint64_t rx = obs.mirror_rx.load(), tx = obs.mirror_tx.load();
  for (uint32_t p = 0; p < port::kMaxPorts && p < ports_.size(); ++p) {
    if (!(((rx | tx) >> p) & 1) || !ports_[p]) continue;
    auto name_of = [&](uint64_t mask, const std::atomic<uint8_t>* to) -> control::Json {
      const uint32_t d = to[p].load();
      if (!((mask >> p) & 1) || d >= ports_.size() || !ports_[d]) return nullptr;
      return ports_[d]->name();
    };
    list.push_back({{"port", ports_[p]->name()},
                    {"rx", name_of(rx, obs.mirror_rx_to)},
                    {"tx", name_of(tx, obs.mirror_tx_to)}});
  }
  return list;
}

void Switch::observe_port_gone(uint32_t i) {
  if (capture_) capture_->port_gone(i);
  dp::Observe& obs = tables_.obs;
  std::lock_guard g(obs.lock);
  uint64_t rx = obs.mirror_rx.load(), tx = obs.mirror_tx.load();
  rx &= ~bit(i);
  tx &= ~bit(i);
  for (uint32_t p = 0; p < port::kMaxPorts; ++p) {
    if (obs.mirror_rx_to[p].load() == i) rx &= ~bit(p);
    if (obs.mirror_tx_to[p].load() == i) tx &= ~bit(p);
  }
  obs.mirror_rx.store(rx);
  obs.mirror_tx.store(tx, std::memory_order_release);
  obs.update_rx();
}

}  // namespace vl::app
