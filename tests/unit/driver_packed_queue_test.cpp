// The driver side of virtqueues against virtlink's own device side: PackedDriverQueue with
// PackedDeviceQueue (virtio 1.2 §2.8), and the same typed round trip for the split pair
// (SplitDriverQueue with SplitDeviceQueue, §2.7), which shows the two driver queues have one interface.
// Covers wrap counters over many laps, burst visibility (the first flags stored last), buffer
// IDs and cookies, written lengths, kick and interrupt suppression (ENABLE/DISABLE and the
// descriptor event with EVENT_IDX, across the wrap), and a hostile device (unknown buffer
// IDs, used descriptors while nothing is in flight).
#include "virtio/packed_driver_queue.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "util/fd.h"
#include "virtio/split_device_queue.h"
#include "virtio/driver_memory.h"
#include "virtio/split_driver_queue.h"
#include "virtio/guest_memory.h"
#include "virtio/packed_device_queue.h"

namespace vl::virtio {
namespace {

constexpr uint32_t kBuf = 256;

uint64_t read_eventfd(int fd) {
  uint64_t v = 0;
  if (read(fd, &v, sizeof v) != sizeof v) return 0;
  return v;
}

/// A driver queue, its buffers, and the device's view of the same memory.
template <class DrvQ, class DevQ>
struct Pair {
  DriverMemory mem;
  DrvQ drv;
  BufferPool pool;
  GuestMemory gm;
  DevQ dev;
  UniqueFd kick{eventfd(0, EFD_NONBLOCK)}, call{eventfd(0, EFD_NONBLOCK)};
  std::unique_ptr<SegmentArena> arena = std::make_unique<SegmentArena>();

  void init(uint32_t num, bool event_idx) {
    std::string err;
    ASSERT_TRUE(mem.create(4u << 20, "drvq-test", &err)) << err;
    ASSERT_TRUE(drv.init(mem, num, event_idx, &err)) << err;
    ASSERT_TRUE(pool.init(mem, num, kBuf, &err)) << err;
    const MemRegionDesc r = mem.region();
    const int fd = mem.fd();
    ASSERT_TRUE(gm.build(&r, &fd, 1, &err)) << err;
    const uint64_t f = bit(kFVersion1) | (event_idx ? bit(kRingFEventIdx) : 0) |
                       (std::is_same_v<DevQ, PackedDeviceQueue> ? bit(kFRingPacked) : 0);
    if constexpr (std::is_same_v<DevQ, PackedDeviceQueue>) {
      dev.attach(&gm, num,
                 reinterpret_cast<PackedDesc*>(gm.uva_to_host(drv.desc_uva(), packed_ring_bytes(num))),
                 reinterpret_cast<PackedEvent*>(gm.uva_to_host(drv.avail_uva(), kPackedEventBytes)),
                 reinterpret_cast<PackedEvent*>(gm.uva_to_host(drv.used_uva(), kPackedEventBytes)),
                 drv.vring_base(), f);
    } else {
      dev.attach(&gm, num,
                 reinterpret_cast<VringDesc*>(gm.uva_to_host(drv.desc_uva(), desc_table_bytes(num))),
                 reinterpret_cast<VringAvail*>(gm.uva_to_host(drv.avail_uva(), avail_ring_bytes(num))),
                 reinterpret_cast<VringUsed*>(gm.uva_to_host(drv.used_uva(), used_ring_bytes(num))),
                 static_cast<uint16_t>(drv.vring_base()), f);
    }
    drv.set_kick_fd(kick.get());
    drv.set_call_fd(call.get());
    dev.set_call_fd(call.get());
  }

  /// The device takes every available chain (it reads a transmit buffer: `writes` false, or
  /// fills a receive buffer: true) and returns it with `len_of(first byte)` bytes written.
  template <bool kWrites>
  uint32_t device_round(uint32_t written) {
    uint32_t n = 0;
    arena->clear();
    while (dev.pending() > 0) {
      Chain c;
      if (dev.template pop<kWrites>(*arena, &c) != PopStatus::kOk) break;
      const Segment& s = arena->segs[c.seg_begin];
      if constexpr (kWrites) {
        std::memset(s.ptr, 0xab, written);
        dev.push_used(c.head, written, c.ring_descs);
      } else {
        // The transmit buffer carries its own cookie in its first 4 bytes.
        uint32_t cookie;
        std::memcpy(&cookie, s.ptr, 4);
        EXPECT_EQ(c.len, 64u + cookie % 64);
        dev.push_used(c.head, 0, c.ring_descs);
      }
      ++n;
    }
    dev.publish_used();
    return n;
  }
};

template <class T>
class DriverQueueRoundTrip : public ::testing::Test {};
using QueuePairs = ::testing::Types<Pair<SplitDriverQueue, SplitDeviceQueue>,
                                    Pair<PackedDriverQueue, PackedDeviceQueue>>;
TYPED_TEST_SUITE(DriverQueueRoundTrip, QueuePairs);

// Transmit: bursts of 1..num chains over many laps; every cookie comes back once, in order,
// and the buffer the device read is the one posted under that cookie.
TYPED_TEST(DriverQueueRoundTrip, TransmitManyLaps) {
  TypeParam p;
  p.init(16, true);
  uint32_t next_cookie = 0, expect_cookie = 0;
  for (uint32_t round = 0; round < 200; ++round) {
    const uint32_t burst = 1 + (round * 7) % 16;
    for (uint32_t k = 0; k < burst; ++k) {
      uint32_t i;
      ASSERT_TRUE(p.pool.get(&i));
      const uint32_t cookie = next_cookie++;
      std::memcpy(p.pool.data(i), &cookie, 4);
      ASSERT_TRUE(p.drv.add(p.pool.gpa(i), 64 + cookie % 64, false, i));
    }
    p.drv.publish();
    ASSERT_EQ(p.drv.in_flight(), burst);
    ASSERT_EQ((p.template device_round<false>(0)), burst);
    ASSERT_EQ(p.drv.used_ready(), burst);
    uint32_t i, len;
    while (p.drv.get_used(&i, &len)) {
      uint32_t cookie;
      std::memcpy(&cookie, p.pool.data(i), 4);
      EXPECT_EQ(cookie, expect_cookie++);
      EXPECT_EQ(len, 0u);
      p.pool.put(i);
    }
    ASSERT_FALSE(p.drv.broken());
    ASSERT_EQ(p.drv.in_flight(), 0u);
  }
  EXPECT_EQ(expect_cookie, next_cookie);
}

// Receive: the device's written length comes back with the cookie; a full ring stays full
// until the device returns buffers.
TYPED_TEST(DriverQueueRoundTrip, ReceiveLengthsAndFullRing) {
  TypeParam p;
  p.init(8, true);
  for (uint32_t lap = 0; lap < 20; ++lap) {
    for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(p.drv.add(p.pool.gpa(i), kBuf, true, i));
    EXPECT_FALSE(p.drv.add(p.pool.gpa(0), kBuf, true, 0));  // the ring is full
    p.drv.publish();
    const uint32_t written = 60 + lap;
    ASSERT_EQ((p.template device_round<true>(written)), 8u);
    uint32_t seen = 0, i, len;
    while (p.drv.get_used(&i, &len)) {
      EXPECT_EQ(i, seen++);
      EXPECT_EQ(len, written);
      EXPECT_EQ(p.pool.data(i)[written - 1], 0xab);
    }
    EXPECT_EQ(seen, 8u);
  }
  EXPECT_FALSE(p.drv.broken());
}

class PackedDriverTest : public ::testing::Test {
 protected:
  Pair<PackedDriverQueue, PackedDeviceQueue> p;
  void post(uint32_t n) {
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t i;
      ASSERT_TRUE(p.pool.get(&i));
      ASSERT_TRUE(p.drv.add(p.pool.gpa(i), 64, false, i));
    }
  }
  void complete_all() {
    p.device_round<false>(0);
    uint32_t i, len;
    while (p.drv.get_used(&i, &len)) p.pool.put(i);
  }
};

TEST_F(PackedDriverTest, LayoutAndInitialBase) {
  p.init(6, true);  // a packed ring need not be a power of two (§2.8)
  EXPECT_EQ(p.drv.desc_uva() % 16, 0u);
  EXPECT_EQ(p.drv.avail_uva() % 4, 0u);
  EXPECT_EQ(p.drv.used_uva() % 4, 0u);
  EXPECT_EQ(p.drv.vring_base(), kPackedInitialBase);  // slot 0, wrap counter 1
  std::string err;
  PackedDriverQueue q;
  EXPECT_FALSE(q.init(p.mem, 0, true, &err));
  EXPECT_FALSE(q.init(p.mem, kMaxQueueSize + 1, true, &err));
}

TEST_F(PackedDriverTest, WrapCountersToggleEveryLap) {
  p.init(6, false);
  for (uint32_t lap = 0; lap < 5; ++lap) {
    EXPECT_EQ(p.drv.avail_wrap(), lap % 2 == 0);
    post(4);
    p.drv.publish();
    complete_all();
    post(2);
    p.drv.publish();
    complete_all();
    EXPECT_EQ(p.drv.next_avail(), 0);
    EXPECT_EQ(p.drv.next_used(), 0);
    EXPECT_EQ(p.drv.used_wrap(), lap % 2 != 0);
    EXPECT_EQ(p.dev.avail_wrap(), p.drv.avail_wrap());
  }
}

TEST_F(PackedDriverTest, BurstInvisibleUntilPublished) {
  p.init(8, false);
  post(2);
  p.drv.publish();
  complete_all();
  post(5);  // starts at slot 2: its first descriptor's flags are not written yet
  EXPECT_FALSE(p.dev.has_avail());
  p.drv.publish();
  EXPECT_TRUE(p.dev.has_avail());
  EXPECT_EQ(p.device_round<false>(0), 5u);
}

TEST_F(PackedDriverTest, KickSuppression) {
  p.init(8, false);
  p.dev.set_kicks(false);
  post(3);
  EXPECT_FALSE(p.drv.publish());
  EXPECT_EQ(read_eventfd(p.kick.get()), 0u);
  complete_all();
  p.dev.set_kicks(true);
  post(3);
  EXPECT_TRUE(p.drv.publish());
  EXPECT_EQ(read_eventfd(p.kick.get()), 1u);
  complete_all();
}

// §2.8.10 with EVENT_IDX: the device asks for a kick when a given slot (and wrap) is made
// available; bursts before it do not kick, the burst that covers it does, across the wrap.
TEST_F(PackedDriverTest, KickAtDescriptorEventAcrossTheWrap) {
  p.init(8, true);
  PackedEvent* dev_ev = reinterpret_cast<PackedEvent*>(p.gm.uva_to_host(p.drv.used_uva(), 4));
  post(6);  // slots 0-5 of lap 1
  EXPECT_TRUE(p.drv.publish());  // the device area says ENABLE
  EXPECT_EQ(read_eventfd(p.kick.get()), 1u);
  complete_all();
  // Event at slot 1 of the next lap (wrap counter 0).
  dev_ev->off_wrap = 1;
  dev_ev->flags = kRingEventFlagsDesc;
  post(2);  // slots 6, 7 (lap 1)
  EXPECT_FALSE(p.drv.publish());
  complete_all();
  post(3);  // slots 0, 1, 2 of lap 2: covers slot 1
  EXPECT_TRUE(p.drv.publish());
  EXPECT_EQ(read_eventfd(p.kick.get()), 1u);
  complete_all();
  // Event at slot 7 of lap 2 (wrap 0); a burst from slot 3 that wraps to slot 1 covers it.
  dev_ev->off_wrap = 7;
  post(6);
  EXPECT_TRUE(p.drv.publish());
  EXPECT_EQ(read_eventfd(p.kick.get()), 1u);
  complete_all();
  // An event already passed (slot 0 of lap 2) does not kick again.
  dev_ev->off_wrap = 0;
  post(2);
  EXPECT_FALSE(p.drv.publish());
  complete_all();
}

TEST_F(PackedDriverTest, InterruptSuppression) {
  p.init(8, false);
  p.drv.set_interrupts(false);
  post(2);
  p.drv.publish();
  p.device_round<false>(0);
  EXPECT_EQ(read_eventfd(p.call.get()), 0u);
  p.drv.set_interrupts(true);
  post(1);
  p.drv.publish();
  p.device_round<false>(0);
  EXPECT_EQ(read_eventfd(p.call.get()), 1u);
}

TEST_F(PackedDriverTest, InterruptAtTheNextUsedDescriptor) {
  p.init(8, true);
  post(3);
  p.drv.publish();
  p.drv.set_interrupts(true);  // DESC at our next used slot (0)
  p.device_round<false>(0);
  EXPECT_EQ(read_eventfd(p.call.get()), 1u);
  uint32_t i, len;
  while (p.drv.get_used(&i, &len)) p.pool.put(i);
  // Not re-armed: the event slot 0 is behind; the next completions do not notify.
  post(2);
  p.drv.publish();
  p.device_round<false>(0);
  EXPECT_EQ(read_eventfd(p.call.get()), 0u);
  while (p.drv.get_used(&i, &len)) p.pool.put(i);
  p.drv.set_interrupts(true);  // re-armed at slot 5
  post(1);
  p.drv.publish();
  p.device_round<false>(0);
  EXPECT_EQ(read_eventfd(p.call.get()), 1u);
}

TEST_F(PackedDriverTest, UnknownBufferIdBreaksTheQueue) {
  p.init(8, false);
  post(2);
  p.drv.publish();
  // A hostile device writes a used descriptor with an ID we did not post (5).
  auto* ring = reinterpret_cast<PackedDesc*>(p.gm.uva_to_host(p.drv.desc_uva(), 16 * 8));
  ring[0].id = 5;
  __atomic_store_n(&ring[0].flags, static_cast<uint16_t>(kPackedDescFAvail | kPackedDescFUsed),
                   __ATOMIC_RELEASE);
  uint32_t i, len;
  EXPECT_FALSE(p.drv.get_used(&i, &len));
  EXPECT_TRUE(p.drv.broken());
}

TEST_F(PackedDriverTest, UsedDescriptorWithNothingInFlightBreaksTheQueue) {
  p.init(8, false);
  auto* ring = reinterpret_cast<PackedDesc*>(p.gm.uva_to_host(p.drv.desc_uva(), 16 * 8));
  ring[0].id = 0;
  __atomic_store_n(&ring[0].flags, static_cast<uint16_t>(kPackedDescFAvail | kPackedDescFUsed),
                   __ATOMIC_RELEASE);
  uint32_t i, len;
  EXPECT_FALSE(p.drv.get_used(&i, &len));
  EXPECT_TRUE(p.drv.broken());
}

TEST_F(PackedDriverTest, DuplicateUsedIdBreaksTheQueue) {
  p.init(8, false);
  post(2);
  p.drv.publish();
  auto* ring = reinterpret_cast<PackedDesc*>(p.gm.uva_to_host(p.drv.desc_uva(), 16 * 8));
  const uint16_t id0 = ring[0].id;
  for (int s = 0; s < 2; ++s) {  // the same ID twice
    ring[s].id = id0;
    __atomic_store_n(&ring[s].flags, static_cast<uint16_t>(kPackedDescFAvail | kPackedDescFUsed),
                     __ATOMIC_RELEASE);
  }
  uint32_t i, len;
  EXPECT_TRUE(p.drv.get_used(&i, &len));
  EXPECT_FALSE(p.drv.get_used(&i, &len));
  EXPECT_TRUE(p.drv.broken());
}

}  // namespace
}  // namespace vl::virtio
