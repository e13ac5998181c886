// `virtlink bench NAME ...`: the benchmark harness lives in bench/virtlink_bench.py (it
// starts and stops every process a topology needs); this subcommand runs it with the same
// arguments and this binary as the switch under test.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"

namespace vl::cli {

namespace {

/// The harness: $VIRTLINK_BENCH_DIR/virtlink_bench.py, else the source tree's when the build
/// names one (VIRTLINK_SOURCE_DIR; not in the Debian package's: VIRTLINK_BENCH_FROM_SOURCE
/// OFF, so an installed binary runs no script from its build path). Empty: none.
std::string harness_path() {
  if (const char* d = getenv("VIRTLINK_BENCH_DIR")) return std::string(d) + "/virtlink_bench.py";
#ifdef VIRTLINK_SOURCE_DIR
  return std::string(VIRTLINK_SOURCE_DIR) + "/bench/virtlink_bench.py";
#else
  return "";
#endif
}

}  // namespace

void add_bench_command(CLI::App& app, BenchArgs& a) {
  CLI::App* b = app.add_subcommand(
      "bench",
      "Run a benchmark: p2p, pvp, pvvp (RFC 2544 NDR/PDR and latency, with testpmd and OVS-DPDK "
      "anchors), loopback, batching, chain, tcp, ping, soak; `virtlink bench` lists them, "
      "NAME --help gives its options (bench/README.md)");
  b->allow_extras();
  b->prefix_command();
  b->set_help_flag();  // --help goes to the harness
  b->add_option("name", a.name, "benchmark name (none: list them)");
}

int run_bench(const BenchArgs& a) {
  std::string script = harness_path();
  if (script.empty()) {
    fmt::print(stderr, "virtlink bench: this build has no harness; set VIRTLINK_BENCH_DIR to "
                       "the bench/ directory of a virtlink source tree\n");
    return 2;
  }
  if (!std::filesystem::exists(script)) {
    fmt::print(stderr, "virtlink bench: harness {} not found (set VIRTLINK_BENCH_DIR)\n", script);
    return 2;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 2;
  self[n] = 0;
  std::vector<std::string> args = {"python3", script, a.name.empty() ? "list" : a.name,
                                   "--virtlink", self};
  for (const auto& x : a.extra) args.push_back(x);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  execvp("python3", argv.data());
  fmt::print(stderr, "virtlink bench: cannot run python3\n");
  return 2;
}

}  // namespace vl::cli
