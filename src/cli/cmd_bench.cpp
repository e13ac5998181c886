#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"

namespace vl::cli {

void add_bench_command(CLI::App& app, BenchArgs& a) {
  CLI::App* b = app.add_subcommand("bench", "Run a benchmark (see bench/README.md)");
  b->add_option("name", a.name, "loopback")->required();
  b->add_option("--json", a.json_file, "write the results as bench JSON (INTERFACES.md)");
  b->add_flag("--quick", a.quick, "reduced sweep (under 3 minutes)");
  b->add_option("--frame-sizes", a.frame_sizes, "comma-separated frame sizes in bytes (64,1518)");
  b->add_option("--trial", a.trial_s, "seconds per measurement");
  b->add_option("--runs", a.runs, "measurements per point (median reported)");
}

int run_bench(const BenchArgs& a) {
  fmt::print(stderr, "virtlink bench: unknown benchmark '{}'\n", a.name);
  return 2;
}

}  // namespace vl::cli
