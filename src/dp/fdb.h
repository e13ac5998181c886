#pragma once
// The L2 bridge's MAC table (forwarding database).
//
// Layout: 2^k buckets of 8 slots; a bucket is one 64-byte cache line of 64-bit words, each
// word (MAC << 16 | port + 1), 0 for an empty slot; last-seen times (seconds) sit in a
// parallel array. A lookup hashes the MAC to one bucket and compares 8 words: O(1), one
// cache line whatever the number of MACs. Learning writes a word only when the port
// changes and a time only when the second changes, so steady traffic does not write.
// Hostile ports (tests/hostile, test_16): a port must not be able to evict another port's
// entries, or the victim's unicast is flooded to every port, the attacker's included.
//  - The bucket hash is keyed with a per-table random key (getrandom), so a front-end cannot
//    compute MACs that collide with a victim's bucket.
//  - A full bucket evicts, in this order: when the learning port already holds half the
//    bucket, its own oldest entry; else the oldest entry that is stale (not seen for
//    kFreshS seconds) or belongs to a port holding more than half the bucket; else the
//    learning port's own oldest entry; else nothing (the MAC is not learned; its frames
//    are flooded as before). A port's fresh entries are thus safe from any other single
//    port, and one port cannot fill a bucket against a later victim.
//  - A port holds at most `max_per_port` entries in the whole table; at the limit it only
//    replaces its own entries (like a switch's port-security MAC limit). Counts are kept
//    per port with relaxed atomics, approximate when two threads race on one slot.
//
// Concurrency: PMD threads learn and look up with relaxed atomics on whole words (a word is
// never torn); the control thread ages entries out and reads the table for `ctl fdb`.
// Two threads learning the same new MAC at once may store it twice; lookups take the first
// and aging removes the other.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace vl::dp {

/// A 48-bit MAC in the low bits of a u64, first octet most significant.
using Mac = uint64_t;

inline Mac mac_from_bytes(const uint8_t* b) {
  // The six bytes in the top of a little-endian word, byte-swapped: b[0] ends in bits
  // 40-47, b[5] in bits 0-7 (two loads and a bswap instead of six shifts).
  uint64_t v = 0;
  std::memcpy(reinterpret_cast<uint8_t*>(&v) + 2, b, 6);
  return __builtin_bswap64(v);
}
inline bool mac_is_multicast(Mac m) { return (m >> 40) & 1; }  ///< includes broadcast
/// A source MAC the bridge learns: a station's (not multicast, not all zeros; IEEE 802.1Q
/// §8.7 learns individual addresses only). `m` may carry a VLAN above bit 47.
inline bool mac_is_learnable(Mac m) { return !mac_is_multicast(m) && (m & 0xffffffffffffull) != 0; }

class Fdb {
 public:
  static constexpr uint32_t kNoPort = 0xffff;
  static constexpr uint32_t kSlots = 8;

  static constexpr uint32_t kMaxPortIds = 0x10000;
  /// Entries seen within this many seconds are protected from other ports' learning.
  static constexpr uint32_t kFreshS = 10;
  static constexpr uint32_t kDefaultMaxPerPort = 8192;

  /// A table of `buckets` buckets (rounded up to a power of two), 8 entries each, whose
  /// hash key is random (`key` 0) or `key` (tests). A port holds at most `max_per_port`
  /// entries.
  explicit Fdb(uint32_t buckets = 1u << 16, uint32_t max_per_port = kDefaultMaxPerPort,
               uint64_t key = 0);

  /// The port that `mac` was learned on, or kNoPort. A key is a MAC in its low 48 bits and
  /// its VLAN above them (dp/vlan.h vlan_key; VLAN 0 without VLANs). An entry's word holds
  /// the MAC and the port, its VLAN sits next to it (Times::v): a reader may, for an
  /// instant while another thread replaces the entry, pair the new word with the old VLAN;
  /// the forwarder sends a frame only to ports that carry its VLAN, so such a frame never
  /// leaves its VLAN (docs/architecture.md "VLANs").
  uint32_t lookup(Mac key) const {
    uint64_t w = 0;
    return match(key, hash(key), &w) >= 0 ? static_cast<uint32_t>((w & 0xffff) - 1) : kNoPort;
  }

  /// Keys carry VLANs (some port has VLAN settings). Without, every entry is in VLAN 0 and
  /// a lookup reads no VLAN (one cache line fewer). Set before the PMD threads start.
  void set_vlans(bool on) { vlans_ = on; }
  /// Records that `mac` (unicast) was seen on `port` (< kMaxPortIds) at `now_s`
  /// (seconds). May decline to learn it (see the eviction rule above): returns false then.
  bool learn(Mac mac, uint32_t port, uint32_t now_s);
  /// Entries `port` holds (approximate under concurrent learning).
  uint32_t port_entries(uint32_t port) const {
    return port < kMaxPortIds ? counts_[port].load(std::memory_order_relaxed) : 0;
  }
  /// MACs not learned because the bucket or the port's quota was full.
  uint64_t declined() const { return declined_.load(std::memory_order_relaxed); }
  /// The bucket `mac` hashes to (tests).
  uint32_t bucket_of(Mac mac) const { return hash(mac); }

  /// Removes entries not seen for `max_age_s` seconds. Returns how many were removed.
  uint32_t age(uint32_t now_s, uint32_t max_age_s);
  /// Removes every entry of `port` (it went down).
  void flush_port(uint32_t port);
  /// Sets the most entries `port` may hold (0: the table's max_per_port again). Any thread;
  /// learning reads it when a port learns a new MAC or moves one.
  void set_port_limit(uint32_t port, uint32_t limit) {
    if (port < kMaxLimitPorts)
      limits_[port].store(limit ? limit : max_per_port_, std::memory_order_relaxed);
  }
  uint32_t port_limit(uint32_t port) const {
    return port < kMaxLimitPorts ? limits_[port].load(std::memory_order_relaxed) : max_per_port_;
  }
  /// Ports with a limit of their own (the switch's port ids).
  static constexpr uint32_t kMaxLimitPorts = 64;

  struct Entry {
    Mac mac;  ///< its key: VLAN << 48 | MAC
    uint32_t port;
    uint32_t age_s;
  };
  /// The entry lookup() finds for `key`, with its age at `now_s`, or nullopt (`ctl trace`:
  /// the control thread, as for entries()).
  std::optional<Entry> find(Mac key, uint32_t now_s) const {
    const uint32_t h = hash(key);
    uint64_t w = 0;
    const int i = match(key, h, &w);
    if (i < 0) return std::nullopt;
    return Entry{key, static_cast<uint32_t>((w & 0xffff) - 1),
                 now_s - times_[h].t[i].load(std::memory_order_relaxed)};
  }
  /// A snapshot of the table for display: the entries of `port` (every port when port is
  /// ~0u), at most `limit` of them, in bucket order.
  std::vector<Entry> entries(uint32_t now_s, uint32_t port = ~0u, size_t limit = SIZE_MAX) const;
  /// The same over buckets [first, first + n) only, appended to `*out`, for a listing made
  /// in slices (`ctl fdb`, app/json_views.h): returns the bucket after the last one read
  /// (buckets() when the table is done).
  uint32_t entries_in(uint32_t first, uint32_t n, uint32_t now_s, uint32_t port,
                      std::vector<Entry>* out) const;
  uint32_t buckets() const { return mask_ + 1; }
  uint32_t capacity() const { return (mask_ + 1) * kSlots; }

 private:
  struct alignas(64) Bucket {
    std::atomic<uint64_t> w[kSlots];
  };
  struct Times {
    std::atomic<uint32_t> t[kSlots];
    std::atomic<uint16_t> v[kSlots];  ///< each entry's VLAN
  };
  static constexpr uint64_t kMacMask = (uint64_t{1} << 48) - 1;
  /// The slot of bucket h (hash(key)) that lookup() takes for `key`, its word in `*w`; -1
  /// when none holds it.
  int match(Mac key, uint32_t h, uint64_t* w) const {
    const Bucket& b = buckets_[h];
    const uint64_t mac = key & kMacMask;
    const uint16_t vlan = static_cast<uint16_t>(key >> 48);
    for (uint32_t i = 0; i < kSlots; ++i) {
      const uint64_t x = b.w[i].load(std::memory_order_acquire);
      if ((x >> 16) == mac && x &&
          (!vlans_ || times_[h].v[i].load(std::memory_order_relaxed) == vlan)) {
        *w = x;
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  /// A slot being written (learn): no port, and a multicast MAC, which no lookup asks for.
  static constexpr uint64_t kClaimed = uint64_t{1} << (40 + 16);
  /// Entry i of bucket h has key `key` (MAC and VLAN).
  bool holds(uint32_t h, uint32_t i, uint64_t w, Mac key) const {
    return w && (w >> 16) == (key & kMacMask) &&
           times_[h].v[i].load(std::memory_order_relaxed) == (key >> 48);
  }
  /// Keyed multiply-xorshift: with a secret key_ and mul_ a front-end cannot aim MACs at
  /// a bucket (it sees nothing of the table but flooding, which the eviction rule bounds).
  uint32_t hash(Mac mac) const {
    uint64_t x = (mac ^ key_) * mul_;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return static_cast<uint32_t>(x >> 32) & mask_;
  }
  /// Writes entry `want` (VLAN `vlan`, seen at `now_s`) into slot i of bucket h, which held
  /// `old`; false if another thread changed the slot first.
  bool replace(uint32_t h, uint32_t i, uint64_t old, uint64_t want, uint16_t vlan, uint32_t now_s);
  void count(uint64_t word, int delta) {
    if (word & 0xffff) counts_[(word & 0xffff) - 1].fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed);
  }
  uint64_t key_ = 0;
  uint64_t mul_ = 0;
  bool vlans_ = true;  // (tests and a table used without the switch: always checked)
  uint32_t max_per_port_;
  std::atomic<uint32_t> limits_[kMaxLimitPorts];
  std::unique_ptr<std::atomic<uint32_t>[]> counts_;
  std::atomic<uint64_t> declined_{0};
  std::unique_ptr<Bucket[]> buckets_;
  std::unique_ptr<Times[]> times_;
  uint32_t mask_;
};

}  // namespace vl::dp
