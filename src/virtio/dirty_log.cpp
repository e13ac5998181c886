#include "virtio/dirty_log.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "virtio/guest_memory.h"
#include "virtio/sigbus_guard.h"

namespace vl::virtio {

DirtyLog::~DirtyLog() { unmap(); }

void DirtyLog::unmap() {
  if (!map_base_) return;
  SigbusGuard::remove(guard_slot_);
  munmap(map_base_, map_len_);
  map_base_ = nullptr;
  guard_slot_ = -1;
}

bool DirtyLog::map(int fd, uint64_t size, uint64_t offset, std::string* err) {
  if (size == 0 || size > kMaxBytes) {
    *err = fmt::format("log of {} bytes (1 to {} accepted)", size, kMaxBytes);
    return false;
  }
  if (offset > ~uint64_t{0} - size) {
    *err = fmt::format("log offset {:#x} + size {:#x} overflows", offset, size);
    return false;
  }
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    *err = "log fd cannot be inspected";
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = "log fd is not a regular file (memfd)";
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) < offset + size) {
    *err = fmt::format("log fd of {} bytes is smaller than offset {} + size {}", st.st_size,
                       offset, size);
    return false;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_off = offset & ~(page - 1);
  const uint64_t delta = offset - map_off;
  const uint64_t len = size + delta;  // no overflow: size <= kMaxBytes, delta < page
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_off));
  if (p == MAP_FAILED) {
    *err = "log mmap failed";
    return false;
  }
  // The front-end can truncate the file under us (as it can its guest memory): registered,
  // a mark into a vanished page lands in a zero page instead of killing the switch with
  // SIGBUS, and faulted() tells the port to drop the connection.
  const int slot = SigbusGuard::add(p, len);
  if (slot < 0) {
    munmap(p, len);
    *err = "log not mapped: too many guarded mappings";
    return false;
  }
  unmap();
  guard_slot_ = slot;
  map_base_ = p;
  map_len_ = len;
  base_ = static_cast<uint8_t*>(p) + delta;
  size_ = size;
  return true;
}

bool DirtyLog::faulted() const { return SigbusGuard::faulted(guard_slot_); }

void DirtyLog::mark(uint64_t gpa, uint64_t len) {
  if (len == 0) return;
  const uint64_t first = gpa >> kPageShift;
  const uint64_t last_addr = gpa + len - 1 < gpa ? ~uint64_t{0} : gpa + len - 1;
  const uint64_t last = last_addr >> kPageShift;
  const uint64_t limit = size_ * 8;  // pages the bitmap covers
  uint64_t fresh = 0;
  // The caller's writes are ordered before the bit (a locked OR is a full barrier on x86;
  // seq_cst keeps that on other targets): QEMU reads the page after it clears the bit.
  uint64_t pg = first;
  for (; pg <= last && pg < limit; ++pg) {
    const uint8_t m = static_cast<uint8_t>(1u << (pg & 7));
    const uint8_t old = __atomic_fetch_or(&base_[pg >> 3], m, __ATOMIC_SEQ_CST);
    fresh += !(old & m);
  }
  if (fresh) stats_->pages_logged.fetch_add(fresh, std::memory_order_relaxed);
  if (pg <= last) [[unlikely]]
    stats_->out_of_range.fetch_add(last - pg + 1, std::memory_order_relaxed);
}

void DirtyLog::mark_host(const GuestMemory& mem, const uint8_t* p, uint64_t len) {
  const uint32_t n = mem.region_count();
  for (uint32_t i = 0; i < n; ++i) {
    const MappedRegion& r = mem.region(i);
    const uint64_t off = static_cast<uint64_t>(p - r.host);  // wraps below the region
    if (p >= r.host && off < r.size) {
      const uint64_t k = len < r.size - off ? len : r.size - off;
      mark(r.gpa + off, k);
      return;  // a buffer segment never spans regions (translate() splits at edges)
    }
  }
}

}  // namespace vl::virtio
