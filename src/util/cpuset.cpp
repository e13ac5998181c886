#include "util/cpuset.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>

namespace vl {

namespace {
std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 1023) return std::nullopt;
  return v;
}
}  // namespace

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  if (text.empty()) return std::nullopt;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return std::nullopt;
    const size_t dash = item.find('-');
    auto lo = parse_int(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_int(item.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) return std::nullopt;
    for (int c = *lo; c <= *hi; ++c) {
      if (std::find(cpus.begin(), cpus.end(), c) == cpus.end()) cpus.push_back(c);
    }
  }
  return cpus;
}

std::optional<int> repeated_cpu(std::string_view text) {
  if (!parse_cpu_list(text)) return std::nullopt;
  std::vector<bool> seen(1024, false);
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const size_t dash = item.find('-');
    const int lo = *parse_int(item.substr(0, dash));
    const int hi = dash == std::string_view::npos ? lo : *parse_int(item.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) {
      if (seen[static_cast<size_t>(c)]) return c;
      seen[static_cast<size_t>(c)] = true;
    }
  }
  return std::nullopt;
}

int pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace vl
