#pragma once
// The control socket (ControlServer): one JSON request line in, one JSON reply line out,
// served on the switch's control thread. Protocol and limits: docs/architecture.md,
// "Control socket".
#include <cstdint>
#include <functional>
#include <map>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "util/fd.h"

namespace vl::control {

using Json = nlohmann::json;
/// A command: fills `result` or returns false with `*err` set.
using Handler = std::function<bool(const Json& args, Json* result, std::string* err)>;
/// A command of the table (control/command_table.h): gets its argument strings, checked
/// against its row.
using ArgvHandler =
    std::function<bool(const std::vector<std::string>& argv, Json* result, std::string* err)>;
struct CommandSpec;

class ControlServer {
 public:
  /// Time a connection has, from accept, to deliver its request line (ms).
  static constexpr int kRequestBudgetMs = 3000;
  /// Connections waiting for their request line at once; one more drops the oldest.
  static constexpr size_t kMaxPending = 64;

  bool listen(const std::string& path, std::string* err);
  void close();
  /// An epoll fd, readable when a client connects or sends: add it to the caller's epoll
  /// and call on_ready() when it is readable.
  int fd() const { return epoll_.get(); }
  void add(const std::string& cmd, Handler h) { handlers_[cmd] = std::move(h); }
  /// Adds the command of `spec`: a request whose arguments do not fit the row is answered
  /// with its usage error (command_table.h check_args), and `h` is not called. The row is
  /// copied; the text it points to must outlive the server (the table's literals do).
  void add(const CommandSpec& spec, ArgvHandler h);
  /// Accepts new clients, reads what they sent and answers every complete request line;
  /// drops clients past their budget. Never blocks on a client's read (a reply is written
  /// with a 1 s send timeout).
  void on_ready();
  /// Drops clients past their budget (call now and then, e.g. once a second).
  void expire();
  /// Overrides kRequestBudgetMs (tests).
  void set_request_budget_ms(int ms) { budget_ms_ = ms; }
  const std::string& path() const { return path_; }
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    UniqueFd fd;
    int64_t deadline_ms;  // mono_ms() (util/clock.h)
    std::string line;
  };
  void accept_all();
  /// Reads from pending_[i]; returns true when the connection is done with (answered,
  /// closed by the client, over the size limit) and must be removed.
  bool read_from(Pending& p);
  void answer(int fd, const std::string& line);
  void remove(size_t i);

  UniqueFd listen_;
  UniqueFd epoll_;
  std::string path_;
  std::map<std::string, Handler> handlers_;
  std::vector<Pending> pending_;
  int budget_ms_ = kRequestBudgetMs;
};

/// Client side: sends {"cmd": cmd, "args": args} to the socket at `path` and returns the
/// reply's "result". Returns false with `*err` when the switch is unreachable, times out
/// (5 s) or answers with an error.
bool request(const std::string& path, const std::string& cmd, const Json& args, Json* result,
             std::string* err);

}  // namespace vl::control
