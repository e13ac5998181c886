#pragma once
// The control socket (ControlServer): one JSON request line in, one JSON reply line out,
// served on the switch's control thread. Protocol and limits: docs/architecture.md,
// "Control socket".
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "util/fd.h"
#include "util/unix_socket.h"

namespace vl::control {

using Json = nlohmann::json;
/// A command: fills `result` or returns false with `*err` set.
using Handler = std::function<bool(const Json& args, Json* result, std::string* err)>;
/// A command of the table (control/command_table.h): gets its argument strings, checked
/// against its row.
using ArgvHandler =
    std::function<bool(const std::vector<std::string>& argv, Json* result, std::string* err)>;
struct CommandSpec;

/// A reply made in slices, for a reply too long to make in one turn of the control thread
/// (`ctl fdb` of a large MAC table). The server calls next() at most once per turn, when
/// the client's socket has taken every byte made before; next() appends the next
/// part of the reply line (from its first byte, `{"ok":true,...`, to its final '\n') to
/// `*out`, doing at most about kSliceUs of work, and returns true once the line is complete.
/// The server adds the reply's "switch" member (ControlServer::listen) after the line's
/// opening brace.
class ReplyStream {
 public:
  /// Work one call to next() should stop after (µs).
  static constexpr uint64_t kSliceUs = 1000;
  /// Bytes one call should stop after.
  static constexpr size_t kSliceBytes = 64 << 10;
  virtual ~ReplyStream() = default;
  virtual bool next(std::string* out) = 0;
};
using StreamHandler = std::function<bool(const std::vector<std::string>& argv,
                                         std::unique_ptr<ReplyStream>* stream, std::string* err)>;
/// Takes a client's connection once its reply line has left (a capture: the frames follow
/// on the same socket, written by another thread). The connection is non-blocking.
using Takeover = std::function<void(UniqueFd conn)>;
/// A command that keeps its connection: fills `result` and `*take` or returns false with
/// `*err` (answered as an error; the connection then closes as any other).
using TakeoverHandler = std::function<bool(const std::vector<std::string>& argv, Json* result,
                                           Takeover* take, std::string* err)>;

/// Clients are multiplexed on the caller's (the control thread's) loop and never block
/// it: requests are read without waiting, replies are written without waiting from a
/// per-client buffer flushed when the socket is writable, and a long reply is made in
/// slices (ReplyStream) between polls. Limits: docs/architecture.md, "Control socket".
class ControlServer {
 public:
  /// Time a connection has, from accept, to deliver its request line (ms).
  static constexpr int kRequestBudgetMs = 3000;
  /// Connections open at once (waiting for their request or taking their reply); one more
  /// drops the oldest.
  static constexpr size_t kMaxPending = 64;
  /// A client taking its reply is disconnected when its socket takes no byte for this long
  /// (ms), or when the whole reply has not left within kReplyBudgetMs.
  static constexpr int kDrainStallMs = 2000;
  static constexpr int kReplyBudgetMs = 60000;
  // A streamed reply is made further only once the client's socket took every byte made
  // so far, so a client holds at most one slice (ReplyStream::kSliceBytes plus one entry)
  // in its buffer, whatever the reply's length; a whole reply (every other command) is
  // bounded by the number of ports.

  struct Counters {
    uint64_t accepted = 0;
    uint64_t answered = 0;       ///< replies written whole
    uint64_t dropped_slow = 0;   ///< did not take their reply (kDrainStallMs, kReplyBudgetMs)
    uint64_t dropped_idle = 0;   ///< sent no complete request within the budget
    uint64_t dropped_excess = 0; ///< the oldest, dropped at kMaxPending
    uint64_t streamed = 0;       ///< replies made in slices
    uint64_t handed_over = 0;    ///< connections taken over after their reply (capture)
    uint64_t abandoned = 0;      ///< takeover requests (upgrade) not run: the client hung up
  };

  /// The control socket file's permissions (--control-mode, --control-owner,
  /// --control-group), applied between bind and listen like a vhost-user port's.
  struct ListenOptions {
    uint32_t mode = 0600;  ///< permission bits
    std::string owner;     ///< user name or uid; empty: ours
    std::string group;     ///< group name or gid; empty: ours
    /// Create the socket's directory when missing (the default path, /run/virtlink); a path
    /// the user gave must be in a directory that exists (util/unix_socket.h).
    bool create_dir = false;
  };
  /// Listens on `path`. Every reply line then carries, beside "ok" and "result", the member
  /// "switch": {"control": PATH, "pid": N}: which switch answered.
  bool listen(const std::string& path, const ListenOptions& opts, std::string* err);
  bool listen(const std::string& path, std::string* err) { return listen(path, {}, err); }
  /// Serves on a predecessor's listening socket `listener` bound at `path` (`ctl upgrade`):
  /// the file stays as it is. False with `*err`.
  bool adopt(UniqueFd listener, const std::string& path, std::string* err);
  /// The listening socket, or -1.
  int listen_fd() const { return listen_.get(); }
  /// After `ctl upgrade` handed the socket over: accepts no one more and answers every
  /// request still to come with the error `why` (replies already made still go out).
  void retire(const std::string& why);
  void close();
  /// An epoll fd, readable when a client connects or sends: add it to the caller's epoll
  /// and call on_ready() when it is readable.
  int fd() const { return epoll_.get(); }
  void add(const std::string& cmd, Handler h) { handlers_[cmd] = std::move(h); }
  /// Adds the command of `spec`: a request whose arguments do not fit the row is answered
  /// with its usage error (command_table.h check_args), and `h` is not called. The row is
  /// copied; the text it points to must outlive the server (the table's literals do).
  void add(const CommandSpec& spec, ArgvHandler h);
  /// Adds the command of `spec` whose reply is made in slices: `h` checks the arguments
  /// and gives the stream (or returns false with `*err`, answered as an error).
  void add_stream(const CommandSpec& spec, StreamHandler h);
  /// Adds the command of `spec` whose connection is handed over after its reply line
  /// (TakeoverHandler): the server forgets the client then, budgets and all.
  void add_takeover(const CommandSpec& spec, TakeoverHandler h);
  /// One turn: accepts new clients, reads what they sent, starts the reply of every
  /// complete request line, writes what each client's socket takes, makes one slice more
  /// of each streamed reply, and drops clients past their deadlines. Never blocks.
  void on_ready();
  /// True while a streamed reply can be made further now (its client took every byte so
  /// far): call on_ready() again without waiting for fd().
  bool busy() const;
  /// Drops clients past their deadlines (call now and then, e.g. once a second).
  void expire();
  /// Overrides kRequestBudgetMs (tests).
  void set_request_budget_ms(int ms) { budget_ms_ = ms; }
  /// Overrides kDrainStallMs (tests).
  void set_drain_stall_ms(int ms) { stall_ms_ = ms; }
  const std::string& path() const { return path_; }
  size_t pending() const { return clients_.size(); }
  const Counters& counters() const { return counters_; }

 private:
  /// listen()'s and adopt()'s end: the epoll set and the reply identity for `s`.
  bool serve_on(UniqueFd s, const std::string& path, std::string* err);
  struct Client {
    UniqueFd fd;
    int64_t deadline_ms;  // mono_ms() (util/clock.h): request budget, then the reply's
    std::string line;     // the request line as it arrives
    bool replying = false;  // the request was taken: reading stopped, the reply goes out
    std::string out;        // reply bytes not yet sent, from out_off
    size_t out_off = 0;
    std::unique_ptr<ReplyStream> stream;  // the rest of a streamed reply
    Takeover take;          // takes the connection once the reply has left
    int64_t stall_ms = 0;   // replying: the time by which the socket must take a byte
    uint32_t events = 0;    // the epoll events registered for fd
    int64_t since_ms = 0;   // accepted at
    uint64_t turn = 0;      // the turn (turn_) of its last slice
  };
  void accept_all();
  /// Reads from `c`; on a complete request line starts its reply. Returns true when the
  /// connection is done with (closed by the client with nothing to answer, over the size
  /// limit) and must be removed.
  bool read_from(Client& c);
  /// Starts the reply to `line`: a whole reply in c.out, or a stream.
  void start_reply(Client& c, const std::string& line);
  /// Writes what the socket takes and makes one slice of a stream. Returns true when the
  /// client is done with (the reply sent, or the socket failed) and must be removed.
  bool pump(Client& c, bool slice);
  void set_events(Client& c, uint32_t events);
  /// Inserts the "switch" member (identity_) after the opening brace of a reply line.
  void with_identity(std::string* line) const;
  void remove(size_t i);

  BoundSocketFile file_;  // the socket's file (util/unix_socket.h)
  UniqueFd listen_;
  std::string refusal_;  ///< retire()
  UniqueFd epoll_;
  std::string path_;
  std::string identity_;  // `"switch":{"control":PATH,"pid":N}`, a member of every reply
  std::map<std::string, Handler> handlers_;
  using RawStream =
      std::function<bool(const Json& args, std::unique_ptr<ReplyStream>*, std::string*)>;
  std::map<std::string, RawStream> streams_;
  using RawTakeover = std::function<bool(const Json& args, Json*, Takeover*, std::string*)>;
  std::map<std::string, RawTakeover> takeovers_;
  uint64_t turn_ = 0;
  std::vector<Client> clients_;
  int budget_ms_ = kRequestBudgetMs;
  int stall_ms_ = kDrainStallMs;
  Counters counters_;
};

/// Client side: sends {"cmd": cmd, "args": args} to the socket at `path` and returns the
/// reply's "result" (and, when `reply` is given, the whole reply object, with the members
/// some commands add beside "result", e.g. fdb's "total"). Returns false with `*err` when
/// the switch is unreachable, times out (5 s to connect, 5 s without a byte, `budget_ms`
/// for the whole reply) or answers with an error. A reply that is not a JSON object with a
/// boolean "ok" is "malformed" (never an exception: the socket may not be a switch's).
inline constexpr int kClientBudgetMs = ControlServer::kReplyBudgetMs + 5000;
bool request(const std::string& path, const std::string& cmd, const Json& args, Json* result,
             std::string* err, Json* reply = nullptr, int budget_ms = kClientBudgetMs);

/// Client side of a command that keeps its connection (ControlServer::add_takeover): sends
/// the request, reads the reply line and returns the connection (blocking, no timeout)
/// in `*conn` with the bytes that followed the line in `*rest`. False with `*err` as
/// request().
bool request_session(const std::string& path, const std::string& cmd, const Json& args,
                     Json* result, UniqueFd* conn, std::string* rest, std::string* err,
                     Json* reply = nullptr);

}  // namespace vl::control
