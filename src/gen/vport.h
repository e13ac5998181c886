#pragma once
// A virtio-net port driven from userspace: the front-end side of one vhost-user connection,
// with its own driver memory (one memfd), receive and transmit queues and buffer pools.
// This is what `virtlink gen` and `virtlink vnf` send and receive through.
//
// Buffers are one descriptor each: [virtio-net header][frame], `buf_size` bytes. Transmit
// buffer i belongs to descriptor cookie i and is prefilled once by the caller; receive
// buffers are posted whole and re-posted after use.
#include <cstdint>
#include <string>

#include "vhost/frontend.h"
#include "virtio/driver_memory.h"
#include "virtio/driver_queue.h"

namespace vl::gen {

struct VPortConfig {
  std::string name;
  std::string path;
  bool server = false;        ///< listen on path (the back-end is a vhost-user client)
  uint32_t queue_size = 256;  ///< entries per virtqueue
  uint32_t buf_size = 2048;   ///< bytes per buffer, header included
  uint64_t mac = 0;           ///< 48-bit; 0: the user's default (Generator::default_mac)
  int timeout_ms = 10000;
};

class VPort {
 public:
  bool open(const VPortConfig& c, std::string* err);
  void close();
  const VPortConfig& config() const { return cfg_; }
  uint32_t hdr_len() const { return hdr_len_; }
  uint64_t features() const { return fe_.features(); }
  int rx_call_fd() const { return fe_.call_fd(0); }
  bool broken() const { return rxq_.broken() || txq_.broken(); }

  // ---- Transmit ----
  /// Our pointer to transmit buffer `i`'s frame area (after the header), i < queue_size.
  uint8_t* tx_frame(uint32_t i) const { return tx_pool_.data(i) + hdr_len_; }
  /// Returns transmitted buffers; free slots go on an internal stack.
  uint32_t reclaim();
  /// Takes a free transmit buffer index, or false when all are in flight.
  bool tx_get(uint32_t* i) { return tx_pool_.get(i); }
  /// Posts buffer `i` with a frame of `len` bytes (not visible until tx_flush()).
  void tx_put(uint32_t i, uint32_t len) {
    txq_.add(tx_pool_.gpa(i), hdr_len_ + len, false, i);
  }
  void tx_flush() { txq_.publish(); }
  uint32_t tx_free() const { return tx_pool_.available(); }

  // ---- Receive ----
  /// Used receive entries ready now (reads the used index once; rx_next() takes them
  /// without reading it again until they are consumed).
  uint32_t rx_ready() { return rxq_.used_ready(); }
  /// The next received frame (after the header) and its buffer index; release it after use.
  /// Frames spread over several mergeable buffers are counted in `fragmented()` and dropped.
  bool rx_next(const uint8_t** frame, uint32_t* len, uint32_t* idx);
  void rx_release(uint32_t idx) { rxq_.add(rx_pool_.gpa(idx), rx_pool_.buf_size(), true, idx); }
  void rx_flush() { rxq_.publish(); }
  uint64_t fragmented() const { return fragmented_; }

  virtio::DriverQueue& rxq() { return rxq_; }
  virtio::DriverQueue& txq() { return txq_; }

 private:
  VPortConfig cfg_;
  virtio::DriverMemory mem_;
  virtio::DriverQueue rxq_, txq_;
  virtio::BufferPool rx_pool_, tx_pool_;
  vhost::Frontend fe_;
  uint32_t hdr_len_ = 12;
  uint64_t fragmented_ = 0;
};

}  // namespace vl::gen
