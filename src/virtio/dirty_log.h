#pragma once
// The dirty-page log of live migration (vhost-user.rst "Migration", SET_LOG_BASE): a bitmap
// the front-end shares (a memfd, protocol feature LOG_SHMFD), one bit per 4 KiB page of
// guest-physical address space, bit (gpa / 4096) % 8 of byte gpa / 4096 / 8. While the
// front-end has VHOST_F_LOG_ALL set, the back-end sets the bit of every page it writes into
// guest memory (receive buffers, used rings, packed descriptor write-backs); QEMU reads and
// clears the bitmap (atomically, concurrently with us) and sends those pages again.
//
// Security model: the mapping's size and offset come from the front-end. map() checks them
// against the fd (fstat) before mmap; mark() never touches a byte past the mapped size,
// whatever address it is given (a bit past the end is counted in out_of_range(), not
// written). Bits are set with atomic OR of one byte (as DPDK's vhost_log_page does), so
// concurrent PMD threads and QEMU's clearing never lose a bit.
//
// Cost: nothing is called unless logging is on (queues hold a null DirtyLog* otherwise).
#include <atomic>
#include <cstdint>
#include <string>

namespace vl::virtio {

class GuestMemory;

/// Counters of one port's dirty logging, kept across log replacements (read by `ctl stats`).
struct DirtyLogStats {
  std::atomic<uint64_t> pages_logged{0};  ///< bits we set that were clear (pages newly dirtied)
  std::atomic<uint64_t> out_of_range{0};  ///< pages past the end of the log (not marked)
};

class DirtyLog {
 public:
  /// Page size of the log: one bit covers this many bytes of guest-physical memory.
  static constexpr uint64_t kPageShift = 12;
  /// Largest log accepted (bytes): covers 8 TiB of guest-physical address space.
  static constexpr uint64_t kMaxBytes = uint64_t{256} << 20;

  explicit DirtyLog(DirtyLogStats* stats) : stats_(stats) {}
  DirtyLog(const DirtyLog&) = delete;
  DirtyLog& operator=(const DirtyLog&) = delete;
  ~DirtyLog();

  /// Bytes of log that cover guest-physical addresses [0, end): ceil(end / 4096 / 8).
  static uint64_t bytes_for(uint64_t end) {
    const uint64_t pages = (end >> kPageShift) + ((end & ((uint64_t{1} << kPageShift) - 1)) != 0);
    return (pages + 7) / 8;
  }

  /// Maps `size` bytes of `fd` from byte `offset` (SET_LOG_BASE mmap_size/mmap_offset).
  /// The fd is not taken over (the mapping outlives its close). Rejects: size 0 or above
  /// kMaxBytes, offset + size overflowing, an fd that is not a regular file (memfd) or is
  /// smaller than offset + size (fstat), or a failed mmap. The mapping starts at the page
  /// holding `offset` and is guarded against SIGBUS (a file truncated later: faulted()).
  /// False with `*err` set, nothing mapped, on error.
  bool map(int fd, uint64_t size, uint64_t offset, std::string* err);

  /// Builds a log over memory the caller owns (tests): nothing unmapped on destruction.
  void map_unowned(uint8_t* base, uint64_t size) {
    base_ = base;
    size_ = size;
    map_base_ = nullptr;
  }

  /// Marks every page of guest-physical [gpa, gpa + len) dirty (len 0 marks nothing).
  /// Call after the bytes are written. Pages past the log are counted, never written.
  void mark(uint64_t gpa, uint64_t len);

  /// Marks the pages of [p, p + len), a range of our mapping of `mem` (a receive buffer we
  /// wrote), by its guest-physical address. A range in no region marks nothing.
  void mark_host(const GuestMemory& mem, const uint8_t* p, uint64_t len);

  /// True once a mark hit a page the front-end had truncated away (the SIGBUS guard put a
  /// zero page there, virtio/sigbus_guard.h): the connection must be dropped.
  bool faulted() const;

  uint64_t size() const { return size_; }  ///< bytes of bitmap
  const uint8_t* bitmap() const { return base_; }

 private:
  uint8_t* base_ = nullptr;   ///< byte 0 of the bitmap (mmap_offset into the fd)
  uint64_t size_ = 0;
  void* map_base_ = nullptr;  ///< what mmap returned (null: not ours)
  uint64_t map_len_ = 0;
  int guard_slot_ = -1;       ///< SigbusGuard registration of [map_base_, +map_len_)
  DirtyLogStats* stats_;
  void unmap();
};

}  // namespace vl::virtio
