#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "gen/generator.h"

namespace vl::cli {

void add_gen_command(CLI::App& app, GenArgs& a) {
  CLI::App* g = app.add_subcommand("gen", "Traffic generator: paced frames through vhost-user ports");
  g->add_option("--port", a.ports,
                "NAME=vhost-user-client:PATH (gen connects) or NAME=vhost-user:PATH (gen listens); "
                "ports pair 1<->2, 3<->4; optional ,mac=aa:bb:cc:dd:ee:ff")
      ->required();
  g->add_option("--rate", a.rate_pps, "frames per second per stream (0: as fast as possible)");
  g->add_option("--rate-percent", a.rate_percent, "percent of line rate of --link-gbps");
  g->add_option("--link-gbps", a.link_gbps, "link speed for --rate-percent (10)");
  g->add_option("--size", a.size, "frame bytes without FCS (64..9018) or imix");
  g->add_option("--flows", a.flows, "flows per stream (1..1000000)")->check(CLI::Range(1, 1000000));
  g->add_option("--duration", a.duration_s, "seconds of transmission");
  g->add_flag("--unidirectional", a.unidirectional, "only the first port of each pair transmits");
  g->add_flag("--no-learn", a.no_learn, "skip RFC 2889 address learning");
  g->add_option("--queue-size", a.queue_size, "virtqueue entries (256)");
  g->add_option("--cpu", a.cpu, "pin the generator to this CPU");
  g->add_option("--json", a.json_file, "write the results as JSON");
}

int run_gen(const GenArgs& a) {
  gen::GenConfig c;
  for (const auto& spec : a.ports) {
    gen::VPortConfig p;
    std::string s = spec;
    std::string opts;
    if (auto comma = s.find(','); comma != std::string::npos) {
      opts = s.substr(comma + 1);
      s = s.substr(0, comma);
    }
    const auto eq = s.find('='), colon = s.find(':', eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || colon == std::string::npos) {
      spdlog::error("--port {}: expected NAME=vhost-user-client:PATH or NAME=vhost-user:PATH", spec);
      return 2;
    }
    p.name = s.substr(0, eq);
    const std::string type = s.substr(eq + 1, colon - eq - 1);
    p.path = s.substr(colon + 1);
    if (type == "vhost-user") p.server = true;
    else if (type != "vhost-user-client") {
      spdlog::error("--port {}: unknown type {}", spec, type);
      return 2;
    }
    if (opts.rfind("mac=", 0) == 0 && !gen::parse_mac(opts.c_str() + 4, &p.mac)) {
      spdlog::error("--port {}: bad mac", spec);
      return 2;
    }
    p.queue_size = a.queue_size;
    c.ports.push_back(p);
  }
  if (a.size == "imix") c.frame_size = 0;
  else {
    c.frame_size = static_cast<uint32_t>(std::stoul(a.size));
    if (c.frame_size < gen::kMinFrame || c.frame_size > gen::kMaxFrame) {
      spdlog::error("--size {} outside {}..{}", c.frame_size, gen::kMinFrame, gen::kMaxFrame);
      return 2;
    }
  }
  c.rate_pps = a.rate_pps;
  if (a.rate_percent > 0) {
    // Line rate counts the FCS (4), preamble and SFD (8) and inter-frame gap (12).
    const double wire = (c.frame_size ? c.frame_size : 353.83) + 24.0;
    c.rate_pps = a.link_gbps * 1e9 * a.rate_percent / 100.0 / (wire * 8);
  }
  c.flows = a.flows;
  c.duration_s = a.duration_s;
  c.unidirectional = a.unidirectional;
  c.learn = !a.no_learn;
  c.cpu = a.cpu;
  gen::Generator g(c);
  std::string err;
  if (!g.open(&err)) {
    spdlog::error("gen: {}", err);
    return 1;
  }
  const gen::GenResult r = g.run();
  g.close();
  for (const auto& s : r.streams) {
    fmt::print("stream {}->{}: tx {} rx {} lost {} dup {} reordered {} latency ns min {} avg {:.0f} "
               "p50 {} p99 {} p99.9 {} max {}\n",
               s.tx_port, s.rx_port, s.tx, s.rx, s.lost, s.duplicates, s.reordered,
               s.latency.min(), s.latency.mean(), s.latency.percentile(0.5),
               s.latency.percentile(0.99), s.latency.percentile(0.999), s.latency.max());
  }
  fmt::print("clock: TSC {:.3f} GHz calibrated against CLOCK_MONOTONIC_RAW (resolution {:.2f} ns); "
             "TX {:.0f} cycles/frame: one-core ceiling {:.1f} Mpps\n",
             r.tsc_hz / 1e9, 1e9 / r.tsc_hz, r.tx_cycles_per_packet, r.ceiling_mpps);
  if (!a.json_file.empty()) {
    std::ofstream(a.json_file) << r.to_json().dump(2) << "\n";
  }
  return 0;
}

}  // namespace vl::cli
