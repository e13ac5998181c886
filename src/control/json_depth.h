#pragma once
// How deep a JSON text nests, counted before parsing it: nlohmann-json parses and copies
// recursively, so text from a client or a file is refused past kMaxJsonDepth levels (a
// stack overflow otherwise; hostile-inputs.md).
#include <cstddef>
#include <string>

namespace vl::control {

/// The nesting a request line or a state file may have (arrays and objects).
inline constexpr size_t kMaxJsonDepth = 16;

/// Deepest nesting of arrays and objects in the JSON text `s` (brackets inside strings,
/// escapes included, do not count): 0 for a scalar, 1 for [] or {}.
size_t json_depth(const std::string& s);

}  // namespace vl::control
