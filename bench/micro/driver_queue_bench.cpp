// The driver side's cost per frame, split (SplitDriverQueue) vs packed (PackedDriverQueue)
// virtqueues, against virtlink's own device-side queues in one thread: a burst of 32
// transmit buffers posted and published (what `virtlink gen` does per burst), taken by the
// device, returned, and reclaimed. The counter driver_cycles_per_frame is the TSC cycles of
// the driver's part only (add + publish + get_used); the benchmark time covers both sides.
//
//   build/bench/micro/driver_queue_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <x86intrin.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "virtio/split_device_queue.h"
#include "virtio/driver_memory.h"
#include "virtio/packed_driver_queue.h"
#include "virtio/split_driver_queue.h"
#include "virtio/guest_memory.h"
#include "virtio/packed_device_queue.h"

namespace {

using namespace vl::virtio;

constexpr uint32_t kQ = 1024;
constexpr uint32_t kBurst = 32;
constexpr uint32_t kBuf = 2048;
constexpr uint32_t kHdr = 12;

template <class DrvQ, class DevQ>
void BM_DriverTx(benchmark::State& state) {
  DriverMemory mem;
  DrvQ drv;
  BufferPool pool;
  GuestMemory gm;
  DevQ dev;
  std::string err;
  if (!mem.create(16u << 20, "drvq-bench", &err) || !drv.init(mem, kQ, true, &err) ||
      !pool.init(mem, kQ, kBuf, &err))
    abort();
  const MemRegionDesc r = mem.region();
  const int fd = mem.fd();
  if (!gm.build(&r, &fd, 1, &err)) abort();
  const uint64_t f = bit(kFVersion1) | bit(kRingFEventIdx);
  if constexpr (std::is_same_v<DevQ, PackedDeviceQueue>) {
    dev.attach(&gm, kQ, reinterpret_cast<PackedDesc*>(gm.uva_to_host(drv.desc_uva(), 16 * kQ)),
               reinterpret_cast<PackedEvent*>(gm.uva_to_host(drv.avail_uva(), 4)),
               reinterpret_cast<PackedEvent*>(gm.uva_to_host(drv.used_uva(), 4)),
               drv.vring_base(), f | bit(kFRingPacked));
  } else {
    dev.attach(&gm, kQ, reinterpret_cast<VringDesc*>(gm.uva_to_host(drv.desc_uva(), 16 * kQ)),
               reinterpret_cast<VringAvail*>(gm.uva_to_host(drv.avail_uva(), 6 + 2 * kQ)),
               reinterpret_cast<VringUsed*>(gm.uva_to_host(drv.used_uva(), 6 + 8 * kQ)), 0, f);
  }
  auto arena = std::make_unique<SegmentArena>();
  Chain chains[kBurst];
  uint64_t drv_cycles = 0, frames = 0, seq = 0;
  for (auto _ : state) {
    uint64_t t0 = __rdtsc();
    for (uint32_t k = 0; k < kBurst; ++k) {
      uint32_t i = 0;
      if (!pool.get(&i)) abort();
      std::memcpy(pool.data(i) + kHdr + 50, &seq, 8);  // the generator stamps each frame
      ++seq;
      drv.add(pool.gpa(i), kHdr + 64, false, i);
    }
    drv.publish();
    drv_cycles += __rdtsc() - t0;
    arena->clear();
    uint32_t n = 0;
    while (n < kBurst && dev.pending() > 0 && dev.template pop<false>(*arena, &chains[n]) ==
                                                  PopStatus::kOk)
      ++n;
    for (uint32_t k = 0; k < n; ++k) dev.push_used(chains[k].head, 0, chains[k].ring_descs);
    dev.publish_used();
    t0 = __rdtsc();
    uint32_t id, len;
    while (drv.get_used(&id, &len)) pool.put(id);
    drv_cycles += __rdtsc() - t0;
    frames += kBurst;
  }
  state.SetItemsProcessed(static_cast<int64_t>(frames));
  state.counters["driver_cycles_per_frame"] =
      frames ? static_cast<double>(drv_cycles) / static_cast<double>(frames) : 0;
}
BENCHMARK(BM_DriverTx<SplitDriverQueue, SplitDeviceQueue>)->Name("BM_DriverTx/split");
BENCHMARK(BM_DriverTx<PackedDriverQueue, PackedDeviceQueue>)->Name("BM_DriverTx/packed");

}  // namespace

BENCHMARK_MAIN();
