#pragma once
// The driver side of a split virtqueue (virtio 1.2 §2.7), as a guest driver or DPDK's
// virtio PMD plays it: we own the rings, post buffers, and reclaim them from the used
// ring. Used by virtlink's front-end (gen, vnf). Each chain is one descriptor; a cookie per
// descriptor (a buffer index) comes back with its used entry.
//
// The device is a peer we talk to, not one we trust blindly: a used id we did not post, or a
// used index that runs ahead, stops the queue (broken()) instead of corrupting our state.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "virtio/driver_ring.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

class SplitDriverQueue : public DriverRingBase {
 public:
  /// Lays out a ring of `num` entries (a power of two <= 32768) in `mem`:
  /// descriptor table (16-byte aligned), avail ring, used ring (4096-byte aligned).
  bool init(DriverMemory& mem, uint32_t num, bool event_idx, std::string* err);

  uint64_t desc_uva() const { return mem_->uva(desc_); }
  uint64_t avail_uva() const { return mem_->uva(avail_); }
  uint64_t used_uva() const { return mem_->uva(used_); }
  uint16_t avail_idx() const { return avail_idx_; }
  /// SET_VRING_BASE's num for this ring: where the device resumes (the next avail index it
  /// reads: everything before it was used; 0 on a new ring).
  uint32_t vring_base() const { return last_used_; }

  /// Posts one buffer as a chain of one descriptor (not visible until publish()).
  /// `device_writes`: a receive buffer. Returns false when no descriptor is free.
  bool add(uint64_t gpa, uint32_t len, bool device_writes, uint32_t cookie) {
    uint16_t id;
    if (!ids_.take(cookie, &id)) return false;
    VringDesc& d = desc_[id];
    d.addr = gpa;
    d.len = len;
    d.flags = device_writes ? kDescFWrite : 0;
    d.next = 0;
    avail_->ring[avail_idx_ & mask_] = id;
    ++avail_idx_;
    return true;
  }

  /// Makes posted chains visible and kicks the device if it asked for it (avail_event
  /// with EVENT_IDX, else VRING_USED_F_NO_NOTIFY). Returns true if it kicked.
  bool publish() {
    if (avail_idx_ == published_) return false;
    const uint16_t old = published_;
    __atomic_store_n(&avail_->idx, avail_idx_, __ATOMIC_RELEASE);
    published_ = avail_idx_;
    if (kick_fd_ < 0) return false;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    bool need;
    if (event_idx_) {
      const uint16_t ev = __atomic_load_n(reinterpret_cast<uint16_t*>(&used_->ring[num_]),
                                          __ATOMIC_RELAXED);
      need = need_event(ev, avail_idx_, old);
    } else {
      need = !(__atomic_load_n(&used_->flags, __ATOMIC_RELAXED) & kUsedFNoNotify);
    }
    return kick_if(need);
  }

  /// Takes the next used entry: its cookie and the bytes the device wrote.
  bool get_used(uint32_t* cookie, uint32_t* len) {
    if (last_used_ == shadow_used_) {
      shadow_used_ = __atomic_load_n(&used_->idx, __ATOMIC_ACQUIRE);
      if (last_used_ == shadow_used_) return false;
      if (static_cast<uint16_t>(shadow_used_ - last_used_) > num_) [[unlikely]] {
        broken_ = true;
        shadow_used_ = last_used_;
        return false;
      }
    }
    const VringUsedElem e = used_->ring[last_used_ & mask_];
    ++last_used_;
    if (!ids_.give_back(e.id, cookie)) [[unlikely]] {  // an id we did not post
      broken_ = true;
      return false;
    }
    *len = e.len;
    return true;
  }

  /// Used entries ready to take: refreshes the cached used index only when everything
  /// cached was taken (so get_used() then returns exactly these without another read).
  uint32_t used_ready() {
    if (last_used_ == shadow_used_) {
      shadow_used_ = __atomic_load_n(&used_->idx, __ATOMIC_ACQUIRE);
      if (static_cast<uint16_t>(shadow_used_ - last_used_) > num_) [[unlikely]] {
        broken_ = true;
        shadow_used_ = last_used_;
      }
    }
    return static_cast<uint16_t>(shadow_used_ - last_used_);
  }

  /// Asks the device for used-buffer notifications (true) or not (false).
  void set_interrupts(bool on) {
    if (event_idx_) {
      __atomic_store_n(&avail_->ring[num_], static_cast<uint16_t>(on ? last_used_ : last_used_ - 1),
                       __ATOMIC_RELAXED);
    } else {
      __atomic_store_n(&avail_->flags, static_cast<uint16_t>(on ? 0 : kAvailFNoInterrupt),
                       __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  /// True if the device has returned buffers we have not taken yet.
  bool has_used() {
    return last_used_ != __atomic_load_n(&used_->idx, __ATOMIC_ACQUIRE);
  }

 private:
  VringDesc* desc_ = nullptr;
  VringAvail* avail_ = nullptr;
  VringUsed* used_ = nullptr;
  uint32_t mask_ = 0;
  uint16_t avail_idx_ = 0;
  uint16_t published_ = 0;
  uint16_t last_used_ = 0;
  uint16_t shadow_used_ = 0;
};

/// Fixed-size packet buffers in driver memory, handed out by index (the SplitDriverQueue cookie).
class BufferPool {
 public:
  bool init(DriverMemory& mem, uint32_t count, uint32_t buf_size, std::string* err);
  uint8_t* data(uint32_t i) const { return base_ + size_t{i} * buf_size_; }
  uint64_t gpa(uint32_t i) const { return gpa_base_ + uint64_t{i} * buf_size_; }
  uint32_t buf_size() const { return buf_size_; }
  bool get(uint32_t* i) {
    if (free_.empty()) return false;
    *i = free_.back();
    free_.pop_back();
    return true;
  }
  void put(uint32_t i) { free_.push_back(i); }
  uint32_t available() const { return static_cast<uint32_t>(free_.size()); }

 private:
  uint8_t* base_ = nullptr;
  uint64_t gpa_base_ = 0;
  uint32_t buf_size_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace vl::virtio
