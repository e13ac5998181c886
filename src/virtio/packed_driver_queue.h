#pragma once
// The driver side of a packed virtqueue (virtio 1.2 §2.8), as a guest driver or DPDK's
// virtio PMD with packed_vq=1 plays it; the counterpart of split_driver_queue.h (split rings) with
// the same interface, so that the front-end's users (gen) are templates over the queue type
// and choose the ring once per queue: no virtual call per packet.
//
// One descriptor ring that we and the device both write, an avail wrap counter for the
// slots we make available and a used wrap counter for the slots we read back (both start at
// 1, §2.8.1), and two event suppression structures (§2.8.10): the driver area (ours: may the
// device notify us?) and the device area (the device's: may we kick?). Each chain is one
// descriptor; its buffer ID (§2.8.6) indexes our cookie table and comes back in the used
// descriptor.
//
// A burst of add() calls writes every descriptor but the burst's first one completely;
// publish() stores the first one's flags last (release), so the device sees the burst at
// once (§2.8.21 "the driver ... exposes the first descriptor last").
//
// The device is a peer we talk to, not one we trust blindly: a used descriptor with a buffer
// ID we did not post, or one written while nothing is in flight, stops the queue (broken())
// instead of corrupting our state. Descriptors are read once into locals.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "virtio/driver_ring.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

class PackedDriverQueue : public DriverRingBase {
 public:
  /// Lays out a ring of `num` descriptors (1..32768; a packed ring need not be a power of
  /// two) in `mem`: the descriptor ring (16-byte aligned, §2.8.13) and the driver and device
  /// event suppression structures (4 bytes each, 4-byte aligned). `event_idx`: the
  /// RING_EVENT_IDX feature was negotiated (descriptor-specific event suppression).
  bool init(DriverMemory& mem, uint32_t num, bool event_idx, std::string* err);

  /// SET_VRING_ADDR for packed rings (vhost-user.rst): desc = the descriptor ring,
  /// avail = the driver event suppression area, used = the device event suppression area.
  uint64_t desc_uva() const { return mem_->uva(ring_); }
  uint64_t avail_uva() const { return mem_->uva(driver_event_); }
  uint64_t used_uva() const { return mem_->uva(device_event_); }
  /// SET_VRING_BASE's num for this ring (vhost-user.rst "Vring descriptor indices for packed
  /// virtqueues"): where the device resumes, the slot after the last one it used, in bits
  /// 0-14 and its wrap counter in bit 15 (slot 0, wrap 1 on a new ring).
  uint32_t vring_base() const { return uint32_t{next_used_} | uint32_t{used_wrap_} << 15; }

  /// Posts one buffer as a chain of one descriptor (not visible until publish()).
  /// `device_writes`: a receive buffer (VIRTQ_DESC_F_WRITE). Returns false when no
  /// descriptor is free.
  bool add(uint64_t gpa, uint32_t len, bool device_writes, uint32_t cookie) {
    uint16_t id;
    if (!ids_.take(cookie, &id)) return false;
    PackedDesc* d = &ring_[next_avail_];
    d->addr = gpa;
    d->len = len;
    d->id = id;
    const uint16_t f = static_cast<uint16_t>(
        (device_writes ? kDescFWrite : 0) |
        (avail_wrap_ ? kPackedDescFAvail : kPackedDescFUsed));  // §2.8.1: AVAIL=wrap, USED=!wrap
    if (!pending_) {
      first_ = d;
      first_flags_ = f;
    } else {
      __atomic_store_n(&d->flags, f, __ATOMIC_RELEASE);
    }
    ++pending_;
    if (++next_avail_ >= num_) {
      next_avail_ = 0;
      avail_wrap_ = !avail_wrap_;
    }
    return true;
  }

  /// Makes posted chains visible (the burst's first flags stored last) and kicks the device
  /// if its event suppression structure asks for it (§2.8.10: ENABLE; DESC with EVENT_IDX
  /// when the event offset is among the descriptors just made available). Returns true if it
  /// kicked.
  bool publish() {
    if (!pending_) return false;
    __atomic_store_n(&first_->flags, first_flags_, __ATOMIC_RELEASE);
    const uint16_t added = pending_;
    pending_ = 0;
    if (kick_fd_ < 0) return false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our flags stores before the device area read
    const uint16_t flags = __atomic_load_n(&device_event_->flags, __ATOMIC_RELAXED);
    bool need;
    if (flags == kRingEventFlagsDesc && event_idx_) {
      // Slots on one line: an event offset in the lap before ours counts as negative.
      const uint16_t off_wrap = __atomic_load_n(&device_event_->off_wrap, __ATOMIC_RELAXED);
      uint16_t ev = off_wrap & 0x7fff;
      if (static_cast<bool>(off_wrap >> 15) != avail_wrap_) ev = static_cast<uint16_t>(ev - num_);
      const uint16_t now = next_avail_;
      const uint16_t old = static_cast<uint16_t>(now - added);  // negative if the burst wrapped
      need = need_event(ev, now, old);
    } else {
      need = flags != kRingEventFlagsDisable;
    }
    return kick_if(need);
  }

  /// Takes the next used descriptor (§2.8.1: AVAIL and USED both equal to our used wrap
  /// counter): its cookie and the bytes the device wrote (0 unless VIRTQ_DESC_F_WRITE).
  bool get_used(uint32_t* cookie, uint32_t* len) {
    const uint16_t f = __atomic_load_n(&ring_[next_used_].flags, __ATOMIC_ACQUIRE);
    if (!is_used(f)) return false;
    if (ids_.in_flight() == 0) [[unlikely]] {  // a used descriptor while nothing is in flight
      broken_ = true;
      return false;
    }
    PackedDesc d;
    std::memcpy(&d, &ring_[next_used_], sizeof d);
    __asm__ __volatile__("" ::: "memory");  // only the local copy is used from here on
    const uint16_t id = d.id;
    if (!ids_.give_back(id, cookie)) [[unlikely]] {  // a buffer ID we did not post
      broken_ = true;
      return false;
    }
    *len = (f & kDescFWrite) ? d.len : 0;
    if (++next_used_ >= num_) {  // each chain took one slot
      next_used_ = 0;
      used_wrap_ = !used_wrap_;
    }
    return true;
  }

  /// Used descriptors ready to take, counted from the next used slot (at most kScanMax:
  /// a packed ring has no used index, so the flags are read one by one).
  static constexpr uint32_t kScanMax = 64;
  uint32_t used_ready() {
    const uint32_t limit = std::min<uint32_t>(in_flight(), kScanMax);
    uint16_t pos = next_used_;
    bool wrap = used_wrap_;
    uint32_t n = 0;
    while (n < limit) {
      const uint16_t f = __atomic_load_n(&ring_[pos].flags, __ATOMIC_ACQUIRE);
      if (static_cast<bool>(f & kPackedDescFAvail) != wrap ||
          static_cast<bool>(f & kPackedDescFUsed) != wrap)
        break;
      ++n;
      if (++pos >= num_) {
        pos = 0;
        wrap = !wrap;
      }
    }
    return n;
  }

  /// Asks the device for used-buffer notifications (true) or not (false), in the driver
  /// event suppression structure (§2.8.10): DISABLE; with EVENT_IDX, DESC at the next used
  /// slot (notify when that descriptor is used), else ENABLE.
  void set_interrupts(bool on) {
    if (!on) {
      __atomic_store_n(&driver_event_->flags, kRingEventFlagsDisable, __ATOMIC_RELAXED);
    } else if (event_idx_) {
      __atomic_store_n(&driver_event_->off_wrap,
                       static_cast<uint16_t>(next_used_ | uint16_t{used_wrap_} << 15),
                       __ATOMIC_RELAXED);
      __atomic_store_n(&driver_event_->flags, kRingEventFlagsDesc, __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(&driver_event_->flags, kRingEventFlagsEnable, __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  /// True if the device has returned buffers we have not taken yet.
  bool has_used() const {
    return is_used(__atomic_load_n(&ring_[next_used_].flags, __ATOMIC_ACQUIRE));
  }

  // For tests: the ring positions.
  uint16_t next_avail() const { return next_avail_; }
  bool avail_wrap() const { return avail_wrap_; }
  uint16_t next_used() const { return next_used_; }
  bool used_wrap() const { return used_wrap_; }

 private:
  bool is_used(uint16_t f) const {
    return static_cast<bool>(f & kPackedDescFAvail) == used_wrap_ &&
           static_cast<bool>(f & kPackedDescFUsed) == used_wrap_;
  }

  PackedDesc* ring_ = nullptr;
  PackedEvent* driver_event_ = nullptr;  ///< written by us: may the device notify?
  PackedEvent* device_event_ = nullptr;  ///< written by the device: may we kick?
  PackedDesc* first_ = nullptr;          ///< the unpublished burst's first descriptor
  uint16_t first_flags_ = 0;
  uint16_t pending_ = 0;  ///< descriptors added since the last publish()
  uint16_t next_avail_ = 0;
  bool avail_wrap_ = true;
  uint16_t next_used_ = 0;
  bool used_wrap_ = true;
};

}  // namespace vl::virtio
