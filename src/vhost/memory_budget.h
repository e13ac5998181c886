#pragma once
// The guest memory the switch maps over every connection together (`virtlink switch
// --max-total-guest-memory`): one MemoryBudget per switch, shared by the back-ends of every
// port on the control thread. BackendOptions::max_mapped_bytes caps one connection; this
// caps their sum, so that front-ends connecting on many ports, or reconnecting, cannot take
// the address space the switch itself needs (sparse memfds of terabytes cost them nothing).
// A back-end holds one Share for its current memory table: a new table's share is taken
// with the old table's counted as given back (a replaced table is never counted twice), and
// a share is given back when its table is unmapped (a new table, RESET_OWNER, a
// disconnect). docs/architecture.md, "The vhost-user back-end";
// docs/reference/hostile-inputs.md item 22.
#include <atomic>
#include <cstdint>

namespace vl::vhost {

class MemoryBudget {
 public:
  /// Bytes held for one memory table; given back when destroyed or assigned over.
  class Share {
   public:
    Share() = default;
    Share(Share&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Share& operator=(Share&& o) noexcept {
      if (this != &o) {
        give_back();
        budget_ = o.budget_;
        bytes_ = o.bytes_;
        o.budget_ = nullptr;
      }
      return *this;
    }
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;
    ~Share() { give_back(); }
    uint64_t bytes() const { return budget_ ? bytes_ : 0; }

   private:
    friend class MemoryBudget;
    Share(MemoryBudget* b, uint64_t bytes) : budget_(b), bytes_(bytes) {}
    void give_back() {
      if (budget_) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      budget_ = nullptr;
    }
    MemoryBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  /// A share of `bytes` for a table that is to replace the one `replaced` holds (given back
  /// by the caller once the new table is in place; an empty Share for none). False, with
  /// refused() counted, when used() - replaced + bytes would exceed limit(). Control thread
  /// only (take and give back are not atomic together).
  bool take(uint64_t bytes, const Share& replaced, Share* out) {
    const uint64_t others = used() - replaced.bytes();
    if (bytes > limit_ || others > limit_ - bytes) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    used_.fetch_add(bytes, std::memory_order_relaxed);
    *out = Share(this, bytes);
    return true;
  }
  uint64_t limit() const { return limit_; }
  /// Bytes held by every share (a moment above limit() between take() and the replaced
  /// share's release, on the control thread).
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  /// Tables refused by take().
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace vl::vhost
