#include "dp/fdb.h"

#include <sys/random.h>

#include <algorithm>
#include <bit>

#include "util/clock.h"

namespace vl::dp {

Fdb::Fdb(uint32_t buckets, uint32_t max_per_port, uint64_t key) : max_per_port_(max_per_port) {
  uint64_t k[2] = {key, key * 0x9e3779b97f4a7c15ull + 1};
  if (key == 0 && getrandom(k, sizeof k, 0) != static_cast<ssize_t>(sizeof k)) {
    // No entropy source: still not a constant an attacker can read in our sources.
    const uint64_t t = mono_ns();
    k[0] = t ^ reinterpret_cast<uintptr_t>(this);
    k[1] = t * 0x9e3779b97f4a7c15ull;
  }
  key_ = k[0];
  mul_ = k[1] | 1;  // odd: a bijection on 64 bits
  counts_ = std::make_unique<std::atomic<uint32_t>[]>(kMaxPortIds);  // zeroed (C++20 atomic())
  for (auto& l : limits_) l.store(max_per_port_, std::memory_order_relaxed);
  const uint32_t n = std::bit_ceil(buckets < 1 ? 1u : buckets);
  mask_ = n - 1;
  buckets_ = std::make_unique<Bucket[]>(n);
  times_ = std::make_unique<Times[]>(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      buckets_[i].w[s].store(0, std::memory_order_relaxed);
      times_[i].t[s].store(0, std::memory_order_relaxed);
      times_[i].v[s].store(0, std::memory_order_relaxed);
    }
  }
}

bool Fdb::learn(Mac key, uint32_t port, uint32_t now_s) {
  if (port >= kMaxPortIds - 1) return false;
  const uint32_t h = hash(key);
  Bucket& b = buckets_[h];
  Times& t = times_[h];
  const uint16_t vlan = static_cast<uint16_t>(key >> 48);
  const uint64_t want = ((key & kMacMask) << 16) | (port + 1);
  uint64_t words[kSlots];
  int empty = -1;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint64_t w = b.w[i].load(std::memory_order_relaxed);
    words[i] = w;
    if (holds(h, i, w, key)) {
      if (w != want) {  // moved port
        if (port_entries(port) >= port_limit(port)) {  // the limit holds for moves too
          declined_.fetch_add(1, std::memory_order_relaxed);
          return false;
        }
        const uint64_t old = w;
        if (b.w[i].compare_exchange_strong(words[i], want, std::memory_order_relaxed)) {
          count(old, -1);
          count(want, +1);
        }
      }
      if (t.t[i].load(std::memory_order_relaxed) != now_s)
        t.t[i].store(now_s, std::memory_order_relaxed);
      return true;
    }
    if (!w && empty < 0) empty = static_cast<int>(i);
  }
  // A new MAC: the slow path (once per MAC, not per frame).
  const bool at_limit = port_entries(port) >= port_limit(port);
  if (empty >= 0 && !at_limit) {
    // (False: another thread took the slot this instant; learned on a later frame.)
    return replace(h, static_cast<uint32_t>(empty), 0, want, vlan, now_s);
  }
  // Full bucket (or the port's quota is used up): choose a victim (see fdb.h).
  uint32_t per_port[kSlots];
  uint32_t own = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    per_port[i] = 0;
    if (!words[i]) continue;
    for (uint32_t j = 0; j < kSlots; ++j)
      per_port[i] += words[j] && (words[j] & 0xffff) == (words[i] & 0xffff);
    own += (words[i] & 0xffff) == port + 1;
  }
  int victim = -1;
  uint32_t victim_t = UINT32_MAX;
  auto consider = [&](uint32_t i) {
    const uint32_t ti = t.t[i].load(std::memory_order_relaxed);
    if (victim < 0 || ti < victim_t) {
      victim = static_cast<int>(i);
      victim_t = ti;
    }
  };
  const bool own_first = at_limit || own >= kSlots / 2;
  if (!own_first) {
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (!words[i] || (words[i] & 0xffff) == port + 1) continue;
      const uint32_t seen = t.t[i].load(std::memory_order_relaxed);
      if (now_s - seen >= kFreshS || per_port[i] > kSlots / 2) consider(i);
    }
  }
  if (victim < 0) {
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (words[i] && (words[i] & 0xffff) == port + 1) consider(i);
    }
  }
  if (victim < 0 || (at_limit && (words[victim] & 0xffff) != port + 1)) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return replace(h, static_cast<uint32_t>(victim), words[victim], want, vlan, now_s);
}

bool Fdb::replace(uint32_t h, uint32_t i, uint64_t old, uint64_t want, uint16_t vlan,
                  uint32_t now_s) {
  // Claimed first, then its VLAN, then the entry (release): a reader that sees the entry
  // sees its VLAN, and no other thread writes a claimed slot's VLAN.
  if (old == kClaimed ||
      !buckets_[h].w[i].compare_exchange_strong(old, kClaimed, std::memory_order_acquire))
    return false;
  times_[h].v[i].store(vlan, std::memory_order_relaxed);
  times_[h].t[i].store(now_s, std::memory_order_relaxed);
  buckets_[h].w[i].store(want, std::memory_order_release);
  count(old, -1);
  count(want, +1);
  return true;
}

uint32_t Fdb::age(uint32_t now_s, uint32_t max_age_s) {
  uint32_t removed = 0;
  for (uint32_t i = 0; i <= mask_; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      uint64_t w = buckets_[i].w[s].load(std::memory_order_relaxed);
      if (!w || w == kClaimed) continue;
      const uint32_t seen = times_[i].t[s].load(std::memory_order_relaxed);
      if (now_s - seen > max_age_s &&
          buckets_[i].w[s].compare_exchange_strong(w, 0, std::memory_order_relaxed)) {
        count(w, -1);
        ++removed;
      }
    }
  }
  return removed;
}

void Fdb::flush_port(uint32_t port) {
  for (uint32_t i = 0; i <= mask_; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      uint64_t w = buckets_[i].w[s].load(std::memory_order_relaxed);
      if (w && (w & 0xffff) == port + 1 &&
          buckets_[i].w[s].compare_exchange_strong(w, 0, std::memory_order_relaxed))
        count(w, -1);
    }
  }
}

std::vector<Fdb::Entry> Fdb::entries(uint32_t now_s, uint32_t port, size_t limit) const {
  std::vector<Entry> out;
  for (uint32_t i = 0; i <= mask_ && out.size() < limit; i = entries_in(i, 1, now_s, port, &out)) {
  }
  if (out.size() > limit) out.resize(limit);
  return out;
}

uint32_t Fdb::entries_in(uint32_t first, uint32_t n, uint32_t now_s, uint32_t port,
                         std::vector<Entry>* out) const {
  const uint32_t end = first + std::min(n, mask_ + 1 - std::min(first, mask_ + 1));
  for (uint32_t i = first; i < end; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      const uint64_t w = buckets_[i].w[s].load(std::memory_order_acquire);
      if (!w || w == kClaimed) continue;
      if (port != ~0u && (w & 0xffff) != port + 1) continue;
      const uint64_t vlan = times_[i].v[s].load(std::memory_order_relaxed);
      out->push_back({vlan << 48 | w >> 16, static_cast<uint32_t>((w & 0xffff) - 1),
                      now_s - times_[i].t[s].load(std::memory_order_relaxed)});
    }
  }
  return end;
}

}  // namespace vl::dp
