// dp::Fdb: the bridge's MAC table (learning, moves, aging, flushing, bucket overflow).
#include "dp/fdb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace vl::dp {
namespace {

constexpr Mac kA = 0x020000000001ull;
constexpr Mac kB = 0x020000000002ull;
constexpr Mac kC = 0x0a1b2c3d4e5full;

TEST(Fdb, MacFromBytes) {
  const uint8_t b[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  EXPECT_EQ(mac_from_bytes(b), 0x021122334455ull);
  EXPECT_FALSE(mac_is_multicast(0x021122334455ull));
  EXPECT_TRUE(mac_is_multicast(0x010000000000ull));
  EXPECT_TRUE(mac_is_multicast(0xffffffffffffull));
}

TEST(Fdb, LearnAndLookup) {
  Fdb f(1024);
  EXPECT_EQ(f.lookup(kA), Fdb::kNoPort);
  f.learn(kA, 0, 10);
  f.learn(kB, 7, 10);
  f.learn(kC, 0xfffe, 10);  // the largest port number
  EXPECT_EQ(f.lookup(kA), 0u);
  EXPECT_EQ(f.lookup(kB), 7u);
  EXPECT_EQ(f.lookup(kC), 0xfffeu);
  EXPECT_EQ(f.lookup(0x020000000003ull), Fdb::kNoPort);
  EXPECT_EQ(f.lookup(0), Fdb::kNoPort);  // empty slots never match MAC 0
  const auto e = f.entries(15);
  ASSERT_EQ(e.size(), 3u);
  for (const auto& x : e) EXPECT_EQ(x.age_s, 5u);
}

TEST(Fdb, EntriesByPortAndLimit) {
  Fdb f(1024);
  for (Mac m = 1; m <= 30; ++m) f.learn(0x020000000000ull | m, m % 3, 10);
  EXPECT_EQ(f.entries(10).size(), 30u);
  const auto p1 = f.entries(10, 1);
  ASSERT_EQ(p1.size(), 10u);
  for (const auto& x : p1) EXPECT_EQ(x.port, 1u);
  EXPECT_EQ(f.entries(10, ~0u, 7).size(), 7u);
  EXPECT_EQ(f.entries(10, 2, 4).size(), 4u);
  EXPECT_TRUE(f.entries(10, 5).empty());
}

TEST(Fdb, RelearningRefreshesWithoutDuplicates) {
  Fdb f(1024);
  for (uint32_t t = 0; t < 100; ++t) f.learn(kA, 3, t);
  const auto e = f.entries(100);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].mac, kA);
  EXPECT_EQ(e[0].port, 3u);
  EXPECT_EQ(e[0].age_s, 1u);
}

TEST(Fdb, PortMove) {
  Fdb f(1024);
  f.learn(kA, 1, 10);
  f.learn(kA, 2, 11);
  EXPECT_EQ(f.lookup(kA), 2u);
  const auto e = f.entries(11);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].port, 2u);
  EXPECT_EQ(e[0].age_s, 0u);
  f.learn(kA, 1, 12);
  EXPECT_EQ(f.lookup(kA), 1u);
}

TEST(Fdb, Aging) {
  Fdb f(1024);
  f.learn(kA, 1, 100);
  f.learn(kB, 2, 150);
  EXPECT_EQ(f.age(400, 300), 0u);  // A is exactly 300 s old: kept
  EXPECT_EQ(f.lookup(kA), 1u);
  EXPECT_EQ(f.age(401, 300), 1u);
  EXPECT_EQ(f.lookup(kA), Fdb::kNoPort);
  EXPECT_EQ(f.lookup(kB), 2u);
  // Traffic keeps an entry alive.
  f.learn(kB, 2, 440);
  EXPECT_EQ(f.age(500, 300), 0u);
  EXPECT_EQ(f.lookup(kB), 2u);
  EXPECT_EQ(f.age(741, 300), 1u);
  EXPECT_TRUE(f.entries(741).empty());
  // An aged-out MAC is learned again normally.
  f.learn(kA, 4, 800);
  EXPECT_EQ(f.lookup(kA), 4u);
}

TEST(Fdb, FlushPort) {
  Fdb f(1024);
  for (Mac m = 1; m <= 50; ++m) f.learn(0x020000000000ull | m, static_cast<uint32_t>(m % 3), 1);
  f.flush_port(1);
  for (Mac m = 1; m <= 50; ++m) {
    const Mac mac = 0x020000000000ull | m;
    if (m % 3 == 1) {
      EXPECT_EQ(f.lookup(mac), Fdb::kNoPort) << m;
    } else {
      EXPECT_EQ(f.lookup(mac), m % 3) << m;
    }
  }
  EXPECT_EQ(f.entries(1).size(), 50u - 17u);
  f.flush_port(9);  // a port with no entries
  EXPECT_EQ(f.entries(1).size(), 33u);
}

// One bucket: every MAC lands in it, so the 9th evicts the least recently seen.
TEST(Fdb, FullBucketEvictsTheOldest) {
  Fdb f(1);
  ASSERT_EQ(f.capacity(), Fdb::kSlots);
  for (uint32_t i = 0; i < Fdb::kSlots; ++i) f.learn(0x020000000100ull + i, i, 10 + i);
  f.learn(0x020000000100ull + 3, 3, 50);  // refreshed: no longer among the oldest
  for (uint32_t i = 0; i < Fdb::kSlots; ++i) EXPECT_EQ(f.lookup(0x020000000100ull + i), i);
  f.learn(0x0200000001ffull, 20, 60);
  EXPECT_EQ(f.lookup(0x0200000001ffull), 20u);
  EXPECT_EQ(f.lookup(0x020000000100ull), Fdb::kNoPort);  // seen at 10: evicted
  for (uint32_t i = 1; i < Fdb::kSlots; ++i) EXPECT_EQ(f.lookup(0x020000000100ull + i), i) << i;
  f.learn(0x0200000002ffull, 21, 61);
  EXPECT_EQ(f.lookup(0x020000000101ull), Fdb::kNoPort);  // seen at 11: next to go
  EXPECT_EQ(f.lookup(0x020000000103ull), 3u);
  EXPECT_EQ(f.entries(61).size(), Fdb::kSlots);
}

// An emptied slot (aged or flushed) is reused before anything is evicted.
TEST(Fdb, EmptiedSlotsAreReusedFirst) {
  Fdb f(1);
  for (uint32_t i = 0; i < Fdb::kSlots; ++i) f.learn(0x020000000100ull + i, i, 100);
  f.flush_port(5);
  f.learn(0x020000000900ull, 9, 1);  // older than everyone, yet takes the free slot
  for (uint32_t i = 0; i < Fdb::kSlots; ++i) {
    if (i != 5) {
      EXPECT_EQ(f.lookup(0x020000000100ull + i), i) << i;
    }
  }
  EXPECT_EQ(f.lookup(0x020000000900ull), 9u);
}

TEST(Fdb, BucketCountIsRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(Fdb(0).capacity(), Fdb::kSlots);
  EXPECT_EQ(Fdb(3).capacity(), 4 * Fdb::kSlots);
  EXPECT_EQ(Fdb(1000).capacity(), 1024 * Fdb::kSlots);
  EXPECT_EQ(Fdb().capacity(), 65536 * Fdb::kSlots);
}

// 100000 distinct MACs in the default table (524288 slots): all but a handful findable, in
// several address patterns (sequential, middle octets varying, random).
TEST(Fdb, HundredThousandMacs) {
  constexpr uint32_t kN = 100000;
  std::mt19937_64 rng(42);
  const std::vector<std::pair<const char*, std::vector<Mac>>> sets = [&] {
    std::vector<Mac> seq, oui, rnd;
    for (uint32_t i = 0; i < kN; ++i) {
      seq.push_back(0x020000000000ull + i);
      oui.push_back(0x020000000001ull | static_cast<Mac>(i) << 16);
    }
    std::set<Mac> seen;
    while (rnd.size() < kN) {
      const Mac m = rng() & 0xfeffffffffffull;  // unicast
      if (seen.insert(m).second) rnd.push_back(m);
    }
    return std::vector<std::pair<const char*, std::vector<Mac>>>{{"sequential", seq}, {"oui", oui}, {"random", rnd}};
  }();
  for (const auto& [name, macs] : sets) {
    Fdb f;
    ASSERT_GE(f.capacity(), kN);
    for (uint32_t i = 0; i < kN; ++i) f.learn(macs[i], i % 1000, 1);
    uint32_t found = 0, wrong = 0;
    for (uint32_t i = 0; i < kN; ++i) {
      const uint32_t p = f.lookup(macs[i]);
      if (p == i % 1000) ++found;
      else if (p != Fdb::kNoPort) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << name;
    EXPECT_GE(found, kN - kN / 1000) << name << ": only " << found << " of " << kN << " findable";
    EXPECT_EQ(f.entries(1).size(), found) << name;
  }
}

}  // namespace
}  // namespace vl::dp
