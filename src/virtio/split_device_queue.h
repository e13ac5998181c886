#pragma once
// The device side of a split virtqueue (virtio 1.2 §2.7): what a back-end does with the
// rings a driver (guest or container) owns.
//
// Security model. The driver writes the descriptor table and the avail ring at any time,
// concurrently with us, and may be hostile. Therefore:
//  - every shared field is read once into a local (descriptors as a 16-byte copy, indices
//    with single atomic loads) and a compiler barrier keeps later code on the local;
//  - a head or next index >= queue size, a chain longer than the queue size (cycles), a
//    nested or malformed indirect table, a buffer of the wrong direction, or an address
//    that does not translate drop that chain (PopStatus::kBadChain);
//  - an avail index more than the queue size ahead of ours marks the ring broken: the
//    queue stops until the front-end sets it up again (hostile-inputs.md items 10-14);
//  - all memory access goes through GuestMemory, which never returns a range that leaves a
//    mapping.
// The only state we write into guest memory is the used ring (and avail_event / used
// flags), whose addresses were checked when the ring was set up.
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "virtio/chain.h"
#include "virtio/device_ring.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

/// Device-side state of one split virtqueue. Configured by the control thread while the
/// datapath is paused; used by one PMD thread at a time.
class SplitDeviceQueue : public DeviceRingBase {
 public:
  /// Binds the queue to translated ring memory. `num` must be a power of two in
  /// [1, kMaxQueueSize]; `desc`, `avail`, `used` must be our pointers to whole rings
  /// (checked by the caller with GuestMemory). `base` is the next avail index to process
  /// (SET_VRING_BASE); the used index is taken from the ring as the driver left it.
  void attach(const GuestMemory* mem, uint32_t num, VringDesc* desc, VringAvail* avail,
              VringUsed* used, uint16_t base, uint64_t features) {
    bind(mem, num, features);
    mask_ = num - 1;
    desc_ = desc;
    avail_ = avail;
    used_ = used;
    last_avail_ = base;
    shadow_avail_ = base;
    last_used_ = __atomic_load_n(&used->idx, __ATOMIC_ACQUIRE);
    published_used_ = last_used_;
  }
  void detach() {
    unbind();
    desc_ = nullptr;
    avail_ = nullptr;
    used_ = nullptr;
  }
  /// Live migration: while `log` is set (the front-end has VHOST_F_LOG_ALL), every write
  /// into the used ring (guest-physical `used_gpa`) is marked in it after it is made, once
  /// per publish_used()/set_kicks(), and deliver_frame marks the receive buffers it fills.
  /// Null (the default, reset by detach()) costs one predictable branch per burst.
  void set_dirty_log(DirtyLog* log, uint64_t used_gpa) {
    log_ = log;
    used_gpa_ = used_gpa;
  }
  bool attached() const { return used_ != nullptr; }
  uint16_t last_avail() const { return last_avail_; }
  uint16_t last_used() const { return last_used_; }
  /// The queue's positions for an error log line (cold path): ours and the driver's avail
  /// index, ours and the ring's used index, and the size.
  std::string state() const {
    if (!avail_) return "detached";
    return fmt::format("split, size {}, avail idx {} (last read {}), next avail {}, next used {} "
                       "(published {}, ring {})",
                       num_, __atomic_load_n(&avail_->idx, __ATOMIC_ACQUIRE), shadow_avail_,
                       last_avail_, last_used_, published_used_,
                       __atomic_load_n(&used_->idx, __ATOMIC_ACQUIRE));
  }
  /// New avail entries not yet popped, or -1 after marking the ring broken when the
  /// driver's index is more than the queue size ahead (hostile-inputs.md item 11).
  int pending() {
    const uint16_t avail_idx = __atomic_load_n(&avail_->idx, __ATOMIC_ACQUIRE);
    const uint16_t n = static_cast<uint16_t>(avail_idx - last_avail_);
    if (n > num_) [[unlikely]] {
      broken_ = true;
      return -1;
    }
    shadow_avail_ = avail_idx;
    return n;
  }

  /// Chains a burst of up to `max` may pop without checking has_avail() before each: the
  /// avail index read once per burst (0 when the ring is broken: see pending()).
  uint32_t ready(uint32_t max) {
    const uint32_t cached = static_cast<uint16_t>(shadow_avail_ - last_avail_);
    const int n = cached >= max ? static_cast<int>(cached) : pending();
    if (n <= 0) return 0;
    return static_cast<uint32_t>(n) < max ? static_cast<uint32_t>(n) : max;
  }

  /// True if at least one avail entry is ready. Reads the driver's index (a cache line
  /// the driver writes) only when the entries seen last time are used up.
  bool has_avail() {
    if (shadow_avail_ != last_avail_) return true;
    return pending() > 0;
  }

  /// Pops the next chain into `arena`. kDeviceWrites: true for a receive queue (buffers
  /// the device fills), false for a transmit queue (buffers the device reads). Callers
  /// check pending() first and only pop that many entries.
  template <bool kDeviceWrites>
  PopStatus pop(SegmentArena& arena, Chain* chain);
  /// pop(), except that the common chain (one descriptor, checked as pop() checks it) is
  /// returned in `*one` as kOne, without writing the arena or `*chain`: the datapath's
  /// fast paths keep it in registers. Any other chain is popped as pop() does.
  template <bool kDeviceWrites>
  PopStatus pop_any(SegmentArena& arena, Chain* chain, OneBuffer* one);

  /// Un-pops the last `n` chains and un-writes the last `n` unpublished used entries
  /// (a receive chain set aside when a packet did not fit).
  void rewind(uint16_t avail_n, uint16_t used_n) {
    // shadow_avail_ stays: the rewound entries are still ahead of last_avail_.
    last_avail_ = static_cast<uint16_t>(last_avail_ - avail_n);
    last_used_ = static_cast<uint16_t>(last_used_ - used_n);
  }

  /// Un-pops the last `n` chains popped, each of one descriptor, keeping the used entries
  /// pushed since (receive buffers taken ahead for a batch and not used after all).
  void unpop_ones(uint32_t n) { rewind(static_cast<uint16_t>(n), 0); }

  /// A point to come back to with restore() (the same interface as PackedDeviceQueue).
  struct Mark {
    uint16_t avail;
    uint16_t used;
  };
  Mark mark() const { return Mark{last_avail_, last_used_}; }
  /// Un-pops the chains popped since `m` and un-writes the unpublished used entries
  /// pushed since (a receive frame that did not fit).
  void restore(const Mark& m) {
    last_avail_ = m.avail;
    last_used_ = m.used;
  }

  /// Writes one used element (not yet visible to the driver). `ring_descs` is for the
  /// packed interface and unused here.
  void push_used(uint16_t head, uint32_t len, uint16_t /*ring_descs*/) { push_used(head, len); }
  /// Writes one used element (not yet visible to the driver).
  void push_used(uint16_t head, uint32_t len) {
    VringUsedElem* e = &used_->ring[last_used_ & mask_];
    e->id = head;
    e->len = len;
    ++last_used_;
  }

  /// Makes pushed used elements visible (one index store) and signals the call eventfd
  /// when the driver asked for it (used_event with EVENT_IDX, else the NO_INTERRUPT flag;
  /// virtio 1.2 §2.7.10). `defer`: a call the driver asked for is noted instead, for
  /// flush_call() (transmit notification coalescing). Returns true if the driver asked.
  [[gnu::always_inline]] bool publish_used(bool defer = false) {
    if (last_used_ == published_used_) return false;
    const uint16_t old = published_used_;
    __atomic_store_n(&used_->idx, last_used_, __ATOMIC_RELEASE);
    published_used_ = last_used_;
    if (log_) [[unlikely]] log_used(old, last_used_);
    if (call_fd_ < 0) return false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our idx store before the driver's event read
    bool need;
    if (event_idx_) {
      const uint16_t used_event = __atomic_load_n(&avail_->ring[num_], __ATOMIC_RELAXED);
      need = need_event(used_event, last_used_, old);
    } else {
      need = !(__atomic_load_n(&avail_->flags, __ATOMIC_RELAXED) & kAvailFNoInterrupt);
    }
    call_if(need, defer);
    return need;
  }

  /// Asks the driver to kick (true) or not to (false) when it adds buffers
  /// (virtio 1.2 §2.7.10: avail_event with EVENT_IDX, else VRING_USED_F_NO_NOTIFY).
  /// After enabling, callers must check pending() again before sleeping.
  void set_kicks(bool enabled) {
    if (event_idx_) {
      uint16_t* avail_event = reinterpret_cast<uint16_t*>(&used_->ring[num_]);
      __atomic_store_n(avail_event, static_cast<uint16_t>(enabled ? last_avail_ : last_avail_ - 1),
                       __ATOMIC_RELAXED);
    } else {
      __atomic_store_n(&used_->flags, static_cast<uint16_t>(enabled ? 0 : kUsedFNoNotify),
                       __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (log_) [[unlikely]] {
      if (event_idx_) log_->mark(used_gpa_ + 4 + 8ull * num_, 2);  // avail_event
      else log_->mark(used_gpa_, 2);                                 // flags
    }
  }

 private:
  /// Marks the used ring's flags/idx and the entries [from, to) (mod size) in the log.
  void log_used(uint16_t from, uint16_t to) {
    log_->mark(used_gpa_, 4);
    mark_ring_entries(*log_, used_gpa_ + 4, sizeof(VringUsedElem), from & mask_,
                      static_cast<uint16_t>(to - from), num_);
  }

  /// pop() past its first descriptor `d` (a local copy of head's): chains, indirect
  /// tables, region splits, and every malformed chain.
  template <bool kDeviceWrites>
  PopStatus pop_walk(SegmentArena& arena, Chain* chain, uint16_t head, VringDesc d);

  /// Drops the chain at `head`: returns it to the driver with len 0 when the head is valid.
  PopStatus drop_chain(uint16_t head, PopStatus why) {
    if (head < num_) push_used(head, 0);
    return why;
  }

  VringDesc* desc_ = nullptr;
  VringAvail* avail_ = nullptr;
  VringUsed* used_ = nullptr;
  uint32_t mask_ = 0;
  uint16_t last_avail_ = 0;
  uint16_t shadow_avail_ = 0;  ///< the driver's avail index as last read
  uint16_t last_used_ = 0;
  uint16_t published_used_ = 0;
  uint64_t used_gpa_ = 0;
};

template <bool kDeviceWrites>
inline PopStatus SplitDeviceQueue::pop_any(SegmentArena& arena, Chain* chain, OneBuffer* one) {
  const uint16_t slot = last_avail_ & mask_;
  const uint16_t head = __atomic_load_n(&avail_->ring[slot], __ATOMIC_RELAXED);
  ++last_avail_;
  if (head >= num_) [[unlikely]] return PopStatus::kBadChain;  // hostile-inputs.md item 14

  VringDesc d;
  std::memcpy(&d, &desc_[head], sizeof d);
  pin_copy(d);  // item 13: only the local copy is used from here on
  if (uint8_t* p = one_descriptor_buffer<kDeviceWrites>(*mem_, d.flags, d.addr, d.len)) [[likely]] {
    *one = OneBuffer{p, d.len, head};
    return PopStatus::kOne;
  }
  return pop_walk<kDeviceWrites>(arena, chain, head, d);
}

template <bool kDeviceWrites>
inline PopStatus SplitDeviceQueue::pop(SegmentArena& arena, Chain* chain) {
  return pop_via_arena<kDeviceWrites>(*this, arena, chain);
}

template <bool kDeviceWrites>
[[gnu::noinline]] PopStatus SplitDeviceQueue::pop_walk(SegmentArena& arena, Chain* chain,
                                                  uint16_t head, VringDesc d) {
  const VringDesc* table = desc_;
  uint32_t table_size = num_;
  uint32_t ttl = num_;  // a chain never has more descriptors than the queue size (item 10)
  bool in_indirect = false;
  ChainWalk w;

  for (;;) {  // `d` holds a local copy of the next descriptor
    ++w.ndesc;
    if (d.flags & kDescFIndirect) {
      // virtio 1.2 §2.7.5.3: one indirect table per chain, not nested (item 12).
      if (in_indirect || !indirect_ || !indirect_table_fits(d.len, num_)) [[unlikely]]
        return drop_chain(head, PopStatus::kBadChain);
      const auto* t = reinterpret_cast<const VringDesc*>(mem_->translate_whole(d.addr, d.len));
      if (!t) [[unlikely]]
        return drop_chain(head, PopStatus::kBadChain);
      table = t;
      table_size = d.len / sizeof(VringDesc);
      ttl = table_size;
      in_indirect = true;
      std::memcpy(&d, &table[0], sizeof d);
      compiler_barrier();
      continue;
    }
    if (static_cast<bool>(d.flags & kDescFWrite) != kDeviceWrites) [[unlikely]]
      return drop_chain(head, PopStatus::kBadChain);
    if (!w.add(*mem_, arena, d.addr, d.len)) [[unlikely]]
      return drop_chain(head, PopStatus::kBadChain);
    if (!(d.flags & kDescFNext)) break;
    if (--ttl == 0 || d.next >= table_size) [[unlikely]]
      return drop_chain(head, PopStatus::kBadChain);
    std::memcpy(&d, &table[d.next], sizeof d);
    compiler_barrier();
  }
  if (!w.fits()) return drop_chain(head, PopStatus::kTooBig);
  w.finish(arena, chain, head, 1);
  return PopStatus::kOk;
}

}  // namespace vl::virtio
