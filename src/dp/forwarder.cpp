#include "dp/forwarder.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "util/log.h"

namespace vl::dp {

using port::Drop;
using port::PortCounters;
using namespace vl::virtio;

void Forwarder::flood(uint32_t in, uint32_t pkt) {
  bool any = false;
  for (uint32_t o = 0; o < t_->nports; ++o) {
    if (o == in || !t_->ports[o]->active()) continue;
    enqueue(o, pkt);
    any = true;
  }
  if (!any) counters_[in].drop(Drop::kNoDestination);
}

uint32_t Forwarder::poll(uint32_t in) {
  port::VhostPort* p = t_->ports[in];
  if (!p->active()) return 0;
  const port::PortDp& d = p->dp();
  DeviceQueue* q = d.txq;
  if (!q || q->broken()) return 0;
  const int pending = q->pending();
  if (pending <= 0) [[likely]] {
    if (pending < 0) {
      counters_[in].drop(Drop::kRingBroken);
      VL_LOG_RL(spdlog::level::err,
                "port {}: transmit queue broken (avail index ran more than a queue ahead); stopped",
                p->config().name);
    }
    return 0;
  }
  const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(pending), t_->burst);
  PortCounters& c = counters_[in];
  arena_.clear();
  uint32_t k = 0;
  uint32_t taken = 0;
  uint64_t bytes = 0;
  for (; taken < n && arena_.has_room_for_chain(); ++taken) {
    Chain ch;
    switch (q->pop<false>(arena_, &ch)) {
      case PopStatus::kOk: {
        Pkt& pk = pkts_[k];
        if (!split_tx_chain(arena_, ch, d.hdr_len, &pk.f)) [[unlikely]] {
          c.drop(Drop::kBadHeader);
          q->push_used(ch.head, 0);
          break;
        }
        pk.head = ch.head;
        bytes += pk.f.len;
        ++k;
        break;
      }
      case PopStatus::kBadChain: c.drop(Drop::kBadDescriptor); break;
      case PopStatus::kTooBig: c.drop(Drop::kTooBig); break;
      default: break;
    }
  }
  PortCounters::add(c.rx_packets, taken);
  PortCounters::add(c.rx_bytes, bytes);

  // Classify.
  const uint32_t now = t_->now_s.load(std::memory_order_relaxed);
  Mac last_src = ~Mac{0};
  for (uint32_t i = 0; i < k; ++i) {
    const TxFrame& f = pkts_[i].f;
    if (t_->mode == ForwardMode::kXconnect) {
      const uint32_t o = t_->xc_peer[in];
      if (o == SwitchTables::kNoPeer) c.drop(Drop::kNoDestination);
      else enqueue(o, i);
      continue;
    }
    uint8_t eth[12];
    const Segment& s0 = arena_.segs[f.seg_begin];
    if (s0.len >= 12) [[likely]] std::memcpy(eth, s0.ptr, 12);
    else gather_copy(eth, &arena_.segs[f.seg_begin], f.nsegs, 0, 12);
    const Mac dst = mac_from_bytes(eth);
    const Mac src = mac_from_bytes(eth + 6);
    if (src != last_src && !mac_is_multicast(src)) {
      t_->fdb->learn(src, in, now);
      last_src = src;
    }
    if (mac_is_multicast(dst)) {
      flood(in, i);
      continue;
    }
    const uint32_t o = t_->fdb->lookup(dst);
    if (o == Fdb::kNoPort || o >= t_->nports) flood(in, i);
    else if (o == in) c.drop(Drop::kNoDestination);  // never back out of the ingress port
    else enqueue(o, i);
  }
  flush(in);

  // Give the transmitted buffers back to the sender.
  for (uint32_t i = 0; i < k; ++i) q->push_used(pkts_[i].head, 0);
  q->publish_used();
  return taken;
}

void Forwarder::flush(uint32_t in) {
  while (touched_) {
    const uint32_t o = static_cast<uint32_t>(std::countr_zero(touched_));
    touched_ &= touched_ - 1;
    const uint32_t cnt = outn_[o];
    outn_[o] = 0;
    port::VhostPort* op = t_->ports[o];
    DeviceQueue* rq = op->active() ? op->dp().rxq : nullptr;
    if (!rq || rq->broken()) {
      counters_[in].drop(Drop::kNoDestination, cnt);
      continue;
    }
    const port::PortDp& od = op->dp();
    PortCounters& oc = counters_[o];
    uint64_t sent = 0, bytes = 0;
    for (uint32_t j = 0; j < cnt; ++j) {
      const TxFrame& f = pkts_[outq_[o][j]].f;
      if (f.len > od.max_frame) [[unlikely]] {
        oc.drop(Drop::kTooBig);
        continue;
      }
      const DeliverStatus st = deliver_frame(*rq, scratch_, NetHdr{}, od.hdr_len,
                                             &arena_.segs[f.seg_begin], f.nsegs, f.len,
                                             od.mrg_rxbuf);
      if (st == DeliverStatus::kOk) [[likely]] {
        ++sent;
        bytes += f.len;
      } else if (st == DeliverStatus::kNoBuffer) {
        oc.drop(Drop::kNoRxBuffer);
      } else if (st == DeliverStatus::kTooBig) {
        oc.drop(Drop::kTooBig);
      } else {
        oc.drop(Drop::kRingBroken, cnt - j);
        VL_LOG_RL(spdlog::level::err, "port {}: malformed receive chain; receive queue stopped",
                  op->config().name);
        break;
      }
    }
    PortCounters::add(oc.tx_packets, sent);
    PortCounters::add(oc.tx_bytes, bytes);
    rq->publish_used();
  }
}

}  // namespace vl::dp
