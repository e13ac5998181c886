#pragma once
// What the driver side of both ring layouts shares: the driver memory the ring lives in,
// its size, the buffer IDs in flight, the kick and call eventfds and the broken state.
// SplitDriverQueue (split) and PackedDriverQueue (packed) derive from it; docs/architecture.md
// "Rings".
#include <sys/eventfd.h>

#include <cstdint>

#include "virtio/driver_buffer_ids.h"
#include "virtio/driver_memory.h"

namespace vl::virtio {

class DriverRingBase {
 public:
  uint32_t size() const { return num_; }
  void set_kick_fd(int fd) { kick_fd_ = fd; }
  void set_call_fd(int fd) { call_fd_ = fd; }
  int call_fd() const { return call_fd_; }
  /// The device broke the ring (a used ID we did not post, a used index running ahead).
  bool broken() const { return broken_; }
  uint32_t free_descs() const { return ids_.free_count(); }
  /// Chains posted and not yet returned by the device.
  uint32_t in_flight() const { return ids_.in_flight(); }

 protected:
  /// init()'s common part, once the layout's rings are allocated in `mem`.
  void bind(DriverMemory& mem, uint32_t num, bool event_idx) {
    mem_ = &mem;
    num_ = num;
    event_idx_ = event_idx;
    ids_.reset(num);
    broken_ = false;
  }
  /// Kicks the device when `need` (publish(), after the layout's suppression check).
  bool kick_if(bool need) const {
    if (need) eventfd_write(kick_fd_, 1);
    return need;
  }

  DriverMemory* mem_ = nullptr;
  uint32_t num_ = 0;
  bool event_idx_ = false;  ///< VIRTIO_RING_F_EVENT_IDX negotiated
  bool broken_ = false;
  int kick_fd_ = -1;
  int call_fd_ = -1;
  DriverBufferIds ids_;
};

}  // namespace vl::virtio
