#include "virtio/packed_driver_queue.h"

#include <fmt/format.h>

namespace vl::virtio {

bool PackedDriverQueue::init(DriverMemory& mem, uint32_t num, bool event_idx, std::string* err) {
  if (num == 0 || num > kMaxQueueSize) {
    *err = fmt::format("queue size {} outside 1..{}", num, kMaxQueueSize);
    return false;
  }
  bind(mem, num, event_idx);
  ring_ = reinterpret_cast<PackedDesc*>(mem.alloc(packed_ring_bytes(num), 16));
  driver_event_ = reinterpret_cast<PackedEvent*>(mem.alloc(kPackedEventBytes, 4));
  device_event_ = reinterpret_cast<PackedEvent*>(mem.alloc(kPackedEventBytes, 4));
  if (!ring_ || !driver_event_ || !device_event_) {
    *err = "driver memory too small for the packed ring";
    return false;
  }
  next_avail_ = next_used_ = 0;
  avail_wrap_ = used_wrap_ = true;  // virtio 1.2 §2.8.1
  pending_ = 0;
  first_ = nullptr;
  return true;
}

}  // namespace vl::virtio
