#include "virtio/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>

namespace vl::virtio {

namespace {

constexpr int kSlots = 1024;

struct Slot {
  std::atomic<uintptr_t> start{0};
  std::atomic<size_t> len{0};
  std::atomic<bool> faulted{false};
};

Slot g_slots[kSlots];
std::atomic<uint64_t> g_repairs{0};
std::mutex g_mu;  // serialises add/remove (control thread); the handler takes no lock
std::once_flag g_once;

void on_sigbus(int sig, siginfo_t* si, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t st = s.start.load(std::memory_order_acquire);
    if (!st) continue;
    const size_t len = s.len.load(std::memory_order_acquire);
    if (a - st < len) {
      // Replace the whole registered mapping (page-aligned), not only the faulting page: one
      // fault per region however many pages were truncated, and one mapping instead of one
      // per page. Page by page, a front-end that truncates a large region and offers
      // buffers on every other page makes a PMD thread create tens of thousands of
      // mappings a second (vm.max_map_count is 65530), after which mmap - here and in
      // malloc - fails and the switch dies. The connection is dropped anyway (faulted()).
      void* p = reinterpret_cast<void*>(st);
      if (mmap(p, len, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
        s.faulted.store(true, std::memory_order_release);
        g_repairs.fetch_add(1, std::memory_order_relaxed);
        return;  // the faulting access is retried on the zero page
      }
      break;
    }
  }
  // Not guest memory: the default action.
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void SigbusGuard::install() {
  std::call_once(g_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

int SigbusGuard::add(void* base, size_t len) {
  install();
  std::lock_guard<std::mutex> l(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    if (g_slots[i].start.load(std::memory_order_relaxed)) continue;
    g_slots[i].faulted.store(false, std::memory_order_relaxed);
    g_slots[i].len.store(len, std::memory_order_relaxed);
    g_slots[i].start.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return -1;
}

void SigbusGuard::remove(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  std::lock_guard<std::mutex> l(g_mu);
  g_slots[slot].start.store(0, std::memory_order_release);
  g_slots[slot].len.store(0, std::memory_order_release);
}

bool SigbusGuard::faulted(int slot) {
  return slot >= 0 && slot < kSlots && g_slots[slot].faulted.load(std::memory_order_acquire);
}

uint64_t SigbusGuard::repairs() { return g_repairs.load(std::memory_order_relaxed); }

}  // namespace vl::virtio
