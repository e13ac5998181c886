#pragma once
// A mock virtio DRIVER over fake guest memory, for unit tests, fuzz targets and the
// hostile-peer suite.
//
//  - FakeMemory owns one or more regions (page-aligned heap buffers, or memfds mapped here
//    too so that a vhost-user back-end can map the same pages), hands out guest-physical
//    addresses with a bump allocator, and builds a virtio::GuestMemory over them
//    (build_unowned(), or the region table + fds for SET_MEM_TABLE / build()).
//  - FakeVring lays out a split ring (descriptor table, avail ring + used_event, used
//    ring + avail_event) in that memory and plays the driver: it builds transmit chains
//    from a byte buffer split into given descriptor sizes (optionally through an indirect
//    table, optionally at a misaligned address), posts receive buffers, writes raw
//    descriptors for hostile tests, and reads the used ring back.
//
// The driver side trusts itself: its own translations abort on a bad address instead of
// returning errors. Nothing here is used by product code.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "virtio/split_device_queue.h"
#include "virtio/guest_memory.h"
#include "virtio/net_copy.h"
#include "virtio/virtio_defs.h"

// gtest printers for the status enums (found by ADL).
namespace vl::virtio {
inline const char* status_name(PopStatus s) {
  switch (s) {
    case PopStatus::kOk: return "kOk";
    case PopStatus::kOne: return "kOne";
    case PopStatus::kEmpty: return "kEmpty";
    case PopStatus::kBadChain: return "kBadChain";
    case PopStatus::kTooBig: return "kTooBig";
    case PopStatus::kBroken: return "kBroken";
  }
  return "?";
}
inline const char* status_name(DeliverStatus s) {
  switch (s) {
    case DeliverStatus::kOk: return "kOk";
    case DeliverStatus::kNoBuffer: return "kNoBuffer";
    case DeliverStatus::kTooBig: return "kTooBig";
    case DeliverStatus::kBadRing: return "kBadRing";
    case DeliverStatus::kShortBuffer: return "kShortBuffer";
  }
  return "?";
}
inline void PrintTo(PopStatus s, std::ostream* os) { *os << status_name(s); }
inline void PrintTo(DeliverStatus s, std::ostream* os) { *os << status_name(s); }
}  // namespace vl::virtio

namespace vl::test {

/// Where a region's front-end virtual address lies by default: gpa + this.
inline constexpr uint64_t kUvaBias = 0x7f0000000000ull;

[[noreturn]] inline void fake_die(const char* what) {
  std::fprintf(stderr, "fake_driver: %s\n", what);
  std::abort();
}

/// Guest memory as a driver owns it.
class FakeMemory {
 public:
  struct Region {
    uint64_t gpa = 0;
    uint64_t size = 0;
    uint64_t uva = 0;
    uint64_t mmap_offset = 0;  ///< memfd regions: offset of gpa in the fd
    uint8_t* host = nullptr;   ///< our pointer to gpa
    int fd = -1;               ///< memfd, or -1 for heap regions
    void* base = nullptr;      ///< what to free / munmap
    size_t base_len = 0;
    uint64_t cursor = 0;       ///< bump allocator: next free offset
  };

  FakeMemory() = default;
  FakeMemory(const FakeMemory&) = delete;
  FakeMemory& operator=(const FakeMemory&) = delete;
  ~FakeMemory() {
    for (Region& r : regions_) {
      if (r.fd >= 0) {
        munmap(r.base, r.base_len);
        ::close(r.fd);
      } else {
        std::free(r.base);
      }
    }
  }

  /// Adds a zeroed region backed by a page-aligned heap buffer. `uva` defaults to
  /// gpa + kUvaBias. Returns its host pointer.
  uint8_t* add_region(uint64_t gpa, uint64_t size, std::optional<uint64_t> uva = {}) {
    const size_t len = (size + 4095) & ~size_t{4095};
    void* p = std::aligned_alloc(4096, len);
    if (!p) fake_die("aligned_alloc failed");
    std::memset(p, 0, len);
    Region r;
    r.gpa = gpa;
    r.size = size;
    r.uva = uva.value_or(gpa + kUvaBias);
    r.host = static_cast<uint8_t*>(p);
    r.base = p;
    r.base_len = len;
    regions_.push_back(r);
    return r.host;
  }

  /// Adds a region over memory the caller owns (e.g. a large MAP_NORESERVE mapping).
  uint8_t* add_external_region(uint64_t gpa, uint64_t size, uint8_t* host,
                               std::optional<uint64_t> uva = {}) {
    Region r;
    r.gpa = gpa;
    r.size = size;
    r.uva = uva.value_or(gpa + kUvaBias);
    r.host = host;
    regions_.push_back(r);  // base stays nullptr: nothing to free
    return host;
  }

  /// Adds a zeroed region backed by a memfd of mmap_offset + size bytes, mapped here
  /// (MAP_SHARED) so a back-end mapping the same fd sees the same bytes.
  uint8_t* add_memfd_region(uint64_t gpa, uint64_t size, std::optional<uint64_t> uva = {},
                            uint64_t mmap_offset = 0) {
    const int fd = memfd_create("fake-guest", MFD_CLOEXEC);
    if (fd < 0) fake_die("memfd_create failed");
    const uint64_t need = mmap_offset + size;
    if (ftruncate(fd, static_cast<off_t>(need)) != 0) fake_die("ftruncate failed");
    const size_t len = (need + 4095) & ~uint64_t{4095};
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fake_die("mmap failed");
    Region r;
    r.gpa = gpa;
    r.size = size;
    r.uva = uva.value_or(gpa + kUvaBias);
    r.mmap_offset = mmap_offset;
    r.host = static_cast<uint8_t*>(p) + mmap_offset;
    r.fd = fd;
    r.base = p;
    r.base_len = len;
    regions_.push_back(r);
    return r.host;
  }

  const std::vector<Region>& regions() const { return regions_; }
  Region& region(size_t i) { return regions_.at(i); }

  /// The region table as SET_MEM_TABLE / GuestMemory::build take it.
  std::vector<virtio::MemRegionDesc> descs() const {
    std::vector<virtio::MemRegionDesc> d;
    for (const Region& r : regions_) d.push_back({r.gpa, r.size, r.uva, r.mmap_offset});
    return d;
  }
  std::vector<int> fds() const {
    std::vector<int> f;
    for (const Region& r : regions_) f.push_back(r.fd);
    return f;
  }
  std::vector<uint8_t*> hosts() const {
    std::vector<uint8_t*> h;
    for (const Region& r : regions_) h.push_back(r.host);
    return h;
  }

  /// Builds `gm` over this memory without mapping anything (build_unowned).
  bool build(virtio::GuestMemory& gm, std::string* err = nullptr) const {
    std::string e;
    const auto d = descs();
    const auto h = hosts();
    const bool ok = gm.build_unowned(d.data(), h.data(), static_cast<uint32_t>(d.size()), &e);
    if (err) *err = e;
    return ok;
  }
  /// Builds `gm` by mapping the memfds (GuestMemory::build): memfd regions only.
  bool build_mapped(virtio::GuestMemory& gm, std::string* err = nullptr) const {
    std::string e;
    const auto d = descs();
    const auto f = fds();
    const bool ok = gm.build(d.data(), f.data(), static_cast<uint32_t>(d.size()), &e);
    if (err) *err = e;
    return ok;
  }

  /// Driver-side translation: our pointer to [gpa, gpa+len), which must lie in one region.
  uint8_t* host(uint64_t gpa, uint64_t len = 1) const {
    for (const Region& r : regions_) {
      if (gpa >= r.gpa && gpa - r.gpa < r.size && len <= r.size - (gpa - r.gpa))
        return r.host + (gpa - r.gpa);
    }
    fake_die("driver-side address not in one region");
  }
  uint64_t gpa_to_uva(uint64_t gpa) const {
    for (const Region& r : regions_) {
      if (gpa >= r.gpa && gpa - r.gpa < r.size) return r.uva + (gpa - r.gpa);
    }
    fake_die("gpa not in a region");
  }

  /// Bump allocator: a gpa of `len` bytes aligned to `align` inside region `region`
  /// (or the first region with room when -1). Memory is never reused.
  uint64_t alloc(uint64_t len, uint64_t align = 8, int region = -1) {
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (region >= 0 && static_cast<size_t>(region) != i) continue;
      Region& r = regions_[i];
      // Align the guest-physical address (what the device sees).
      uint64_t off = r.cursor;
      const uint64_t mis = (r.gpa + off) % align;
      if (mis) off += align - mis;
      if (off <= r.size && len <= r.size - off) {
        r.cursor = off + len;
        return r.gpa + off;
      }
    }
    fake_die("fake guest memory exhausted");
  }

  void write(uint64_t gpa, const void* src, uint64_t len) {
    if (len) std::memcpy(host(gpa, len), src, len);
  }
  void read(uint64_t gpa, void* dst, uint64_t len) const {
    if (len) std::memcpy(dst, host(gpa, len), len);
  }

 private:
  std::vector<Region> regions_;
};

/// One descriptor of a chain as a test describes it. add_chain() adds NEXT and `next`.
struct DescSpec {
  uint64_t addr;
  uint32_t len;
  uint16_t flags = 0;  ///< kDescFWrite, kDescFIndirect; NEXT is added
};

/// How add_tx/add_rx/add_chain lay a chain out.
struct ChainOpts {
  bool indirect = false;          ///< descriptors go to an indirect table; one ring slot used
  uint64_t indirect_misalign = 0;  ///< bytes added to the table's 16-byte aligned address
  int region = -1;                ///< where buffers (and the table) are allocated
  uint64_t buf_align = 8;         ///< alignment of data buffers
};

/// The descriptors of a transmit chain carrying `bytes` in buffers of `sizes` bytes (which
/// must add up to bytes.size(); empty: one buffer), allocated in `mem` as `o` says. Both
/// fake drivers' add_tx.
inline std::vector<DescSpec> tx_descs(FakeMemory& mem, std::span<const uint8_t> bytes,
                                      std::vector<uint32_t> sizes, const ChainOpts& o) {
  if (sizes.empty()) sizes.push_back(static_cast<uint32_t>(bytes.size()));
  uint64_t sum = 0;
  for (uint32_t s : sizes) sum += s;
  if (sum != bytes.size()) fake_die("add_tx: sizes do not add up to the buffer");
  std::vector<DescSpec> d;
  size_t off = 0;
  for (uint32_t s : sizes) {
    const uint64_t a = mem.alloc(s ? s : 1, o.buf_align, o.region);
    mem.write(a, bytes.data() + off, s);
    d.push_back({a, s, 0});
    off += s;
  }
  return d;
}

/// The descriptors of a receive chain of device-writable buffers of `sizes` bytes, filled
/// with 0xee so that untouched bytes are visible. Both fake drivers' add_rx.
inline std::vector<DescSpec> rx_descs(FakeMemory& mem, const std::vector<uint32_t>& sizes,
                                      const ChainOpts& o) {
  std::vector<DescSpec> d;
  for (uint32_t s : sizes) {
    const uint64_t a = mem.alloc(s ? s : 1, o.buf_align, o.region);
    if (s) std::memset(mem.host(a, s), 0xee, s);
    d.push_back({a, s, virtio::kDescFWrite});
  }
  return d;
}

/// A split virtqueue as the driver sees it.
class FakeVring {
 public:
  /// Lays out a ring of `num` entries in `mem` (region `region`, or wherever there is room)
  /// at the minimum alignments of virtio 1.2 §2.7 (desc 16, avail 2, used 4).
  FakeVring(FakeMemory& mem, uint32_t num, int region = -1) : mem_(mem), num_(num) {
    desc_gpa_ = mem.alloc(virtio::desc_table_bytes(num), 16, region);
    avail_gpa_ = mem.alloc(virtio::avail_ring_bytes(num), 2, region);
    used_gpa_ = mem.alloc(virtio::used_ring_bytes(num), 4, region);
    for (uint32_t i = num; i > 0; --i) free_.push_back(static_cast<uint16_t>(i - 1));
  }

  uint32_t num() const { return num_; }
  uint64_t desc_gpa() const { return desc_gpa_; }
  uint64_t avail_gpa() const { return avail_gpa_; }
  uint64_t used_gpa() const { return used_gpa_; }
  uint64_t desc_uva() const { return mem_.gpa_to_uva(desc_gpa_); }
  uint64_t avail_uva() const { return mem_.gpa_to_uva(avail_gpa_); }
  uint64_t used_uva() const { return mem_.gpa_to_uva(used_gpa_); }
  virtio::VringDesc* desc() const {
    return reinterpret_cast<virtio::VringDesc*>(mem_.host(desc_gpa_, virtio::desc_table_bytes(num_)));
  }
  virtio::VringAvail* avail() const {
    return reinterpret_cast<virtio::VringAvail*>(mem_.host(avail_gpa_, virtio::avail_ring_bytes(num_)));
  }
  virtio::VringUsed* used() const {
    return reinterpret_cast<virtio::VringUsed*>(mem_.host(used_gpa_, virtio::used_ring_bytes(num_)));
  }
  /// used_event (written by the driver, read by the device with EVENT_IDX).
  uint16_t& used_event() const { return avail()->ring[num_]; }
  /// avail_event (written by the device with EVENT_IDX).
  uint16_t avail_event() const {
    uint16_t v;
    std::memcpy(&v, &used()->ring[num_], 2);
    return v;
  }

  /// Binds a device queue to this ring through `gm` (our pointers, as the back-end would
  /// get from GuestMemory).
  void attach(virtio::SplitDeviceQueue& q, const virtio::GuestMemory& gm, uint64_t features,
              uint16_t base = 0) const {
    auto* d = reinterpret_cast<virtio::VringDesc*>(gm.translate_whole(desc_gpa_, virtio::desc_table_bytes(num_)));
    auto* a = reinterpret_cast<virtio::VringAvail*>(gm.translate_whole(avail_gpa_, virtio::avail_ring_bytes(num_)));
    auto* u = reinterpret_cast<virtio::VringUsed*>(gm.translate_whole(used_gpa_, virtio::used_ring_bytes(num_)));
    if (!d || !a || !u) fake_die("ring does not translate through the GuestMemory under test");
    q.attach(&gm, num_, d, a, u, base, features);
  }

  // ---- Raw access (hostile tests) ----
  /// Takes a free descriptor index.
  uint16_t alloc_desc() {
    if (free_.empty()) fake_die("no free descriptors");
    const uint16_t i = free_.back();
    free_.pop_back();
    return i;
  }
  size_t free_descs() const { return free_.size(); }
  void write_desc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next = 0) {
    virtio::VringDesc d{addr, len, flags, next};
    std::memcpy(&desc()[i], &d, sizeof d);
  }
  /// Writes `head` to the next avail slot and bumps the avail index (release).
  void publish(uint16_t head) {
    virtio::VringAvail* a = avail();
    const uint16_t idx = a->idx;
    a->ring[idx % num_] = head;
    __atomic_store_n(&a->idx, static_cast<uint16_t>(idx + 1), __ATOMIC_RELEASE);
  }
  uint16_t avail_idx() const { return avail()->idx; }
  void set_avail_idx(uint16_t v) { __atomic_store_n(&avail()->idx, v, __ATOMIC_RELEASE); }
  void set_avail_flags(uint16_t f) { avail()->flags = f; }
  /// Writes a raw avail slot without bumping the index.
  void set_avail_slot(uint16_t slot, uint16_t head) { avail()->ring[slot % num_] = head; }

  /// Writes `descs` as one chain: into the ring's descriptor table (linked with NEXT), or
  /// into an indirect table referenced by one ring descriptor. Publishes it; returns its head.
  uint16_t add_chain(const std::vector<DescSpec>& descs, const ChainOpts& o = {},
                     bool publish_it = true) {
    ChainRec rec;
    uint16_t head;
    if (o.indirect) {
      const uint64_t bytes = 16ull * descs.size();
      const uint64_t t = mem_.alloc(bytes + o.indirect_misalign, 16, o.region) + o.indirect_misalign;
      for (size_t k = 0; k < descs.size(); ++k) {
        const bool last = k + 1 == descs.size();
        virtio::VringDesc d{descs[k].addr, descs[k].len,
                            static_cast<uint16_t>(descs[k].flags | (last ? 0 : virtio::kDescFNext)),
                            static_cast<uint16_t>(last ? 0 : k + 1)};
        mem_.write(t + 16 * k, &d, sizeof d);
      }
      head = alloc_desc();
      write_desc(head, t, static_cast<uint32_t>(bytes), virtio::kDescFIndirect, 0);
      rec.descs.push_back(head);
      rec.indirect_table = t;
    } else {
      std::vector<uint16_t> idx;
      for (size_t k = 0; k < descs.size(); ++k) idx.push_back(alloc_desc());
      for (size_t k = 0; k < descs.size(); ++k) {
        const bool last = k + 1 == descs.size();
        write_desc(idx[k], descs[k].addr, descs[k].len,
                   static_cast<uint16_t>(descs[k].flags | (last ? 0 : virtio::kDescFNext)),
                   last ? 0 : idx[k + 1]);
      }
      head = idx.at(0);
      rec.descs = idx;
    }
    for (const DescSpec& d : descs) rec.bufs.push_back({d.addr, d.len});
    chains_[head] = rec;
    if (publish_it) publish(head);
    return head;
  }

  /// A transmit chain carrying `bytes` (virtio-net header + frame, as the caller built
  /// them) split into descriptors of `sizes` bytes (which must add up to bytes.size();
  /// empty: one descriptor). Returns the head.
  uint16_t add_tx(std::span<const uint8_t> bytes, std::vector<uint32_t> sizes = {},
                  const ChainOpts& o = {}) {
    return add_chain(tx_descs(mem_, bytes, std::move(sizes), o), o);
  }

  /// A receive chain of device-writable buffers of `sizes` bytes (filled with 0xee so
  /// that untouched bytes are visible). Returns the head.
  uint16_t add_rx(const std::vector<uint32_t>& sizes, const ChainOpts& o = {}) {
    return add_chain(rx_descs(mem_, sizes, o), o);
  }

  /// The buffers of the chain whose head is `head` (as add_chain wrote them).
  struct Buf {
    uint64_t gpa;
    uint32_t len;
  };
  const std::vector<Buf>& chain_bufs(uint16_t head) const { return chains_.at(head).bufs; }
  /// The first `len` bytes of the chain's buffers, concatenated.
  std::vector<uint8_t> chain_bytes(uint16_t head, uint32_t len) const {
    std::vector<uint8_t> out;
    for (const Buf& b : chains_.at(head).bufs) {
      if (out.size() >= len) break;
      const uint32_t k = std::min<uint32_t>(b.len, len - static_cast<uint32_t>(out.size()));
      const uint8_t* p = mem_.host(b.gpa, k ? k : 1);
      out.insert(out.end(), p, p + k);
    }
    return out;
  }

  // ---- Used ring ----
  uint16_t used_idx() const { return __atomic_load_n(&used()->idx, __ATOMIC_ACQUIRE); }
  uint16_t used_flags() const { return used()->flags; }
  virtio::VringUsedElem used_elem(uint16_t i) const {
    virtio::VringUsedElem e;
    std::memcpy(&e, &used()->ring[i % num_], sizeof e);
    return e;
  }
  /// The next used element not yet taken, or nullopt. Frees the chain's descriptors.
  std::optional<virtio::VringUsedElem> next_used() {
    if (last_used_ == used_idx()) return std::nullopt;
    const virtio::VringUsedElem e = used_elem(last_used_++);
    auto it = chains_.find(static_cast<uint16_t>(e.id));
    if (e.id < num_ && it != chains_.end()) {
      for (uint16_t i : it->second.descs) free_.push_back(i);
      // Keep the record: tests read the bytes after taking the used entry.
      done_[it->first] = it->second;
      chains_.erase(it);
    }
    return e;
  }
  /// Bytes of a chain that was already returned through next_used().
  std::vector<uint8_t> done_bytes(uint16_t head, uint32_t len) {
    auto it = done_.find(head);
    if (it == done_.end()) fake_die("done_bytes: unknown head");
    chains_[head] = it->second;
    auto out = chain_bytes(head, len);
    chains_.erase(head);
    return out;
  }

 private:
  struct ChainRec {
    std::vector<uint16_t> descs;
    std::vector<Buf> bufs;
    uint64_t indirect_table = 0;
  };
  FakeMemory& mem_;
  uint32_t num_;
  uint64_t desc_gpa_ = 0, avail_gpa_ = 0, used_gpa_ = 0;
  std::vector<uint16_t> free_;
  std::map<uint16_t, ChainRec> chains_;
  std::map<uint16_t, ChainRec> done_;
  uint16_t last_used_ = 0;
};

// ---- Frames ----

/// An Ethernet frame of `len` bytes: dst, src, ethertype 0x0800, then a pattern from `seed`.
inline std::vector<uint8_t> make_frame(uint32_t len, uint8_t seed = 1) {
  std::vector<uint8_t> f(len);
  for (uint32_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  const uint8_t hdr[14] = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00};
  if (len) std::memcpy(f.data(), hdr, std::min<uint32_t>(len, 14));
  return f;
}

/// `hdr` (its first hdr_len bytes) followed by `frame`.
inline std::vector<uint8_t> with_net_hdr(const virtio::NetHdr& hdr, uint32_t hdr_len,
                                         std::span<const uint8_t> frame) {
  std::vector<uint8_t> out(hdr_len + frame.size());
  std::memcpy(out.data(), &hdr, hdr_len);
  if (!frame.empty()) std::memcpy(out.data() + hdr_len, frame.data(), frame.size());
  return out;
}

/// Concatenates the segments [begin, begin+n) of `arena`.
inline std::vector<uint8_t> gather(const virtio::SegmentArena& arena, uint32_t begin, uint32_t n) {
  std::vector<uint8_t> out;
  for (uint32_t i = begin; i < begin + n; ++i)
    out.insert(out.end(), arena.segs[i].ptr, arena.segs[i].ptr + arena.segs[i].len);
  return out;
}

}  // namespace vl::test
