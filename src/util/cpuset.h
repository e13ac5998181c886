#pragma once
// Parsing of CPU lists in taskset syntax ("1", "1,3", "2-5", "0,2-3").
#include <optional>
#include <string_view>
#include <vector>

namespace vl {

/// Parses a taskset-style CPU list. Returns the CPUs in the order given, without
/// duplicates, or nullopt when the text is malformed or a CPU number exceeds 1023.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

/// The first CPU that a well-formed list names twice ("1,1", "1-3,2"), or nullopt when
/// each CPU is named once (or the list is malformed: parse_cpu_list says so).
std::optional<int> repeated_cpu(std::string_view text);

/// Pins the calling thread to one CPU. Returns 0 or an errno value.
int pin_current_thread(int cpu);

}  // namespace vl
