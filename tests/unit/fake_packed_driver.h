#pragma once
// A mock virtio DRIVER of a packed virtqueue (virtio 1.2 §2.8) over FakeMemory, for unit
// tests: lays out the descriptor ring and the two event suppression structures, makes
// chains available (direct or through an indirect table) with the driver's wrap counter,
// reads used descriptors back with its own used wrap counter, and writes raw descriptors
// for hostile tests. It trusts itself (aborts on its own mistakes). Not used by product code.
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "fake_driver.h"
#include "virtio/packed_device_queue.h"

namespace vl::test {

/// A used descriptor as the driver reads it.
struct PackedUsed {
  uint16_t id;
  uint32_t len;
  uint16_t flags;
};

class FakePackedRing {
 public:
  FakePackedRing(FakeMemory& mem, uint32_t num, int region = -1) : mem_(mem), num_(num) {
    ring_gpa_ = mem.alloc(virtio::packed_ring_bytes(num), 16, region);
    drv_gpa_ = mem.alloc(virtio::kPackedEventBytes, 4, region);
    dev_gpa_ = mem.alloc(virtio::kPackedEventBytes, 4, region);
    for (uint32_t i = num; i > 0; --i) free_ids_.push_back(static_cast<uint16_t>(i - 1));
  }

  uint32_t num() const { return num_; }
  uint64_t ring_uva() const { return mem_.gpa_to_uva(ring_gpa_); }
  uint64_t driver_event_uva() const { return mem_.gpa_to_uva(drv_gpa_); }
  uint64_t device_event_uva() const { return mem_.gpa_to_uva(dev_gpa_); }
  virtio::PackedDesc* ring() const {
    return reinterpret_cast<virtio::PackedDesc*>(mem_.host(ring_gpa_, virtio::packed_ring_bytes(num_)));
  }
  virtio::PackedEvent* driver_event() const {
    return reinterpret_cast<virtio::PackedEvent*>(mem_.host(drv_gpa_, 4));
  }
  virtio::PackedEvent* device_event() const {
    return reinterpret_cast<virtio::PackedEvent*>(mem_.host(dev_gpa_, 4));
  }

  void attach(virtio::PackedDeviceQueue& q, const virtio::GuestMemory& gm, uint64_t features,
              uint32_t base = virtio::kPackedInitialBase) const {
    auto* r = reinterpret_cast<virtio::PackedDesc*>(gm.translate_whole(ring_gpa_, virtio::packed_ring_bytes(num_)));
    auto* d = reinterpret_cast<virtio::PackedEvent*>(gm.translate_whole(drv_gpa_, 4));
    auto* e = reinterpret_cast<virtio::PackedEvent*>(gm.translate_whole(dev_gpa_, 4));
    if (!r || !d || !e) fake_die("packed ring does not translate through the GuestMemory under test");
    q.attach(&gm, num_, r, d, e, base, features);
  }

  /// Flags that make a descriptor available in the driver's current lap (§2.8.1).
  uint16_t avail_flags() const {
    return avail_wrap_ ? virtio::kPackedDescFAvail : virtio::kPackedDescFUsed;
  }
  uint16_t next_avail() const { return next_avail_; }
  bool avail_wrap() const { return avail_wrap_; }

  /// Writes a raw descriptor at ring slot `pos`.
  void write_desc(uint16_t pos, uint64_t addr, uint32_t len, uint16_t id, uint16_t flags) {
    virtio::PackedDesc d{addr, len, id, flags};
    std::memcpy(&ring()[pos % num_], &d, sizeof d);
  }

  /// Makes `descs` available as one chain with a fresh buffer ID: consecutive slots linked
  /// with NEXT, or one slot pointing at an indirect table. The head's flags are written last.
  /// Returns the buffer ID.
  uint16_t add_chain(const std::vector<DescSpec>& descs, const ChainOpts& o = {}) {
    if (free_ids_.empty()) fake_die("no free buffer IDs");
    const uint16_t id = free_ids_.back();
    free_ids_.pop_back();
    Rec rec;
    for (const DescSpec& d : descs) rec.bufs.push_back({d.addr, d.len});
    const uint16_t head = next_avail_;
    const uint16_t head_flags_lap = avail_flags();
    uint16_t head_flags = 0;
    if (o.indirect) {
      const uint64_t bytes = 16ull * descs.size();
      const uint64_t t = mem_.alloc(bytes + o.indirect_misalign, 16, o.region) + o.indirect_misalign;
      for (size_t k = 0; k < descs.size(); ++k) {
        virtio::PackedDesc d{descs[k].addr, descs[k].len, 0, descs[k].flags};
        mem_.write(t + 16 * k, &d, sizeof d);
      }
      head_flags = static_cast<uint16_t>(virtio::kDescFIndirect | head_flags_lap);
      write_desc(head, t, static_cast<uint32_t>(bytes), id, 0);
      rec.slots = 1;
      advance();
    } else {
      for (size_t k = 0; k < descs.size(); ++k) {
        const bool last = k + 1 == descs.size();
        const uint16_t f = static_cast<uint16_t>(descs[k].flags | (last ? 0 : virtio::kDescFNext) |
                                                 avail_flags());
        if (k == 0) {
          head_flags = f;
          write_desc(next_avail_, descs[k].addr, descs[k].len, id, 0);
        } else {
          write_desc(next_avail_, descs[k].addr, descs[k].len, id, f);
        }
        advance();
      }
      rec.slots = static_cast<uint16_t>(descs.size());
    }
    __atomic_store_n(&ring()[head].flags, head_flags, __ATOMIC_RELEASE);
    recs_[id] = rec;
    return id;
  }

  uint16_t add_tx(std::span<const uint8_t> bytes, std::vector<uint32_t> sizes = {},
                  const ChainOpts& o = {}) {
    return add_chain(tx_descs(mem_, bytes, std::move(sizes), o), o);
  }

  uint16_t add_rx(const std::vector<uint32_t>& sizes, const ChainOpts& o = {}) {
    return add_chain(rx_descs(mem_, sizes, o), o);
  }

  /// The next used descriptor (§2.8.1: AVAIL and USED both equal to the driver's used wrap
  /// counter), or nullopt. Frees the buffer ID and skips the chain's slots.
  std::optional<PackedUsed> next_used() {
    const uint16_t f = __atomic_load_n(&ring()[next_used_].flags, __ATOMIC_ACQUIRE);
    const bool a = f & virtio::kPackedDescFAvail, u = f & virtio::kPackedDescFUsed;
    if (a != used_wrap_ || u != used_wrap_) return std::nullopt;
    virtio::PackedDesc d;
    std::memcpy(&d, &ring()[next_used_], sizeof d);
    auto it = recs_.find(d.id);
    if (it == recs_.end()) fake_die("used descriptor with an unknown buffer ID");
    const uint16_t slots = it->second.slots;
    done_[d.id] = it->second;
    recs_.erase(it);
    free_ids_.push_back(d.id);
    next_used_ = static_cast<uint16_t>(next_used_ + slots);
    if (next_used_ >= num_) {
      next_used_ = static_cast<uint16_t>(next_used_ - num_);
      used_wrap_ = !used_wrap_;
    }
    return PackedUsed{d.id, d.len, f};
  }

  /// The first `len` bytes of a returned chain's buffers, concatenated.
  std::vector<uint8_t> done_bytes(uint16_t id, uint32_t len) const {
    std::vector<uint8_t> out;
    for (const Buf& b : done_.at(id).bufs) {
      if (out.size() >= len) break;
      const uint32_t k = std::min<uint32_t>(b.len, len - static_cast<uint32_t>(out.size()));
      const uint8_t* p = mem_.host(b.gpa, k ? k : 1);
      out.insert(out.end(), p, p + k);
    }
    return out;
  }

  /// Takes `slots` ring slots for a hand-written chain (hostile tests); returns the first.
  uint16_t take_slots(uint16_t slots) {
    const uint16_t first = next_avail_;
    for (uint16_t i = 0; i < slots; ++i) advance();
    return first;
  }
  /// Records a hand-written chain so that next_used() accepts its buffer ID.
  void expect_chain(uint16_t id, uint16_t slots) { recs_[id] = Rec{slots, {}}; }

 private:
  struct Buf {
    uint64_t gpa;
    uint32_t len;
  };
  struct Rec {
    uint16_t slots = 0;
    std::vector<Buf> bufs;
  };
  void advance() {
    if (++next_avail_ >= num_) {
      next_avail_ = 0;
      avail_wrap_ = !avail_wrap_;
    }
  }

  FakeMemory& mem_;
  uint32_t num_;
  uint64_t ring_gpa_ = 0, drv_gpa_ = 0, dev_gpa_ = 0;
  uint16_t next_avail_ = 0;
  bool avail_wrap_ = true;
  uint16_t next_used_ = 0;
  bool used_wrap_ = true;
  std::vector<uint16_t> free_ids_;
  std::map<uint16_t, Rec> recs_;
  std::map<uint16_t, Rec> done_;
};

}  // namespace vl::test
