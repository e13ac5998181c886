#include "virtio/split_driver_queue.h"

#include <fmt/format.h>

namespace vl::virtio {

bool SplitDriverQueue::init(DriverMemory& mem, uint32_t num, bool event_idx, std::string* err) {
  if (num == 0 || num > kMaxQueueSize || (num & (num - 1))) {
    *err = fmt::format("queue size {} is not a power of two up to {}", num, kMaxQueueSize);
    return false;
  }
  bind(mem, num, event_idx);
  mask_ = num - 1;
  desc_ = reinterpret_cast<VringDesc*>(mem.alloc(desc_table_bytes(num), 16));
  avail_ = reinterpret_cast<VringAvail*>(mem.alloc(avail_ring_bytes(num), 2));
  used_ = reinterpret_cast<VringUsed*>(mem.alloc(used_ring_bytes(num), 4096));
  if (!desc_ || !avail_ || !used_) {
    *err = "driver memory too small for the rings";
    return false;
  }
  avail_idx_ = published_ = last_used_ = shadow_used_ = 0;
  return true;
}

bool BufferPool::init(DriverMemory& mem, uint32_t count, uint32_t buf_size, std::string* err) {
  buf_size_ = (buf_size + 63) & ~63u;
  base_ = mem.alloc(size_t{count} * buf_size_, 4096);
  if (!base_) {
    *err = fmt::format("driver memory too small for {} buffers of {} bytes", count, buf_size_);
    return false;
  }
  gpa_base_ = mem.gpa(base_);
  free_.clear();
  for (uint32_t i = count; i-- > 0;) free_.push_back(i);
  return true;
}

}  // namespace vl::virtio
