// vl::StallWatchdog: a thread blocked writing an fd its peer never drains is interrupted
// (the write fails with EINTR); a thread that makes progress is left alone.
#include "util/stall_watchdog.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace vl {
namespace {

TEST(StallWatchdog, InterruptsAWriteBlockedOnAFullPipe) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  fcntl(p[1], F_SETPIPE_SZ, 4096);
  // Fill the pipe without blocking, then make the write end blocking (a hostile front-end
  // can do this to the file description it shares with us).
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  char buf[512] = {};
  while (write(p[1], buf, sizeof buf) > 0) {
  }
  fcntl(p[1], F_SETFL, 0);

  std::atomic<uint64_t> progress{0};
  std::atomic<int> result{0}, err{0};
  std::atomic<bool> started{false};
  StallWatchdog wd;
  std::thread t([&] {
    started = true;
    const ssize_t n = write(p[1], buf, 8);  // blocks: the pipe is full
    result = static_cast<int>(n);
    err = errno;
  });
  while (!started) std::this_thread::yield();
  ASSERT_TRUE(wd.start(t.native_handle(), &progress, SIGURG, 200, 20));
  t.join();
  wd.stop();
  EXPECT_EQ(result.load(), -1);
  EXPECT_EQ(err.load(), EINTR);
  EXPECT_GE(wd.interrupts(), 1u);
  close(p[0]);
  close(p[1]);
}

TEST(StallWatchdog, LeavesAProgressingThreadAlone) {
  std::atomic<uint64_t> progress{0};
  std::atomic<bool> stop{false};
  std::atomic<int> eintr{0};
  std::thread t([&] {
    while (!stop) {
      progress.fetch_add(1, std::memory_order_relaxed);
      // A short sleep, like a VNF's poll with a timeout: EINTR here would mean a signal.
      timespec ts{0, 2'000'000};
      if (nanosleep(&ts, nullptr) != 0 && errno == EINTR) eintr.fetch_add(1);
    }
  });
  StallWatchdog wd;
  ASSERT_TRUE(wd.start(t.native_handle(), &progress, SIGURG, 100, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  wd.stop();
  stop = true;
  t.join();
  EXPECT_EQ(wd.interrupts(), 0u);
  EXPECT_EQ(eintr.load(), 0);
}

}  // namespace
}  // namespace vl
