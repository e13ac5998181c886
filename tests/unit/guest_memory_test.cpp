// GuestMemory: validation of memory tables and bounded translation (hostile-inputs.md 3, 7-9).
#include "virtio/guest_memory.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fake_driver.h"

namespace vl::virtio {
namespace {

using test::FakeMemory;

bool build_unowned(GuestMemory& gm, const std::vector<MemRegionDesc>& r, std::string* err) {
  static uint8_t dummy[64];
  std::vector<uint8_t*> hosts(r.size(), dummy);
  return gm.build_unowned(r.data(), hosts.data(), static_cast<uint32_t>(r.size()), err);
}

TEST(GuestMemoryValidate, AcceptsOneToEightRegions) {
  for (uint32_t n = 1; n <= GuestMemory::kMaxRegions; ++n) {
    std::vector<MemRegionDesc> r;
    for (uint32_t i = 0; i < n; ++i) r.push_back({0x100000ull * i, 0x1000, 0x7000000ull + 0x100000ull * i, 0});
    GuestMemory gm;
    std::string err;
    EXPECT_TRUE(build_unowned(gm, r, &err)) << n << ": " << err;
    EXPECT_EQ(gm.region_count(), n);
  }
}

TEST(GuestMemoryValidate, RejectsBadRegionCounts) {
  GuestMemory gm;
  std::string err;
  EXPECT_FALSE(gm.build_unowned(nullptr, nullptr, 0, &err));
  std::vector<MemRegionDesc> r;
  for (uint32_t i = 0; i < GuestMemory::kMaxRegions + 1; ++i)
    r.push_back({0x100000ull * i, 0x1000, 0x7000000ull + 0x100000ull * i, 0});
  EXPECT_FALSE(build_unowned(gm, r, &err));
  EXPECT_EQ(gm.region_count(), 0u);
}

TEST(GuestMemoryValidate, RejectsZeroSizeAndOverflows) {
  const uint64_t kMax = ~0ull;
  const std::vector<std::vector<MemRegionDesc>> bad = {
      {{0x1000, 0, 0x1000, 0}},                         // size 0
      {{kMax - 0xfff, 0x1000, 0x1000, 0}},              // gpa + size == 2^64
      {{0x1000, kMax, 0x1000, 0}},                      // size overflows gpa
      {{0x1000, 0x1000, kMax - 10, 0}},                 // uva overflows
      {{0x1000, 0x1000, 0x1000, kMax - 0x10}},          // offset overflows
      {{0x1000, 0x1000, 0x1000, kMax - 0x1000 - 100}},  // offset + size overflows when page-rounded
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    GuestMemory gm;
    std::string err;
    EXPECT_FALSE(build_unowned(gm, bad[i], &err)) << "case " << i;
    EXPECT_FALSE(err.empty()) << "case " << i;
  }
  // The largest region that does not overflow, page rounding included, is fine (unowned:
  // nothing is mapped).
  GuestMemory gm;
  std::string err;
  EXPECT_TRUE(build_unowned(gm, {{0, kMax - 0x1000, 0, 0}}, &err)) << err;
}

TEST(GuestMemoryValidate, RejectsOverlaps) {
  const std::vector<std::vector<MemRegionDesc>> bad = {
      {{0x0, 0x2000, 0x10000, 0}, {0x1fff, 0x1000, 0x20000, 0}},   // gpa overlaps by a byte
      {{0x2000, 0x1000, 0x10000, 0}, {0x0, 0x10000, 0x20000, 0}},  // gpa contains the other
      {{0x0, 0x1000, 0x10000, 0}, {0x1000, 0x1000, 0x10fff, 0}},   // uva overlaps by a byte
      {{0x0, 0x1000, 0x10000, 0}, {0x8000, 0x1000, 0x20000, 0}, {0x0800, 0x100, 0x30000, 0}},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    GuestMemory gm;
    std::string err;
    EXPECT_FALSE(build_unowned(gm, bad[i], &err)) << "case " << i;
  }
  // Adjacent (touching) ranges do not overlap.
  GuestMemory gm;
  std::string err;
  EXPECT_TRUE(build_unowned(gm, {{0x0, 0x1000, 0x10000, 0}, {0x1000, 0x1000, 0x11000, 0}}, &err)) << err;
}

TEST(GuestMemoryTranslate, BoundsEveryRange) {
  FakeMemory fm;
  uint8_t* h0 = fm.add_region(0x10000, 0x1000);
  uint8_t* h1 = fm.add_region(0x40000, 0x2000);
  GuestMemory gm;
  ASSERT_TRUE(fm.build(gm));
  uint64_t contig = 0;
  EXPECT_EQ(gm.translate(0x10000, 0x10, &contig), h0);
  EXPECT_EQ(contig, 0x10u);
  EXPECT_EQ(gm.translate(0x10ff0, 0x100, &contig), h0 + 0xff0);
  EXPECT_EQ(contig, 0x10u);  // only the bytes left in the region
  EXPECT_EQ(gm.translate(0x10fff, 0, &contig), h0 + 0xfff);
  EXPECT_EQ(contig, 1u);  // len 0 still needs a valid address
  EXPECT_EQ(gm.translate(0x41fff, 2, &contig), h1 + 0x1fff);
  EXPECT_EQ(contig, 1u);
  // In no region, whatever the length (item 8).
  for (uint64_t gpa : {0x0ull, 0xffffull, 0x11000ull, 0x3ffffull, 0x42000ull, ~0ull}) {
    EXPECT_EQ(gm.translate(gpa, 0, &contig), nullptr) << std::hex << gpa;
    EXPECT_EQ(gm.translate(gpa, 1, &contig), nullptr) << std::hex << gpa;
  }
  // translate_whole: the whole range or nothing.
  EXPECT_EQ(gm.translate_whole(0x10000, 0x1000), h0);
  EXPECT_EQ(gm.translate_whole(0x10001, 0x1000), nullptr);
  EXPECT_EQ(gm.translate_whole(0x10fff, ~0ull), nullptr);
  EXPECT_EQ(gm.translate_whole(0x11000, 0), nullptr);
}

TEST(GuestMemoryTranslate, ContiguousGuestRangesAreStillTwoPieces) {
  FakeMemory fm;
  uint8_t* h0 = fm.add_region(0x10000, 0x1000);
  uint8_t* h1 = fm.add_region(0x11000, 0x1000);
  GuestMemory gm;
  ASSERT_TRUE(fm.build(gm));
  uint64_t contig = 0;
  EXPECT_EQ(gm.translate(0x10f00, 0x200, &contig), h0 + 0xf00);
  EXPECT_EQ(contig, 0x100u);
  EXPECT_EQ(gm.translate(0x11000, 0x100, &contig), h1);
  EXPECT_EQ(contig, 0x100u);
  EXPECT_EQ(gm.translate_whole(0x10f00, 0x200), nullptr);  // rings and tables need one piece
}

TEST(GuestMemoryTranslate, UserspaceAddresses) {
  FakeMemory fm;
  uint8_t* h0 = fm.add_region(0x10000, 0x1000, 0x7f0000001000ull);
  GuestMemory gm;
  ASSERT_TRUE(fm.build(gm));
  EXPECT_EQ(gm.uva_to_host(0x7f0000001000ull, 0x1000), h0);
  EXPECT_EQ(gm.uva_to_host(0x7f0000001ff0ull, 0x10), h0 + 0xff0);
  EXPECT_EQ(gm.uva_to_host(0x7f0000001ff0ull, 0x11), nullptr);
  EXPECT_EQ(gm.uva_to_host(0x7f0000001ff0ull, ~0ull), nullptr);
  EXPECT_EQ(gm.uva_to_host(0x7f0000000fffull, 1), nullptr);
  EXPECT_EQ(gm.uva_to_host(0x7f0000002000ull, 0), nullptr);
  uint64_t gpa = 0;
  EXPECT_TRUE(gm.uva_to_gpa(0x7f0000001010ull, &gpa));
  EXPECT_EQ(gpa, 0x10010u);
  EXPECT_FALSE(gm.uva_to_gpa(0x7f0000002000ull, &gpa));
}

TEST(GuestMemoryBuild, MapsMemfdsAtTheirOffsets) {
  FakeMemory fm;
  uint8_t* h0 = fm.add_memfd_region(0x0, 0x3000);
  uint8_t* h1 = fm.add_memfd_region(0x100000, 0x2000, {}, 0x5000);  // not at offset 0
  std::memcpy(h0 + 0x10, "region zero", 12);
  std::memcpy(h1 + 0x1ff0, "region one", 11);
  GuestMemory gm;
  std::string err;
  ASSERT_TRUE(fm.build_mapped(gm, &err)) << err;
  EXPECT_EQ(gm.region_count(), 2u);
  // Each region is mapped from its offset's page (hostile-inputs: a region far into a big
  // fd must not map everything before it).
  EXPECT_EQ(gm.mapped_bytes(), 0x3000u + 0x2000u);
  uint64_t contig;
  uint8_t* p0 = gm.translate(0x10, 12, &contig);
  ASSERT_NE(p0, nullptr);
  EXPECT_NE(p0, h0 + 0x10);  // its own mapping...
  EXPECT_STREQ(reinterpret_cast<char*>(p0), "region zero");  // ...of the same pages
  uint8_t* p1 = gm.translate(0x101ff0, 11, &contig);
  ASSERT_NE(p1, nullptr);
  EXPECT_STREQ(reinterpret_cast<char*>(p1), "region one");
  // Writes through the back-end's mapping reach the driver.
  std::memcpy(p0, "written", 8);
  EXPECT_STREQ(reinterpret_cast<char*>(h0 + 0x10), "written");
}

TEST(GuestMemoryBuild, RejectsShortAndNonRegularFds) {
  FakeMemory fm;
  fm.add_memfd_region(0x0, 0x2000);
  GuestMemory gm;
  std::string err;
  // Region claims more than the fd holds.
  MemRegionDesc big{0x0, 0x3000, 0x10000, 0};
  int fd = fm.fds()[0];
  EXPECT_FALSE(gm.build(&big, &fd, 1, &err));
  MemRegionDesc off{0x0, 0x2000, 0x10000, 0x1000};
  EXPECT_FALSE(gm.build(&off, &fd, 1, &err));
  // An eventfd is not memory.
  int efd = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  MemRegionDesc r{0x0, 0x1000, 0x10000, 0};
  EXPECT_FALSE(gm.build(&r, &efd, 1, &err));
  ::close(efd);
  // A closed fd.
  int bad = -1;
  EXPECT_FALSE(gm.build(&r, &bad, 1, &err));
  EXPECT_EQ(gm.region_count(), 0u);
  EXPECT_EQ(gm.mapped_bytes(), 0u);
}

TEST(GuestMemoryBuild, FailureAfterSomeMapsUnmapsThem) {
  FakeMemory fm;
  fm.add_memfd_region(0x0, 0x1000);
  fm.add_memfd_region(0x10000, 0x1000);
  auto d = fm.descs();
  d[1].memory_size = 0x100000;  // the second fd is too small
  auto f = fm.fds();
  GuestMemory gm;
  std::string err;
  EXPECT_FALSE(gm.build(d.data(), f.data(), 2, &err));
  EXPECT_EQ(gm.region_count(), 0u);
  EXPECT_EQ(gm.mapped_bytes(), 0u);
}

}  // namespace
}  // namespace vl::virtio

namespace vl::virtio {
namespace {

// hostile-inputs.md (own class): the front-end shrinks its memfd after SET_MEM_TABLE.
// Touching the vanished pages would raise SIGBUS; the guard maps zero pages instead and
// reports the mapping as faulted so the port can drop the connection.
TEST(GuestMemorySigbus, TruncatedMemfdFaultsIntoZeroPagesInsteadOfKillingTheProcess) {
  const int fd = memfd_create("vl-trunc", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  MemRegionDesc r{0x1000000, 1 << 20, 0x7f0000000000ull, 0};
  GuestMemory mem;
  std::string err;
  ASSERT_TRUE(mem.build(&r, &fd, 1, &err)) << err;
  uint64_t contig = 0;
  uint8_t* p = mem.translate(0x1000000 + 4096 * 10, 64, &contig);
  ASSERT_NE(p, nullptr);
  p[0] = 7;
  EXPECT_FALSE(mem.faulted());
  ASSERT_EQ(ftruncate(fd, 0), 0);  // the hostile part
  volatile uint8_t v = p[0];       // would be SIGBUS
  EXPECT_EQ(v, 0);
  p[1] = 9;                        // writes land in the private zero page
  EXPECT_TRUE(mem.faulted());
  close(fd);
}

}  // namespace
}  // namespace vl::virtio
