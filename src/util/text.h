// Text helpers for messages that quote untrusted input.
#pragma once

#include <string>
#include <string_view>

namespace vl {

/// The first at most `max` bytes of `s`, cut back to the end of its last whole UTF-8
/// character: a quote of untrusted input in a message that becomes JSON (a control reply)
/// must not end in the middle of a multi-byte character, which the JSON writer refuses.
/// Bytes before the cut are kept as they are (valid UTF-8 or not).
inline std::string utf8_prefix(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  // Step back over continuation bytes (10xxxxxx), then over the lead byte of the character
  // they belong to if that character does not fit whole.
  size_t k = n;
  while (k > 0 && (static_cast<unsigned char>(s[k - 1]) & 0xC0) == 0x80) --k;
  if (k > 0) {
    const auto lead = static_cast<unsigned char>(s[k - 1]);
    const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (len > 1 && (k - 1) + len > n) n = k - 1;
  }
  return std::string(s.substr(0, n));
}

}  // namespace vl
