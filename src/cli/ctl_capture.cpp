// `virtlink ctl capture`: the client side of a capture session. ctl opens the file (the
// switch never opens a path for a client) and writes the frames the switch streams over
// the control connection with libpcap (docs/architecture.md "Capture and mirroring").
#include <pcap/pcap.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "app/capture.h"
#include "cli/commands.h"
#include "control/control_server.h"

namespace vl::cli {

namespace {

using control::Json;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

/// SIGINT and SIGTERM end the capture (the switch is told, and sends its end record);
/// without SA_RESTART, so a blocked read returns.
void catch_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

/// The filter as the switch takes it ("CODE:JT:JF:K,..."); false with `*err`.
bool compile_filter(pcap_t* dead, const std::string& expr, std::string* out, std::string* err) {
  bpf_program prog{};
  if (pcap_compile(dead, &prog, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
    *err = fmt::format("bad filter '{}': {}", expr, pcap_geterr(dead));
    return false;
  }
  for (u_int i = 0; i < prog.bf_len; ++i) {
    const bpf_insn& x = prog.bf_insns[i];
    *out += fmt::format("{}{}:{}:{}:{}", i ? "," : "", x.code, x.jt, x.jf, x.k);
  }
  pcap_freecode(&prog);
  return true;
}

/// Member `k` of `o` (JSON from the switch) as a count, or 0 when `o` is not an object or the
/// member is absent or not a count; as a text, or `dflt`. ctl trusts the switch less than
/// fully: a member of another type is never an exception (uncaught, it aborted ctl).
uint64_t count_of(const Json& o, const char* k) {
  if (!o.is_object()) return 0;
  const auto it = o.find(k);
  return it != o.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}
std::string text_of(const Json& o, const char* k, const char* dflt = "?") {
  if (!o.is_object()) return dflt;
  const auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string(dflt);
}

/// Reads the session's records from `conn` (after `rest`) into the dump until the end
/// record; returns the exit status.
class Receiver {
 public:
  Receiver(int conn, pcap_dumper_t* d, std::string rest, uint32_t snaplen, std::string file)
      : conn_(conn), dump_(d), buf_(std::move(rest)), snaplen_(snaplen), file_(std::move(file)) {}
  /// The end record's summary (after run() returned 0).
  const Json& summary() const { return summary_; }

  int run() {
    char chunk[1 << 16];
    for (;;) {
      if (int st = 0; consume(&st)) return st;
      if (g_stop && !told_) {
        shutdown(conn_, SHUT_WR);  // the switch ends the session and sends its end record
        told_ = true;
      }
      const ssize_t n = recv(conn_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fmt::print(stderr, "virtlink ctl capture: the switch closed the capture without its "
                           "end record ({} frames written)\n", frames_);
        return 1;
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  /// Takes the complete records in buf_; true when done (exit status in `*st`).
  bool consume(int* st) {
    size_t at = 0;
    while (buf_.size() - at >= sizeof(app::CaptureRecord)) {
      app::CaptureRecord r;
      std::memcpy(&r, buf_.data() + at, sizeof r);
      const bool frame = r.type == app::CaptureRecord::kFrame;
      if ((!frame && r.type != app::CaptureRecord::kEnd) ||
          (frame && (r.caplen > snaplen_ || r.caplen > r.len)) || r.caplen > (1u << 20)) {
        fmt::print(stderr, "virtlink ctl capture: malformed stream from the switch\n");
        *st = 1;
        return true;
      }
      if (buf_.size() - at - sizeof r < r.caplen) break;
      const auto* data = reinterpret_cast<const u_char*>(buf_.data() + at + sizeof r);
      at += sizeof r + r.caplen;
      if (!frame) {
        *st = finish(std::string(reinterpret_cast<const char*>(data), r.caplen));
        return true;
      }
      pcap_pkthdr h{};
      h.ts.tv_sec = static_cast<time_t>(r.ts_ns / 1000000000);
      h.ts.tv_usec = static_cast<suseconds_t>(r.ts_ns % 1000000000);  // (nanosecond file)
      h.caplen = r.caplen;
      h.len = r.len;
      pcap_dump(reinterpret_cast<u_char*>(dump_), &h, data);
      ++frames_;
    }
    buf_.erase(0, at);
    if (at && !flushed()) {
      fmt::print(stderr, "virtlink ctl capture: writing {}: {}\n", file_, strerror(errno));
      shutdown(conn_, SHUT_RDWR);  // the switch ends the session
      *st = 1;
      return true;
    }
    return false;
  }

  /// Every frame so far is in the file. (A write that failed inside pcap_dump leaves only
  /// the stream's error flag: fflush then has nothing to fail on.)
  bool flushed() const { return pcap_dump_flush(dump_) == 0 && !ferror(pcap_dump_file(dump_)); }

  int finish(const std::string& text) {
    if (!flushed()) {
      fmt::print(stderr, "virtlink ctl capture: writing {}: {}\n", file_, strerror(errno));
      return 1;
    }
    const Json e = Json::parse(text, nullptr, false);
    if (!e.is_object()) {
      fmt::print(stderr, "virtlink ctl capture: malformed end record\n");
      return 1;
    }
    summary_ = e;
    const uint64_t gso = count_of(e, "gso_frames");
    fmt::print(stderr,
               "virtlink ctl capture: {} frames captured ({}); {} missed (capture ring full), "
               "{} missed (ctl too slow), {} filtered out{}\n",
               count_of(e, "captured"), text_of(e, "reason"), count_of(e, "missed_ring"),
               count_of(e, "missed_client"), count_of(e, "filtered"),
               gso ? fmt::format("; {} are TSO/GSO frames as their sender gave them (larger "
                                 "than the MTU, checksums partial)",
                                 gso)
                   : std::string());
    return 0;
  }

  int conn_;
  pcap_dumper_t* dump_;
  std::string buf_;
  uint32_t snaplen_;
  std::string file_;
  uint64_t frames_ = 0;
  bool told_ = false;
  Json summary_;
};

/// What ctl prints beside the file once the capture ended, as every ctl command does: with
/// --json the reply's result and the summary, else which switch answered; on stdout unless
/// the frames went there.
void print_outcome(const CtlArgs& a, const Json& result, const Json& summary, const Json& reply) {
  FILE* out = a.file == "-" ? stderr : stdout;
  if (a.json) {
    fmt::print(out, "{}\n", Json{{"capture", result}, {"summary", summary}}.dump(2));
    return;
  }
  if (const auto who = reply.find("switch"); who != reply.end() && who->is_object())
    fmt::print(out, "(switch {} at {})\n", count_of(*who, "pid"), text_of(*who, "control"));
}

/// The capture's output: standard output, or a file opened for writing without truncating
/// it until the switch has accepted the capture.
class OutputFile {
 public:
  ~OutputFile() {
    if (fd_ >= 0) close(fd_);
  }
  bool open(const std::string& path, std::string* err) {
    path_ = path;
    if (path == "-") return true;
    struct stat st;
    made_ = stat(path.c_str(), &st) != 0;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) *err = strerror(errno);
    return fd_ >= 0;
  }
  /// The switch refused: a file this made goes again.
  void abandon() {
    if (fd_ >= 0 && made_) unlink(path_.c_str());
  }
  /// The dump, the file emptied first (its header written and flushed); null with `*err`.
  pcap_dumper_t* dumper(pcap_t* dead, std::string* err) {
    FILE* f = stdout;
    if (path_ != "-") {
      f = ftruncate(fd_, 0) == 0 ? fdopen(fd_, "w") : nullptr;
      if (!f) {
        *err = strerror(errno);
        return nullptr;
      }
      fd_ = -1;  // the FILE's now
    }
    pcap_dumper_t* d = pcap_dump_fopen(dead, f);
    if (!d) *err = pcap_geterr(dead);
    else if (pcap_dump_flush(d) != 0 || ferror(f)) {
      *err = strerror(errno);
      pcap_dump_close(d);
      return nullptr;
    }
    return d;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool made_ = false;
};

}  // namespace

int run_ctl_capture(const CtlArgs& a, const std::string& path) {
  if (a.file.empty()) {
    fmt::print(stderr, "virtlink ctl capture: --file F (or --file - for standard output) is needed\n");
    return 2;
  }
  pcap_t* dead = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, static_cast<int>(a.snaplen),
                                                      PCAP_TSTAMP_PRECISION_NANO);
  std::string bpf, err;
  if (!a.filter.empty() && !compile_filter(dead, a.filter, &bpf, &err)) {
    fmt::print(stderr, "virtlink ctl capture: {}\n", err);
    pcap_close(dead);
    return 2;
  }
  // The file first, opened without truncating it: one that cannot be written fails before
  // the switch is asked, and one the switch then refuses is left as it was (or removed, if
  // this made it).
  OutputFile out;
  if (!out.open(a.file, &err)) {
    fmt::print(stderr, "virtlink ctl capture: cannot write {}: {}\n", a.file, err);
    pcap_close(dead);
    return 1;
  }
  std::vector<std::string> argv = a.args;
  if (a.count) argv.insert(argv.end(), {"--count", std::to_string(a.count)});
  argv.insert(argv.end(), {"--snaplen", std::to_string(a.snaplen)});
  if (a.duration_s) argv.insert(argv.end(), {"--duration", std::to_string(a.duration_s)});
  if (!bpf.empty()) argv.insert(argv.end(), {"--bpf", bpf});
  Json result, reply;
  UniqueFd conn;
  std::string rest;
  catch_signals();
  int st = 1;
  if (!control::request_session(path, "capture", Json{{"argv", argv}}, &result, &conn, &rest, &err,
                                &reply)) {
    fmt::print(stderr, "virtlink ctl capture: {}\n", err);
    st = err.rfind("usage:", 0) == 0 ? 2 : 1;
    out.abandon();
  } else if (pcap_dumper_t* d = out.dumper(dead, &err); !d) {
    fmt::print(stderr, "virtlink ctl capture: cannot write {}: {}\n", a.file, err);
  } else {
    fmt::print(stderr, "virtlink ctl capture: port {} ({}) into {}; Ctrl-C stops\n",
               text_of(result, "port"), text_of(result, "direction"),
               a.file == "-" ? std::string("standard output") : a.file);
    Receiver rx(conn.get(), d, std::move(rest), a.snaplen, a.file);
    st = rx.run();
    pcap_dump_close(d);  // (stdout's frames before print_outcome's text on stderr)
    if (st == 0) print_outcome(a, result, rx.summary(), reply);
  }
  pcap_close(dead);
  return st;
}

}  // namespace vl::cli
