// Live migration, hostile front-end: the dirty log's file truncated after SET_LOG_BASE.
// A mark into a vanished page would raise SIGBUS and kill the switch; the log's mapping is
// guarded like guest memory (virtio/sigbus_guard.h): the mark lands in a zero page and
// faulted() tells the port to drop the connection (hostile test Migration.test_09).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "virtio/dirty_log.h"

namespace vl::virtio {
namespace {

TEST(DirtyLogSigbus, TruncatedLogFaultsIntoZeroPagesInsteadOfKillingTheProcess) {
  const int fd = memfd_create("vl-log-trunc", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 3 * 4096), 0);
  DirtyLogStats stats;
  DirtyLog log(&stats);
  std::string err;
  ASSERT_TRUE(log.map(fd, 2 * 4096, 100, &err)) << err;
  log.mark(0, 1);
  EXPECT_FALSE(log.faulted());
  EXPECT_EQ(stats.pages_logged.load(), 1u);
  ASSERT_EQ(ftruncate(fd, 0), 0);  // the hostile part
  // Bits of the second page of the file: would be SIGBUS.
  log.mark(uint64_t{8} * 4096 * 4096, 4096);
  EXPECT_TRUE(log.faulted());
  // A log mapped again over a good file is a new registration, not faulted.
  ASSERT_EQ(ftruncate(fd, 3 * 4096), 0);
  ASSERT_TRUE(log.map(fd, 4096, 0, &err)) << err;
  EXPECT_FALSE(log.faulted());
  log.mark(0, 1);
  close(fd);
}

TEST(DirtyLogSigbus, RefusedMapKeepsTheOldLog) {
  const int fd = memfd_create("vl-log", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  DirtyLogStats stats;
  DirtyLog log(&stats);
  std::string err;
  ASSERT_TRUE(log.map(fd, 4096, 0, &err)) << err;
  EXPECT_FALSE(log.map(fd, 8192, 0, &err));  // past the file
  EXPECT_EQ(log.size(), 4096u);
  log.mark(4096, 1);
  EXPECT_TRUE(log.bitmap()[0] & 2);
  close(fd);
}

}  // namespace
}  // namespace vl::virtio
