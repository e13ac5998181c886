#pragma once
// The buffer IDs of one driver-side virtqueue (split: descriptor heads; packed: buffer IDs,
// virtio 1.2 §2.8.6): which are free, which the device holds, and the caller's cookie for
// each. The device hands IDs back in the used ring; an ID it does not hold (out of range,
// never posted, or returned twice) is refused, so a hostile device cannot make the driver
// free a buffer twice or read a stale cookie.
#include <cstdint>
#include <vector>

namespace vl::virtio {

class DriverBufferIds {
 public:
  /// IDs 0..num-1, all free (num <= 32768).
  void reset(uint32_t num) {
    num_ = num;
    free_.clear();
    for (uint32_t i = num; i-- > 0;) free_.push_back(static_cast<uint16_t>(i));
    cookie_.assign(num, 0);
    posted_.assign(num, 0);
  }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t in_flight() const { return num_ - free_count(); }
  /// Takes a free ID for a buffer posted with `cookie`; false when none is free.
  bool take(uint32_t cookie, uint16_t* id) {
    if (free_.empty()) return false;
    *id = free_.back();
    free_.pop_back();
    cookie_[*id] = cookie;
    posted_[*id] = 1;
    return true;
  }
  /// The device returned `id`: frees it and gives its cookie. False (nothing changed) for
  /// an ID the device does not hold.
  bool give_back(uint32_t id, uint32_t* cookie) {
    if (id >= num_ || !posted_[id]) [[unlikely]] return false;
    posted_[id] = 0;
    *cookie = cookie_[id];
    free_.push_back(static_cast<uint16_t>(id));
    return true;
  }

 private:
  uint32_t num_ = 0;
  std::vector<uint16_t> free_;
  std::vector<uint32_t> cookie_;
  std::vector<uint8_t> posted_;  ///< 1 while the device holds the ID
};

}  // namespace vl::virtio
