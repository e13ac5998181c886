#pragma once
// What a popped descriptor chain is, for both ring layouts (split and packed): its buffers
// as segments in our address space, collected by one walker helper, and the statuses a pop
// returns. Design: docs/architecture.md "Rings".
#include <cstdint>
#include <cstring>

#include "virtio/guest_memory.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

/// A barrier on one local copy `v` of shared memory: the compiler must take `v` as changed
/// here, so it cannot re-read the shared bytes in place of `v` (a double fetch). Unlike
/// compiler_barrier(), values elsewhere in memory need not be reloaded after it.
template <class T>
inline void pin_copy(T& v) {
  asm volatile("" : "+m"(v));
}

/// A piece of a buffer in our address space.
struct Segment {
  uint8_t* ptr;
  uint32_t len;  ///< bytes
};

/// Segment storage for one burst: chains' segments are appended here, never allocated.
struct SegmentArena {
  /// Segments one chain may use (descriptors split at region edges count once per piece).
  /// A longer chain is dropped as too big.
  static constexpr uint32_t kMaxChainSegments = 4096;
  static constexpr uint32_t kCapacity = 2 * kMaxChainSegments;
  Segment segs[kCapacity];
  uint32_t used = 0;
  bool has_room_for_chain() const { return kCapacity - used >= kMaxChainSegments; }
  void clear() { used = 0; }
};

/// One popped descriptor chain.
struct Chain {
  uint16_t head;       ///< split: head descriptor index; packed: buffer ID (what to return)
  uint16_t ring_descs;  ///< packed: ring slots the chain took (pass to push_used); split: 1
  uint32_t seg_begin;  ///< first segment in the arena
  uint32_t nsegs;      ///< number of segments
  uint32_t len;        ///< total bytes of its buffers
  uint32_t ndesc;      ///< descriptors read to walk it (direct and indirect): its cost
};

/// A one-descriptor chain as pop_any() returns it, without touching the arena: our pointer
/// to its buffer, its length in bytes, and what to return (split: the head index; packed:
/// the buffer ID, one ring slot).
struct OneBuffer {
  uint8_t* ptr;
  uint32_t len;
  uint16_t head;
};

enum class PopStatus : uint8_t {
  kOk,        ///< `*chain` is valid
  kOne,       ///< pop_any() only: a one-descriptor chain, in `*one`; the arena is untouched
  kEmpty,     ///< no new avail entry
  kBadChain,  ///< malformed chain consumed; its head (if valid) was returned with len 0
  kTooBig,    ///< more than kMaxChainSegments segments; consumed and returned with len 0
  kBroken,    ///< the avail index is not plausible: the queue is now stopped
};

/// The common chain, popped inline by both ring layouts: one descriptor (a local copy of
/// its flags, addr and len) of the right direction, non-empty, in one region. Returns our
/// pointer to its buffer, or nullptr when the chain needs the general walk (pop_walk(),
/// which makes the same checks and more).
template <bool kDeviceWrites>
inline uint8_t* one_descriptor_buffer(const GuestMemory& mem, uint16_t flags, uint64_t addr,
                                      uint32_t len) {
  // Neither NEXT nor INDIRECT, and WRITE exactly when the device writes: one test.
  constexpr uint16_t kMask = kDescFNext | kDescFIndirect | kDescFWrite;
  constexpr uint16_t kWant = kDeviceWrites ? kDescFWrite : 0;
  if ((flags & kMask) != kWant || len == 0) return nullptr;
  return mem.translate_whole(addr, len);
}

/// Records a chain whose `nsegs` segments were appended at the arena's end in `*chain`
/// (`len`: its bytes; `ndesc`: descriptors read) and takes those segments.
inline void finish_chain(SegmentArena& arena, Chain* chain, uint16_t head, uint16_t ring_descs,
                         uint32_t nsegs, uint32_t len, uint32_t ndesc) {
  chain->head = head;
  chain->ring_descs = ring_descs;
  chain->seg_begin = arena.used;
  chain->nsegs = nsegs;
  chain->len = len;
  chain->ndesc = ndesc;
  arena.used += nsegs;
}

/// Records a one-descriptor chain (`head`, buffer `p` of `len` bytes) in `arena` and `*chain`.
inline void take_one(SegmentArena& arena, Chain* chain, uint16_t head, uint8_t* p, uint32_t len) {
  arena.segs[arena.used] = Segment{p, len};
  finish_chain(arena, chain, head, 1, 1, len, 1);
}

/// An indirect descriptor's table length is usable: a multiple of 16 bytes, not empty, and
/// at most a queue's worth of descriptors (virtio 1.2 §2.7.5.3, §2.8.7; hostile-inputs.md
/// item 12). Both layouts' descriptors are 16 bytes.
inline bool indirect_table_fits(uint32_t len, uint32_t queue_size) {
  return len != 0 && len % sizeof(VringDesc) == 0 && len / sizeof(VringDesc) <= queue_size;
}

/// The buffers of one chain being walked (pop_walk of either layout): their segments go to
/// the arena's end, split at region edges. Past kMaxChainSegments segments the walk goes on
/// validating (every address must still translate) but collects nothing: the chain is then
/// too big (PopStatus::kTooBig).
struct ChainWalk {
  uint32_t nsegs = 0;   ///< segments collected
  uint64_t total = 0;   ///< bytes of every buffer seen
  uint32_t ndesc = 0;   ///< descriptors read
  bool too_big = false;

  /// Adds the buffer [addr, addr+len) of guest memory. Returns false when it does not
  /// translate (the chain is malformed); an empty buffer's address must translate too
  /// (hostile-inputs.md item 8).
  bool add(const GuestMemory& mem, SegmentArena& arena, uint64_t addr, uint32_t len) {
    if (!too_big) {
      if (!collect(mem, arena, addr, len)) [[unlikely]] {
        if (nsegs < SegmentArena::kMaxChainSegments) return false;
        too_big = true;  // keep validating, stop collecting
      }
    } else {
      uint64_t contig;
      if (!mem.translate(addr, len, &contig)) return false;
    }
    total += len;
    return true;
  }
  /// The walk is over: kTooBig if the chain had too many segments or more than 4 GiB.
  bool fits() const { return !too_big && total <= 0xffffffffull; }
  /// Records the chain in `*chain` (after fits()).
  void finish(SegmentArena& arena, Chain* chain, uint16_t head, uint16_t ring_descs) const {
    finish_chain(arena, chain, head, ring_descs, nsegs, static_cast<uint32_t>(total), ndesc);
  }

 private:
  bool collect(const GuestMemory& mem, SegmentArena& arena, uint64_t addr, uint32_t len) {
    if (len == 0) {
      uint64_t contig;
      return mem.translate(addr, 0, &contig) != nullptr;
    }
    uint64_t left = len;
    do {
      uint64_t contig = 0;
      uint8_t* p = mem.translate(addr, left, &contig);
      if (!p) return false;
      if (nsegs >= SegmentArena::kMaxChainSegments) return false;
      arena.segs[arena.used + nsegs] = Segment{p, static_cast<uint32_t>(contig)};
      ++nsegs;
      addr += contig;
      left -= contig;
    } while (left != 0);
    return true;
  }
};

/// pop() of either ring layout from its pop_any(): a one-descriptor chain is recorded in
/// the arena like any other.
template <bool kDeviceWrites, class Q>
inline PopStatus pop_via_arena(Q& q, SegmentArena& arena, Chain* chain) {
  OneBuffer b{};  // (initialised for the compiler: written whenever kOne is returned)
  const PopStatus st = q.template pop_any<kDeviceWrites>(arena, chain, &b);
  if (st != PopStatus::kOne) return st;
  take_one(arena, chain, b.head, b.ptr, b.len);
  return PopStatus::kOk;
}

}  // namespace vl::virtio
