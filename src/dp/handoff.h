#pragma once
// The lock-free handoff ring between two PMD threads (HandoffRing): how a frame reaches a
// guest receive queue that another PMD thread writes. Design, record layout and cost:
// docs/architecture.md, "Writers and handoff".
#include <sys/eventfd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "virtio/split_device_queue.h"
#include "virtio/virtio_defs.h"

namespace vl::dp {

/// One handed-off frame's header in the ring (40 bytes), followed by `len` frame bytes.
struct HandoffRecord {
  static constexpr uint32_t kPad = 0xffffffff;  ///< `len` of a pad record (skip to the end)
  uint32_t len;        ///< frame bytes (at most virtio::kMaxFrameLen), or kPad
  uint32_t bytes;      ///< this record's size in the ring (64-byte multiple)
  uint32_t gen;        ///< the receiver's PortDp::gen when the frame was handed off
  uint8_t port;        ///< receiving port
  uint8_t queue;       ///< its guest receive queue (queue pair)
  uint8_t src;         ///< sending port (drops found at delivery are counted on it)
  uint8_t pad0;
  uint64_t t_ns;       ///< when the sender's burst was taken (queue age)
  virtio::NetHdr hdr;  ///< the frame's virtio-net header (already checked on arrival)
};
static_assert(sizeof(HandoffRecord) == 40);

/// The SPSC ring from one PMD thread (producer) to another (consumer): docs/architecture.md.
class HandoffRing {
 public:
  /// Ring size in bytes: 2 MiB (16384 frames of 64 bytes, 1310 of 1518, 31 of 64 KiB: about
  /// a whole burst of the largest TSO frames). Its pages are touched as records pass through,
  /// so a ring in use costs 2 MiB of memory: T * (T - 1) rings for T PMD threads.
  static constexpr uint64_t kBytes = 2 * 1024 * 1024;
  static constexpr uint64_t kAlign = 64;

  /// `consumer_sleeping`/`consumer_wake_fd`: the consumer thread's "asleep" flag and the
  /// eventfd that wakes it (notify()); null/-1 when nothing sleeps (tests).
  HandoffRing(const std::atomic<bool>* consumer_sleeping = nullptr, int consumer_wake_fd = -1)
      : buf_(static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBytes))),
        sleeping_(consumer_sleeping),
        wake_fd_(consumer_wake_fd) {
    if (!buf_) throw std::bad_alloc();  // set-up time (PmdSet), never on the datapath
  }
  HandoffRing(const HandoffRing&) = delete;

  // ---- producer side (one thread) ----
  /// Appends one frame gathered from `segs` (not yet visible: publish()). False when the
  /// ring has no room (the caller drops the frame: Drop::kHandoffFull).
  bool push(const virtio::Segment* segs, uint32_t nsegs, uint32_t len, const virtio::NetHdr& hdr,
            uint8_t port, uint8_t queue, uint8_t src, uint32_t gen, uint64_t t_ns) {
    const uint64_t need = round_up(sizeof(HandoffRecord) + uint64_t{len});
    if (need > kBytes / 2) [[unlikely]] return false;
    uint64_t pos = wpos_;
    uint64_t off = pos & (kBytes - 1);
    const uint64_t to_end = kBytes - off;
    const uint64_t pad = need > to_end ? to_end : 0;
    if (pos + pad + need - tail_cache_ > kBytes) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (pos + pad + need - tail_cache_ > kBytes) return false;
    }
    if (pad) {
      auto* p = reinterpret_cast<HandoffRecord*>(buf_.get() + off);
      p->len = HandoffRecord::kPad;
      p->bytes = static_cast<uint32_t>(pad);
      pos += pad;
      off = 0;
    }
    auto* r = reinterpret_cast<HandoffRecord*>(buf_.get() + off);
    r->len = len;
    r->bytes = static_cast<uint32_t>(need);
    r->gen = gen;
    r->port = port;
    r->queue = queue;
    r->src = src;
    r->t_ns = t_ns;
    r->hdr = hdr;
    uint8_t* d = reinterpret_cast<uint8_t*>(r + 1);
    uint32_t left = len;
    for (uint32_t i = 0; i < nsegs && left; ++i) {
      const uint32_t k = segs[i].len < left ? segs[i].len : left;
      std::memcpy(d, segs[i].ptr, k);
      d += k;
      left -= k;
    }
    wpos_ = pos + need;
    return true;
  }
  /// Makes the pushed records visible to the consumer and wakes it if it sleeps.
  void publish() {
    if (wpos_ == head_.load(std::memory_order_relaxed)) return;
    head_.store(wpos_, std::memory_order_release);
    if (sleeping_) {
      // Pairs with the consumer's seq_cst "asleep" store and its later check of head_:
      // either it sees our records, or we see it asleep and wake it.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (sleeping_->load(std::memory_order_relaxed) && wake_fd_ >= 0) eventfd_write(wake_fd_, 1);
    }
  }

  // ---- consumer side (one thread) ----
  /// True if records are waiting (one acquire load of the producer's position).
  bool has_records() const { return head_.load(std::memory_order_acquire) != rpos_; }
  /// Calls `fn(const HandoffRecord&, const uint8_t* frame)` for every published record not
  /// visited yet, oldest first. The records stay valid (the producer cannot reuse their
  /// room) until release(). Returns the number of frames.
  template <class Fn>
  uint32_t visit(Fn&& fn) {
    const uint64_t head = head_.load(std::memory_order_acquire);
    uint32_t n = 0;
    uint64_t pos = rpos_;
    while (pos != head) {
      const auto* r = reinterpret_cast<const HandoffRecord*>(buf_.get() + (pos & (kBytes - 1)));
      if (r->len != HandoffRecord::kPad) {
        fn(*r, reinterpret_cast<const uint8_t*>(r + 1));
        ++n;
      }
      pos += r->bytes;
    }
    rpos_ = pos;
    return n;
  }
  /// Gives the room of every visited record back to the producer.
  void release() { tail_.store(rpos_, std::memory_order_release); }

 private:
  static constexpr uint64_t round_up(uint64_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buf_;  // kBytes, 64-byte aligned, uninitialized (pages touched on use)
  const std::atomic<bool>* sleeping_;
  int wake_fd_;
  alignas(64) std::atomic<uint64_t> head_{0};  // producer: published write position
  uint64_t wpos_ = 0;                          // producer: write position (unpublished)
  uint64_t tail_cache_ = 0;                    // producer: last tail seen
  alignas(64) std::atomic<uint64_t> tail_{0};  // consumer: freed position
  uint64_t rpos_ = 0;                          // consumer: read position
};

}  // namespace vl::dp
