#include "dp/flush.h"

#include <charconv>

#include <fmt/format.h>

namespace vl::dp {

std::optional<FlushPolicy> parse_flush_policy(std::string_view s, std::string* err) {
  if (s == "immediate") return FlushPolicy{FlushKind::kImmediate, 0};
  if (s == "rx-batch") return FlushPolicy{FlushKind::kRxBatch, 0};
  FlushKind kind;
  std::string_view num;
  if (s.starts_with("interval=")) {
    kind = FlushKind::kInterval;
    num = s.substr(9);
  } else if (s.starts_with("budget=")) {
    kind = FlushKind::kBudget;
    num = s.substr(7);
  } else {
    *err = fmt::format("flush policy '{}': expected immediate, rx-batch, interval=US or budget=US",
                       s);
    return std::nullopt;
  }
  uint64_t us = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), us);
  if (num.empty() || ec != std::errc{} || end != num.data() + num.size() || us > kMaxFlushUs) {
    *err = fmt::format("flush policy '{}': US must be an integer number of microseconds in 0..{}",
                       s, kMaxFlushUs);
    return std::nullopt;
  }
  if (kind == FlushKind::kBudget && us == 0) {
    *err = fmt::format("flush policy '{}': a budget must be at least 1 us (or use immediate)", s);
    return std::nullopt;
  }
  return FlushPolicy{kind, static_cast<uint32_t>(us)};
}

std::string flush_policy_name(FlushPolicy p) {
  switch (p.kind) {
    case FlushKind::kImmediate: return "immediate";
    case FlushKind::kRxBatch: return "rx-batch";
    case FlushKind::kInterval: return fmt::format("interval={}", p.us);
    case FlushKind::kBudget: return fmt::format("budget={}", p.us);
  }
  return "?";
}

}  // namespace vl::dp
