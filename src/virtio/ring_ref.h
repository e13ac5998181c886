#pragma once
// A reference to one device-side virtqueue of either layout (split or packed), or to none:
// what a port hands the datapath for each of its queues. The datapath visits it once per
// burst, so the burst loop is a template over the layout: no virtual call and no layout
// test per frame. docs/architecture.md "Rings" and "Ports".
#include <cstdint>

#include "virtio/split_device_queue.h"
#include "virtio/packed_device_queue.h"

namespace vl::virtio {

class RingRef {
 public:
  enum class Layout : uint8_t { kNone, kSplit, kPacked };

  RingRef() = default;
  explicit RingRef(SplitDeviceQueue* q) : q_(q), layout_(q ? Layout::kSplit : Layout::kNone) {}
  explicit RingRef(PackedDeviceQueue* q) : q_(q), layout_(q ? Layout::kPacked : Layout::kNone) {}

  /// A queue is referred to (it was ready when the port's datapath view was built).
  explicit operator bool() const { return layout_ != Layout::kNone; }
  Layout layout() const { return layout_; }

  /// Calls `f(SplitDeviceQueue&)` or `f(PackedDeviceQueue&)` and returns what it returns; only
  /// on a non-empty reference. `f` is a generic lambda: both layouts are instantiated.
  template <class F>
  decltype(auto) visit(F&& f) const {
    if (layout_ == Layout::kSplit) return f(*static_cast<SplitDeviceQueue*>(q_));
    return f(*static_cast<PackedDeviceQueue*>(q_));
  }

  /// The queue stopped (a hostile or broken driver); false when there is none.
  bool broken() const {
    return *this && visit([](const auto& q) { return q.broken(); });
  }
  /// New chains (split: how many; packed: 1 if any), -1 if broken; 0 when there is none.
  int pending() const {
    return *this ? visit([](auto& q) { return q.pending(); }) : 0;
  }
  /// Asks the driver to kick (or not) when it adds buffers; nothing when there is none.
  void set_kicks(bool on) const {
    if (*this) visit([on](auto& q) { q.set_kicks(on); });
  }
  /// Makes pushed used entries visible (one index or flags store) and calls the driver if
  /// it asked, or with `defer` notes that call for flush_call(). Returns true if it asked;
  /// false when there is no queue.
  bool publish_used(bool defer = false) const {
    return *this && visit([defer](auto& q) { return q.publish_used(defer); });
  }
  /// Sends a call noted by publish_used(true); nothing when there is none.
  void flush_call() const {
    if (*this) visit([](auto& q) { q.flush_call(); });
  }

 private:
  void* q_ = nullptr;
  Layout layout_ = Layout::kNone;
};

}  // namespace vl::virtio
