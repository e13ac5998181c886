#pragma once
// The Prometheus endpoint (`virtlink switch --metrics [ADDR:]PORT`): GET /metrics over HTTP,
// served by libmicrohttpd's threads, never by a PMD thread and never blocking the control
// thread. Limits and freshness: docs/architecture.md, "Metrics".
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "util/fd.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace vl::control {

/// A scrape asks the control thread for a fresh body through an eventfd (wake_fd()) and
/// waits for it at most kFreshMs; past that it gets the last body made (a control thread
/// busy elsewhere delays no scrape by more than that, and a scrape never waits on a PMD
/// thread). Bounded: kMaxConnections at once (kPerIp from one address), kTimeoutS of
/// silence closes a connection, kMemoryLimit bytes of request headers per connection
/// (larger: 431/413 from libmicrohttpd), GET and HEAD of /metrics only (404 for another
/// path, 405 for another method).
class MetricsServer {
 public:
  static constexpr unsigned kMaxConnections = 16;
  static constexpr unsigned kPerIp = 8;
  static constexpr unsigned kTimeoutS = 5;
  static constexpr size_t kMemoryLimit = 32 << 10;
  static constexpr int kFreshMs = 1000;

  struct Counters {
    std::atomic<uint64_t> scrapes{0};     ///< bodies served
    std::atomic<uint64_t> stale{0};       ///< of them, the last body (no fresh one in kFreshMs)
    std::atomic<uint64_t> not_found{0};   ///< another path (404)
    std::atomic<uint64_t> bad_method{0};  ///< another method (405)
  };

  MetricsServer();
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// Parses "[ADDR:]PORT" (an IPv4 or [IPv6] address; a port alone means 127.0.0.1) into
  /// `addr` and `port`. False with `*err` for anything else.
  static bool parse_listen(const std::string& spec, std::string* addr, uint16_t* port, std::string* err);
  /// Listens on `spec` ("[ADDR:]PORT", parse_listen) and starts serving. False with `*err`.
  /// `adopt_fd`: a predecessor's listening socket on `spec` (`ctl upgrade`), taken over.
  bool start(const std::string& spec, std::string* err, int adopt_fd = -1);
  /// The listening socket, or -1 (not running).
  int listen_fd() const;
  /// Stops serving: open connections are closed; no scrape is answered after.
  void stop();
  bool running() const { return daemon_ != nullptr; }
  /// The port it listens on (the kernel's choice for port 0).
  uint16_t port() const { return port_; }
  /// Readable when a scrape waits for a body: the control loop then calls serve().
  int wake_fd() const { return wake_.get(); }
  /// On the control thread: reads the wake-up and, if a scrape waits, publishes render()'s
  /// body for it (and the next scrapes).
  void serve(const std::function<std::string()>& render);
  const Counters& counters() const { return counters_; }

 private:
  friend struct MetricsRequest;  // metrics_server.cpp: libmicrohttpd's callback
  /// The body a scrape gets: a fresh one if the control thread makes it within kFreshMs
  /// (null when none was ever made).
  std::shared_ptr<const std::string> fresh_body();

  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  UniqueFd wake_;
  std::mutex mu_;
  std::condition_variable made_;
  std::shared_ptr<const std::string> body_;  // the last body made (under mu_)
  uint64_t generation_ = 0;                  // bodies made (under mu_)
  uint64_t wanted_ = 0;                      // the generation a waiting scrape wants (under mu_)
  Counters counters_;
};

}  // namespace vl::control
