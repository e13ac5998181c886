#pragma once
// Memory a virtio driver (front-end) owns and shares with a back-end: one memfd region,
// mapped here, handed over with VHOST_USER_SET_MEM_TABLE. Rings and packet buffers are
// carved from it with a bump allocator; guest-physical addresses are offsets from
// kGpaBase, front-end virtual addresses are our own pointers (as QEMU's are).
#include <cstddef>
#include <cstdint>
#include <string>

#include "util/fd.h"
#include "virtio/guest_memory.h"

namespace vl::virtio {

class DriverMemory {
 public:
  /// Guest-physical address of the first byte (not 0, so a zero address is always wrong).
  static constexpr uint64_t kGpaBase = 0x100000;

  DriverMemory() = default;
  DriverMemory(const DriverMemory&) = delete;
  DriverMemory& operator=(const DriverMemory&) = delete;
  ~DriverMemory();

  /// Creates and maps a memfd of `bytes` (rounded up to 2 MiB). False with `*err` on error.
  bool create(size_t bytes, const std::string& name, std::string* err);

  /// Allocates `bytes` aligned to `align` (a power of two), zeroed; nullptr when full.
  uint8_t* alloc(size_t bytes, size_t align);

  uint64_t gpa(const void* p) const { return kGpaBase + (static_cast<const uint8_t*>(p) - base_); }
  uint64_t uva(const void* p) const { return reinterpret_cast<uint64_t>(p); }
  uint8_t* host(uint64_t gpa) const { return base_ + (gpa - kGpaBase); }
  int fd() const { return fd_.get(); }
  size_t size() const { return size_; }
  /// The region as SET_MEM_TABLE describes it.
  MemRegionDesc region() const { return {kGpaBase, size_, uva(base_), 0}; }

 private:
  UniqueFd fd_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

}  // namespace vl::virtio
