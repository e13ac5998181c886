#pragma once
// A vhost-user socket endpoint (Channel): reads and writes whole messages with the fds they
// carry (SCM_RIGHTS), never reading past one message or trusting its size field. Used by
// the back-end (non-blocking, on the control thread) and the front-end (blocking with a
// timeout). docs/architecture.md, "The vhost-user back-end".
#include <cstdint>
#include <string>

#include "util/fd.h"
#include "vhost/protocol.h"

namespace vl::vhost {

/// One received message: header, payload and the fds that came with it (owned).
struct Message {
  MsgHeader hdr{};
  alignas(8) uint8_t payload[kMaxPayload];
  UniqueFd fds[kMaxFds];
  uint32_t nfds = 0;

  /// Copies the payload into `out` when its size is exactly sizeof(T).
  template <typename T>
  bool get(T* out) const {
    if (hdr.size != sizeof(T)) return false;
    __builtin_memcpy(out, payload, sizeof(T));
    return true;
  }
  void close_fds() {
    for (auto& f : fds) f.reset();
    nfds = 0;
  }
};

enum class ReadStatus : uint8_t {
  kMessage,  ///< a whole message is in message()
  kAgain,    ///< need more bytes (non-blocking) or timed out (blocking)
  kClosed,   ///< the peer closed the socket cleanly between messages
  kError,    ///< malformed framing (size over kMaxPayload, too many fds), or a socket error
};

class Channel {
 public:
  Channel() = default;
  explicit Channel(UniqueFd sock) : sock_(std::move(sock)) {}
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  int fd() const { return sock_.get(); }
  bool open() const { return sock_.valid(); }
  void close() {
    sock_.reset();
    msg_.close_fds();
    have_ = 0;
    failed_ = false;
  }
  /// Starts over on a new socket.
  void reset(UniqueFd sock) {
    close();
    sock_ = std::move(sock);
  }

  /// Reads without blocking until one message is complete or the socket has no more
  /// bytes. After kMessage, message() holds it until the next read(). After kError every
  /// further read() returns kError until close() or reset().
  ReadStatus read(std::string* err);
  /// Waits up to `timeout_ms` for one whole message.
  ReadStatus read_wait(int timeout_ms, std::string* err);
  Message& message() { return msg_; }
  /// Lets read() accept a socket among the fds (refused by default: see channel.cpp). Only
  /// a front-end turns it on, to receive the direct-link channel from its back-end
  /// (vhost/link_protocol.h); a back-end never does.
  void accept_sockets(bool on) { accept_sockets_ = on; }
  /// Milliseconds send() waits for socket space (0: never waits).
  void set_send_timeout(int ms) { send_timeout_ms_ = ms; }

  /// Sends one message with up to kMaxFds fds. Waits up to the send timeout (1 s unless
  /// set) for socket space; false when there is none by then.
  bool send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
            const int* fds = nullptr, uint32_t nfds = 0);

 private:
  UniqueFd sock_;
  Message msg_;
  uint32_t have_ = 0;  ///< bytes of the current message received (header + payload)
  bool failed_ = false;  ///< read() returned kError: the stream is out of step until close()
  bool accept_sockets_ = false;
  int send_timeout_ms_ = 1000;
};

}  // namespace vl::vhost
