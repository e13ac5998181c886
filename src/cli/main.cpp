// virtlink: a userspace virtio networking data plane. Entry point with subcommands:
//   switch  the vhost-user switch daemon
//   ctl     talk to a running switch over its control socket
//   top     a live view of a running switch (over its control socket)
//   bench   benchmarks (bench/README.md)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "util/log.h"
#include "util/log_sinks.h"
#include "virtlink_version.h"

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if __has_feature(address_sanitizer) || defined(__SANITIZE_ADDRESS__)
// LeakSanitizer (sanitizer builds): DPDK 22.11's af_xdp driver does not delete its libxdp
// umem when a port closes (80 bytes per closed port; tests/unit/dpdk_wire_test.cpp has the
// same suppression), so every switch with a dpdk:net_af_xdp port reported it at exit and
// exited 1. Not ours to free.
extern "C" const char* __lsan_default_suppressions() { return "leak:xsk_umem__create\n"; }
#endif

int main(int argc, char** argv) {
  vl::init_logging();  // stderr, or the journal under systemd (util/log_sinks.h)

  CLI::App app{"virtlink: a userspace virtio networking data plane (vhost-user switch)"};
  // Every option's --help line shows its default value (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", VIRTLINK_VERSION);
  std::string level = "info";
  app.add_option("--log-level", level, "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.require_subcommand(1);

  vl::cli::SwitchArgs sw;
  vl::cli::add_switch_command(app, sw);
  vl::cli::CtlArgs ctl;
  vl::cli::add_ctl_command(app, ctl);
  vl::cli::TopArgs top;
  vl::cli::add_top_command(app, top);
  vl::cli::GenArgs gen;
  vl::cli::add_gen_command(app, gen);
  vl::cli::VnfArgs vnf;
  vl::cli::add_vnf_command(app, vnf);
  vl::cli::BenchArgs bench;
  vl::cli::add_bench_command(app, bench);
  // --log-level also after the subcommand (`virtlink switch --log-level debug ...`): an
  // option a subcommand does not know falls through to this level (bench passes its
  // extras to its harness instead).
  for (const char* name : {"switch", "ctl", "top", "gen", "vnf"}) app.get_subcommand(name)->fallthrough();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // app.exit prints CLI11's message (--help and --version print theirs and give 0). Every
    // other parse error is a usage error and exits 2, like the bad values the commands
    // check themselves (CLI11's own codes, 100-115, would tell a script nothing more).
    return app.exit(e) == 0 ? 0 : 2;
  }
  vl::set_log_level(level.c_str());
  if (app.got_subcommand("switch")) return vl::cli::run_switch(sw);
  // ctl and top read what a program on a socket sent: whatever they did not foresee ends
  // them with status 1 and a message, after the destructors ran (top's terminal put back),
  // not in std::terminate.
  try {
    if (app.got_subcommand("ctl")) return vl::cli::run_ctl(ctl);
    if (app.got_subcommand("top")) return vl::cli::run_top(top);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "virtlink %s: unexpected reply or error: %s\n",
                 app.got_subcommand("ctl") ? "ctl" : "top", e.what());
    return 1;
  }
  if (app.got_subcommand("gen")) return vl::cli::run_gen(gen);
  if (app.got_subcommand("vnf")) return vl::cli::run_vnf(vnf);
  if (app.got_subcommand("bench")) {
    bench.extra = app.get_subcommand("bench")->remaining();
    return vl::cli::run_bench(bench);
  }
  return 2;
}
