#include <signal.h>

#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "gen/frame.h"
#include "vnf/vnf.h"

namespace vl::cli {

namespace {
vnf::Vnf* g_vnf = nullptr;
void on_signal(int) {
  if (g_vnf) g_vnf->stop();
}
void on_usr1(int) {
  if (g_vnf) g_vnf->request_stats();
}
}  // namespace

void add_vnf_command(CLI::App& app, VnfArgs& a) {
  CLI::App* v = app.add_subcommand("vnf", "Two-port forwarder (the VM of PVP and chains)");
  v->add_option("--port", a.ports,
                "two ports: vhost-user-client:PATH (vnf connects) or vhost-user:PATH (vnf listens), "
                "optional ,mac=..,peer=.. (l2fwd)")
      ->required()
      ->expected(2);
  v->add_option("--mode", a.mode, "io (default), macswap, l2fwd")
      ->check(CLI::IsMember({"io", "macswap", "l2fwd"}));
  v->add_option("--pmd-mode", a.pmd_mode, "poll (default) or interrupt")
      ->check(CLI::IsMember({"poll", "interrupt"}));
  v->add_option("--cpu", a.cpu, "pin to this CPU");
  v->add_option("--duration", a.duration_s, "stop after this many seconds (default: on SIGINT/SIGTERM)");
  v->add_option("--queue-size", a.queue_size, "virtqueue entries (256)");
  v->add_option("--buf-size", a.buf_size, "bytes per buffer (2048; 9216+ for jumbo frames)");
  v->add_flag("--no-direct-link", a.no_direct_link,
              "do not offer to serve direct links (docs/direct-link.md): the ports stay switched");
  v->footer("SIGUSR1 prints the statistics (JSON, one line) on stdout; they are printed on exit too.");
}

int run_vnf(const VnfArgs& a) {
  vnf::VnfConfig c;
  for (int i = 0; i < 2; ++i) {
    std::string s = a.ports[static_cast<size_t>(i)];
    std::string opts;
    if (auto comma = s.find(','); comma != std::string::npos) {
      opts = s.substr(comma + 1);
      s = s.substr(0, comma);
    }
    const auto colon = s.find(':');
    const std::string type = colon == std::string::npos ? "" : s.substr(0, colon);
    if (type == "vhost-user") c.ports[i].server = true;
    else if (type != "vhost-user-client") {
      spdlog::error("--port {}: expected vhost-user-client:PATH or vhost-user:PATH", s);
      return 2;
    }
    c.ports[i].path = s.substr(colon + 1);
    c.ports[i].mac = 0x020000000100ull + static_cast<uint64_t>(i);
    size_t pos = 0;
    while (pos < opts.size()) {
      size_t end = opts.find(',', pos);
      if (end == std::string::npos) end = opts.size();
      const std::string kv = opts.substr(pos, end - pos);
      pos = end + 1;
      uint64_t* dst = kv.rfind("mac=", 0) == 0 ? &c.ports[i].mac
                      : kv.rfind("peer=", 0) == 0 ? &c.ports[i].peer_mac : nullptr;
      if (!dst || !gen::parse_mac(kv.c_str() + kv.find('=') + 1, dst)) {
        spdlog::error("--port option '{}' (mac=.. or peer=..)", kv);
        return 2;
      }
    }
  }
  c.mode = a.mode == "macswap" ? vnf::Mode::kMacswap
           : a.mode == "l2fwd" ? vnf::Mode::kL2fwd : vnf::Mode::kIo;
  c.interrupt = a.pmd_mode == "interrupt";
  c.cpu = a.cpu;
  c.duration_s = a.duration_s;
  c.queue_size = a.queue_size;
  c.buf_size = a.buf_size;
  c.direct_link = !a.no_direct_link;
  vnf::Vnf v(c);
  std::string err;
  if (!v.open(&err)) {
    spdlog::error("vnf: {}", err);
    return 1;
  }
  g_vnf = &v;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction su {};
  su.sa_handler = on_usr1;
  sigaction(SIGUSR1, &su, nullptr);
  spdlog::info("vnf: forwarding ({} mode, {})", a.mode, a.pmd_mode);
  v.run();
  g_vnf = nullptr;
  v.close();
  fmt::print("{}\n", v.stats().dump());
  return 0;
}

}  // namespace vl::cli
