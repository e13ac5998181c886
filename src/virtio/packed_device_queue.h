#pragma once
// The device side of a packed virtqueue (virtio 1.2 §2.8): one descriptor ring the driver
// and the device both write, two wrap counters, and two event suppression structures.
// The counterpart of split_device_queue.h (split rings), with the same interface, so that the
// copy paths (net_copy.h) and the forwarder are templates over the queue type: no virtual
// call per packet.
//
// Security model (as for split rings; hostile-inputs.md items 7-14). The driver writes the
// ring and its event suppression structure at any time and may be hostile. Therefore:
//  - a descriptor is read once into a local (its flags with an acquire load first, then a
//    16-byte copy) and only the local is used;
//  - the device never has more ring slots in flight (taken and not yet returned) than the
//    ring holds: a chain that would take more (a NEXT run around the whole ring) means the
//    driver broke the ring, and the queue stops until it is set up again (item 10, 11);
//  - a nested indirect table, an indirect descriptor with NEXT or inside a chain, a table
//    whose length is 0, not a multiple of 16 or longer than the queue, a buffer of the
//    wrong direction, or an address that does not translate drop the chain: it is returned
//    to the driver with length 0 under its buffer ID (items 7, 8, 12);
//  - buffer IDs are the driver's: echoed back, never used as an index;
//  - used descriptors are written into slots the driver gave us (taken, not yet returned),
//    so a hostile driver cannot make us write elsewhere in its memory.
// Used descriptors are written when publish_used() runs, not when pushed: the first one's
// flags are stored last (release), so the driver sees a burst at once and chains can be
// un-taken (restore()) until then.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "virtio/chain.h"
#include "virtio/device_ring.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

/// vhost-user.rst "Vring descriptor indices for packed virtqueues": the 32-bit num of
/// SET/GET_VRING_BASE. Bits 0-14 next avail slot, bit 15 avail wrap counter, bits 16-30
/// next used slot, bit 31 used wrap counter.
struct PackedRingState {
  uint16_t avail = 0;
  bool avail_wrap = true;  ///< virtio 1.2 §2.8.1: both wrap counters start at 1
  uint16_t used = 0;
  bool used_wrap = true;
  static PackedRingState decode(uint32_t num) {
    PackedRingState s;
    s.avail = num & 0x7fff;
    s.avail_wrap = (num >> 15) & 1;
    // QEMU and DPDK send only the low 16 bits; nothing is in flight when a ring starts, so
    // the used side resumes where the avail side does.
    s.used = s.avail;
    s.used_wrap = s.avail_wrap;
    return s;
  }
  uint32_t encode() const {
    return uint32_t{avail} | uint32_t{avail_wrap} << 15 | uint32_t{used} << 16 |
           uint32_t{used_wrap} << 31;
  }
};

/// The state SET_VRING_BASE gives a packed ring before any traffic: slot 0, wrap 1.
inline constexpr uint32_t kPackedInitialBase = 1u << 15;

/// Device-side state of one packed virtqueue. Configured by the control thread while the
/// datapath is paused; used by one PMD thread at a time.
class PackedDeviceQueue : public DeviceRingBase {
 public:
  /// Binds the queue to translated ring memory. `num` in [1, kMaxQueueSize] (any value: a
  /// packed ring need not be a power of two); `ring` is our pointer to the whole descriptor
  /// ring, `driver_event`/`device_event` to the two event suppression structures (checked by
  /// the caller with GuestMemory). `base` is SET_VRING_BASE's num (PackedRingState); its
  /// slot must be < num (the caller checks: packed_base_valid()).
  void attach(const GuestMemory* mem, uint32_t num, PackedDesc* ring, PackedEvent* driver_event,
              PackedEvent* device_event, uint32_t base, uint64_t features) {
    bind(mem, num, features);
    ring_ = ring;
    driver_event_ = driver_event;
    device_event_ = device_event;
    const PackedRingState s = PackedRingState::decode(base);
    last_avail_ = s.avail;
    avail_wrap_ = s.avail_wrap;
    used_pos_ = s.used;
    used_wrap_ = s.used_wrap;
    if (shadow_cap_ < num) {
      shadow_ = std::make_unique<UsedElem[]>(num);
      shadow_cap_ = num;
    }
    nshadow_ = 0;
    in_flight_ = 0;
  }
  static bool packed_base_valid(uint32_t base, uint32_t num) { return (base & 0x7fff) < num; }
  /// Live migration (see SplitDeviceQueue::set_dirty_log): used descriptors written back into
  /// the ring at guest-physical `ring_gpa` and the device event suppression structure at
  /// `device_event_gpa` are marked in `log` after they are written.
  void set_dirty_log(DirtyLog* log, uint64_t ring_gpa, uint64_t device_event_gpa) {
    log_ = log;
    ring_gpa_ = ring_gpa;
    device_event_gpa_ = device_event_gpa;
  }
  void detach() {
    unbind();
    ring_ = nullptr;
    driver_event_ = nullptr;
    device_event_ = nullptr;
  }
  bool attached() const { return ring_ != nullptr; }
  /// The ring's position for GET_VRING_BASE (PackedRingState::encode()).
  uint32_t vring_base() const {
    return PackedRingState{last_avail_, avail_wrap_, used_pos_, used_wrap_}.encode();
  }
  uint16_t last_avail() const { return last_avail_; }
  bool avail_wrap() const { return avail_wrap_; }
  uint16_t used_pos() const { return used_pos_; }
  bool used_wrap() const { return used_wrap_; }
  /// The queue's positions for an error log line (cold path).
  std::string state() const {
    return fmt::format("packed, size {}, next avail {} (wrap {}), next used {} (wrap {})", num_,
                       last_avail_, avail_wrap_, used_pos_, used_wrap_);
  }
  /// True if the descriptor at the next avail slot is available (virtio 1.2 §2.8.1: its
  /// AVAIL flag equals our avail wrap counter and its USED flag does not). False while the
  /// whole ring is in flight.
  bool has_avail() const {
    if (in_flight_ >= num_) [[unlikely]]
      return false;
    const uint16_t f = __atomic_load_n(&ring_[last_avail_].flags, __ATOMIC_ACQUIRE);
    return is_avail(f);
  }
  /// 1 if a chain is available, else 0 (a packed ring has no avail index to count with).
  int pending() const { return has_avail() ? 1 : 0; }
  /// Chains a burst of up to `max` may try to pop: `max` if one is available (pop() then
  /// says kEmpty at the first that is not; a packed ring has no index to read ahead).
  uint32_t ready(uint32_t max) const { return has_avail() ? max : 0; }

  /// Takes the next chain into `arena`. kDeviceWrites: true for a receive queue. Returns
  /// kEmpty if nothing is available; kBadChain/kTooBig after returning the chain with
  /// length 0 (pushed, published with the next publish_used()); kBroken if the chain runs
  /// over more slots than the driver can have made available (the queue stops).
  template <bool kDeviceWrites>
  PopStatus pop(SegmentArena& arena, Chain* chain);
  /// pop(), returning a one-descriptor chain in `*one` as kOne (SplitDeviceQueue::pop_any()).
  template <bool kDeviceWrites>
  PopStatus pop_any(SegmentArena& arena, Chain* chain, OneBuffer* one);
  /// pop() past its first descriptor `d` (a local copy, flags already checked available):
  /// chains, indirect tables, region splits and every malformed chain.
  template <bool kDeviceWrites>
  PopStatus pop_walk(SegmentArena& arena, Chain* chain, PackedDesc d);

  /// Un-pops the last `n` chains popped, each of one descriptor (one ring slot), keeping the
  /// used entries pushed since (receive buffers taken ahead for a batch and not used).
  void unpop_ones(uint32_t n) {
    if (n > last_avail_) {  // back across the ring's end: the wrap counter flips back
      last_avail_ = static_cast<uint16_t>(last_avail_ + num_ - n);
      avail_wrap_ = !avail_wrap_;
    } else {
      last_avail_ = static_cast<uint16_t>(last_avail_ - n);
    }
    in_flight_ -= n;
  }

  /// A point to come back to with restore(): un-takes the chains taken since and forgets
  /// the used entries pushed since (a receive frame that did not fit).
  struct Mark {
    uint16_t avail;
    bool avail_wrap;
    uint32_t nshadow;
    uint32_t in_flight;
  };
  Mark mark() const { return Mark{last_avail_, avail_wrap_, nshadow_, in_flight_}; }
  void restore(const Mark& m) {
    last_avail_ = m.avail;
    avail_wrap_ = m.avail_wrap;
    nshadow_ = m.nshadow;
    in_flight_ = m.in_flight;
  }

  /// Records a used element for the chain with buffer ID `id` that took `ring_descs` ring
  /// slots, `len` bytes written (not visible to the driver until publish_used()).
  void push_used(uint16_t id, uint32_t len, uint16_t ring_descs) {
    if (nshadow_ >= shadow_cap_) [[unlikely]] {  // cannot happen: in_flight_ <= num_
      broken_ = true;
      return;
    }
    shadow_[nshadow_++] = UsedElem{id, ring_descs, len};
  }

  /// Writes the pushed used descriptors into the ring (virtio 1.2 §2.8.9: ID, length, then
  /// AVAIL and USED flags equal to the used wrap counter; the burst's first flags last) and
  /// signals the call eventfd when the driver's event suppression structure asks for it
  /// (§2.8.10: ENABLE, or DESC with EVENT_IDX when the event offset was passed). `defer`:
  /// as SplitDeviceQueue::publish_used. Returns true if the driver asked for a call.
  [[gnu::always_inline]] bool publish_used(bool defer = false) {
    if (!nshadow_) return false;
    const uint16_t old_pos = used_pos_;
    // Locals: the release stores below would make every member be reloaded each entry.
    PackedDesc* const ring = ring_;
    const UsedElem* const shadow = shadow_.get();
    const uint32_t n = nshadow_;
    const uint16_t num = static_cast<uint16_t>(num_);
    uint16_t pos = used_pos_;
    bool wrap = used_wrap_;
    PackedDesc* first = nullptr;
    uint16_t first_flags = 0;
    uint32_t slots = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const UsedElem e = shadow[i];
      PackedDesc* d = &ring[pos];
      __atomic_store_n(&d->id, e.id, __ATOMIC_RELAXED);
      __atomic_store_n(&d->len, e.len, __ATOMIC_RELAXED);
      // AVAIL and USED equal to the wrap counter; §2.8.6: the length is valid only with WRITE.
      const uint16_t f = static_cast<uint16_t>((wrap ? (kPackedDescFAvail | kPackedDescFUsed) : 0) |
                                               (e.len ? kDescFWrite : 0));
      if (i == 0) {
        first = d;
        first_flags = f;
      } else {
        __atomic_store_n(&d->flags, f, __ATOMIC_RELEASE);
      }
      slots += e.ring_descs;
      pos = static_cast<uint16_t>(pos + e.ring_descs);
      if (pos >= num) [[unlikely]] {
        pos = static_cast<uint16_t>(pos - num);
        wrap = !wrap;
      }
    }
    __atomic_store_n(&first->flags, first_flags, __ATOMIC_RELEASE);
    if (log_) [[unlikely]] {
      // Slots [old_pos, old_pos + slots) mod num_ were written.
      mark_ring_entries(*log_, ring_gpa_, sizeof(PackedDesc), old_pos, slots, num_);
    }
    used_pos_ = pos;
    used_wrap_ = wrap;
    nshadow_ = 0;
    in_flight_ = slots > in_flight_ ? 0 : in_flight_ - slots;
    if (call_fd_ < 0) return false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our flags stores before the driver's event read
    const uint16_t flags = __atomic_load_n(&driver_event_->flags, __ATOMIC_RELAXED);
    bool need;
    if (flags == kRingEventFlagsDisable) {
      need = false;
    } else if (flags == kRingEventFlagsDesc && event_idx_) {
      const uint16_t off_wrap = __atomic_load_n(&driver_event_->off_wrap, __ATOMIC_RELAXED);
      // Compare slots on one line: positions from the previous lap count as negative.
      uint16_t off = off_wrap & 0x7fff;
      uint16_t old = old_pos;
      if (used_pos_ <= old) old = static_cast<uint16_t>(old - num_);
      if (static_cast<bool>(off_wrap >> 15) != used_wrap_) off = static_cast<uint16_t>(off - num_);
      need = need_event(off, used_pos_, old);
    } else {
      need = true;  // ENABLE (and reserved values: a spurious notification is harmless)
    }
    call_if(need, defer);
    return need;
  }

  /// Asks the driver to kick (true) or not to (false) when it makes buffers available
  /// (virtio 1.2 §2.8.10: the device event suppression structure, ENABLE or DISABLE).
  /// After enabling, callers must check has_avail() again before sleeping.
  void set_kicks(bool enabled) {
    __atomic_store_n(&device_event_->flags,
                     enabled ? kRingEventFlagsEnable : kRingEventFlagsDisable, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (log_) [[unlikely]] log_->mark(device_event_gpa_, kPackedEventBytes);
  }

 private:
  struct UsedElem {
    uint16_t id;
    uint16_t ring_descs;
    uint32_t len;
  };

  bool is_avail(uint16_t f) const {
    return static_cast<bool>(f & kPackedDescFAvail) == avail_wrap_ &&
           static_cast<bool>(f & kPackedDescFUsed) != avail_wrap_;
  }
  /// pop_walk()'s steps: one buffer of the chain (`in_table`: from an indirect table), and
  /// an indirect descriptor's table (`slots`: ring slots the chain took so far). False: the
  /// chain is malformed.
  template <bool kDeviceWrites>
  bool take_buffer(SegmentArena& arena, ChainWalk& w, const PackedDesc& d, bool in_table) const;
  template <bool kDeviceWrites>
  bool walk_indirect(SegmentArena& arena, ChainWalk& w, const PackedDesc& d, uint32_t slots) const;
  void next_slot(uint16_t* pos, bool* wrap) const {
    if (++*pos >= num_) {
      *pos = 0;
      *wrap = !*wrap;
    }
  }
  PackedDesc* ring_ = nullptr;
  PackedEvent* driver_event_ = nullptr;  ///< written by the driver: may we notify?
  PackedEvent* device_event_ = nullptr;  ///< written by us: may the driver kick?
  uint16_t last_avail_ = 0;  ///< next slot to take
  bool avail_wrap_ = true;
  uint16_t used_pos_ = 0;    ///< next slot to write a used descriptor to
  bool used_wrap_ = true;
  uint32_t in_flight_ = 0;   ///< slots taken and not yet published as used
  std::unique_ptr<UsedElem[]> shadow_;
  uint32_t shadow_cap_ = 0;
  uint32_t nshadow_ = 0;
  uint64_t ring_gpa_ = 0;
  uint64_t device_event_gpa_ = 0;
};

template <bool kDeviceWrites>
inline PopStatus PackedDeviceQueue::pop_any(SegmentArena& arena, Chain* chain, OneBuffer* one) {
  if (in_flight_ >= num_) [[unlikely]]
    return PopStatus::kEmpty;
  PackedDesc d;
  const uint16_t f0 = __atomic_load_n(&ring_[last_avail_].flags, __ATOMIC_ACQUIRE);
  if (!is_avail(f0)) return PopStatus::kEmpty;
  std::memcpy(&d, &ring_[last_avail_], sizeof d);
  pin_copy(d);   // item 13: only the local copy is used from here on
  d.flags = f0;  // the flags we checked, not a second read
  if (uint8_t* p = one_descriptor_buffer<kDeviceWrites>(*mem_, d.flags, d.addr, d.len)) [[likely]] {
    next_slot(&last_avail_, &avail_wrap_);
    ++in_flight_;
    *one = OneBuffer{p, d.len, d.id};
    return PopStatus::kOne;
  }
  return pop_walk<kDeviceWrites>(arena, chain, d);
}

template <bool kDeviceWrites>
inline PopStatus PackedDeviceQueue::pop(SegmentArena& arena, Chain* chain) {
  return pop_via_arena<kDeviceWrites>(*this, arena, chain);
}

template <bool kDeviceWrites>
[[gnu::noinline]] PopStatus PackedDeviceQueue::pop_walk(SegmentArena& arena, Chain* chain,
                                                        PackedDesc d) {
  // Slots this chain may take: the driver cannot have made more available than are free.
  const uint32_t budget = num_ - in_flight_;
  uint16_t pos = last_avail_;
  bool wrap = avail_wrap_;
  uint32_t slots = 0;
  ChainWalk w;
  bool bad = false;
  for (;;) {  // `d` holds a local copy of the next descriptor
    ++slots;
    ++w.ndesc;
    if (!bad) {
      bad = (d.flags & kDescFIndirect) ? !walk_indirect<kDeviceWrites>(arena, w, d, slots)
                                       : !take_buffer<kDeviceWrites>(arena, w, d, false);
    }
    if (!(d.flags & kDescFNext)) break;
    if (slots >= budget) [[unlikely]] {
      // A NEXT run longer than the free part of the ring: no chain ends there.
      broken_ = true;
      return PopStatus::kBroken;
    }
    next_slot(&pos, &wrap);
    std::memcpy(&d, &ring_[pos], sizeof d);
    compiler_barrier();
  }
  next_slot(&pos, &wrap);
  last_avail_ = pos;
  avail_wrap_ = wrap;
  in_flight_ += slots;
  const uint16_t ring_descs = static_cast<uint16_t>(slots);
  if (bad || !w.fits()) [[unlikely]] {  // returned under the last descriptor's buffer ID
    push_used(d.id, 0, ring_descs);
    return bad ? PopStatus::kBadChain : PopStatus::kTooBig;
  }
  w.finish(arena, chain, d.id, ring_descs);
  return PopStatus::kOk;
}

template <bool kDeviceWrites>
inline bool PackedDeviceQueue::take_buffer(SegmentArena& arena, ChainWalk& w, const PackedDesc& d,
                                           bool in_table) const {
  // A device-writable buffer on a queue the device reads is refused in the ring, but read
  // in an indirect table: DPDK's virtio PMD initialises its packed TX tables with WRITE on
  // every entry (vring_desc_init_indirect_packed) and leaves it on the header entry, and
  // reading a device-writable buffer is only discouraged (virtio 1.2 descriptor device
  // requirements: SHOULD NOT). Writing to a driver-readable buffer is never done.
  const bool writable = d.flags & kDescFWrite;
  if (writable != kDeviceWrites && (kDeviceWrites || !in_table)) [[unlikely]]
    return false;
  return w.add(*mem_, arena, d.addr, d.len);
}

template <bool kDeviceWrites>
bool PackedDeviceQueue::walk_indirect(SegmentArena& arena, ChainWalk& w, const PackedDesc& d,
                                      uint32_t slots) const {
  // virtio 1.2 §2.8.7: an indirect descriptor is a chain of its own (no NEXT, not after
  // other descriptors); its table holds len/16 descriptors, none of them indirect.
  if (slots != 1 || (d.flags & kDescFNext) || !indirect_ || !indirect_table_fits(d.len, num_))
      [[unlikely]]
    return false;
  const auto* t = reinterpret_cast<const PackedDesc*>(mem_->translate_whole(d.addr, d.len));
  if (!t) [[unlikely]]
    return false;
  const uint32_t n = d.len / sizeof(PackedDesc);
  for (uint32_t i = 0; i < n; ++i) {
    PackedDesc e;
    std::memcpy(&e, &t[i], sizeof e);
    compiler_barrier();
    ++w.ndesc;
    if ((e.flags & kDescFIndirect) || !take_buffer<kDeviceWrites>(arena, w, e, true)) [[unlikely]]
      return false;
  }
  return true;
}

}  // namespace vl::virtio
