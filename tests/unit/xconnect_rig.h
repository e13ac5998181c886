// Two vhost-user ports cross-connected through a Forwarder, each with an AnyRingFrontend
// (split or packed rings, a feature mask), and a checker that every frame one side sends
// arrives at the other once, in order and intact (ring_position_test, header_length_test).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_any_frontend.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"

namespace vl::test {

/// How one side's front-end drives its device.
struct RigSide {
  bool packed = false;
  uint64_t drop_features = 0;  ///< offered features this front-end declines
  uint32_t hdr_len = 12;       ///< the virtio-net header this driver writes and expects
};

class XconnectRig {
 public:
  XconnectRig(RigSide s0, RigSide s1) : side_{s0, s1} {
    quiescer_ = std::make_unique<FakeQuiescer>(1);
    fdb_ = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c = rig_port_config(i);
      ports_.push_back(std::make_unique<port::VhostPort>(i, c, quiescer_.get()));
      fes_.push_back(std::make_unique<AnyRingFrontend>(side_[i].packed, 32u << 20));
      EXPECT_TRUE(connect_any(*ports_[i], *fes_[i]));
      fes_[i]->start(side_[i].drop_features);
      EXPECT_TRUE(ports_[i]->active());
      tables_.ports[i] = ports_[i].get();
    }
    tables_.nports = 2;
    tables_.mode = dp::ForwardMode::kXconnect;
    tables_.xc_peer[0] = 1;
    tables_.xc_peer[1] = 0;
    tables_.fdb = fdb_.get();
    tables_.burst = 32;
    fw_ = std::make_unique<dp::Forwarder>(&tables_, &dp::tsc_now_ns, 0);
  }
  explicit XconnectRig(bool packed) : XconnectRig(RigSide{packed}, RigSide{packed}) {}

  AnyRingFrontend& fe(uint32_t i) { return *fes_[i]; }
  port::VhostPort& port(uint32_t i) { return *ports_[i]; }
  /// Calls f(ring) with side i's vring v as its own type (FakeVring or FakePackedRing).
  template <class F>
  void ring(uint32_t i, uint32_t v, F f) {
    if (side_[i].packed) {
      f(*fes_[i]->pk[v]);
    } else {
      f(*fes_[i]->split[v]);
    }
  }

  /// Side i sends a frame of `len` bytes (with its own header length).
  void send(uint32_t i, uint32_t len) {
    auto f = frame_tagged(len, next_tag_++);
    ring(i, vhost::kTxVring, [&](auto& r) {
      r.add_tx(with_net_hdr(virtio::NetHdr{}, side_[i].hdr_len, f));
    });
    in_flight_[1 - i].push_back(f);
    ++sent_[i];
  }
  /// Side i posts n receive buffers of `bytes` each.
  void post_rx(uint32_t i, uint32_t n, uint32_t bytes = 2048) {
    ring(i, vhost::kRxVring, [&](auto& r) {
      for (uint32_t k = 0; k < n; ++k) r.add_rx({bytes});
    });
  }
  /// Runs the datapath on both ports until nothing moves.
  void forward() {
    for (int k = 0; k < 16; ++k) {
      const uint32_t n = fw_->poll(0, 0) + fw_->poll(1, 0);
      if (!n) break;
    }
    fw_->flush_all();
  }
  /// Side i's transmit chains returned since the last call.
  uint32_t reclaim_tx(uint32_t i) {
    uint32_t n = 0;
    ring(i, vhost::kTxVring, [&](auto& r) {
      while (r.next_used()) ++n;
    });
    tx_done_[i] += n;
    return n;
  }
  /// Takes side i's used receive buffers and checks each against the next frame the other
  /// side sent: used length header + frame, num_buffers 1 (where the header has it: 12
  /// bytes), the frame's bytes after side i's header length.
  void receive(uint32_t i, const std::string& what) {
    const uint32_t hl = side_[i].hdr_len;
    ring(i, vhost::kRxVring, [&](auto& r) {
      while (auto u = r.next_used()) {
        ASSERT_FALSE(in_flight_[i].empty()) << what << ": more frames than were sent";
        const std::vector<uint8_t> want = in_flight_[i].front();
        in_flight_[i].pop_front();
        ASSERT_EQ(u->len, hl + want.size()) << what << " frame " << got_[i] << " at side " << i;
        auto bytes = r.done_bytes(static_cast<uint16_t>(u->id), u->len);
        if (hl >= 12) {
          uint16_t nb;
          std::memcpy(&nb, bytes.data() + 10, 2);
          EXPECT_EQ(nb, 1) << what << " frame " << got_[i];
        }
        EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + hl, bytes.end()), want)
            << what << " frame " << got_[i] << " at side " << i << " (out of order or corrupt)";
        ++got_[i];
      }
    });
  }
  uint64_t drops(uint32_t i) {
    uint64_t n = 0;
    for (auto& d : fw_->counters(i).drops) n += d.load();
    return n;
  }
  /// Side i's counters in the forwarder (attack tests: per-reason drops, packets).
  const port::PortCounters& counters(uint32_t i) const { return fw_->counters(i); }
  /// Frames on their way to side i, oldest first (attack tests with their own checks).
  std::deque<std::vector<uint8_t>>& in_flight(uint32_t i) { return in_flight_[i]; }
  bool ready(uint32_t i, uint32_t vring) { return ports_[i]->backend().vring(vring).ready; }
  uint32_t sent(uint32_t i) const { return sent_[i]; }
  uint32_t got(uint32_t i) const { return got_[i]; }
  uint32_t tx_done(uint32_t i) const { return tx_done_[i]; }

 private:
  RigSide side_[2];
  std::unique_ptr<FakeQuiescer> quiescer_;
  std::unique_ptr<dp::Fdb> fdb_;
  std::vector<std::unique_ptr<port::VhostPort>> ports_;
  std::vector<std::unique_ptr<AnyRingFrontend>> fes_;
  dp::SwitchTables tables_;
  std::unique_ptr<dp::Forwarder> fw_;
  std::deque<std::vector<uint8_t>> in_flight_[2];  ///< frames on their way to side i
  uint32_t sent_[2] = {}, got_[2] = {}, tx_done_[2] = {}, next_tag_ = 0;
};

}  // namespace vl::test
