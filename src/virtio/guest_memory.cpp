#include "virtio/guest_memory.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "virtio/sigbus_guard.h"

namespace vl::virtio {

namespace {
bool add_overflows(uint64_t a, uint64_t b) { return a + b < a; }
bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;  // no overflow: validated before
}
}  // namespace

GuestMemory::~GuestMemory() { unmap_all(); }

void GuestMemory::unmap_all() {
  if (owned_) {
    for (uint32_t i = 0; i < n_; ++i) {
      SigbusGuard::remove(regions_[i].guard_slot);
      if (regions_[i].map_base) munmap(regions_[i].map_base, regions_[i].map_len);
    }
  }
  for (uint32_t i = 0; i < n_; ++i) regions_[i] = MappedRegion{};  // translate_whole reads [0]
  n_ = 0;
}

bool GuestMemory::validate(const MemRegionDesc* r, uint32_t n, std::string* err) const {
  if (n == 0 || n > kMaxRegions) {
    *err = fmt::format("{} memory regions (1 to {} allowed)", n, kMaxRegions);
    return false;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (uint32_t i = 0; i < n; ++i) {
    const MemRegionDesc& a = r[i];
    if (a.memory_size == 0) {
      *err = fmt::format("region {} has size 0", i);
      return false;
    }
    if (add_overflows(a.guest_phys_addr, a.memory_size) ||
        add_overflows(a.userspace_addr, a.memory_size) ||
        add_overflows(a.mmap_offset, a.memory_size) ||
        add_overflows(a.mmap_offset + a.memory_size, page)) {
      *err = fmt::format("region {} overflows (gpa {:#x} uva {:#x} offset {:#x} size {:#x})", i,
                         a.guest_phys_addr, a.userspace_addr, a.mmap_offset, a.memory_size);
      return false;
    }
    for (uint32_t j = 0; j < i; ++j) {
      const MemRegionDesc& b = r[j];
      if (ranges_overlap(a.guest_phys_addr, a.memory_size, b.guest_phys_addr, b.memory_size)) {
        *err = fmt::format("regions {} and {} overlap in guest-physical space", j, i);
        return false;
      }
      if (ranges_overlap(a.userspace_addr, a.memory_size, b.userspace_addr, b.memory_size)) {
        *err = fmt::format("regions {} and {} overlap in userspace addresses", j, i);
        return false;
      }
    }
  }
  return true;
}

bool GuestMemory::build(const MemRegionDesc* r, const int* fds, uint32_t n, std::string* err,
                        uint64_t max_bytes) {
  unmap_all();
  if (!validate(r, n, err)) return false;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    // No overflow: validate() checked offset + size + page.
    const uint64_t in_page = r[i].mmap_offset & (page - 1);
    const uint64_t len = (in_page + r[i].memory_size + page - 1) & ~(page - 1);
    total += len;  // at most 8 regions of < 2^64 - page each: checked below per step
    if (total < len || total > max_bytes) {
      *err = fmt::format("memory table maps more than the {} bytes allowed per connection",
                         max_bytes);
      return false;
    }
  }
  owned_ = true;
  for (uint32_t i = 0; i < n; ++i) {
    struct stat st;
    if (fstat(fds[i], &st) != 0) {
      *err = fmt::format("region {}: fstat failed", i);
      unmap_all();
      return false;
    }
    const uint64_t need = r[i].mmap_offset + r[i].memory_size;
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < need) {
      *err = fmt::format("region {}: fd holds {} bytes, region needs {}", i, st.st_size, need);
      unmap_all();
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      *err = fmt::format("region {}: fd is not a regular file or memfd", i);
      unmap_all();
      return false;
    }
    const uint64_t in_page = r[i].mmap_offset & (page - 1);
    const uint64_t len = (in_page + r[i].memory_size + page - 1) & ~(page - 1);
    void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i],
                      static_cast<off_t>(r[i].mmap_offset - in_page));
    if (base == MAP_FAILED) {
      *err = fmt::format("region {}: mmap of {} bytes failed", i, len);
      unmap_all();
      return false;
    }
    MappedRegion& m = regions_[i];
    m.gpa = r[i].guest_phys_addr;
    m.size = r[i].memory_size;
    m.uva = r[i].userspace_addr;
    m.host = static_cast<uint8_t*>(base) + in_page;
    m.map_base = base;
    m.map_len = len;
    m.guard_slot = SigbusGuard::add(base, len);
    n_ = i + 1;
  }
  return true;
}

bool GuestMemory::build_unowned(const MemRegionDesc* r, uint8_t* const* hosts, uint32_t n,
                                std::string* err) {
  unmap_all();
  if (!validate(r, n, err)) return false;
  owned_ = false;
  for (uint32_t i = 0; i < n; ++i) {
    regions_[i] = MappedRegion{r[i].guest_phys_addr, r[i].memory_size, r[i].userspace_addr,
                               hosts[i], nullptr, 0};
  }
  n_ = n;
  return true;
}

uint8_t* GuestMemory::uva_to_host(uint64_t uva, uint64_t len) const {
  for (uint32_t i = 0; i < n_; ++i) {
    const MappedRegion& r = regions_[i];
    const uint64_t off = uva - r.uva;
    if (off < r.size) return (len <= r.size - off) ? r.host + off : nullptr;
  }
  return nullptr;
}

bool GuestMemory::uva_to_gpa(uint64_t uva, uint64_t* gpa) const {
  for (uint32_t i = 0; i < n_; ++i) {
    const MappedRegion& r = regions_[i];
    const uint64_t off = uva - r.uva;
    if (off < r.size) {
      *gpa = r.gpa + off;
      return true;
    }
  }
  return false;
}

bool GuestMemory::faulted() const {
  for (uint32_t i = 0; i < n_; ++i)
    if (SigbusGuard::faulted(regions_[i].guard_slot)) return true;
  return false;
}

bool GuestMemory::table_bytes(const MemRegionDesc* r, uint32_t n, uint64_t* bytes,
                              std::string* err) {
  const GuestMemory probe;  // validate() reads no state of its own
  if (!probe.validate(r, n, err)) return false;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    // No overflow in a region's length: validate() checked offset + size + page.
    const uint64_t in_page = r[i].mmap_offset & (page - 1);
    const uint64_t len = (in_page + r[i].memory_size + page - 1) & ~(page - 1);
    total = total + len < total ? UINT64_MAX : total + len;  // saturates
  }
  *bytes = total;
  return true;
}

uint64_t GuestMemory::mapped_bytes() const {
  uint64_t t = 0;
  for (uint32_t i = 0; i < n_; ++i) t += regions_[i].map_len;
  return t;
}

}  // namespace vl::virtio
