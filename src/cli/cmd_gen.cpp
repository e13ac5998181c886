#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/config.h"
#include "cli/commands.h"
#include "gen/generator.h"
#include "wire/dpdk_eal.h"

namespace vl::cli {

void add_gen_command(CLI::App& app, GenArgs& a) {
  CLI::App* g = app.add_subcommand(
      "gen", "Traffic generator: paced frames through vhost-user ports or uplinks");
  g->add_option("--port", a.ports,
                "NAME=TYPE:ARG, the switch's port types: vhost-user-client:PATH (gen connects), "
                "vhost-user:PATH (gen listens), or a wire: tap:IFNAME, af-packet:IFACE, "
                "af-xdp:IFACE (falling back to af-packet), dpdk:DEVARGS; ports pair 1<->2, "
                "3<->4; optional ,mac=aa:bb:cc:dd:ee:ff at the end")
      ->required();
  g->add_option("--dpdk-extra", a.dpdk_extra,
                "extra EAL arguments for dpdk ports, space separated (as the switch's)");
  g->add_option("--rate", a.rate_pps, "frames per second per stream (0: as fast as possible)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--rate-percent", a.rate_percent, "percent of line rate of --link-gbps")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--link-gbps", a.link_gbps, "link speed for --rate-percent (10)");
  g->add_option("--size", a.size, "frame bytes without FCS (64..9018) or imix");
  g->add_option("--flows", a.flows, "flows per stream (1..1000000)")->check(CLI::Range(1, 1000000));
  g->add_option("--duration", a.duration_s, "seconds of transmission (above 0)")
      ->check(CLI::PositiveNumber);
  g->add_flag("--unidirectional", a.unidirectional, "only the first port of each pair transmits");
  g->add_flag("--no-learn", a.no_learn, "skip RFC 2889 address learning");
  g->add_flag("--check-payload", a.check_payload,
              "verify every received frame (IPv4 checksum and length, payload pattern); "
              "failures are counted as corrupted, not received");
  g->add_option("--queue-size", a.queue_size, "virtqueue entries (256)");
  g->add_option("--ring", a.ring,
                 "virtqueue layout: split (virtio 1.2 §2.7) or packed (§2.8, negotiates "
                 "VIRTIO_F_RING_PACKED; the back-end must offer it)")
      ->check(CLI::IsMember({"split", "packed"}));
  g->add_option("--queues", a.queues,
                "queue pairs per port (1..64; above 1 negotiates VIRTIO_NET_F_MQ): flow f leaves "
                "on transmit queue f % N, every receive queue is polled")
      ->check(CLI::Range(1, 64));
  g->add_option("--cpu", a.cpu, "pin the generator to this CPU");
  g->add_option("--json", a.json_file, "write the results as JSON");
  g->add_option("--max-lag", a.max_lag,
                "slots the generator may fall behind its schedule before it skips them "
                "(default: queue size / 4)");
  g->add_flag("--serve", a.serve,
              "keep the ports open and run one trial per line read from standard input: "
              "'run RATE SIZE DURATION FLOWS JSONFILE' (SIZE a number or imix; the buffers fit "
              "the --size given at start, at least 1518 B); prints 'done JSONFILE' or "
              "'error MESSAGE'; 'quit' or end of input stops");
}

namespace {

void print_result(const gen::GenResult& r) {
  for (const auto& s : r.streams) {
    fmt::print(
        "stream {}->{}: offered {} (tx {} + ring full {}; {} late slots skipped of {}) rx {} "
        "lost {} dup {} reordered {} interval {:.1f} ns latency ns min {} avg {:.0f} "
        "p50 {} p99 {} p99.9 {} max {}\n",
        s.tx_port, s.rx_port, s.offered, s.tx, s.tx_ring_full, s.late_skipped, s.planned, s.rx,
        s.lost, s.duplicates, s.reordered, s.mean_interval_ns, s.latency.min(), s.latency.mean(),
        s.latency.percentile(0.5), s.latency.percentile(0.99), s.latency.percentile(0.999),
        s.latency.max());
    // The schedule was not kept: the offered rate is below the asked one and loss or
    // latency then describe the generator as much as the device under test.
    if (s.planned && s.late_skipped * 100 > s.planned)
      fmt::print("warning: stream {}->{}: the generator fell behind its schedule and skipped "
                 "{:.1f} % of its slots (offered {} of {} planned): the rate asked is above what "
                 "it could send here (see the one-core ceiling below, and the CPU it shares)\n",
                 s.tx_port, s.rx_port, 100.0 * static_cast<double>(s.late_skipped) /
                                           static_cast<double>(s.planned),
                 s.offered, s.planned);
    if (s.tx_refused)
      fmt::print("warning: stream {}->{}: its port's wire refused {} frames (its own device "
                 "full; not offered, not lost)\n", s.tx_port, s.rx_port, s.tx_refused);
  }
  for (const auto& p : r.ports) {
    if (!p.wire) continue;
    fmt::print("port {}: {} {}: wire tx {} refused {} rx {}", p.name, p.type, p.target,
               p.wire_counters.tx_packets, p.wire_counters.tx_refused,
               p.wire_counters.rx_packets);
    for (const auto& [k, v] : p.device)
      if (v) fmt::print(" {} {}", k, v);
    fmt::print("\n");
  }
  fmt::print(
      "clock: TSC {:.3f} GHz calibrated against CLOCK_MONOTONIC_RAW (resolution {:.2f} ns); "
      "TX {:.0f} cycles/frame: one-core ceiling {:.1f} Mpps ({} ring, {} queue pair{})\n",
      r.tsc_hz / 1e9, 1e9 / r.tsc_hz, r.tx_cycles_per_packet, r.ceiling_mpps, r.ring, r.queues,
      r.queues == 1 ? "" : "s");
}

bool write_json(const gen::GenResult& r, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << r.to_json().dump(2) << "\n";
    if (!f) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool parse_size(const std::string& s, uint32_t* out) {
  if (s == "imix") {
    *out = 0;
    return true;
  }
  try {
    size_t pos = 0;
    const unsigned long v = std::stoul(s, &pos);
    if (pos != s.size() || v < gen::kMinFrame || v > gen::kMaxFrame) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// --serve: one trial per command line on stdin, ports kept open between trials.
int serve(gen::Generator& g) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd, size, path;
    in >> cmd;
    if (cmd.empty()) continue;
    if (cmd == "quit") break;
    double rate = 0, duration = 0;
    uint32_t flows = 0, fs = 0;
    std::string err;
    if (cmd != "run" || !(in >> rate >> size >> duration >> flows >> path) ||
        !parse_size(size, &fs)) {
      err = "expected: run RATE SIZE DURATION FLOWS JSONFILE";
    } else if (g.set_trial(rate, fs, flows, duration, &err)) {
      const gen::GenResult r = g.run();
      print_result(r);
      if (write_json(r, path)) {
        fmt::print("done {}\n", path);
        std::fflush(stdout);
        continue;
      }
      err = "cannot write " + path;
    }
    fmt::print("error {}\n", err);
    std::fflush(stdout);
  }
  return 0;
}

// One --port: NAME=TYPE:ARG as the switch's --port spells it (app::parse_port_spec), with an
// optional ,mac=MAC at the end (taken off first: DEVARGS have commas of their own); the ring
// settings come from the other options. False (logged) on a malformed spec.
bool parse_port(const std::string& spec, const GenArgs& a, gen::VPortConfig* p) {
  std::string s = spec;
  std::string mac;
  if (auto m = s.rfind(",mac="); m != std::string::npos) {
    mac = s.substr(m + 5);
    s = s.substr(0, m);
  }
  std::string err;
  const auto pc = app::parse_port_spec(s, &err);
  if (!pc) {
    spdlog::error("--port {}", err);
    return false;
  }
  p->name = pc->name;
  p->path = pc->path;
  p->server = pc->type == port::PortType::kVhostUser && pc->mode == port::SocketMode::kServer;
  switch (pc->type) {
    case port::PortType::kVhostUser: p->kind = gen::PortKind::kVhostUser; break;
    case port::PortType::kTap: p->kind = gen::PortKind::kTap; break;
    case port::PortType::kAfPacket: p->kind = gen::PortKind::kAfPacket; break;
    case port::PortType::kAfXdp: p->kind = gen::PortKind::kAfXdp; break;
    case port::PortType::kDpdk: p->kind = gen::PortKind::kDpdk; break;
    case port::PortType::kVxlan:  // (a tunnel needs a switch's underlay port)
      spdlog::error("--port {}: the generator takes no vxlan port (put it behind a switch's tunnel)", spec);
      return false;
  }
  if (!mac.empty() && !gen::parse_mac(mac.c_str(), &p->mac)) {
    spdlog::error("--port {}: bad mac", spec);
    return false;
  }
  p->queue_size = a.queue_size;
  p->packed = a.ring == "packed" && p->kind == gen::PortKind::kVhostUser;
  p->queues = a.queues;
  return true;
}

// --rate, or --rate-percent of --link-gbps for frames of `frame_size` bytes (0: IMIX).
double rate_pps(const GenArgs& a, uint32_t frame_size) {
  if (a.rate_percent <= 0) return a.rate_pps;
  // Line rate counts the FCS (4), preamble and SFD (8) and inter-frame gap (12).
  const double wire = (frame_size ? frame_size : 353.83) + 24.0;
  return a.link_gbps * 1e9 * a.rate_percent / 100.0 / (wire * 8);
}

// Checks made before any port is opened (usage errors, exit 2): the trial's size, the
// --cpu (like the switch's --pmd-cores: a CPU this process may run on) and that --json can
// be written (fail before the trial, not after it). False (logged) otherwise.
bool check_usage(const gen::GenConfig& c, const std::string& json_file) {
  std::string err;
  if (!gen::check_trial(c.rate_pps, c.duration_s, &err)) {
    spdlog::error("gen: {}", err);
    return false;
  }
  if (c.cpu >= 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (c.cpu >= CPU_SETSIZE ||
        (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && !CPU_ISSET(c.cpu, &allowed))) {
      spdlog::error("gen: --cpu {} is not a CPU this process may run on", c.cpu);
      return false;
    }
  }
  if (!json_file.empty()) {
    const auto slash = json_file.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : json_file.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0) {
      spdlog::error("gen: --json {}: cannot write in {}: {}", json_file, dir, strerror(errno));
      return false;
    }
  }
  return true;
}

// The generator's configuration from the command line. False (logged: a usage error) when
// an option is malformed or inconsistent.
bool make_config(const GenArgs& a, gen::GenConfig* c) {
  for (const auto& spec : a.ports) {
    gen::VPortConfig p;
    if (!parse_port(spec, a, &p)) return false;
    c->ports.push_back(p);
  }
  if (!a.dpdk_extra.empty()) {
    std::vector<std::string> args;
    std::istringstream in(a.dpdk_extra);
    for (std::string w; in >> w;) args.push_back(w);
    wire::set_eal_extra_args(std::move(args));
  }
  if (c->ports.empty() || c->ports.size() % 2) {  // like the switch's xconnect check
    spdlog::error("gen needs an even number of --port (streams pair them 1<->2, 3<->4, ...), "
                  "got {}", c->ports.size());
    return false;
  }
  if (!parse_size(a.size, &c->frame_size)) {
    spdlog::error("--size {}: expected imix or {}..{}", a.size, gen::kMinFrame, gen::kMaxFrame);
    return false;
  }
  c->rate_pps = rate_pps(a, c->frame_size);
  c->flows = a.flows;
  c->duration_s = a.duration_s;
  c->unidirectional = a.unidirectional;
  c->learn = !a.no_learn;
  c->check_payload = a.check_payload;
  c->cpu = a.cpu;
  c->max_lag_slots = a.max_lag;
  return check_usage(*c, a.json_file);
}

}  // namespace

int run_gen(const GenArgs& a) {
  gen::GenConfig c;
  if (!make_config(a, &c)) return 2;
  gen::Generator g(c);
  std::string err;
  if (!g.open(&err)) {
    spdlog::error("gen: {}", err);
    return 1;
  }
  if (a.serve) {
    fmt::print("ready\n");
    std::fflush(stdout);
    const int rc = serve(g);
    g.close();
    return rc;
  }
  const gen::GenResult r = g.run();
  g.close();
  print_result(r);
  if (!a.json_file.empty() && !write_json(r, a.json_file)) {
    spdlog::error("gen: cannot write {}", a.json_file);
    return 1;
  }
  return 0;
}

}  // namespace vl::cli
