#pragma once
// The control socket: a Unix stream socket on which `virtlink ctl` (or any script) sends
// one JSON request line and reads one JSON reply line.
//   request: {"cmd": "stats", "args": {...}}
//   reply:   {"ok": true, "result": ...}  or  {"ok": false, "error": "why"}
// The socket file is created with mode 0600. Requests are served on the switch's control
// thread, one connection at a time, each with a 1 s receive timeout.
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "util/fd.h"

namespace vl::control {

using Json = nlohmann::json;
/// A command: fills `result` or returns false with `*err` set.
using Handler = std::function<bool(const Json& args, Json* result, std::string* err)>;

class ControlServer {
 public:
  bool listen(const std::string& path, std::string* err);
  void close();
  int fd() const { return listen_.get(); }
  void add(const std::string& cmd, Handler h) { handlers_[cmd] = std::move(h); }
  /// Accepts and serves one client (called when fd() is readable).
  void serve_one();
  const std::string& path() const { return path_; }

 private:
  UniqueFd listen_;
  std::string path_;
  std::map<std::string, Handler> handlers_;
};

/// Client side: sends {"cmd": cmd, "args": args} to the socket at `path` and returns the
/// reply's "result". Returns false with `*err` when the switch is unreachable, times out
/// (5 s) or answers with an error.
bool request(const std::string& path, const std::string& cmd, const Json& args, Json* result,
             std::string* err);

}  // namespace vl::control
