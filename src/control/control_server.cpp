#include "control/control_server.h"
#include "control/json_depth.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "control/command_table.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/unix_socket.h"

namespace vl::control {

namespace {
void set_timeout(int fd, int secs) {
  timeval tv{secs, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int64_t now_ms() { return static_cast<int64_t>(mono_ms()); }

/// True when the peer of `fd` closed or shut down its end (POLLRDHUP), without waiting.
bool peer_hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/// Reads until a newline (true) or `limit` bytes, the peer's close (true if it sent
/// anything), an error or a recv timeout (SO_RCVTIMEO), or `budget_ms` in all (false: a
/// peer sending a byte now and then, each within the recv timeout, held a client for ever).
bool read_line(int fd, std::string* out, size_t limit, int64_t budget_ms) {
  const int64_t end = now_ms() + budget_ms;
  char buf[1 << 16];
  while (out->size() < limit) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !out->empty();
    const size_t old = out->size();
    out->append(buf, static_cast<size_t>(n));
    // Only the new bytes: a reply of megabytes arrives in thousands of reads.
    if (out->find('\n', old) != std::string::npos) return true;
    if (now_ms() >= end) return false;
  }
  return false;
}

/// The reply's verdict: "ok" true, or false with its "error". A reply not of that form
/// (a program on the socket that is not a switch) is malformed, never an exception.
bool reply_ok(const Json& reply, std::string* err) {
  const auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) {
    *err = "malformed reply from the switch";
    return false;
  }
  if (ok->get<bool>()) return true;
  const auto e = reply.find("error");
  *err = e != reply.end() && e->is_string() ? e->get<std::string>() : std::string("unknown error");
  return false;
}

/// Connects to the control socket at `a`, within the send timeout: a switch whose control
/// thread is stuck (or stopped) fills its listen backlog, and connect() then waited for ever.
bool connect_within(int fd, const sockaddr_un& a, int secs) {
  set_timeout(fd, secs);
  return connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

constexpr size_t kMaxLine = 1 << 16;  // request line, bytes

constexpr size_t kMaxDepth = kMaxJsonDepth;

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}
}  // namespace

bool ControlServer::listen(const std::string& path, const ListenOptions& opts, std::string* err) {
  sockaddr_un a;
  if (!make_unix_addr(path, &a, err)) return false;
  if (opts.create_dir) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  }
  if (const std::string e = missing_socket_dir(path, "control socket"); !e.empty()) {
    *err = e;
    return false;
  }
  uint32_t uid = static_cast<uint32_t>(-1), gid = static_cast<uint32_t>(-1);  // -1: unchanged
  if (!opts.owner.empty() && !resolve_id(opts.owner, false, &uid)) {
    *err = fmt::format("control socket: unknown owner '{}'", opts.owner);
    return false;
  }
  if (!opts.group.empty() && !resolve_id(opts.group, true, &gid)) {
    *err = fmt::format("control socket: unknown group '{}'", opts.group);
    return false;
  }
  if (!clear_stale_socket(path, a, "control socket", err)) return false;
  // As for a vhost-user socket: nobody can connect before listen(), so the moment between
  // bind and chown/chmod exposes nothing.
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid() || bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      !file_.record(path) || !file_.set_access(opts.mode, uid, gid) || ::listen(s.get(), 64) != 0) {
    *err = fmt::format("cannot listen on {}: {}", path, strerror(errno));
    file_.remove();
    return false;
  }
  return serve_on(std::move(s), path, err);
}

bool ControlServer::adopt(UniqueFd listener, const std::string& path, std::string* err) {
  if (!listener.valid() || !file_.record(path)) {
    *err = fmt::format("control socket {}: not taken over: {}", path, strerror(errno));
    return false;
  }
  return serve_on(std::move(listener), path, err);
}

bool ControlServer::serve_on(UniqueFd s, const std::string& path, std::string* err) {
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s.get();
  if (!ep.valid() || epoll_ctl(ep.get(), EPOLL_CTL_ADD, s.get(), &ev) != 0) {
    *err = fmt::format("control socket: epoll: {}", strerror(errno));
    file_.remove();
    return false;
  }
  listen_ = std::move(s);
  epoll_ = std::move(ep);
  path_ = path;
  identity_ = fmt::format(R"("switch":{})",
                          Json{{"control", path}, {"pid", static_cast<int64_t>(getpid())}}.dump());
  return true;
}

void ControlServer::add(const CommandSpec& spec, ArgvHandler h) {
  add(std::string(spec.name), [spec, h = std::move(h)](const Json& args, Json* r, std::string* e) {
    std::vector<std::string> argv;
    return check_args(spec, args, &argv, e) && h(argv, r, e);
  });
}

void ControlServer::add_stream(const CommandSpec& spec, StreamHandler h) {
  streams_[std::string(spec.name)] = [spec, h = std::move(h)](
                                         const Json& args, std::unique_ptr<ReplyStream>* st,
                                         std::string* e) {
    std::vector<std::string> argv;
    return check_args(spec, args, &argv, e) && h(argv, st, e);
  };
}

void ControlServer::add_takeover(const CommandSpec& spec, TakeoverHandler h) {
  takeovers_[std::string(spec.name)] = [spec, h = std::move(h)](const Json& args, Json* result,
                                                               Takeover* take, std::string* e) {
    std::vector<std::string> argv;
    return check_args(spec, args, &argv, e) && h(argv, result, take, e);
  };
}

void ControlServer::close() {
  clients_.clear();
  epoll_.reset();
  if (listen_.valid()) {
    listen_.reset();
    file_.remove();
  }
}

void ControlServer::remove(size_t i) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, clients_[i].fd.get(), nullptr);
  clients_[i] = std::move(clients_.back());
  clients_.pop_back();
}

void ControlServer::set_events(Client& c, uint32_t events) {
  if (c.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = c.fd.get();
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  c.events = events;
}

void ControlServer::retire(const std::string& why) {
  refusal_ = why;
  if (listen_.valid()) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
  listen_.reset();  // (our copy: the socket file and the successor's copy stay)
}

void ControlServer::accept_all() {
  if (!listen_.valid()) return;
  for (;;) {
    UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c.valid()) return;  // EAGAIN: none left (or a transient error: next readiness)
    ++counters_.accepted;
    if (clients_.size() >= kMaxPending) {
      // First take the requests that already arrived (a flood of new connections must
      // not evict a client that did its part), then drop the oldest of those still
      // waiting for their request, else the oldest of all.
      for (size_t i = 0; i < clients_.size();) {
        if (!clients_[i].replying && read_from(clients_[i])) remove(i);
        else ++i;
      }
    }
    if (clients_.size() >= kMaxPending) {
      size_t oldest = 0;
      for (size_t i = 1; i < clients_.size(); ++i) {
        const Client& a = clients_[i];
        const Client& o = clients_[oldest];
        if (a.replying != o.replying ? o.replying : a.since_ms < o.since_ms) oldest = i;
      }
      VL_LOG_RL(spdlog::level::warn, "control socket: {} clients at once; the oldest dropped",
                kMaxPending);
      ++counters_.dropped_excess;
      remove(oldest);
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c.get();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.get(), &ev) != 0) continue;
    Client cl;
    cl.fd = std::move(c);
    cl.since_ms = now_ms();
    cl.deadline_ms = cl.since_ms + budget_ms_;
    cl.events = EPOLLIN;
    clients_.push_back(std::move(cl));
  }
}

bool ControlServer::read_from(Client& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;  // wait for more
    if (n <= 0) {  // the client closed (or failed): answer what it sent, if anything
      if (c.line.empty()) return true;
      const std::string line = std::move(c.line);
      start_reply(c, line);
      return pump(c, c.turn != turn_);
    }
    const size_t old = c.line.size();
    c.line.append(buf, static_cast<size_t>(n));
    const size_t nl = c.line.find('\n', old);
    if (nl != std::string::npos) {
      c.line.resize(nl);
      const std::string line = std::move(c.line);
      start_reply(c, line);
      return pump(c, c.turn != turn_);
    }
    if (c.line.size() >= kMaxLine) {
      VL_LOG_RL(spdlog::level::warn, "control socket: a request line over {} bytes; dropped",
                kMaxLine);
      return true;
    }
  }
}

void ControlServer::expire() {
  const int64_t now = now_ms();
  for (size_t i = 0; i < clients_.size();) {
    const Client& c = clients_[i];
    if (!c.replying && now >= c.deadline_ms) {
      VL_LOG_RL(spdlog::level::warn,
                "control socket: a client sent no complete request line within {} ms; dropped",
                budget_ms_);
      ++counters_.dropped_idle;
      remove(i);
      continue;
    }
    // hostile-inputs.md item 23: a client that does not take its reply is disconnected.
    const bool blocked = c.out_off < c.out.size();
    if (c.replying && (now >= c.deadline_ms || (blocked && now >= c.stall_ms))) {
      VL_LOG_RL(spdlog::level::warn,
                "control socket: a client did not take its reply ({}; {} bytes unsent); "
                "disconnected",
                now >= c.deadline_ms ? fmt::format("not done within {} ms", kReplyBudgetMs)
                                     : fmt::format("no byte taken for {} ms", stall_ms_),
                c.out.size() - c.out_off);
      ++counters_.dropped_slow;
      remove(i);
      continue;
    }
    ++i;
  }
}

bool ControlServer::busy() const {
  for (const Client& c : clients_)
    if (c.stream && c.out_off == c.out.size()) return true;
  return false;
}

void ControlServer::on_ready() {
  ++turn_;
  epoll_event evs[16];
  const int n = epoll_wait(epoll_.get(), evs, 16, 0);
  for (int e = 0; e < n; ++e) {
    const int fd = evs[e].data.fd;
    if (fd == listen_.get()) {
      accept_all();
      continue;
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      Client& c = clients_[i];
      if (c.fd.get() != fd) continue;
      const bool done = c.replying ? pump(c, c.turn != turn_) : read_from(c);
      if (done) remove(i);
      break;
    }
  }
  // Streamed replies whose clients took everything so far: one slice each per turn.
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    if (c.stream && c.out_off == c.out.size() && c.turn != turn_ && pump(c, true)) remove(i);
    else ++i;
  }
  expire();
}

// hostile-inputs.md item 23: nothing here waits on the client's socket, and a stream makes
// its next slice only once the client took the previous one.
bool ControlServer::pump(Client& c, bool slice) {
  const int64_t now = now_ms();
  for (;;) {
    if (c.out_off == 0 && !c.out.empty()) c.stall_ms = now + stall_ms_;  // a fresh buffer
    while (c.out_off < c.out.size()) {
      const ssize_t n = send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_events(c, EPOLLOUT);  // flushed when the socket is writable
        return false;
      }
      if (n <= 0) return true;  // the client went away
      c.out_off += static_cast<size_t>(n);
      c.stall_ms = now + stall_ms_;
    }
    c.out.clear();
    c.out_off = 0;
    if (!c.stream) {
      ++counters_.answered;
      if (c.take) {  // the connection goes on elsewhere (add_takeover)
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
        ++counters_.handed_over;
        Takeover take = std::move(c.take);
        c.take = nullptr;
        take(std::move(c.fd));
      }
      return true;
    }
    set_events(c, 0);  // hang-ups and errors are still reported
    if (!slice) return false;  // the next slice at the next turn
    slice = false;
    c.turn = turn_;
    if (c.stream->next(&c.out)) c.stream.reset();
  }
}

void ControlServer::with_identity(std::string* line) const {
  // A reply line is one JSON object (ReplyStream: from its opening brace): the member goes
  // first, so a streamed reply's first slice carries it like a whole reply.
  if (identity_.empty() || line->empty() || (*line)[0] != '{') return;
  line->insert(1, (*line)[1] == '}' ? identity_ : identity_ + ",");
}

void ControlServer::start_reply(Client& c, const std::string& line) {
  c.replying = true;
  c.deadline_ms = now_ms() + kReplyBudgetMs;
  set_events(c, 0);  // one request per connection: nothing more is read
  static const Json kMalformed = {
      {"ok", false}, {"error", "malformed request (an object with a string cmd and an object args)"}};
  Json reply;
  // A raw NUL byte is never part of a JSON text, but nlohmann-json's parser takes it for the
  // end of its input: `{"cmd": ...}\0junk` would be served, and the depth check (which reads
  // the whole line) and the parser would disagree on what the request is (fuzz_control,
  // regressions/fuzz_control/nul_byte_ends_parse_not_depth_check).
  if (line.find('\0') != std::string::npos) {
    c.out = kMalformed.dump() + "\n";
    with_identity(&c.out);
    return;
  }
  if (json_depth(line) > kMaxDepth) {
    c.out = Json{{"ok", false}, {"error", "request nested too deeply"}}.dump() + "\n";
    with_identity(&c.out);
    return;
  }
  const Json req = Json::parse(line, nullptr, false);
  static const Json kNoArgs = Json::object();
  const Json* args = &kNoArgs;
  if (req.is_object() && req.contains("args")) args = &req["args"];
  if (req.is_discarded() || !req.is_object() || !req.contains("cmd") || !req["cmd"].is_string() ||
      !args->is_object()) {
    reply = kMalformed;
  } else if (!refusal_.empty()) {
    reply = {{"ok", false}, {"error", refusal_}};
  } else {
    const std::string cmd = req["cmd"];
    auto it = handlers_.find(cmd);
    auto st = streams_.find(cmd);
    auto tk = takeovers_.find(cmd);
    if (it == handlers_.end() && st == streams_.end() && tk == takeovers_.end()) {
      std::set<std::string> names;
      for (const auto& [name, h] : handlers_) names.insert(name);
      for (const auto& [name, h] : streams_) names.insert(name);
      for (const auto& [name, h] : takeovers_) names.insert(name);
      std::string known;
      for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
      reply = {{"ok", false}, {"error", fmt::format("unknown command '{}' (commands: {})", cmd, known)}};
    } else {
      Json result;
      std::string err;
      try {
        if (st != streams_.end()) {
          if (st->second(*args, &c.stream, &err)) {
            ++counters_.streamed;
            c.turn = turn_;
            if (c.stream->next(&c.out)) c.stream.reset();  // the first slice
            with_identity(&c.out);
            return;
          }
          c.stream.reset();
          reply = {{"ok", false}, {"error", err}};
        } else if (tk != takeovers_.end()) {
          Takeover take;
          if (peer_hung_up(c.fd.get())) {
            // A request queued behind a long one (an upgrade) whose client gave up waiting:
            // a takeover changes the whole switch, so it runs only for someone still there.
            ++counters_.abandoned;
            reply = {{"ok", false}, {"error", "the client hung up before its request was served"}};
          } else if (tk->second(*args, &result, &take, &err)) {
            reply = {{"ok", true}, {"result", result}};
            c.take = std::move(take);
          } else {
            reply = {{"ok", false}, {"error", err}};
          }
        } else if (it->second(*args, &result, &err)) {
          reply = {{"ok", true}, {"result", result}};
        } else {
          reply = {{"ok", false}, {"error", err}};
        }
      } catch (const std::exception& e) {  // a handler reading args of the wrong type
        c.stream.reset();
        reply = {{"ok", false}, {"error", fmt::format("invalid arguments: {}", e.what())}};
      }
    }
  }
  // Bytes that are not UTF-8 (a name given on the command line, a quote of untrusted input)
  // are written as U+FFFD: the JSON writer would otherwise throw, and nothing here may.
  c.out = reply.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  with_identity(&c.out);
}

namespace {

/// One request and its reply line (`limit` bytes, `budget_ms` in all): the connection in
/// `*conn`, the bytes after the line's end in `*rest`, the reply's result (and the whole
/// reply, when `full`). False with `*err`.
bool ask(const std::string& path, const std::string& cmd, const Json& args, size_t limit,
         int budget_ms, UniqueFd* conn, std::string* rest, Json* result, Json* full,
         std::string* err) {
  sockaddr_un a;
  if (!make_unix_addr(path, &a, err)) return false;
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!connect_within(s.get(), a, 5)) {
    *err = fmt::format("cannot reach the switch at {}: {}", path, strerror(errno));
    return false;
  }
  // `upgrade` answers once its successor forwards: up to 40 s (app/switch_upgrade.cpp).
  if (cmd == "upgrade") set_timeout(s.get(), 60);
  const Json req = {{"cmd", cmd}, {"args", args}};
  std::string line;
  if (!write_all(s.get(), req.dump() + "\n") || !read_line(s.get(), &line, limit, budget_ms)) {
    *err = "no reply from the switch";
    return false;
  }
  const size_t nl = line.find('\n');
  if (nl != std::string::npos) {
    *rest = line.substr(nl + 1);
    line.resize(nl);
  }
  Json reply = Json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    *err = "malformed reply from the switch";
    return false;
  }
  if (!reply_ok(reply, err)) return false;
  *result = reply["result"];
  if (full) *full = std::move(reply);
  *conn = std::move(s);
  return true;
}

}  // namespace

bool request(const std::string& path, const std::string& cmd, const Json& args, Json* result,
             std::string* err, Json* full, int budget_ms) {
  UniqueFd conn;
  std::string rest;
  return ask(path, cmd, args, 64u << 20, budget_ms, &conn, &rest, result, full, err);
}

bool request_session(const std::string& path, const std::string& cmd, const Json& args,
                     Json* result, UniqueFd* conn, std::string* rest, std::string* err,
                     Json* full) {
  if (!ask(path, cmd, args, kMaxLine, kClientBudgetMs, conn, rest, result, full, err))
    return false;
  set_timeout(conn->get(), 0);  // the session's own pace from here
  return true;
}

}  // namespace vl::control
