// SEND_RARP announcements are bounded per port (app/announce_limiter.h): a front-end sending
// SEND_RARP in a loop made the control thread learn a MAC and broadcast a RARP on every
// uplink for each one (3000 messages in 0.09 s: 3000 RARPs on each of 5 uplinks).
#include <gtest/gtest.h>

#include "app/announce_limiter.h"

namespace vl::test {
namespace {

using app::AnnounceLimiter;

TEST(AnnounceLimiter, ABurstPassesThenAFewASecondAndPortsAreApart) {
  AnnounceLimiter l;
  uint64_t t = 1000000;
  uint32_t ok = 0;
  for (int i = 0; i < 3000; ++i) ok += l.allow(3, t);  // a loop, all in one millisecond
  EXPECT_EQ(ok, AnnounceLimiter::kBurst);
  EXPECT_EQ(l.limited(), 3000 - AnnounceLimiter::kBurst);
  EXPECT_TRUE(l.allow(4, t));  // another port has its own bucket
  // One second later: kPerSecond more, not the whole burst.
  t += 1000;
  ok = 0;
  for (int i = 0; i < 100; ++i) ok += l.allow(3, t);
  EXPECT_EQ(ok, AnnounceLimiter::kPerSecond);
  // QEMU's announce rounds (5, 50..450 ms apart) after a quiet minute all pass.
  t += 60000;
  for (uint64_t d : {0, 50, 150, 250, 350}) EXPECT_TRUE(l.allow(3, t + d));
  EXPECT_FALSE(l.allow(port::kMaxPorts, t));
  // A clock that went backwards adds nothing and does not wrap.
  AnnounceLimiter b;
  for (int i = 0; i < 16; ++i) b.allow(0, 5000);
  EXPECT_FALSE(b.allow(0, 4000));
}

}  // namespace
}  // namespace vl::test
