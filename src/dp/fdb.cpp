#include "dp/fdb.h"

#include <bit>

namespace vl::dp {

Fdb::Fdb(uint32_t buckets) {
  const uint32_t n = std::bit_ceil(buckets < 1 ? 1u : buckets);
  mask_ = n - 1;
  buckets_ = std::make_unique<Bucket[]>(n);
  times_ = std::make_unique<Times[]>(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      buckets_[i].w[s].store(0, std::memory_order_relaxed);
      times_[i].t[s].store(0, std::memory_order_relaxed);
    }
  }
}

void Fdb::learn(Mac mac, uint32_t port, uint32_t now_s) {
  const uint32_t h = hash(mac);
  Bucket& b = buckets_[h];
  Times& t = times_[h];
  const uint64_t want = (mac << 16) | (port + 1);
  int empty = -1;
  int oldest = 0;
  uint32_t oldest_t = UINT32_MAX;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint64_t w = b.w[i].load(std::memory_order_relaxed);
    if (w && (w >> 16) == mac) {
      if (w != want) b.w[i].store(want, std::memory_order_relaxed);  // moved port
      if (t.t[i].load(std::memory_order_relaxed) != now_s)
        t.t[i].store(now_s, std::memory_order_relaxed);
      return;
    }
    if (!w && empty < 0) empty = static_cast<int>(i);
    const uint32_t ti = t.t[i].load(std::memory_order_relaxed);
    if (ti < oldest_t) {
      oldest_t = ti;
      oldest = static_cast<int>(i);
    }
  }
  if (empty >= 0) {
    uint64_t expected = 0;
    if (b.w[empty].compare_exchange_strong(expected, want, std::memory_order_relaxed)) {
      t.t[empty].store(now_s, std::memory_order_relaxed);
      return;
    }
  }
  b.w[oldest].store(want, std::memory_order_relaxed);
  t.t[oldest].store(now_s, std::memory_order_relaxed);
}

uint32_t Fdb::age(uint32_t now_s, uint32_t max_age_s) {
  uint32_t removed = 0;
  for (uint32_t i = 0; i <= mask_; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      uint64_t w = buckets_[i].w[s].load(std::memory_order_relaxed);
      if (!w) continue;
      const uint32_t seen = times_[i].t[s].load(std::memory_order_relaxed);
      if (now_s - seen > max_age_s &&
          buckets_[i].w[s].compare_exchange_strong(w, 0, std::memory_order_relaxed))
        ++removed;
    }
  }
  return removed;
}

void Fdb::flush_port(uint32_t port) {
  for (uint32_t i = 0; i <= mask_; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      uint64_t w = buckets_[i].w[s].load(std::memory_order_relaxed);
      if (w && (w & 0xffff) == port + 1)
        buckets_[i].w[s].compare_exchange_strong(w, 0, std::memory_order_relaxed);
    }
  }
}

std::vector<Fdb::Entry> Fdb::entries(uint32_t now_s) const {
  std::vector<Entry> out;
  for (uint32_t i = 0; i <= mask_; ++i) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      const uint64_t w = buckets_[i].w[s].load(std::memory_order_relaxed);
      if (!w) continue;
      out.push_back({w >> 16, static_cast<uint32_t>((w & 0xffff) - 1),
                     now_s - times_[i].t[s].load(std::memory_order_relaxed)});
    }
  }
  return out;
}

}  // namespace vl::dp
