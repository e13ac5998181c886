#include "dp/forwarder.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "dp/l2_rules.h"
#include "util/log.h"

namespace vl::dp {

using port::Drop;
using port::PortCounters;
using namespace vl::virtio;

namespace {
constexpr uint64_t bit(uint32_t i) { return uint64_t{1} << i; }
}  // namespace

Forwarder::Forwarder(SwitchTables* t, uint64_t (*clock)(), uint32_t thread)
    : tables_(t), clock_(clock), thread_(thread < port::kMaxPmdThreads ? thread : 0) {
  for (uint32_t i = 0; i < kPoolSlots; ++i) free_[i] = static_cast<uint16_t>(kPoolSlots - 1 - i);
  nfree_ = kPoolSlots;
  for (uint32_t i = 0; i < port::kMaxPorts; ++i) {
    src_old_[i] = src_young_[i] = kNoSlot;
    budget_ns_[i] = UINT64_MAX;
  }
  for (uint32_t i = 0; i < kKeptBlocks; ++i) kept_free_[i] = static_cast<uint8_t>(i);
  kept_nfree_ = kKeptBlocks;
}

[[gnu::always_inline]] inline uint16_t Forwarder::new_slot(uint32_t in, uint32_t qi, uint16_t head,
                                                        uint16_t ring_descs) {
  const uint16_t s = free_[--nfree_];
  Slot& sl = pool_[s];
  sl.head = head;
  sl.ring_descs = ring_descs;
  sl.src = static_cast<uint8_t>(in);
  sl.sq = static_cast<uint8_t>(qi);
  return s;
}

[[gnu::always_inline]] inline void Forwarder::link_slot(uint32_t in, uint16_t s) {
  Slot& sl = pool_[s];
  sl.next_src = kNoSlot;
  sl.done = false;
  if (src_young_[in] == kNoSlot) src_old_[in] = s;
  else pool_[src_young_[in]].next_src = s;
  src_young_[in] = s;
  ++live_from_[in];
  live_src_ |= bit(in);
}

void Forwarder::refresh_policies() {
  const uint64_t g = tables_->flush_gen.load(std::memory_order_acquire);
  if (g == pol_gen_) [[likely]] return;
  pol_gen_ = g;
  any_hold_ = false;
  hold_unless_loaded_ = true;
  for (uint32_t i = 0; i < port::kMaxPorts; ++i) {
    policy_[i] = tables_->flush_policy(i);
    if (!due_at_burst_end(policy_[i]) && policy_[i].kind != FlushKind::kBudget)
      hold_unless_loaded_ = false;
    budget_ns_[i] = policy_[i].kind == FlushKind::kBudget ? uint64_t{policy_[i].us} * 1000 : UINT64_MAX;
    any_hold_ |= !due_at_burst_end(policy_[i]);
  }
}

void Forwarder::enqueue(uint32_t out, uint16_t s) {
  OutQueue& q = outq_[out];
  if (q.n == kOutQueueCap) [[unlikely]] flush_port(out, 0);
  Slot& sl = pool_[s];
  if (!q.n) {
    q.oldest_ns = sl.t_ns;
    held_ |= bit(out);
  }
  q.slot[q.n++] = s;
  ++sl.refs;
  burst_out_ |= bit(out);
  if (due_on_enqueue(policy_[out], q.n, tables_->burst)) flush_port(out, 0);
  if (mirror_tx_ & bit(out)) [[unlikely]]
    mirror_to(sl.src, tables_->obs.mirror_tx_to[out].load(std::memory_order_relaxed), &s, 1);
}

void Forwarder::enqueue_run(uint32_t out, const uint16_t* s, uint32_t n) {
  if (policy_[out].kind == FlushKind::kImmediate) [[unlikely]] {
    for (uint32_t j = 0; j < n; ++j) enqueue(out, s[j]);
    return;
  }
  if (mirror_tx_ & bit(out)) [[unlikely]]
    mirror_to(pool_[s[0]].src, tables_->obs.mirror_tx_to[out].load(std::memory_order_relaxed), s, n);
  OutQueue& q = outq_[out];
  const uint32_t burst = tables_->burst;
  burst_out_ |= bit(out);
  for (uint32_t j = 0; j < n;) {
    if (q.n == 0 && n - j >= burst) [[likely]] {
      // A full burst for an empty queue is due at once (due_on_enqueue): delivered from the
      // burst's own list, without entering the queue (the burst's pin keeps each slot).
      // What finds the receive queue full enters it, for a retry.
      const uint32_t done = send_slots(out, s + j, burst, 0, /*may_keep=*/true);
      if (done < burst) [[unlikely]] {
        for (uint32_t i = done; i < burst; ++i) {
          q.slot[q.n++] = s[j + i];
          ++pool_[s[j + i]].refs;
        }
        note_kept(out);
      }
      j += burst;
      continue;
    }
    if (q.n == kOutQueueCap) [[unlikely]] flush_port(out, 0);
    if (!q.n) {
      q.oldest_ns = pool_[s[j]].t_ns;
      held_ |= bit(out);
    }
    // Up to a full burst (due_on_enqueue) and the queue's room.
    uint32_t m = std::min(n - j, kOutQueueCap - q.n);
    if (q.n < burst) m = std::min(m, burst - q.n);
    for (const uint16_t* e = s + j + m; s + j < e; ++j) {
      q.slot[q.n++] = s[j];
      ++pool_[s[j]].refs;
    }
    if (q.n >= burst) flush_port(out, 0, /*may_keep=*/true);
  }
}

void Forwarder::flood(uint32_t in, uint16_t s) {
  bool any = false;
  const bool vlans = tables_->vlans;
  const uint32_t nports = tables_->nports.load(std::memory_order_relaxed);
  const uint64_t underlays = tables_->underlays.load(std::memory_order_relaxed);
  for (uint32_t o = 0; o < nports; ++o) {
    if (!floods_to(*tables_, o, in, underlays, vlans, pool_[s].vlan)) continue;
    enqueue(o, s);
    any = true;
  }
  if (!any) counters_[in].drop(Drop::kNoDestination);
}

uint32_t Forwarder::poll(uint32_t in, uint32_t qi) {
  port::Port* p = tables_->port(in);
  if (!p->active()) return 0;
  const port::PortDp& d = p->dp();
  const port::QueuePairDp& qp = d.qp[qi];
  // The ring layout is chosen once per poll: the burst is a template, no virtual call or
  // layout test per packet.
  if (!qp.txq) return 0;
  if (d.wire.pull) [[unlikely]] d.wire.pull(d.wire.ctx, qi);  // an uplink: frames from its wire
  return qp.txq.visit([&](auto& q) { return poll_ring(in, qi, &q, qp.tx_shared); });
}

template <class Q>
inline uint32_t Forwarder::poll_ring(uint32_t in, uint32_t qi, Q* q, port::QueueShared* shared) {
  if (q->broken()) return 0;
  if (!q->has_avail()) [[likely]] {  // an empty poll: one load of a cached index
    if (q->broken()) report_broken(in);
    return 0;
  }
  return forward_burst(in, qi, q, shared);
}

void Forwarder::report_broken(uint32_t in) {
  counters_[in].drop(Drop::kRingBroken);
  VL_LOG_RL(spdlog::level::err,
            "port {}: transmit queue broken (avail index more than a queue ahead, or a chain "
            "over the whole ring); stopped",
            tables_->port(in)->name());
}

// The steps of a busy poll. Their costs, in instructions per 64 B frame (xconnect, split
// ring, rx-batch, full bursts of 32; bench/instructions.py at bdb8cff, 298 in all,
// bench/results/instructions-*.txt), are in the comment above each step.
template <class Q>
[[gnu::noinline]] uint32_t Forwarder::forward_burst(uint32_t in, uint32_t qi, Q* q,
                                                    port::QueueShared* shared) {
  refresh_policies();
  if (nfree_ < tables_->burst) [[unlikely]] flush_all();  // every slot is queued: deliver them all
  const uint32_t taken = take_burst(in, qi, q, shared);
  classify(in);
  end_burst();
  return taken;
}

// Step 1, take a burst (114 instructions a frame, the pops, slots and header checks): pops
// up to `burst` chains, reads each frame's virtio-net header once, checks it, and gives each
// good frame a slot in burst_[0..nburst_). Malformed chains are counted and returned in
// turn (IN_ORDER). Returns the chains taken.
template <class Q>
[[gnu::noinline]] uint32_t Forwarder::take_burst(uint32_t in, uint32_t qi, Q* q,
                                                 port::QueueShared* shared) {
  const port::PortDp& d = tables_->port(in)->dp();
  // (locals: the pops' barriers reload members)
  BurstTake bt{in, qi, clock_(), d.caps.hdr_len, d.caps.features, counters_[in]};
  arena_.clear();
  shared->enter(thread_);  // self-check: no other thread polls this queue (port.h QueueShared)
  // A lean burst: no output holds frames past a burst and this sender has no chain still
  // queued, so every chain of the burst goes back at its end, in the order taken, without
  // the retire order's bookkeeping (take_slot, complete, retire).
  lean_ = (!any_hold_ || (hold_unless_loaded_ && loaded_)) && src_old_[in] == kNoSlot;
  lean_n_ = 0;
  lean_split_ = false;
  kept_ = false;
  const uint32_t ready = q->ready(tables_->burst);  // split: the avail index, read once per burst
  // Pass 1: pop the burst's one-buffer chains (descriptors only) and prefetch their
  // buffers, so that the line transfers from the driver's core overlap instead of each
  // frame waiting for its own (the cost that triples when the two cores are far apart:
  // bench/README.md "Core placement"). The first chain of another kind ends the pass.
  OneBuffer pre[kMaxBurst];
  uint32_t npre = 0;
  Chain ch;
  PopStatus st = PopStatus::kEmpty;
  while (npre < ready) {
    st = q->template pop_any<false>(arena_, &ch, &pre[npre]);
    if (st != PopStatus::kOne) break;
    __builtin_prefetch(pre[npre].ptr);
    __builtin_prefetch(pre[npre].ptr + 64);
    ++npre;
  }
  // Pass 2: the one-buffer chains in the order taken, then the chain that ended pass 1 and
  // any more the ring holds (chains of several descriptors, malformed ones), one by one.
  Chain unused;
  for (uint32_t i = 0; i < npre; ++i) take_chain(bt, PopStatus::kOne, pre[i], unused);
  if (npre < ready && st != PopStatus::kEmpty && st != PopStatus::kBroken) [[unlikely]] {
    OneBuffer b{};  // (initialised for the compiler: written whenever kOne is returned)
    for (;;) {
      take_chain(bt, st, b, ch);
      if (bt.taken >= ready || !arena_.has_room_for_chain()) break;
      st = q->template pop_any<false>(arena_, &ch, &b);
      if (st == PopStatus::kEmpty || st == PopStatus::kBroken) break;
    }
  }
  shared->leave();
  if (q->broken()) report_broken(in);
  end_take(bt);
  return bt.taken;
}

inline void Forwarder::take_chain(BurstTake& bt, PopStatus st, const OneBuffer& b, Chain& ch) {
  ++bt.taken;
  if (st == PopStatus::kBadChain || st == PopStatus::kTooBig) [[unlikely]] {
    bt.c.drop(st == PopStatus::kTooBig ? Drop::kTooBig : Drop::kBadDescriptor);
    return;
  }
  const bool one = st == PopStatus::kOne;
  const uint16_t s = new_slot(bt.in, bt.qi, one ? b.head : ch.head, one ? 1 : ch.ring_descs);
  if (!lean_) [[unlikely]] link_slot(bt.in, s);
  else if (lean_split_) [[unlikely]] lean_slots_[lean_n_++] = s;
  Slot& sl = pool_[s];
  Drop bad = Drop::kCount;
  if (one && bt.hdr_len == sizeof(NetHdr) && b.len >= sizeof(NetHdr) + kEthHdrLen) [[likely]] {
    // The common chain: header and frame in one buffer. The header is read once, into
    // the slot; the frame's one segment lives in the slot (never in the arena).
    std::memcpy(&sl.hdr, b.ptr, sizeof(NetHdr));
    pin_copy(sl.hdr);  // read once: the slot's copy is what counts
    sl.inl[0] = Segment{b.ptr + sizeof(NetHdr), b.len - static_cast<uint32_t>(sizeof(NetHdr))};
    sl.segs = sl.inl;
    sl.nsegs = 1;
    sl.len = sl.inl[0].len;
  } else {
    if (one) take_one(arena_, &ch, b.head, b.ptr, b.len);
    bad = split_into_slot(sl, ch, bt.hdr_len);
  }
  if (bad == Drop::kCount && !offload::plain_tx_header(&sl.hdr)) [[unlikely]] {
    const auto v = offload::check_tx_header(&sl.hdr, sl.len, bt.features);
    if (v != offload::TxCheck::kOk)
      bad = v == offload::TxCheck::kBadCsum ? Drop::kBadCsum : Drop::kBadGso;
  }
  if (bad != Drop::kCount) [[unlikely]] {
    refuse_taken(bt.c, bt.k, s, bad);
    return;
  }
  sl.t_ns = bt.now;
  sl.refs = 1;  // this burst's pin, released by end_burst
  burst_[bt.k++] = s;
  bt.bytes += sl.len;
}

Drop Forwarder::split_into_slot(Slot& sl, const Chain& ch, uint32_t hdr_len) {
  TxFrame f;
  if (!split_tx_chain(arena_, ch, hdr_len, &f)) {
    sl.segs = sl.inl;  // not the list of the slot's previous use
    sl.nsegs = 0;
    return Drop::kBadHeader;
  }
  sl.hdr = f.hdr;
  sl.segs = &arena_.segs[f.seg_begin];
  sl.nsegs = f.nsegs;
  sl.len = f.len;
  many_segs_ |= f.nsegs > kInlineSegs;
  return Drop::kCount;
}

[[gnu::noinline]] void Forwarder::refuse_taken(PortCounters& c, uint32_t k, uint16_t s, Drop why) {
  c.drop(why);
  pool_[s].refs = 0;
  if (!lean_) {
    complete(s);  // returned in turn, after the older chains (IN_ORDER)
  } else if (!lean_split_) {
    // The lean list was burst_ so far; from this chain on it is kept apart.
    std::memcpy(lean_slots_, burst_, k * sizeof burst_[0]);
    lean_n_ = k;
    lean_slots_[lean_n_++] = s;
    lean_split_ = true;
  }
}

[[gnu::always_inline]] inline void Forwarder::end_take(const BurstTake& bt) {
  PortCounters::add(bt.c.rx_packets, bt.taken);
  PortCounters::add(bt.c.rx_bytes, bt.bytes);
  port::QueueCounters& qc = qcounters_[bt.in][bt.qi];
  PortCounters::add(qc.rx_packets, bt.taken);
  PortCounters::add(qc.rx_bytes, bt.bytes);
  pass_.frames += bt.taken;
  pass_.bytes += bt.bytes;
  senders_dirty_ |= bit(bt.in);
  dirty_q_[bt.in] |= static_cast<uint8_t>(1u << bt.qi);
  taken_[bt.in] += bt.taken;
  nburst_ = bt.k;
  if (lean_ && !lean_split_) lean_n_ = bt.k;  // every chain taken is in burst_, in order
  lean_list_ = lean_split_ ? lean_slots_ : burst_;
  lean_in_ = bt.in;
  lean_qi_ = bt.qi;
}

// Step 2, classify (3 instructions a frame cross-connected; 159 with the delivery of a
// full burst, which happens here: the copy 112, receive pops and used entries 47): each
// frame of the burst to the intermediate queue of its output port
// (cross-connect: the peer, as one run; bridge: learn the source MAC, look up the
// destination, flood what is unknown or multicast). Immediate queues, and queues that
// reach a full burst, are delivered here.
[[gnu::noinline]] void Forwarder::classify(uint32_t in) {
  // Capture and mirroring (dp/observe.h): while none is on, this one test per burst.
  // Port security takes the same one test per burst (its bit beside the taps').
  const uint64_t orx = tables_->obs.rx.load(std::memory_order_acquire) |
                       tables_->guarded.load(std::memory_order_relaxed);
  const uint64_t mtx = tables_->obs.mirror_tx.load(std::memory_order_relaxed);
  if (((orx >> in) & 1) | (mtx != 0)) [[unlikely]] {
    classify_observed(in, mtx);
    return;
  }
  if (tables_->vlans) [[unlikely]] classify_as<true, false>(in);
  else classify_as<false, false>(in);
}

void Forwarder::classify_any(uint32_t in) {
  const bool g = (tables_->guarded.load(std::memory_order_relaxed) >> in) & 1;
  if (tables_->vlans) g ? classify_as<true, true>(in) : classify_as<true, false>(in);
  else g ? classify_as<false, true>(in) : classify_as<false, false>(in);
}

uint32_t Forwarder::guard_sources(uint32_t in, const uint16_t* from, uint32_t n) {
  const SourceGuard& g = tables_->guard[in];
  uint32_t m = 0, refused = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint16_t s = from[i];
    const Slot& sl = pool_[s];
    uint8_t eth[12];  // frames are at least an Ethernet header long (take_burst)
    if (sl.segs[0].len >= 12) [[likely]] std::memcpy(eth, sl.segs[0].ptr, 12);
    else gather_copy(eth, sl.segs, sl.nsegs, 0, 12);
    if (source_allowed(g, mac_from_bytes(eth + 6))) vlan_burst_[m++] = s;
    else ++refused;
  }
  if (refused) counters_[in].drop(Drop::kSourceNotAllowed, refused);
  return m;
}

[[gnu::noinline]] void Forwarder::classify_observed(uint32_t in, uint64_t mtx) {
  Observe& obs = tables_->obs;
  // The frames as their sender gave them, before any VLAN step.
  if ((obs.tap_rx.load(std::memory_order_acquire) >> in) & 1)
    tap(in, kTapRx, [this](uint32_t j) -> const Slot& { return pool_[burst_[j]]; }, nburst_, 0);
  // (Mirrors are refused on a switch with VLANs, app/capture.h: no frame here has a tag
  // to be edited for the mirror port.)
  if (((obs.mirror_rx.load(std::memory_order_relaxed) >> in) & 1) && !tables_->vlans)
    mirror_to(in, obs.mirror_rx_to[in].load(std::memory_order_relaxed), burst_, nburst_);
  mirror_tx_ = tables_->vlans ? 0 : mtx;
  classify_any(in);
  mirror_tx_ = 0;
}

void Forwarder::mirror_to(uint32_t src, uint32_t dst, const uint16_t* s, uint32_t n) {
  if (!n || dst == src || dst >= tables_->nports.load(std::memory_order_relaxed) ||
      !tables_->port(dst)->active())
    return;
  const uint64_t saved = mirror_tx_;
  mirror_tx_ = 0;
  enqueue_run(dst, s, n);
  mirror_tx_ = saved;
}

template <class Get>
void Forwarder::tap(uint32_t port, TapDir dir, Get&& frame, uint32_t n, uint64_t now) {
  Observe& obs = tables_->obs;
  HandoffRing* ring = obs.ring[thread_].load(std::memory_order_acquire);
  if (!ring) return;
  const uint32_t snap = obs.snaplen[port].load(std::memory_order_relaxed);
  uint64_t missed = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const Slot& sl = frame(j);
    if (!ring->push(sl.segs, sl.nsegs, std::min(sl.len, snap), sl.hdr, static_cast<uint8_t>(port),
                    dir, 0, sl.len, now ? now : sl.t_ns))
      ++missed;
  }
  ring->publish();
  if (missed) PortCounters::add(obs.missed[thread_][port][dir], missed);
}

template <bool kVlans, bool kGuard>
void Forwarder::classify_as(uint32_t in) {
  const uint32_t k = nburst_;
  PortCounters& c = counters_[in];
  uint32_t k2 = k;
  // With VLANs or port security the frames to forward are a list apart (vlan_burst_):
  // burst_ keeps every frame taken, those dropped here included, for end_burst to give
  // back (each once).
  uint16_t* const list = kVlans || kGuard ? vlan_burst_ : burst_;
  if constexpr (kVlans) k2 = vlan_ingress(in, k);
  if constexpr (kGuard) k2 = guard_sources(in, kVlans ? vlan_burst_ : burst_, k2);
  if (tables_->mode == ForwardMode::kXconnect) {
    const uint32_t o = tables_->xc_peer[in];
    if (o == SwitchTables::kNoPeer) [[unlikely]] {
      c.drop(Drop::kNoDestination, k2);
      return;
    }
    uint32_t k3 = k2;
    if constexpr (kVlans) {  // only the VLANs the peer carries
      k3 = 0;
      for (uint32_t i = 0; i < k2; ++i) {
        if (tables_->vlan[o].carries(pool_[list[i]].vlan)) list[k3++] = list[i];
        else c.drop(Drop::kVlanNotAllowed);
      }
    }
    enqueue_run(o, list, k3);
    return;
  }
  const uint32_t now_s = tables_->now_s.load(std::memory_order_relaxed);
  // Once per burst, not per frame (bench/results/instructions-2026-12-03-runtime-ports.md).
  const uint32_t nports = tables_->nports.load(std::memory_order_relaxed);
  Fdb* const fdb = tables_->fdb;
  // Consecutive frames to one source MAC are learned once, to one destination MAC looked
  // up once, and frames to one output port enqueued as one run (list[run_b..i)). With
  // VLANs a MAC table key is (VLAN, MAC) (dp/vlan.h vlan_key).
  constexpr uint32_t kNone = ~0u;
  Mac last_src = ~Mac{0}, last_dst = ~Mac{0};
  uint32_t last_o = kNone, run_o = kNone, run_b = 0;
  bool last_ok = false;  // last_o is where frames to last_dst go
  static_assert(Fdb::kNoPort >= port::kMaxPorts);
  auto end_run = [&](uint32_t i) {
    if (run_o != kNone) enqueue_run(run_o, list + run_b, i - run_b);
    run_o = kNone;
  };
  for (uint32_t i = 0; i < k2; ++i) {
    const uint16_t s = list[i];
    const Slot& sl = pool_[s];
    uint8_t eth[12];
    if (sl.segs[0].len >= 12) [[likely]] std::memcpy(eth, sl.segs[0].ptr, 12);
    else gather_copy(eth, sl.segs, sl.nsegs, 0, 12);
    Mac dst = mac_from_bytes(eth);
    Mac src = mac_from_bytes(eth + 6);
    if constexpr (kVlans) {
      dst = vlan_key(dst, sl.vlan);
      src = vlan_key(src, sl.vlan);
    }
    if (src != last_src && mac_is_learnable(src)) {
      fdb->learn(src, in, now_s);
      last_src = src;
      last_dst = ~Mac{0};  // a learned source may be a later frame's destination
    }
    if (!mac_is_multicast(dst)) [[likely]] {
      if (dst != last_dst) {
        last_dst = dst;
        last_o = fdb->lookup(dst);
        // Known, a port of the table, and not back to its ingress (kNoPort >= nports).
        last_ok = to_learned_port(last_o, in, nports);
      }
      // (With VLANs, an entry another thread is replacing at this instant may name a port
      // outside the frame's VLAN, fdb.h: the frame is then flooded in its VLAN.)
      if (last_ok && (!kVlans || tables_->vlan[last_o].carries(sl.vlan))) [[likely]] {
        if (last_o != run_o) {
          end_run(i);
          run_o = last_o;
          run_b = i;
        }
        continue;
      }
    }
    end_run(i);
    if (back_to_ingress(dst, last_o, in)) c.drop(Drop::kNoDestination);  // never back out
    else flood(in, s);
  }
  end_run(k2);
}

uint32_t Forwarder::vlan_ingress(uint32_t in, uint32_t k) {
  uint32_t k2 = 0;
  for (uint32_t i = 0; i < k; ++i) {
    Slot& sl = pool_[burst_[i]];
    uint8_t h[16] = {};
    if (sl.segs[0].len >= 16) std::memcpy(h, sl.segs[0].ptr, 16);
    else gather_copy(h, sl.segs, sl.nsegs, 0, std::min<uint32_t>(16, sl.len));
    uint16_t vid = 0;
    sl.tagged = vlan_tag(h, &vid);  // (h is zeros past the end of a shorter frame)
    // A tag may be taken off on the way out (vlan_view), moving csum_start 4 bytes back:
    // a checksum that starts before the end of the tag would then start before the frame
    // (csum_start wraps to ~65532) and be filled in out of bounds. No real frame's does.
    if (sl.tagged && (sl.hdr.flags & virtio::kNetHdrFNeedsCsum) &&
        sl.hdr.csum_start < 12 + kVlanTagLen) [[unlikely]] {
      counters_[in].drop(Drop::kBadCsum);
      continue;
    }
    // (A frame with the 802.1Q TPID under 18 bytes is in no VLAN: dp/l2_rules.h.)
    const int v = ingress_vlan(tables_->vlan[in], sl.tagged, vid, sl.len);
    if (v < 0) {
      counters_[in].drop(Drop::kVlanNotAllowed);
      continue;
    }
    sl.vlan = static_cast<uint16_t>(v);
    vlan_burst_[k2++] = burst_[i];
  }
  return k2;
}

const Forwarder::Slot& Forwarder::vlan_view(const Slot& sl, uint32_t o, uint32_t j) {
  const bool out_tagged = !tables_->vlan[o].untagged(sl.vlan);
  if (out_tagged == sl.tagged) return sl;
  Slot& e = vlan_slot_[j];
  e = sl;
  // Splice: the bytes before the tag's place, the tag (added) or nothing (removed), the rest.
  const uint32_t at = 2 * 6, cut = sl.tagged ? kVlanTagLen : 0;
  uint32_t n = 0, off = 0;
  bool fits = true;
  auto put = [&](uint8_t* p, uint32_t len) {
    if (!len) return;
    if (n == kMaxEditSegs) fits = false;
    else vlan_segs_[j][n++] = virtio::Segment{p, len};
  };
  for (uint32_t i = 0; i < sl.nsegs; ++i) {
    const virtio::Segment& g = sl.segs[i];
    const uint32_t a = off, b = off + g.len;  // this segment's bytes [a, b) of the frame
    off = b;
    // [a, b) minus [at, at + cut), with the new tag inserted at `at`.
    if (b <= at || a >= at + cut) {
      if (!sl.tagged && a == at) put(vlan_tag_[j], kVlanTagLen);
      put(g.ptr, g.len);
      continue;
    }
    if (a < at) put(g.ptr, at - a);
    if (!sl.tagged) put(vlan_tag_[j], kVlanTagLen);
    if (b > at + cut) put(g.ptr + (at + cut - a), b - (at + cut));
  }
  if (!sl.tagged) {
    vlan_tag_[j][0] = kEthTypeVlan >> 8;
    vlan_tag_[j][1] = kEthTypeVlan & 0xff;
    vlan_tag_[j][2] = static_cast<uint8_t>(sl.vlan >> 8);
    vlan_tag_[j][3] = static_cast<uint8_t>(sl.vlan);
  }
  if (!fits || sl.len < at + cut) [[unlikely]] {  // too many segments to splice: too_big
    e.nsegs = 0;
    e.len = ~0u >> 1;
    e.hdr = NetHdr{};
    return e;
  }
  e.segs = vlan_segs_[j];
  e.nsegs = n;
  const int d = sl.tagged ? -static_cast<int>(kVlanTagLen) : static_cast<int>(kVlanTagLen);
  e.len = static_cast<uint32_t>(static_cast<int>(sl.len) + d);
  // The header's offsets count from the frame's first byte (virtio 1.2 §5.1.6.2).
  if (e.hdr.flags & virtio::kNetHdrFNeedsCsum) e.hdr.csum_start = static_cast<uint16_t>(e.hdr.csum_start + d);
  if (e.hdr.hdr_len) e.hdr.hdr_len = static_cast<uint16_t>(e.hdr.hdr_len + d);
  return e;
}

// Step 3, end the burst (24 instructions a frame: the sender's used entries, publish and
// notification checks, counters): delivers the queues that are due now (rx-batch, and
// queues holding a frame whose segments cannot be kept past this burst), releases the
// burst's pins (a frame no queue holds goes back to its sender; a held one keeps its
// segments in its slot, the arena being reused by the next burst), checks the held queues'
// deadlines, and publishes the used entries of every sender (chains returned oldest first).
[[gnu::noinline]] void Forwarder::end_burst() {
  // A frame of more than kInlineSegs segments cannot outlive the burst (its segments are in
  // the burst's arena): every output this burst reached is delivered now.
  if (many_segs_) [[unlikely]] must_flush_ |= burst_out_;
  many_segs_ = false;
  uint64_t due = must_flush_;
  for (uint64_t m = burst_out_; m; m &= m - 1) {
    const uint32_t o = static_cast<uint32_t>(std::countr_zero(m));
    if (due_at_burst_end(policy_[o], loaded_)) due |= bit(o);
  }
  loaded_ = loaded_burst(nburst_, tables_->burst);  // for the next burst
  for (due &= held_; due; due &= due - 1)
    flush_port(static_cast<uint32_t>(std::countr_zero(due)), 0, /*may_keep=*/true);
  burst_out_ = must_flush_ = 0;
  if (lean_ && kept_) [[unlikely]] {
    // A receive queue was full and frames of this lean burst wait for a retry: its chains
    // join the retire order after all (oldest first), and are returned as they complete.
    for (uint32_t i = 0; i < lean_n_; ++i) {
      link_slot(lean_in_, lean_list_[i]);
      if (pool_[lean_list_[i]].refs == 0) complete(lean_list_[i]);  // a malformed frame
    }
    lean_ = false;
    lean_n_ = 0;
  }
  kept_ = false;
  if (lean_) [[likely]] {
    // Every queue this burst filled was delivered above: its chains go back in order.
    const port::QueuePairDp& qp = tables_->port(lean_in_)->dp().qp[lean_qi_];
    if (qp.txq) [[likely]] {
      qp.txq.visit([&](auto& q) {
        for (uint32_t i = 0; i < lean_n_; ++i) {
          const uint16_t s = lean_list_[i];
          q.push_used(pool_[s].head, 0, pool_[s].ring_descs);
          free_[nfree_++] = s;
        }
      });
    } else {  // the ring went away: the chains are gone with it
      for (uint32_t i = 0; i < lean_n_; ++i) free_[nfree_++] = lean_list_[i];
    }
    lean_ = false;
    lean_n_ = 0;
  } else {
    for (uint32_t i = 0; i < nburst_; ++i) {
      const uint16_t s = burst_[i];
      Slot& sl = pool_[s];
      if (--sl.refs == 0) {
        complete(s);
      } else if (in_arena(sl.segs)) {  // more segments went to the store (note_kept)
        std::memcpy(sl.inl, sl.segs, sl.nsegs * sizeof(Segment));  // nsegs <= kInlineSegs
        sl.segs = sl.inl;
      }
    }
  }
  nburst_ = 0;
  if (held_) flush_due();
  publish_senders();
}

void Forwarder::flush_due() {
  refresh_policies();
  const uint64_t now = clock_();
  const uint64_t prev = gap_fresh_ ? 0 : gap_.last_check_ns();
  gap_.check(now, gap_fresh_, prev ? off_cpu_.overlap(prev, now) : 0);
  gap_fresh_ = false;
  const uint64_t predicted = gap_.predict();
  for (uint64_t m = held_; m; m &= m - 1) {
    const uint32_t o = static_cast<uint32_t>(std::countr_zero(m));
    if (due_at_check(policy_[o], outq_[o].oldest_ns, now, predicted)) flush_port(o, prev, true);
  }
  if (!held_) gap_fresh_ = true;
  publish_senders();
}

void Forwarder::settle_pending_ages() {
  for (uint32_t i = 0; i < npending_; ++i) {
    const PendingAge& e = pending_[i];
    const uint64_t a = e.now_ns > e.from_ns ? e.now_ns - e.from_ns : 0;
    const uint64_t on = a - off_cpu_.overlap(e.from_ns, e.now_ns);
    age_on_cpu_[e.o].add(on, e.n);
    if (a > budget_ns_[e.o]) [[unlikely]] {
      PortCounters::add(over_budget_raw_[e.o], e.n);
      if (on > budget_ns_[e.o]) PortCounters::add(over_budget_[e.o], e.n);
    }
  }
  npending_ = 0;
}

void Forwarder::flush_all() {
  while (held_) flush_port(static_cast<uint32_t>(std::countr_zero(held_)), 0);
  gap_fresh_ = true;
  publish_senders();
}

uint64_t Forwarder::flush_before_sleep() {
  for (uint64_t m = held_; m; m &= m - 1)
    flush_port(static_cast<uint32_t>(std::countr_zero(m)), 0, true);
  gap_fresh_ = true;
  publish_senders();
  if (!held_) return 0;
  // What is left was kept for a retry: the time until the first of it is dropped.
  const uint64_t now = clock_();
  uint64_t left = UINT64_MAX;
  for (uint64_t m = held_; m; m &= m - 1) {
    const uint32_t o = static_cast<uint32_t>(std::countr_zero(m));
    const uint64_t until = outq_[o].oldest_ns + tables_->port(o)->dp().tx_retry_ns;
    left = std::min(left, until > now ? until - now : 1);
  }
  return left;
}

void Forwarder::release_paused() {
  for (uint64_t m = held_ | live_src_ | calls_due_; m; m &= m - 1) {
    if (!tables_->port(std::countr_zero(m))->active()) {
      flush_all();
      // Calls noted for a paused port (flush_all may have noted some) go out now, before
      // the control thread changes its rings: a note must not outlive the pause.
      for (uint64_t c = calls_due_; c; c &= c - 1) {
        const uint32_t p = static_cast<uint32_t>(std::countr_zero(c));
        if (!tables_->port(p)->active()) send_calls(p);
      }
      return;
    }
  }
}

void Forwarder::complete(uint16_t s) {
  pool_[s].done = true;
  if (in_store(pool_[s].segs)) [[unlikely]] {  // its block goes back
    kept_free_[kept_nfree_++] =
        static_cast<uint8_t>((pool_[s].segs - kept_segs_) / kKeptBlockSegs);
    --kept_by_out_[pool_[s].kept_out];
    // Released once: the slot's next use may be refused before it sets segs (a bad
    // header), and its complete() must not count this store user again.
    pool_[s].segs = pool_[s].inl;
  }
  retire_due_ |= bit(pool_[s].src);  // retired in one walk per sender by publish_senders()
}

void Forwarder::retire(uint32_t src) {
  // The sender's queue is unchanged while we hold its chains (pmd.h).
  const port::PortDp& d = tables_->port(src)->dp();
  uint16_t s = src_old_[src];
  uint32_t qs = 0;
  uint32_t n = 0;
  while (s != kNoSlot && pool_[s].done) {
    // A run of chains from one transmit queue (the common case: a burst), its layout
    // chosen once.
    const uint8_t sq = pool_[s].sq;
    const port::QueuePairDp& qp = d.qp[sq];
    qs |= 1u << sq;
    auto run = [&](auto* q) {
      for (; s != kNoSlot && pool_[s].done && pool_[s].sq == sq; ++n) {
        if (q) q->push_used(pool_[s].head, 0, pool_[s].ring_descs);
        free_[nfree_++] = s;
        s = pool_[s].next_src;
      }
    };
    if (qp.txq) [[likely]]
      qp.txq.visit([&](auto& q) { run(&q); });
    else  // the ring went away: the chains are gone with it
      run(static_cast<virtio::SplitDeviceQueue*>(nullptr));
  }
  live_from_[src] -= n;
  src_old_[src] = s;
  if (s == kNoSlot) {
    src_young_[src] = kNoSlot;
    live_src_ &= ~bit(src);
  }
  senders_dirty_ |= bit(src);
  dirty_q_[src] |= static_cast<uint8_t>(qs);
}

void Forwarder::publish_senders() {
  for (; retire_due_; retire_due_ &= retire_due_ - 1)
    retire(static_cast<uint32_t>(std::countr_zero(retire_due_)));
  for (; senders_dirty_; senders_dirty_ &= senders_dirty_ - 1) {
    const uint32_t p = static_cast<uint32_t>(std::countr_zero(senders_dirty_));
    const port::PortDp& d = tables_->port(p)->dp();
    const bool coalesce = d.completion_coalesce_ns != 0;
    uint32_t asked = 0;  // queue pairs whose driver asked for a call
    for (uint32_t m = dirty_q_[p]; m; m &= m - 1) {
      const uint32_t q = static_cast<uint32_t>(std::countr_zero(m));
      if (d.qp[q].txq.publish_used(coalesce)) asked |= 1u << q;
    }
    dirty_q_[p] = 0;
    // (A front-end that polls never asks.)
    if (coalesce && asked) [[unlikely]] note_calls(p, d, asked);
  }
}

void Forwarder::note_calls(uint32_t p, const port::PortDp& d, uint32_t asked) {
  uint32_t bound = UINT32_MAX;  // chains a driver may have used and not been called for
  for (uint32_t m = asked; m; m &= m - 1) {
    const virtio::RingRef& r = d.qp[std::countr_zero(m)].txq;
    bound = std::min(bound, r.visit([](auto& q) { return q.size(); }) / kCoalesceRingFraction);
  }
  if (!(calls_due_ & bit(p))) {
    call_at_[p] = clock_() + d.completion_coalesce_ns;
    next_call_ns_ = calls_due_ ? std::min(next_call_ns_, call_at_[p]) : call_at_[p];
    calls_due_ |= bit(p);
  }
  call_q_[p] |= static_cast<uint8_t>(asked);
  // A driver that sent many frames since its last call may be running out of room in its
  // ring (Linux stops its queue a few entries short of full, then asks once, far ahead):
  // no waiting.
  if (taken_[p] - call_from_[p] >= bound) send_calls(p);
}

void Forwarder::send_calls(uint32_t p) {
  // Active, or paused and seen so right after a quiescent point (release_paused): its view
  // is still whole until the next one.
  const port::PortDp& d = tables_->port(p)->dp();
  for (uint32_t m = call_q_[p]; m; m &= m - 1) d.qp[std::countr_zero(m)].txq.flush_call();
  call_q_[p] = 0;
  calls_due_ &= ~bit(p);
  call_from_[p] = taken_[p];
}

void Forwarder::send_due_calls() {
  const uint64_t now = clock_();
  if (now < next_call_ns_) return;
  uint64_t next = UINT64_MAX;
  for (uint64_t m = calls_due_; m; m &= m - 1) {
    const uint32_t p = static_cast<uint32_t>(std::countr_zero(m));
    // A paused port's notes wait for the next quiescent point (release_paused sends them).
    if (call_at_[p] <= now && tables_->port(p)->active()) send_calls(p);
    else next = std::min(next, call_at_[p]);
  }
  next_call_ns_ = next;
}

uint64_t Forwarder::ns_to_next_call() const {
  if (!calls_due_) return 0;
  uint64_t next = UINT64_MAX;
  for (uint64_t m = calls_due_; m; m &= m - 1)
    next = std::min(next, call_at_[std::countr_zero(m)]);
  const uint64_t now = clock_();
  return next > now ? next - now : 1;
}

void Forwarder::flush_port(uint32_t o, uint64_t prev_check_ns, bool may_keep) {
  OutQueue& tq = outq_[o];
  const uint32_t cnt = tq.n;
  tq.n = 0;
  held_ &= ~bit(o);
  // Frames kept past their burst whose segments are in the burst's arena move to their
  // slot or the kept-segment store (note_kept).
  const uint32_t done = send_slots(o, tq.slot, cnt, prev_check_ns, may_keep);
  for (uint32_t i = 0; i < done; ++i) unref(tq.slot[i]);
  if (done < cnt) [[unlikely]] {
    // A full receive queue: what did not fit waits in the queue for the next pass
    // (tx_retry_us), unless it is already that old.
    std::memmove(tq.slot, tq.slot + done, (cnt - done) * sizeof tq.slot[0]);
    tq.n = cnt - done;
    note_kept(o);
  }
}

bool Forwarder::keep_segments(Slot& sl, uint32_t out) {
  if (!in_arena(sl.segs) || sl.nsegs <= kInlineSegs) return true;  // end_burst copies to inl
  if (sl.nsegs > kKeptBlockSegs || !kept_nfree_ || kept_by_out_[out] >= kKeptBlocksPerOutput)
    return false;
  Segment* b = kept_segs_ + uint32_t{kept_free_[--kept_nfree_]} * kKeptBlockSegs;
  std::memcpy(b, sl.segs, sl.nsegs * sizeof(Segment));
  sl.segs = b;
  sl.kept_out = static_cast<uint8_t>(out);
  ++kept_by_out_[out];
  return true;
}

void Forwarder::note_kept(uint32_t o) {
  OutQueue& tq = outq_[o];
  // A frame of more than kInlineSegs segments outlives its burst only with a block of the
  // kept-segment store (this output's share, kKeptBlockSegs at most); without, it is
  // dropped (no_rx_buffer) and the others stay, in order.
  uint32_t k = 0;
  for (uint32_t i = 0; i < tq.n; ++i) {
    const uint16_t s = tq.slot[i];
    if (keep_segments(pool_[s], o)) [[likely]] {
      tq.slot[k++] = s;
    } else {
      counters_[o].drop(Drop::kNoRxBuffer);
      unref(s);
    }
  }
  tq.n = k;
  if (!k) [[unlikely]] return;
  tq.oldest_ns = pool_[tq.slot[0]].t_ns;
  held_ |= bit(o);
  kept_ = true;
  PortCounters::add(counters_[o].tx_retries, tq.n);
  PortCounters::add(routed_[o], ~uint64_t{tq.n} + 1);  // counted again when retried
}

uint32_t Forwarder::send_slots(uint32_t o, const uint16_t* slots, uint32_t cnt,
                               uint64_t prev_check_ns, bool may_keep) {
  port::Port* op = tables_->port(o);
  const port::PortDp& out_dp = op->dp();
  const port::PortDp::RxTargets& targets = out_dp.rx_for[thread_];
  PortCounters::add(routed_[o], cnt);
  if (!op->active() || !targets.n) [[unlikely]] {
    for (uint32_t j = 0; j < cnt; ++j) counters_[pool_[slots[j]].src].drop(Drop::kNoDestination);
    return cnt;
  }
  const uint64_t now = clock_();
  if (prev_check_ns && now > prev_check_ns &&
      now - prev_check_ns > gap_max_ns_.load(std::memory_order_relaxed))
    gap_max_ns_.store(now - prev_check_ns, std::memory_order_relaxed);
  auto in_pool = [this](const uint16_t* sl) {
    return [this, sl](uint32_t j) -> const Slot& { return pool_[sl[j]]; };
  };
  if (targets.via != port::PortDp::kDirect) [[unlikely]] {
    hand_off(o, targets.via, targets.q[0], out_dp.gen, slots, cnt);
    return cnt;
  }
  if (targets.n == 1) [[likely]]
    return deliver_to(o, targets.q[0], in_pool(slots), cnt, now, may_keep ? out_dp.tx_retry_ns : 0);
  // Several candidate queues: group the frames by the queue their flow hash picks, keeping
  // each group in order (so each flow stays in order), then one batch per queue.
  uint8_t sel[kOutQueueCap];
  uint32_t start[port::kMaxQueuePairs + 1] = {};
  for (uint32_t j = 0; j < cnt; ++j) {
    const Slot& sl = pool_[slots[j]];
    sel[j] = static_cast<uint8_t>(pick_queue(flow_hash(sl.segs, sl.nsegs, sl.len), targets.n));
    ++start[sel[j] + 1];
  }
  for (uint32_t c = 0; c < targets.n; ++c) start[c + 1] += start[c];
  uint16_t order[kOutQueueCap];
  uint32_t fill[port::kMaxQueuePairs];
  for (uint32_t c = 0; c < targets.n; ++c) fill[c] = start[c];
  for (uint32_t j = 0; j < cnt; ++j) order[fill[sel[j]]++] = slots[j];
  for (uint32_t c = 0; c < targets.n; ++c) {
    if (start[c + 1] > start[c])
      deliver_to(o, targets.q[c], in_pool(order + start[c]), start[c + 1] - start[c], now);
  }
  return cnt;
}

template <class Get>
uint32_t Forwarder::deliver_to(uint32_t o, uint32_t qi, Get&& frame, uint32_t n, uint64_t now,
                               uint64_t keep_ns, bool as_is) {
  const port::QueuePairDp& qp = tables_->port(o)->dp().qp[qi];
  port::QueueShared* shared = qp.rx_shared;
  uint32_t done = n;
  shared->enter(thread_);  // self-check: this thread is the queue's only writer (port.h)
  // The receive ring's layout is chosen once per batch.
  if (qp.rxq && !qp.rxq.broken()) {
    // A capture of o's sent frames (dp/observe.h) and VLAN edits share the one test.
    const bool tapped = (tables_->obs.tap_tx.load(std::memory_order_acquire) >> o) & 1;
    if ((tables_->vlans && !as_is) | tapped) [[unlikely]] {
      done = deliver_observed(o, qi, frame, n, now, keep_ns, as_is, tapped);
    } else {
      done = qp.rxq.visit([&](auto& q) { return deliver_queue(o, qi, &q, frame, n, now, keep_ns); });
    }
  } else {
    for (uint32_t j = 0; j < n; ++j) counters_[frame(j).src].drop(Drop::kNoDestination);
  }
  shared->leave();
  return done;
}

template <class Get>
[[gnu::noinline]] uint32_t Forwarder::deliver_observed(uint32_t o, uint32_t qi, Get& frame, uint32_t n,
                                                     uint64_t now, uint64_t keep_ns, bool as_is,
                                                     bool tapped) {
  const port::QueuePairDp& qp = tables_->port(o)->dp().qp[qi];
  uint32_t done;
  if (tables_->vlans && !as_is) {  // frames as they leave o (tags added, removed)
    auto edited = [&](uint32_t j) -> const Slot& { return vlan_view(frame(j), o, j); };
    done = qp.rxq.visit([&](auto& q) { return deliver_queue(o, qi, &q, edited, n, now, keep_ns); });
    if (tapped) tap(o, kTapTx, edited, done, now);
  } else {
    done = qp.rxq.visit([&](auto& q) { return deliver_queue(o, qi, &q, frame, n, now, keep_ns); });
    // Captured as handed to the receive queue (delivered, or dropped there: no_rx_buffer,
    // too_big), like a DPDK tx callback; frames kept for a retry when they are done.
    if (tapped) tap(o, kTapTx, frame, done, now);
  }
  return done;
}

void Forwarder::hand_off(uint32_t o, uint32_t via, uint32_t qi, uint32_t gen,
                         const uint16_t* slots, uint32_t n) {
  HandoffRing* ring = via < port::kMaxPmdThreads ? tables_->handoff[thread_][via] : nullptr;
  if (!ring) [[unlikely]] {
    for (uint32_t j = 0; j < n; ++j) counters_[pool_[slots[j]].src].drop(Drop::kNoDestination);
    return;
  }
  // A frame without GSO above the receiver's largest frame is too_big at delivery
  // (offload/deliver.cpp): drop it here rather than copy up to half the ring for nothing,
  // which let a front-end sending oversized frames starve every other port's handoffs on
  // this pair of threads (hostile Handoff.test_07).
  const uint32_t max_frame = tables_->port(o)->dp().caps.max_frame;
  uint32_t sent = 0;
  for (uint32_t j = 0; j < n; ++j) {
    // The frame as it leaves o (its tag added or removed), copied so into the ring.
    const Slot& sl = tables_->vlans ? vlan_view(pool_[slots[j]], o, j) : pool_[slots[j]];
    if (too_big_for(sl.len, sl.hdr.gso_type, max_frame)) [[unlikely]] {
      counters_[o].drop(Drop::kTooBig);
      continue;
    }
    if (ring->push(sl.segs, sl.nsegs, sl.len, sl.hdr, static_cast<uint8_t>(o),
                   static_cast<uint8_t>(qi), sl.src, gen, sl.t_ns)) [[likely]] {
      ++sent;
    } else {
      counters_[o].drop(Drop::kHandoffFull);
    }
  }
  ring->publish();
  PortCounters::add(qcounters_[o][qi].handoff_packets, sent);
}

bool Forwarder::handoff_pending() const {
  for (uint32_t p = 0; p < tables_->pmd_threads && p < port::kMaxPmdThreads; ++p) {
    const HandoffRing* ring = tables_->handoff[p][thread_];
    if (ring && ring->has_records()) return true;
  }
  return false;
}

uint32_t Forwarder::drain_handoffs() {
  uint32_t total = 0;
  for (uint32_t p = 0; p < tables_->pmd_threads && p < port::kMaxPmdThreads; ++p) {
    HandoffRing* ring = tables_->handoff[p][thread_];
    if (!ring || !ring->has_records()) [[likely]] continue;
    // Consecutive records for the same queue are delivered as one batch (one used-ring
    // update), before release() lets the producer reuse their room.
    uint32_t n = 0;
    total += ring->visit([&](const HandoffRecord& r, const uint8_t* data) {
      if (n && (n == kMaxBurst || r.port != handed_[0].port || r.queue != handed_[0].queue ||
                r.gen != handed_[0].gen)) {
        deliver_handed(handed_, n);
        n = 0;
      }
      Handed& h = handed_[n++];
      h.slot.inl[0] = virtio::Segment{const_cast<uint8_t*>(data), r.len};
      h.slot.segs = h.slot.inl;
      h.slot.nsegs = 1;
      h.slot.len = r.len;
      h.slot.t_ns = r.t_ns;
      h.slot.src = r.src;
      h.slot.hdr = r.hdr;
      h.port = r.port;
      h.queue = r.queue;
      h.gen = r.gen;
    });
    if (n) deliver_handed(handed_, n);
    ring->release();
  }
  return total;
}

void Forwarder::deliver_handed(const Handed* h, uint32_t n) {
  const uint32_t o = h[0].port;
  const uint32_t qi = h[0].queue;
  port::Port* op = o < tables_->nports.load(std::memory_order_relaxed) ? tables_->port(o) : nullptr;
  const bool ok = op && op->active() && op->dp().gen == h[0].gen && qi < port::kMaxQueuePairs;
  if (!ok) [[unlikely]] {  // the port paused or changed its queues since: its writers may differ
    for (uint32_t j = 0; j < n; ++j) counters_[h[j].slot.src].drop(Drop::kNoDestination);
    return;
  }
  deliver_to(o, qi, [h](uint32_t j) -> const Slot& { return h[j].slot; }, n, clock_(), 0,
             /*as_is=*/true);
}

template <class Q, class Get>
uint32_t Forwarder::deliver_queue(uint32_t o, uint32_t qi, Q* rq, Get&& frame, uint32_t cnt,
                                  uint64_t now, uint64_t keep_ns) {
  const port::PortDp& out_dp = tables_->port(o)->dp();
  uint64_t sent = 0, bytes = 0, nobuf = 0;
  // The receiver's settings as locals (the pops' barriers would reload them every frame).
  const uint32_t max_frame = out_dp.caps.max_frame;
  const uint32_t hdr_len = out_dp.caps.hdr_len;
  const bool mrg_rxbuf = out_dp.caps.mrg_rxbuf;
  // Queue ages: frames of one burst share their time, so the histogram is updated once per
  // run of equal times (frames run_j..j), not once per frame.
  uint64_t run_t = frame(0).t_ns;
  uint32_t run_j = 0;
  // Pass 1: receive buffers for the leading plain frames, prefetched for writing.
  OneBuffer rx[kOutQueueCap];
  const uint32_t nrx = pop_rx_ahead(rq, frame, cnt, max_frame, rx);
  uint32_t j = 0;
  // Pass 2: the frames pass 1 found buffers for.
  for (; j < nrx; ++j) {
    const Slot& sl = frame(j);
    if (sl.t_ns != run_t) [[unlikely]] {
      add_age(o, run_t, now, j - run_j);
      run_t = sl.t_ns;
      run_j = j;
    }
    if (rx[j].len < uint64_t{hdr_len} + sl.len) [[unlikely]] {  // spread over several buffers
      rq->unpop_ones(nrx - j);
      break;
    }
    virtio::put_one(*rq, rx[j], NetHdr{}, hdr_len, sl.segs[0].ptr, sl.len);
    ++sent;
    bytes += sl.len;
  }
  // Then frame by frame.
  for (; j < cnt; ++j) {
    const Slot& sl = frame(j);
    if (sl.t_ns != run_t) [[unlikely]] {
      add_age(o, run_t, now, j - run_j);
      run_t = sl.t_ns;
      run_j = j;
    }
    // A frame that asks for no offload goes straight to the copy (offload/deliver.h): its
    // flags and gso_type bytes, tested as one 16-bit word.
    uint16_t flags_gso;
    std::memcpy(&flags_gso, &sl.hdr, sizeof flags_gso);
    static_assert(offsetof(NetHdr, flags) == 0 && offsetof(NetHdr, gso_type) == 1);
    offload::Outcome st;
    if (!flags_gso && sl.len <= max_frame) [[likely]] {
      const DeliverStatus ds = deliver_frame(*rq, scratch_, NetHdr{}, hdr_len, sl.segs,
                                             sl.nsegs, sl.len, mrg_rxbuf);
      if (ds == DeliverStatus::kOk) [[likely]] {
        ++sent;
        bytes += sl.len;
        continue;
      }
      // The receive queue is full and nothing of the frame went in: keep it (and the
      // frames after it, in order) for a retry while it is younger than the bound. A frame
      // segmented in software may have had segments delivered: it is never kept.
      if (ds == DeliverStatus::kNoBuffer && keep_ns && now - std::min(now, sl.t_ns) < keep_ns)
        break;
      st = offload::map(ds);
    } else {
      st = offload_.deliver(*rq, scratch_, sl.hdr, sl.segs, sl.nsegs, sl.len, out_dp.caps,
                            counters_[o].offload_work);
      // A frame delivered in one piece (a TSO frame passed whole, a checksum filled in)
      // that found the queue full left nothing in it: kept like a plain one.
      if (st == offload::Outcome::kNoBuffer && keep_ns &&
          now - std::min(now, sl.t_ns) < keep_ns &&
          offload::SoftOffload::delivers_whole(sl.hdr, out_dp.caps))
        break;
    }
    if (st == offload::Outcome::kOk) [[likely]] {
      ++sent;
      bytes += sl.len;
    } else if (st == offload::Outcome::kNoBuffer) {
      counters_[o].drop(Drop::kNoRxBuffer);
      ++nobuf;
    } else if (!count_refused(o, st, sl.src)) [[unlikely]] {  // the receive queue stopped
      stop_rx_queue(o, qi, cnt - j, rq->state());
      add_age(o, run_t, now, j + 1 - run_j);  // frames after it: not aged
      run_j = j = cnt;  // all counted: none kept
      break;
    }
  }
  if (j > run_j) add_age(o, run_t, now, j - run_j);
  end_delivery(o, qi, sent, bytes, nobuf);
  // A call into the receive queue takes noted completions along (one INTx interrupt).
  if (rq->publish_used() && (calls_due_ & bit(o))) [[unlikely]] send_calls(o);
  if (out_dp.wire.push) [[unlikely]] out_dp.wire.push(out_dp.wire.ctx, qi);  // an uplink: to its wire
  return j;
}

template <class Q, class Get>
[[gnu::always_inline]] inline uint32_t Forwarder::pop_rx_ahead(Q* rq, Get& frame, uint32_t cnt,
                                                               uint32_t max_frame,
                                                               OneBuffer* rx) {
  // For the leading plain frames (no offload asked, one segment, within the receiver's
  // limit), one one-buffer receive chain each, prefetched for writing, so that the lines
  // the driver last touched arrive together, not one frame at a time. A chain of another
  // kind ends the pass and un-pops every chain it took (restore: nothing was pushed yet;
  // one mark per batch, not per chain), leaving the whole batch to the frame-by-frame path.
  // A chain of another kind is popped into the scratch arena before it is un-popped: the
  // arena must have a chain's room (a spread frame's last delivery may have filled it).
  scratch_.clear();
  // (cnt <= kOutQueueCap: a queue flush, a burst or a handed-off batch; bounded here for rx[].)
  const uint32_t ready = rq->ready(std::min<uint32_t>(cnt, kOutQueueCap));  // split: avail idx once
  const auto start = rq->mark();
  uint32_t nrx = 0;
  while (nrx < ready) {
    const Slot& sl = frame(nrx);
    uint16_t fg;
    std::memcpy(&fg, &sl.hdr, sizeof fg);
    if (fg || sl.len > max_frame || sl.nsegs != 1) [[unlikely]] break;
    Chain ch;
    const PopStatus st = rq->template pop_any<true>(scratch_, &ch, &rx[nrx]);
    if (st != PopStatus::kOne) [[unlikely]] {
      if (st != PopStatus::kEmpty) {  // (an empty packed ring took nothing)
        rq->restore(start);
        nrx = 0;
      }
      break;
    }
    __builtin_prefetch(rx[nrx].ptr, 1);
    __builtin_prefetch(rx[nrx].ptr + 64, 1);
    ++nrx;
  }
  return nrx;
}

[[gnu::noinline]] bool Forwarder::count_refused(uint32_t o, offload::Outcome st, uint32_t src) {
  switch (st) {
    case offload::Outcome::kOk:
    case offload::Outcome::kNoBuffer:  // (counted by the caller)
      return true;
    case offload::Outcome::kTooBig:
      counters_[o].drop(Drop::kTooBig);
      return true;
    case offload::Outcome::kBadGso:
      counters_[src].drop(Drop::kBadGso);
      return true;
    case offload::Outcome::kShortBuffer:
      if (!counters_[o].drops[static_cast<uint32_t>(Drop::kShortRxBuffer)].load(std::memory_order_relaxed))
        VL_LOG_RL(spdlog::level::warn,
                  "port {}: receive buffer shorter than the virtio-net header or than any "
                  "frame (against virtio 1.2 §5.1.6.3.1); returned unused, the frame dropped "
                  "(short_rx_buffer; logged once per PMD thread)",
                  tables_->port(o)->name());
      counters_[o].drop(Drop::kShortRxBuffer);
      return true;
    case offload::Outcome::kBadRing:
      break;
  }
  return false;
}

[[gnu::noinline]] void Forwarder::stop_rx_queue(uint32_t o, uint32_t qi, uint32_t frames,
                                             const std::string& state) {
  counters_[o].drop(Drop::kRingBroken, frames);
  VL_LOG_RL(spdlog::level::err,
            "port {}: malformed receive chain or avail index; receive queue {} stopped "
            "(pmd {}: {})",
            tables_->port(o)->name(), qi, thread_, state);
}

[[gnu::always_inline]] inline void Forwarder::end_delivery(uint32_t o, uint32_t qi, uint64_t sent,
                                                           uint64_t bytes, uint64_t nobuf) {
  PortCounters& oc = counters_[o];
  port::QueueCounters& qc = qcounters_[o][qi];
  PortCounters::add(oc.tx_packets, sent);
  PortCounters::add(oc.tx_bytes, bytes);
  PortCounters::add(qc.tx_packets, sent);
  PortCounters::add(qc.tx_bytes, bytes);
  if (nobuf) PortCounters::add(qc.no_rx_buffer, nobuf);
  pass_.frames += sent;
  pass_.bytes += bytes;
  ++pass_.batches;
}

}  // namespace vl::dp
