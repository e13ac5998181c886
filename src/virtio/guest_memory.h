#pragma once
// Guest memory as the back-end sees it: the regions a front-end shares with
// VHOST_USER_SET_MEM_TABLE (vhost-user.rst "Memory region description"), mapped into
// this process.
//
// Security model: every address a front-end gives us (descriptor addresses are
// guest-physical, ring addresses are front-end virtual addresses) is untrusted. The only
// way to turn one into a pointer is translate()/uva_to_host(), which take a length and
// never return a range that leaves one mapping. A failed translation is an error whatever
// the length, including 0 (hostile-inputs.md items 7-9).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vl::virtio {

/// One region of a memory table, as carried by SET_MEM_TABLE (vhost-user.rst).
struct MemRegionDesc {
  uint64_t guest_phys_addr;  ///< first guest-physical address of the region
  uint64_t memory_size;      ///< bytes
  uint64_t userspace_addr;   ///< the front-end's virtual address of the region
  uint64_t mmap_offset;      ///< offset of the region in the fd
};

/// A mapped region.
struct MappedRegion {
  uint64_t gpa = 0;       ///< first guest-physical address
  uint64_t size = 0;      ///< bytes
  uint64_t uva = 0;       ///< front-end virtual address
  uint8_t* host = nullptr;  ///< our address of gpa
  void* map_base = nullptr;  ///< what mmap returned
  size_t map_len = 0;     ///< bytes mapped (size + offset within its page, page-rounded)
  int guard_slot = -1;    ///< SigbusGuard registration
};

/// The mapped memory table of one front-end. Immutable after build(); destroying it unmaps.
/// Thread-safe for concurrent translate() calls.
class GuestMemory {
 public:
  /// Most regions a table may hold. vhost-user.rst: VHOST_MEMORY_BASELINE_NREGIONS = 8.
  static constexpr uint32_t kMaxRegions = 8;

  GuestMemory() = default;
  GuestMemory(const GuestMemory&) = delete;
  GuestMemory& operator=(const GuestMemory&) = delete;
  ~GuestMemory();

  /// Validates and maps `n` regions whose fds are `fds[i]` (not taken over: the caller
  /// closes them; mappings stay valid after close). Rejects: n == 0 or > kMaxRegions, a
  /// zero size, an address or offset range that overflows 64 bits (also after page
  /// rounding), overlapping guest-physical or userspace ranges, an fd smaller than
  /// offset + size, more than `max_bytes` in all (page-rounded), or a failed mmap. Each
  /// region is mapped from the page holding its mmap_offset, not from offset 0. On error
  /// returns false with `*err` set and maps nothing.
  bool build(const MemRegionDesc* regions, const int* fds, uint32_t n, std::string* err,
             uint64_t max_bytes = ~uint64_t{0});

  /// Builds a table over memory this process already has (no mmap, nothing unmapped on
  /// destruction): for tests and for the front-end side, which owns its memory.
  bool build_unowned(const MemRegionDesc* regions, uint8_t* const* hosts, uint32_t n,
                     std::string* err);

  /// Translates a guest-physical range. Returns our pointer to `gpa` and sets `*contig`
  /// to the bytes that are contiguous there (>= 1, <= len; 1 when len is 0), or returns
  /// nullptr when `gpa` is in no region. Callers loop on the rest of the range.
  inline uint8_t* translate(uint64_t gpa, uint64_t len, uint64_t* contig) const {
    for (uint32_t i = 0; i < n_; ++i) {
      const MappedRegion& r = regions_[i];
      const uint64_t off = gpa - r.gpa;  // wraps when gpa < r.gpa, then fails the test below
      if (off < r.size) {
        const uint64_t avail = r.size - off;
        *contig = len == 0 ? 1 : (len < avail ? len : avail);
        return r.host + off;
      }
    }
    return nullptr;
  }

  /// Translates a guest-physical range that must be contiguous in one region (ring parts,
  /// indirect tables). nullptr if any byte of [gpa, gpa+len) is outside that region.
  inline uint8_t* translate_whole(uint64_t gpa, uint64_t len) const {
    // The first region without the loop: most guests have one. (Unused entries are all
    // zero, so with no region this fails the size test.)
    const uint64_t off0 = gpa - regions_[0].gpa;
    if (off0 < regions_[0].size) [[likely]]
      return len <= regions_[0].size - off0 ? regions_[0].host + off0 : nullptr;
    for (uint32_t i = 1; i < n_; ++i) {
      const MappedRegion& r = regions_[i];
      const uint64_t off = gpa - r.gpa;  // wraps when gpa < r.gpa, then fails the test below
      if (off < r.size) return len <= r.size - off ? r.host + off : nullptr;
    }
    return nullptr;
  }

  /// Translates a front-end virtual range (SET_VRING_ADDR addresses) that must lie in one
  /// region. nullptr if it does not.
  uint8_t* uva_to_host(uint64_t uva, uint64_t len) const;

  /// Translates a front-end virtual address to guest-physical; false if in no region.
  bool uva_to_gpa(uint64_t uva, uint64_t* gpa) const;

  uint32_t region_count() const { return n_; }
  const MappedRegion& region(uint32_t i) const { return regions_[i]; }
  /// Bytes mapped in total (for the stats and the leak tests).
  uint64_t mapped_bytes() const;
  /// Bytes build() would map for these regions (each from its offset's page, rounded up to
  /// pages), checked as build() checks them first (false with `*err` for a table build()
  /// refuses as invalid), without mapping anything: a switch-wide cap is checked before the
  /// table is mapped (vhost/memory_budget.h).
  static bool table_bytes(const MemRegionDesc* regions, uint32_t n, uint64_t* bytes,
                          std::string* err);
  /// True if the front-end truncated a region's file under us and an access to it faulted
  /// (SigbusGuard replaced the page by a zero page): the connection must be dropped.
  bool faulted() const;

 private:
  void unmap_all();
  bool validate(const MemRegionDesc* regions, uint32_t n, std::string* err) const;

  MappedRegion regions_[kMaxRegions];
  uint32_t n_ = 0;
  bool owned_ = false;
};

}  // namespace vl::virtio
