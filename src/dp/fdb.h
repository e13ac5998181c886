#pragma once
// The L2 bridge's MAC table (forwarding database).
//
// Layout: 2^k buckets of 8 slots; a bucket is one 64-byte cache line of 64-bit words, each
// word (MAC << 16 | port + 1), 0 for an empty slot; last-seen times (seconds) sit in a
// parallel array. A lookup hashes the MAC to one bucket and compares 8 words: O(1), one
// cache line whatever the number of MACs. Learning writes a word only when the port
// changes and a time only when the second changes, so steady traffic does not write.
// A full bucket evicts its oldest entry.
//
// Concurrency: PMD threads learn and look up with relaxed atomics on whole words (a word is
// never torn); the control thread ages entries out and reads the table for `ctl fdb`.
// Two threads learning the same new MAC at once may store it twice; lookups take the first
// and aging removes the other.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace vl::dp {

/// A 48-bit MAC in the low bits of a u64, first octet most significant.
using Mac = uint64_t;

inline Mac mac_from_bytes(const uint8_t* b) {
  return (uint64_t{b[0]} << 40) | (uint64_t{b[1]} << 32) | (uint64_t{b[2]} << 24) |
         (uint64_t{b[3]} << 16) | (uint64_t{b[4]} << 8) | uint64_t{b[5]};
}
inline bool mac_is_multicast(Mac m) { return (m >> 40) & 1; }  ///< includes broadcast

class Fdb {
 public:
  static constexpr uint32_t kNoPort = 0xffff;
  static constexpr uint32_t kSlots = 8;

  /// A table of `buckets` buckets (rounded up to a power of two), 8 entries each.
  explicit Fdb(uint32_t buckets = 1u << 16);

  /// The port that `mac` was learned on, or kNoPort.
  uint32_t lookup(Mac mac) const {
    const Bucket& b = buckets_[hash(mac)];
    for (uint32_t i = 0; i < kSlots; ++i) {
      const uint64_t w = b.w[i].load(std::memory_order_relaxed);
      if ((w >> 16) == mac && w) return static_cast<uint32_t>((w & 0xffff) - 1);
    }
    return kNoPort;
  }

  /// Records that `mac` (unicast) was seen on `port` at `now_s` (seconds).
  void learn(Mac mac, uint32_t port, uint32_t now_s);

  /// Removes entries not seen for `max_age_s` seconds. Returns how many were removed.
  uint32_t age(uint32_t now_s, uint32_t max_age_s);
  /// Removes every entry of `port` (it went down).
  void flush_port(uint32_t port);

  struct Entry {
    Mac mac;
    uint32_t port;
    uint32_t age_s;
  };
  /// A snapshot of the table for display.
  std::vector<Entry> entries(uint32_t now_s) const;
  uint32_t capacity() const { return (mask_ + 1) * kSlots; }

 private:
  struct alignas(64) Bucket {
    std::atomic<uint64_t> w[kSlots];
  };
  struct Times {
    std::atomic<uint32_t> t[kSlots];
  };
  uint32_t hash(Mac mac) const {
    uint64_t x = mac * 0x9e3779b97f4a7c15ull;
    return static_cast<uint32_t>(x >> 40) & mask_;
  }
  std::unique_ptr<Bucket[]> buckets_;
  std::unique_ptr<Times[]> times_;
  uint32_t mask_;
};

}  // namespace vl::dp
