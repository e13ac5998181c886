#pragma once
// The contract both ring layouts keep, as C++20 concepts: what the device side (back-end:
// SplitDeviceQueue, PackedDeviceQueue) and the driver side (front-end: SplitDriverQueue,
// PackedDriverQueue) offer, so that the datapath, the copy paths and the front-end's users
// are templates over the layout (chosen once per burst, no virtual call per frame).
// ring_contract.cpp checks each class against its concept. docs/architecture.md "Rings".
#include <concepts>
#include <cstdint>
#include <string>

#include "virtio/chain.h"

namespace vl::virtio {

/// The device side of a virtqueue (virtio 1.2 §2.7 split, §2.8 packed).
template <class Q>
concept DeviceRing = requires(Q q, const Q cq, SegmentArena& arena, Chain* chain,
                              OneBuffer* one, typename Q::Mark m, uint16_t id, uint32_t n) {
  // Taking chains the driver made available. kOne only from pop_any().
  { q.template pop<true>(arena, chain) } -> std::same_as<PopStatus>;
  { q.template pop<false>(arena, chain) } -> std::same_as<PopStatus>;
  { q.template pop_any<true>(arena, chain, one) } -> std::same_as<PopStatus>;
  { q.template pop_any<false>(arena, chain, one) } -> std::same_as<PopStatus>;
  { q.ready(n) } -> std::same_as<uint32_t>;  // chains a burst of up to n may pop
  { q.pending() } -> std::same_as<int>;      // > 0: some; -1: broken
  { q.has_avail() } -> std::same_as<bool>;
  // Un-taking: a receive frame that did not fit, buffers taken ahead and not used.
  { cq.mark() } -> std::same_as<typename Q::Mark>;
  q.restore(m);
  q.unpop_ones(n);
  // Returning chains: pushed entries become visible (and the driver is notified when it
  // asked) at publish_used(); ring_descs is the packed layout's slot count (split: 1).
  q.push_used(id, n, id);
  { q.publish_used() } -> std::same_as<bool>;
  q.set_kicks(true);
  q.signal();
  // State.
  { cq.broken() } -> std::same_as<bool>;
  { cq.call_blocked() } -> std::same_as<bool>;
  { cq.attached() } -> std::same_as<bool>;
  { cq.size() } -> std::same_as<uint32_t>;
  { cq.state() } -> std::same_as<std::string>;
  q.mark_broken();
  q.detach();
};

/// The driver side of a virtqueue: one-descriptor chains posted with a cookie that comes
/// back with their used entry.
template <class Q>
concept DriverRing = requires(Q q, const Q cq, uint64_t gpa, uint32_t len, uint32_t* out, bool on) {
  { q.add(gpa, len, on, len) } -> std::same_as<bool>;  // false: no descriptor free
  { q.publish() } -> std::same_as<bool>;               // true: kicked the device
  { q.get_used(out, out) } -> std::same_as<bool>;      // cookie, bytes written
  { q.used_ready() } -> std::same_as<uint32_t>;
  { q.has_used() } -> std::same_as<bool>;
  q.set_interrupts(on);
  q.set_kick_fd(0);
  q.set_call_fd(0);
  { cq.call_fd() } -> std::same_as<int>;
  { cq.broken() } -> std::same_as<bool>;
  { cq.size() } -> std::same_as<uint32_t>;
  { cq.free_descs() } -> std::same_as<uint32_t>;
  { cq.in_flight() } -> std::same_as<uint32_t>;
  { cq.vring_base() } -> std::same_as<uint32_t>;
  { cq.desc_uva() } -> std::same_as<uint64_t>;
  { cq.avail_uva() } -> std::same_as<uint64_t>;
  { cq.used_uva() } -> std::same_as<uint64_t>;
};

}  // namespace vl::virtio
