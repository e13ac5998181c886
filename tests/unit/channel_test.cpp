// vhost::Channel: message framing and fd passing over a stream socket, never reading past
// one message or trusting its size field (hostile-inputs.md item 4).
#include "vhost/channel.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "vhost_peer.h"

namespace vl::vhost {
namespace {

using test::count_open_fds;
using test::RawPeer;

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UniqueFd a, b;
    ASSERT_TRUE(test::make_socketpair(&a, &b));
    chan = std::make_unique<Channel>(std::move(a));
    peer = std::make_unique<RawPeer>(std::move(b));
  }
  ReadStatus read() {
    err.clear();
    return chan->read(&err);
  }
  static std::vector<uint8_t> msg_bytes(uint32_t req, uint32_t flags, const std::vector<uint8_t>& payload,
                                        std::optional<uint32_t> size = {}) {
    std::vector<uint8_t> b(12 + payload.size());
    const MsgHeader h{req, flags, size.value_or(static_cast<uint32_t>(payload.size()))};
    std::memcpy(b.data(), &h, 12);
    if (!payload.empty()) std::memcpy(b.data() + 12, payload.data(), payload.size());
    return b;
  }
  static ino_t inode(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return 0;
    return st.st_ino;
  }

  std::unique_ptr<Channel> chan;
  std::unique_ptr<RawPeer> peer;
  std::string err;
};

TEST_F(ChannelTest, ReadsAWholeMessageWithFds) {
  std::vector<uint8_t> payload(40);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i + 1);
  UniqueFd e1(eventfd(0, EFD_CLOEXEC)), e2(eventfd(0, EFD_CLOEXEC));
  const int fds[2] = {e1.get(), e2.get()};
  const auto b = msg_bytes(5, kVersion, payload);
  ASSERT_TRUE(peer->send_bytes(b.data(), b.size(), fds, 2));
  ASSERT_EQ(read(), ReadStatus::kMessage) << err;
  const Message& m = chan->message();
  EXPECT_EQ(m.hdr.request, 5u);
  EXPECT_EQ(m.hdr.flags, kVersion);
  EXPECT_EQ(m.hdr.size, 40u);
  EXPECT_EQ(std::memcmp(m.payload, payload.data(), 40), 0);
  ASSERT_EQ(m.nfds, 2u);
  EXPECT_EQ(inode(m.fds[0].get()), inode(e1.get()));
  EXPECT_EQ(inode(m.fds[1].get()), inode(e2.get()));
  EXPECT_EQ(read(), ReadStatus::kAgain);
}

TEST_F(ChannelTest, ReassemblesAMessageSentInPieces) {
  std::vector<uint8_t> payload(100, 0x5a);
  const auto b = msg_bytes(9, kVersion, payload);
  const size_t cuts[] = {0, 1, 7, 12, 13, 60, b.size()};
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    EXPECT_EQ(read(), ReadStatus::kAgain) << "after " << cuts[i] << " bytes";
    ASSERT_TRUE(peer->send_bytes(b.data() + cuts[i], cuts[i + 1] - cuts[i]));
  }
  ASSERT_EQ(read(), ReadStatus::kMessage) << err;
  EXPECT_EQ(chan->message().hdr.request, 9u);
  EXPECT_EQ(chan->message().hdr.size, 100u);
  EXPECT_EQ(std::memcmp(chan->message().payload, payload.data(), 100), 0);
}

TEST_F(ChannelTest, NeverReadsPastOneMessage) {
  auto b = msg_bytes(2, kVersion, std::vector<uint8_t>(8, 0x11));
  const auto b2 = msg_bytes(1, kVersion, {});
  const auto b3 = msg_bytes(8, kVersion, std::vector<uint8_t>(8, 0x33));
  b.insert(b.end(), b2.begin(), b2.end());
  b.insert(b.end(), b3.begin(), b3.end());
  ASSERT_TRUE(peer->send_bytes(b.data(), b.size()));
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(chan->message().hdr.request, 2u);
  EXPECT_EQ(chan->message().payload[7], 0x11);
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(chan->message().hdr.request, 1u);
  EXPECT_EQ(chan->message().hdr.size, 0u);
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(chan->message().hdr.request, 8u);
  EXPECT_EQ(chan->message().payload[0], 0x33);
  EXPECT_EQ(read(), ReadStatus::kAgain);
}

TEST_F(ChannelTest, FdsStayWithTheirMessageAndUntakenOnesAreClosed) {
  const int base = count_open_fds();
  {
    UniqueFd e(eventfd(0, EFD_CLOEXEC));
    const auto m1 = msg_bytes(12, kVersion, std::vector<uint8_t>(8, 0));
    const int fd = e.get();
    ASSERT_TRUE(peer->send_bytes(m1.data(), m1.size(), &fd, 1));
  }
  const auto m2 = msg_bytes(13, kVersion, std::vector<uint8_t>(8, 0));
  ASSERT_TRUE(peer->send_bytes(m2.data(), m2.size()));
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(chan->message().nfds, 1u);
  EXPECT_EQ(count_open_fds(), base + 1);  // received, held by the message
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(chan->message().hdr.request, 13u);
  EXPECT_EQ(chan->message().nfds, 0u);
  EXPECT_EQ(count_open_fds(), base);  // the first message's fd was not taken: closed
}

TEST_F(ChannelTest, CleanCloseBetweenMessages) {
  const auto b = msg_bytes(1, kVersion, {});
  ASSERT_TRUE(peer->send_bytes(b.data(), b.size()));
  peer->close();
  ASSERT_EQ(read(), ReadStatus::kMessage);
  EXPECT_EQ(read(), ReadStatus::kClosed);
}

TEST_F(ChannelTest, CloseInsideAHeaderOrPayloadIsAnError) {
  const auto b = msg_bytes(1, kVersion, {});
  ASSERT_TRUE(peer->send_bytes(b.data(), 6));
  EXPECT_EQ(read(), ReadStatus::kAgain);
  peer->close();
  EXPECT_EQ(read(), ReadStatus::kError);
  EXPECT_NE(err.find("middle"), std::string::npos) << err;

  SetUp();
  const auto p = msg_bytes(2, kVersion, std::vector<uint8_t>(8, 1));
  ASSERT_TRUE(peer->send_bytes(p.data(), 15));
  EXPECT_EQ(read(), ReadStatus::kAgain);
  peer->close();
  EXPECT_EQ(read(), ReadStatus::kError);
}

TEST_F(ChannelTest, PayloadOverTheLimitIsAnErrorAndItsFdsAreClosed) {
  const int base = count_open_fds();
  {
    UniqueFd e(eventfd(0, EFD_CLOEXEC));
    const int fd = e.get();
    const auto h = msg_bytes(5, kVersion, {}, kMaxPayload + 1);
    ASSERT_TRUE(peer->send_bytes(h.data(), h.size(), &fd, 1));
  }
  EXPECT_EQ(read(), ReadStatus::kError);
  EXPECT_NE(err.find("limit"), std::string::npos) << err;
  EXPECT_EQ(count_open_fds(), base);
}

TEST_F(ChannelTest, PayloadAtTheLimitIsRead) {
  std::vector<uint8_t> payload(kMaxPayload, 0x77);
  const auto b = msg_bytes(5, kVersion, payload);
  ASSERT_TRUE(peer->send_bytes(b.data(), b.size()));
  ASSERT_EQ(read(), ReadStatus::kMessage) << err;
  EXPECT_EQ(chan->message().hdr.size, kMaxPayload);
  EXPECT_EQ(chan->message().payload[kMaxPayload - 1], 0x77);
}

// After a framing error the channel must stay failed: reading on must neither return the
// oversized message nor write its bytes past the payload buffer.
TEST_F(ChannelTest, ErrorIsSticky) {
  const uint32_t big = kMaxPayload + 1000;
  std::vector<uint8_t> b = msg_bytes(5, kVersion, std::vector<uint8_t>(big, 0xff));
  ASSERT_TRUE(peer->send_bytes(b.data(), b.size()));
  EXPECT_EQ(read(), ReadStatus::kError);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read(), ReadStatus::kError) << "read " << i + 2;
    EXPECT_LE(chan->message().nfds, kMaxFds);
    for (const auto& f : chan->message().fds) EXPECT_EQ(f.get(), -1);
  }
}

TEST_F(ChannelTest, MoreThanEightFdsIsAnErrorWithoutLeaks) {
  const int base = count_open_fds();
  {
    std::vector<UniqueFd> owned;
    std::vector<int> fds;
    for (int i = 0; i < 12; ++i) {
      owned.emplace_back(eventfd(0, EFD_CLOEXEC));
      fds.push_back(owned.back().get());
    }
    const auto b = msg_bytes(5, kVersion, std::vector<uint8_t>(8, 0));
    ASSERT_TRUE(peer->send_bytes(b.data(), b.size(), fds.data(), fds.size()));
  }
  EXPECT_EQ(read(), ReadStatus::kError);
  EXPECT_NE(err.find("fds"), std::string::npos) << err;
  EXPECT_EQ(count_open_fds(), base);
}

TEST_F(ChannelTest, FdsSpreadOverSeveralSendsOfOneMessageAreCapped) {
  // Nine fds arriving with different pieces of one message.
  const int base = count_open_fds();
  {
    std::vector<UniqueFd> owned;
    std::vector<int> fds;
    for (int i = 0; i < 9; ++i) {
      owned.emplace_back(eventfd(0, EFD_CLOEXEC));
      fds.push_back(owned.back().get());
    }
    const auto b = msg_bytes(5, kVersion, std::vector<uint8_t>(8, 0));
    ASSERT_TRUE(peer->send_bytes(b.data(), 6, fds.data(), 5));
    EXPECT_EQ(read(), ReadStatus::kAgain);
    ASSERT_TRUE(peer->send_bytes(b.data() + 6, b.size() - 6, fds.data() + 5, 4));
  }
  EXPECT_EQ(read(), ReadStatus::kError);
  chan->close();
  EXPECT_EQ(count_open_fds(), base - 1);  // our end of the socket is gone too
}

TEST_F(ChannelTest, SendRoundTripsWithFds) {
  UniqueFd a, b;
  ASSERT_TRUE(test::make_socketpair(&a, &b));
  Channel tx(std::move(a)), rx(std::move(b));
  UniqueFd e(eventfd(0, EFD_CLOEXEC));
  const int fd = e.get();
  const uint64_t v = 0x0123456789abcdefull;
  ASSERT_TRUE(tx.send(13, kVersion | kFlagNeedReply, &v, 8, &fd, 1));
  ASSERT_TRUE(tx.send(1, kVersion, nullptr, 0));
  ASSERT_EQ(rx.read_wait(1000, &err), ReadStatus::kMessage) << err;
  EXPECT_EQ(rx.message().hdr.request, 13u);
  EXPECT_EQ(rx.message().hdr.flags, kVersion | kFlagNeedReply);
  uint64_t got = 0;
  EXPECT_TRUE(rx.message().get(&got));
  EXPECT_EQ(got, v);
  ASSERT_EQ(rx.message().nfds, 1u);
  EXPECT_EQ(inode(rx.message().fds[0].get()), inode(fd));
  ASSERT_EQ(rx.read_wait(1000, &err), ReadStatus::kMessage) << err;
  EXPECT_EQ(rx.message().hdr.request, 1u);
  uint32_t wrong_size;
  EXPECT_FALSE(rx.message().get(&wrong_size));  // get() needs the exact size
  // Nothing more: times out.
  EXPECT_EQ(rx.read_wait(50, &err), ReadStatus::kAgain);
  EXPECT_NE(err.find("timed out"), std::string::npos);
  // send() refuses what the protocol cannot carry.
  std::vector<uint8_t> big(kMaxPayload + 1);
  EXPECT_FALSE(tx.send(1, kVersion, big.data(), static_cast<uint32_t>(big.size())));
  int nine[9] = {fd, fd, fd, fd, fd, fd, fd, fd, fd};
  EXPECT_FALSE(tx.send(1, kVersion, &v, 8, nine, 9));
}

TEST_F(ChannelTest, PartialWritesStillDeliverWholeMessages) {
  UniqueFd a, b;
  ASSERT_TRUE(test::make_socketpair(&a, &b));
  // A small send buffer forces partial writes while the reader drains.
  int small = 1024;
  setsockopt(a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  Channel tx(std::move(a)), rx(std::move(b));
  std::vector<uint8_t> payload(kMaxPayload);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13);
  constexpr int kMessages = 32;
  int good = 0;
  std::thread reader([&] {
    std::string e;
    for (int i = 0; i < kMessages; ++i) {
      if (rx.read_wait(2000, &e) != ReadStatus::kMessage) return;
      if (rx.message().hdr.request != static_cast<uint32_t>(100 + i)) return;
      if (std::memcmp(rx.message().payload, payload.data(), payload.size()) != 0) return;
      ++good;
    }
  });
  int sent = 0;
  for (int i = 0; i < kMessages; ++i) {
    if (tx.send(100 + i, kVersion, payload.data(), static_cast<uint32_t>(payload.size()))) ++sent;
  }
  reader.join();
  EXPECT_EQ(sent, kMessages);
  EXPECT_EQ(good, kMessages);
}

}  // namespace
}  // namespace vl::vhost
