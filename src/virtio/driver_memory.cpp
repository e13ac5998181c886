#include "virtio/driver_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace vl::virtio {

DriverMemory::~DriverMemory() {
  if (base_) munmap(base_, size_);
}

bool DriverMemory::create(size_t bytes, const std::string& name, std::string* err) {
  const size_t unit = 2u << 20;
  size_ = (bytes + unit - 1) / unit * unit;
  fd_.reset(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!fd_.valid() || ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
    *err = fmt::format("memfd of {} bytes: {}", size_, strerror(errno));
    return false;
  }
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_.get(), 0);
  if (p == MAP_FAILED) {
    *err = fmt::format("mmap of {} bytes: {}", size_, strerror(errno));
    return false;
  }
  base_ = static_cast<uint8_t*>(p);
  return true;
}

uint8_t* DriverMemory::alloc(size_t bytes, size_t align) {
  const size_t start = (used_ + align - 1) & ~(align - 1);
  if (start + bytes > size_) return nullptr;
  used_ = start + bytes;
  std::memset(base_ + start, 0, bytes);
  return base_ + start;
}

}  // namespace vl::virtio
