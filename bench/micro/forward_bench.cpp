// Micro-benchmark of the device-side copy path, without sockets or threads: frames popped
// from one driver's transmit queue are delivered into another driver's receive queue, as
// the switch's Forwarder does, in bursts of 32. Both "guests" are memfds mapped twice (once
// as the driver's memory, once through GuestMemory as the back-end maps it).
//
// Run: build/bench/micro/forward_bench   (wall-clock rate; noisy on a shared machine)
//      valgrind --tool=callgrind build/bench/micro/forward_bench --benchmark_min_time=0.05
//        then callgrind_annotate: instructions per frame of each function (repeatable).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "virtio/split_device_queue.h"
#include "virtio/driver_memory.h"
#include "virtio/split_driver_queue.h"
#include "virtio/guest_memory.h"
#include "virtio/net_copy.h"

using namespace vl::virtio;

namespace {

constexpr uint32_t kQ = 256;
constexpr uint32_t kBurst = 32;
constexpr uint32_t kBuf = 2048;
constexpr uint32_t kHdr = 12;

/// One guest: driver memory with both queues and a buffer pool, plus the back-end's view.
struct Guest {
  DriverMemory mem;
  SplitDriverQueue rx, tx;
  BufferPool pool;
  GuestMemory dev_mem;
  SplitDeviceQueue dev_rx, dev_tx;

  explicit Guest(const char* name) {
    std::string err;
    if (!mem.create(8u << 20, name, &err) || !rx.init(mem, kQ, true, &err) ||
        !tx.init(mem, kQ, true, &err) || !pool.init(mem, 2 * kQ, kBuf, &err))
      abort();
    const MemRegionDesc r = mem.region();
    const int fd = mem.fd();
    if (!dev_mem.build(&r, &fd, 1, &err)) abort();
    const uint64_t f = bit(kFVersion1) | bit(kNetFMrgRxbuf) | bit(kRingFEventIdx);
    auto attach = [&](SplitDeviceQueue& d, SplitDriverQueue& q) {
      d.attach(&dev_mem, kQ, reinterpret_cast<VringDesc*>(dev_mem.uva_to_host(q.desc_uva(), 16 * kQ)),
               reinterpret_cast<VringAvail*>(dev_mem.uva_to_host(q.avail_uva(), 6 + 2 * kQ)),
               reinterpret_cast<VringUsed*>(dev_mem.uva_to_host(q.used_uva(), 6 + 8 * kQ)), 0, f);
    };
    attach(dev_rx, rx);
    attach(dev_tx, tx);
  }
};

void BM_ForwardBurst(benchmark::State& state) {
  const uint32_t frame = static_cast<uint32_t>(state.range(0));
  Guest a("bench-a"), b("bench-b");
  SegmentArena arena, scratch;
  Chain chains[kBurst];
  TxFrame frames[kBurst];
  // b posts every receive buffer once; they are re-posted as they come back.
  for (uint32_t i = 0; i < kQ; ++i) {
    uint32_t id = 0;
    b.pool.get(&id);
    b.rx.add(b.pool.gpa(id), kBuf, true, id);
  }
  b.rx.publish();
  for (auto _ : state) {
    // Driver a transmits a burst.
    for (uint32_t i = 0; i < kBurst; ++i) {
      uint32_t id = 0;
      a.pool.get(&id);
      std::memset(a.pool.data(id), 0, kHdr);
      std::memset(a.pool.data(id) + kHdr, 0x5a, 12);
      a.tx.add(a.pool.gpa(id), kHdr + frame, false, id);
    }
    a.tx.publish();
    // Device side: pop, split, deliver, complete (what Forwarder::poll does per burst).
    arena.clear();
    const int n = a.dev_tx.pending();
    for (int i = 0; i < n; ++i) {
      a.dev_tx.pop<false>(arena, &chains[i]);
      split_tx_chain(arena, chains[i], kHdr, &frames[i]);
    }
    for (int i = 0; i < n; ++i) {
      deliver_frame(b.dev_rx, scratch, NetHdr{}, kHdr, &arena.segs[frames[i].seg_begin],
                    frames[i].nsegs, frames[i].len, true);
    }
    b.dev_rx.publish_used();
    for (int i = 0; i < n; ++i) a.dev_tx.push_used(chains[i].head, 0);
    a.dev_tx.publish_used();
    // Drivers take their buffers back.
    uint32_t id = 0, len = 0;
    while (a.tx.get_used(&id, &len)) a.pool.put(id);
    while (b.rx.get_used(&id, &len)) b.rx.add(b.pool.gpa(id), kBuf, true, id);
    b.rx.publish();
    benchmark::DoNotOptimize(len);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBurst);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBurst * frame);
}
BENCHMARK(BM_ForwardBurst)->Arg(64)->Arg(1518);

}  // namespace

BENCHMARK_MAIN();
