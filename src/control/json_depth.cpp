#include "control/json_depth.h"

#include <algorithm>

namespace vl::control {

size_t json_depth(const std::string& s) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    else if (ch == '[' || ch == '{') deepest = std::max(deepest, ++depth);
    else if ((ch == ']' || ch == '}') && depth > 0) --depth;
  }
  return deepest;
}

}  // namespace vl::control
