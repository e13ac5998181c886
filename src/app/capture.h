#pragma once
// Packet capture sessions (`ctl capture`): the capture thread that takes tapped frames
// from the PMD threads' capture rings (dp/observe.h) and streams them to each session's
// ctl client over its control connection. Design: docs/architecture.md "Capture and
// mirroring"; the stream's records: CaptureRecord below.
#include <pcap/pcap.h>  // (bpf_insn; pcap/bpf.h alone lacks its types)

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dp/forwarder.h"
#include "util/fd.h"

namespace vl::app {

/// One record of a capture stream, after the reply line, in host byte order (the client
/// runs on the same host): a frame (`kFrame`, then `caplen` bytes) or the end (`kEnd`, then
/// `caplen` bytes of a JSON object: captured, filtered, missed_ring, missed_client,
/// gso_frames, reason).
struct CaptureRecord {
  static constexpr uint32_t kFrame = 1;
  static constexpr uint32_t kEnd = 2;
  uint32_t type;
  uint32_t caplen;  ///< bytes that follow
  uint32_t len;     ///< the frame's length (bytes)
  uint8_t dir;      ///< dp::TapDir
  uint8_t gso;      ///< the frame's virtio-net gso_type (0: none; a TSO frame as sent)
  uint16_t pad;
  uint64_t ts_ns;   ///< CLOCK_REALTIME, ns
};
static_assert(sizeof(CaptureRecord) == 24);

/// What `ctl capture` asks for (checked by parse_capture()).
struct CaptureRequest {
  uint32_t port = 0;
  std::string port_name;
  uint8_t dirs = 0;            ///< bit dp::TapDir
  uint32_t snaplen = 262144;   ///< bytes kept of a frame (tcpdump's default)
  uint64_t count = 0;          ///< frames, then the capture ends (0: no limit)
  uint64_t duration_ns = 0;    ///< then the capture ends (0: no limit)
  std::vector<bpf_insn> filter;  ///< compiled by the client; validated (bpf_validate)
};

/// Parses a capture request's argv after PORT and DIR: "--count N", "--snaplen B",
/// "--duration S", "--bpf CODE:JT:JF:K,..." (the filter as the client compiled it). False
/// with `*err` on a bad word or value.
bool parse_capture_options(const std::vector<std::string>& words, CaptureRequest* r,
                           std::string* err);

class CaptureService {
 public:
  /// Sessions at once.
  static constexpr size_t kMaxSessions = 4;
  /// Bytes a session may hold for a client not yet reading (then frames are missed_client).
  static constexpr size_t kSessionBytes = 4u << 20;

  explicit CaptureService(dp::SwitchTables* tables, uint32_t pmd_threads);
  ~CaptureService();  ///< ends every session ("switch stopping") and joins the thread
  CaptureService(const CaptureService&) = delete;

  /// Control thread: starts a session streaming to `conn` (its reply line already sent).
  void start(CaptureRequest req, UniqueFd conn);
  /// Control thread: whether another session may start now (else `*err`).
  bool can_start(std::string* err) const;
  /// Control thread: ends the sessions on slot `port` (the port is being deleted).
  void port_gone(uint32_t port);
  /// Sessions running and totals: {"sessions": N, "started": N, "frames": N}.
  nlohmann::json stats() const;

 private:
  struct Session;
  void run();
  void take_new();
  void drain_rings();
  void dispatch(const dp::HandoffRecord& r, const uint8_t* data);
  /// Writes what each client takes; ends a session whose time is up or whose client
  /// shut its side down, and closes those ended whose end record left (or that had 2 s).
  void service_sessions();
  void finish(Session& s, const char* reason);
  void update_taps();

  dp::SwitchTables* tables_;
  uint32_t threads_;
  UniqueFd wake_;   // eventfd: new sessions, stop
  UniqueFd epoll_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards pending_, gone_, running_
  std::vector<std::unique_ptr<Session>> pending_;
  uint64_t gone_ = 0;      // ports deleted (bits), for the thread to end their sessions
  size_t running_ = 0;     // sessions started and not yet closed
  std::vector<std::unique_ptr<Session>> sessions_;  // the capture thread's
  std::atomic<uint64_t> started_{0}, frames_{0};
  int64_t real_minus_mono_ns_ = 0;  // CLOCK_REALTIME - tsc_now_ns(), at the thread's start
};

}  // namespace vl::app
