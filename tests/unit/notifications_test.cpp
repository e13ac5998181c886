// What the switch asks of a guest's notifications (docs/architecture.md "Notifications").
// Transmit completion coalescing (port::PortConfig::completion_coalesce_us,
// dp/forwarder.cpp publish_coalesced): a call the guest asked for on its transmit queue is
// noted, and goes out with the next call into the same guest's receive queue, when its
// time is up, or at once when the guest sent a quarter of its ring since it asked; never
// lost, and off (the call at once) when the setting is 0. And the guest's receive queues
// ask for no kicks.
#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include <memory>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"

namespace vl {
namespace {

using test::FakeQuiescer;
using test::Frontend;

uint64_t g_now_ns = 1'000'000;
uint64_t fake_now() { return g_now_ns; }

/// A frame from 02:00:00:00:00:`src` to 02:00:00:00:00:`dst`, 64 bytes.
std::vector<uint8_t> frame_to(uint8_t dst, uint8_t src, uint8_t tag) {
  std::vector<uint8_t> f = test::make_frame(64, tag);
  const uint8_t d[6] = {0x02, 0, 0, 0, 0, dst}, s[6] = {0x02, 0, 0, 0, 0, src};
  std::memcpy(f.data(), d, 6);
  std::memcpy(f.data() + 6, s, 6);
  return f;
}

class Notifications : public ::testing::Test {
 protected:
  /// Two cross-connected ports (a, b) coalescing completions for `us` microseconds.
  void start(uint32_t us) {
    q = std::make_unique<FakeQuiescer>(1);
    fdb = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c = test::rig_port_config(i);
      c.completion_coalesce_us = us;
      ports.push_back(std::make_unique<port::VhostPort>(i, c, q.get()));
      fes.push_back(std::make_unique<Frontend>(1));
      ASSERT_TRUE(test::connect_port(*ports[i], *fes[i]));
      tables.ports[i] = ports[i].get();
      fes[i]->start_pair(0);
      ASSERT_TRUE(ports[i]->active());
    }
    tables.nports = 2;
    tables.mode = dp::ForwardMode::kXconnect;
    tables.xc_peer[0] = 1;
    tables.xc_peer[1] = 0;
    tables.fdb = fdb.get();
    fw = std::make_unique<dp::Forwarder>(&tables, &fake_now, 0);
  }
  test::FakeVring& tx(uint32_t p) { return *fes[p]->rings[1]; }
  test::FakeVring& rx(uint32_t p) { return *fes[p]->rings[0]; }
  /// Calls written to port p's transmit (vring 1) or receive (vring 0) queue since last read.
  uint64_t calls(uint32_t p, uint32_t vring) {
    eventfd_t v = 0;
    return eventfd_read(fes[p]->call[vring].get(), &v) == 0 ? v : 0;
  }
  /// Port p's driver asks for a call at its next used transmit entry (EVENT_IDX, as Linux's
  /// virtqueue_enable_cb_prepare does).
  void arm_tx(uint32_t p) { tx(p).used_event() = tx(p).used_idx(); }
  void arm_rx(uint32_t p) { rx(p).used_event() = rx(p).used_idx(); }
  void send(uint32_t p, uint8_t tag) {
    tx(p).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, frame_to(p == 0 ? 2 : 1, p + 1, tag)));
  }
  uint64_t deferred(uint32_t p) { return ports[p]->backend().vring(vhost::kTxVring).calls_deferred(); }

  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<dp::Fdb> fdb;
  std::vector<std::unique_ptr<port::VhostPort>> ports;
  std::vector<std::unique_ptr<Frontend>> fes;
  dp::SwitchTables tables;
  std::unique_ptr<dp::Forwarder> fw;
};

TEST_F(Notifications, OffTheCallGoesOutAtOnce) {
  start(0);
  for (int i = 0; i < 2; ++i) rx(1).add_rx({2048});
  arm_tx(0);
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(calls(0, 1), 1u);
  EXPECT_FALSE(fw->calls_pending());
  EXPECT_EQ(deferred(0), 0u);
}

TEST_F(Notifications, TheCallWaitsForItsTimeAndGoesOutOnce) {
  start(500);
  rx(1).add_rx({2048});
  arm_tx(0);
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(tx(0).used_idx(), 1u);  // the chain is used at once; only the call waits
  EXPECT_EQ(calls(0, 1), 0u);
  EXPECT_TRUE(fw->calls_pending());
  EXPECT_EQ(deferred(0), 1u);
  EXPECT_EQ(fw->ns_to_next_call(), 500'000u);
  g_now_ns += 499'000;
  fw->send_due_calls();
  EXPECT_EQ(calls(0, 1), 0u);
  EXPECT_EQ(fw->ns_to_next_call(), 1'000u);
  g_now_ns += 1'000;
  fw->send_due_calls();
  EXPECT_EQ(calls(0, 1), 1u);
  EXPECT_FALSE(fw->calls_pending());
  EXPECT_EQ(fw->ns_to_next_call(), 0u);
  g_now_ns += 1'000'000;
  fw->send_due_calls();
  EXPECT_EQ(calls(0, 1), 0u);  // once
}

TEST_F(Notifications, ACallIntoTheSameGuestsReceiveQueueTakesItAlong) {
  // a's request is used and its call noted; b's reply arrives in a's receive queue (a call
  // there): both go out together, well before the coalescing time.
  start(1000);
  rx(1).add_rx({2048});
  rx(0).add_rx({2048});
  arm_tx(0);
  arm_rx(0);
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(calls(0, 1), 0u);
  g_now_ns += 100'000;
  send(1, 2);
  EXPECT_EQ(fw->poll(1, 0), 1u);
  EXPECT_EQ(calls(0, 0), 1u);  // the reply's call
  EXPECT_EQ(calls(0, 1), 1u);  // and the noted completion with it
  EXPECT_EQ(fw->calls_pending(), deferred(1) != 0);  // b's own completion may wait
  EXPECT_EQ(calls(1, 1) + deferred(1), 1u);
}

TEST_F(Notifications, NoCallIntoTheReceiveQueueLeavesTheNoteToItsTime) {
  // The guest polls its receive queue (it asked for no call there): the reply's delivery
  // sends nothing, and the noted completion waits for its time.
  start(1000);
  rx(1).add_rx({2048});
  rx(0).add_rx({2048});
  arm_tx(0);
  rx(0).used_event() = static_cast<uint16_t>(rx(0).used_idx() + 100);  // no call wanted
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  send(1, 2);
  EXPECT_EQ(fw->poll(1, 0), 1u);
  EXPECT_EQ(calls(0, 0), 0u);
  EXPECT_EQ(calls(0, 1), 0u);
  g_now_ns += 1'000'000;
  fw->send_due_calls();
  EXPECT_EQ(calls(0, 1), 1u);
}

TEST_F(Notifications, AQuarterOfTheRingSentSinceTheLastCallCallsAtOnce) {
  // The ring has kNum entries; once the guest sent kNum / 4 chains since its last call, it
  // may be short of room: its next call goes out at once.
  start(1000);
  const uint32_t quarter = test::kNum / 4;
  for (uint32_t i = 0; i < 2 * quarter; ++i) rx(1).add_rx({2048});
  uint32_t sent = 0;
  while (sent < quarter) {
    arm_tx(0);  // the driver asks again after each completion
    send(0, static_cast<uint8_t>(sent));
    EXPECT_EQ(fw->poll(0, 0), 1u);
    ++sent;
    if (sent < quarter) {
      EXPECT_EQ(calls(0, 1), 0u) << sent;
    }
  }
  EXPECT_EQ(calls(0, 1), 1u);
  EXPECT_FALSE(fw->calls_pending());
}

TEST_F(Notifications, ADriverThatStoppedAndAsksOnceFarAheadIsCalledAtOnce) {
  // Linux stops a nearly full transmit queue and asks once, far ahead
  // (virtqueue_enable_cb_delayed): the device drains the ring in bursts, the used index
  // passes used_event only after many chains, and then the driver waits for that call.
  start(1000);
  const uint32_t n = test::kNum / 2;
  for (uint32_t i = 0; i < n; ++i) rx(1).add_rx({2048});
  for (uint32_t i = 0; i < n; ++i) send(0, static_cast<uint8_t>(i));
  tx(0).used_event() = static_cast<uint16_t>(tx(0).used_idx() + n - 1);
  uint32_t taken = 0;
  while (taken < n) taken += fw->poll(0, 0);
  EXPECT_EQ(calls(0, 1), 1u);  // not 1000 us later
  EXPECT_FALSE(fw->calls_pending());
}

TEST_F(Notifications, APausedPortsNotesGoOutBeforeTheControlThreadChangesIt) {
  // A note must not outlive a pause (a ring stopped by GET_VRING_BASE, a disconnect, a
  // direct link): right after the quiescent point where the thread sees the port paused,
  // release_paused() sends it.
  start(1000);
  rx(1).add_rx({2048});
  arm_tx(0);
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_TRUE(fw->calls_pending());
  EXPECT_EQ(calls(0, 1), 0u);
  ports[0]->pause_datapath();
  g_now_ns += 2'000'000;
  fw->send_due_calls();  // due, but not from here: the port may be changing
  EXPECT_EQ(calls(0, 1), 0u);
  fw->release_paused();
  EXPECT_EQ(calls(0, 1), 1u);
  EXPECT_FALSE(fw->calls_pending());
  ports[0]->resume_datapath();
}

TEST_F(Notifications, ReceiveQueuesAskForNoKicksTransmitQueuesDo) {
  // The driver kicks a split ring with EVENT_IDX when its avail index passes avail_event
  // (virtio 1.2 §2.7.10): behind the next index (never passed before a wrap) on the
  // receive queue; at it (asked for) on the transmit queue until a PMD thread polls it.
  start(250);
  EXPECT_EQ(rx(0).avail_event(), static_cast<uint16_t>(0 - 1));
  EXPECT_EQ(rx(1).avail_event(), static_cast<uint16_t>(0 - 1));
  EXPECT_EQ(tx(0).avail_event(), 0u);
}

TEST_F(Notifications, SendAllCallsLeavesNoNoteBehind) {
  start(1000);
  rx(1).add_rx({2048});
  arm_tx(0);
  send(0, 1);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(calls(0, 1), 0u);
  fw->send_all_calls();
  EXPECT_EQ(calls(0, 1), 1u);
  EXPECT_FALSE(fw->calls_pending());
}

}  // namespace
}  // namespace vl
