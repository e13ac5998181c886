#pragma once
// The per-PMD-thread forwarding engine: drains one port's transmit queue in a burst,
// classifies each frame (L2 bridge or cross-connect), gathers frames in intermediate queues
// (one per output port: this thread's txq state for that port) and delivers each queue with
// one used-ring update and at most one notification, when its flush policy says so
// (dp/flush.h: immediate, rx-batch, interval=US, budget=US; per output port, changeable at
// run time).
//
// Copies: a frame is copied once, from the sender's TX buffer (guest memory) straight into
// the receiver's RX buffer (guest memory), by virtio::deliver_frame. A flooded frame is
// copied once per receiving port. Nothing else copies packet data; the only other bytes
// read are the virtio-net header and the 12 bytes of MAC addresses, into locals. A queued
// frame is a slot holding pointers to the sender's buffers; the sender's descriptor chain
// is returned (used ring) only when every queue it sits in has been delivered, so frames
// held across bursts keep their chains in flight. Chains go back to each sender in the
// order they were taken (VIRTIO_F_IN_ORDER, virtio 1.2 "In-order use of descriptors"): a slot
// whose queues are done waits for the older slots of its sender (retire()). Only chains
// a pop refuses as malformed are returned at once, ahead of older ones. A lean burst (no
// output holds frames past it, the sender has nothing queued) returns its chains in order
// at its end without that bookkeeping. A frame that finds its receiver's queue full may stay
// queued for a retry, up to the port's tx_retry_ns (then it is dropped as no_rx_buffer).
//
// Ring layouts: the burst loop and the delivery loop are templates over the queue type
// (split virtio::SplitDeviceQueue, packed virtio::PackedDeviceQueue), chosen once per burst or
// per output queue: no virtual call and no layout test per packet.
//
// Threads: a Forwarder belongs to one PMD thread; nothing in it is shared (no locks), except
// the counters and queue-age statistics the control thread reads (relaxed atomics) and the
// handoff rings (dp/handoff.h).
// Multiqueue (port/port.h PortDp): the thread polls rxqs (port, queue pair); a chain goes
// back to the transmit queue it came from; an output queue is delivered into the guest
// receive queues PortDp::rx_for[thread] names, spread by flow hash (dp/flow_hash.h) when
// there are several. Each guest receive queue has one writer thread: a thread that writes
// none of a port's queues copies its frames for that port into a handoff ring to a writer
// (the second copy of those frames), which delivers them at its next pass (drain_handoffs).
// Quiescence (dp/pmd.h): frames held across passes point into their sender's memory and
// will be written into their receiver's rings, so the PMD thread calls release_paused()
// right after each quiescent point; it delivers every queue if a port involved has paused.
#include <atomic>
#include <cstdint>

#include "dp/fdb.h"
#include "dp/flow_hash.h"
#include "dp/flush.h"
#include "dp/off_cpu.h"
#include "dp/handoff.h"
#include "dp/observe.h"
#include "dp/vlan.h"
#include "offload/deliver.h"
#include "port/port.h"
#include "virtio/net_copy.h"

namespace vl::dp {

enum class ForwardMode : uint8_t { kBridge, kXconnect };

/// Largest burst a PMD thread takes from one queue (packets).
inline constexpr uint32_t kMaxBurst = 64;

/// Most source MACs port security allows one port (PortConfig::port_security).
inline constexpr uint32_t kMaxAllowedMacs = 8;

/// Port security of one port: the source MACs its frames may carry (OVS's port_security,
/// the MAC part). Written by the control thread only while its slot is out of the datapath
/// (at start, and when the slot's port is opened: app/switch_ports.cpp).
struct SourceGuard {
  uint32_t n = 0;
  Mac macs[kMaxAllowedMacs] = {};
  bool allows(Mac m) const {
    for (uint32_t i = 0; i < n; ++i)
      if (macs[i] == m) return true;
    return false;
  }
};

/// State shared by every PMD thread; set up before the threads start.
struct SwitchTables {
  ForwardMode mode = ForwardMode::kBridge;
  /// Every slot below nports points at a port: a vacant slot (a port deleted at run time,
  /// port/vacant_port.h) at one that is never active. The control thread changes a slot
  /// only while its port is out of the datapath, then waits for quiescence before the old
  /// port object goes (app/switch_ports.cpp).
  std::atomic<port::Port*> ports[port::kMaxPorts] = {};
  /// Slots in use (grows when a port is added at run time; never shrinks).
  std::atomic<uint32_t> nports{0};
  uint32_t xc_peer[port::kMaxPorts];  ///< cross-connect partner, or kNoPeer
  Fdb* fdb = nullptr;
  std::atomic<uint32_t> now_s{0};  ///< coarse clock for MAC learning (seconds)
  uint32_t burst = 32;
  /// Bumped by the control thread whenever a port's datapath view changes.
  std::atomic<uint64_t> ports_gen{0};
  /// Flush policy of each output port (FlushPolicy::encode()), written by the control
  /// thread at any time (set_flush); PMD threads re-read them when flush_gen changes.
  std::atomic<uint64_t> flush[port::kMaxPorts] = {};
  std::atomic<uint64_t> flush_gen{0};
  /// PMD threads, and the handoff ring from thread p to thread c at [p][c] (null when
  /// p == c or when no ring was set up: frames for it are then dropped as no_destination).
  uint32_t pmd_threads = 1;
  /// 802.1Q (dp/vlan.h): some port has an access VLAN or a trunk list (else every frame
  /// skips the VLAN steps), and how each port carries VLANs. Set before the threads start.
  bool vlans = false;
  PortVlan vlan[port::kMaxPorts];
  HandoffRing* handoff[port::kMaxPmdThreads][port::kMaxPmdThreads] = {};
  /// Ports that are tunnels' underlays (bit per port, port/uplink_port.h): never flooded to
  /// (their frames never enter the switch, so no MAC is learned on them). Set before the
  /// threads start, and by the control thread when a tunnel is added or deleted at run time.
  std::atomic<uint64_t> underlays{0};
  /// Ports with port security (bit per port; SourceGuard of each in guard[]): their frames
  /// take the guarded path of classify (Forwarder::guard_sources). Set with the slot out of
  /// the datapath, like vlan[].
  std::atomic<uint64_t> guarded{0};
  SourceGuard guard[port::kMaxPorts];
  /// Capture taps and mirrors (dp/observe.h), changed at run time.
  Observe obs;
  static constexpr uint32_t kNoPeer = 0xffffffff;

  SwitchTables() {
    for (auto& f : flush) f.store(FlushPolicy{}.encode(), std::memory_order_relaxed);
  }
  /// The port in slot `i` (< nports): acquire, so its fields are those it was published with.
  port::Port* port(uint32_t i) const { return ports[i].load(std::memory_order_acquire); }
  /// Sets the flush policy of `port` (or of every port when port >= kMaxPorts).
  void set_flush(uint32_t port, FlushPolicy p) {
    for (uint32_t i = 0; i < port::kMaxPorts; ++i)
      if (port >= port::kMaxPorts || i == port) flush[i].store(p.encode(), std::memory_order_relaxed);
    flush_gen.fetch_add(1, std::memory_order_release);
  }
  FlushPolicy flush_policy(uint32_t port) const {
    return FlushPolicy::decode(flush[port].load(std::memory_order_relaxed));
  }
};

class Forwarder {
 public:
  /// `clock`: ns of a monotonic clock (tests pass a fake one). `thread`: the PMD thread's
  /// index (0..kMaxPmdThreads-1), which selects PortDp::rx_for.
  explicit Forwarder(SwitchTables* t, uint64_t (*clock)() = &tsc_now_ns, uint32_t thread = 0);
  Forwarder(const Forwarder&) = delete;

  /// Drains up to one burst from rxq (`in`, `queue`): the transmit queue of port `in`'s
  /// queue pair `queue`, and forwards it. Returns the number of descriptor chains taken.
  uint32_t poll(uint32_t in, uint32_t queue = 0);

  /// End of a poll loop: delivers the held queues whose time has come (interval, budget).
  void end_pass() {
    if (held_) flush_due();
  }
  /// Delivers every queue (when stopping, at a pause, before rxqs move).
  void flush_all();
  /// Before sleeping: delivers every queue as a due flush would, so frames that find their
  /// receive queue full stay queued for a retry while younger than its tx_retry_ns (a
  /// sleep must not drop them sooner than polling would). Returns, if frames remain
  /// queued: the ns until the first of them is dropped (at least 1; 0: nothing left), and
  /// the thread must keep polling until they are delivered or dropped.
  uint64_t flush_before_sleep();
  /// After a quiescent point: delivers every queue if one of the ports it involves (as
  /// sender or receiver) has paused, so that the control thread may change that port
  /// after the next quiescent point (dp/pmd.h).
  void release_paused();
  /// Frames waiting in intermediate queues.
  bool holding() const { return held_ != 0; }
  /// Transmit completion coalescing (port::PortDp::completion_coalesce_ns,
  /// docs/architecture.md "Notifications"): calls noted for later are pending.
  bool calls_pending() const { return calls_due_ != 0; }
  /// Sends the noted calls whose time is up (once per pass while calls_pending()).
  void send_due_calls();
  /// ns until the first noted call is due (at least 1), 0 when none is pending: the
  /// longest a sleep may last.
  uint64_t ns_to_next_call() const;
  /// Sends every noted call now (before rxqs move to other threads, when stopping).
  void send_all_calls() {
    while (calls_due_) send_calls(static_cast<uint32_t>(std::countr_zero(calls_due_)));
  }
  /// Delivers the frames other PMD threads handed to this one (dp/handoff.h) into the guest
  /// receive queues it writes; once per pass. Returns the frames taken from the rings.
  uint32_t drain_handoffs();
  /// Frames handed to this thread and not yet drained (checked before sleeping).
  bool handoff_pending() const;
  /// Frames this thread routed to output `port` (delivered itself or handed off), for
  /// PmdSet::place_rx_writers (relaxed; single writer).
  uint64_t routed(uint32_t port) const { return routed_[port].load(std::memory_order_relaxed); }

  /// Counters of `port` as seen by this thread.
  const port::PortCounters& counters(uint32_t port) const { return counters_[port]; }
  /// Counters of queue pair `q` of `port` as seen by this thread.
  const port::QueueCounters& queue_counters(uint32_t port, uint32_t q) const {
    return qcounters_[port][q];
  }
  /// Queue ages of output `port` as seen by this thread.
  const QueueAgeStats& queue_age(uint32_t port) const { return age_[port]; }
  /// The same ages less the time this thread was kept off its CPU while the frame waited
  /// (dp/off_cpu.h): what a budget=US policy answers for (recorded under that policy only).
  const QueueAgeStats& queue_age_on_cpu(uint32_t port) const { return age_on_cpu_[port]; }
  /// Frames delivered to output `port` under budget=US later than US: on CPU (the policy's
  /// promise) and raw (including time off the CPU). Relaxed loads.
  uint64_t over_budget(uint32_t port) const { return over_budget_[port].load(std::memory_order_relaxed); }
  uint64_t over_budget_raw(uint32_t port) const {
    return over_budget_raw_[port].load(std::memory_order_relaxed);
  }
  /// This thread's intervals off its CPU: its PMD thread records them (dp/pmd.cpp).
  OffCpuLog& off_cpu() { return off_cpu_; }
  const OffCpuLog& off_cpu() const { return off_cpu_; }
  /// Records the ages on CPU of the frames delivered to budget=US outputs since the last
  /// call, less the time off the CPU noted meanwhile (the PMD thread calls it at the end of
  /// each pass, after noting the pass's own).
  void settle_ages() {
    if (npending_) [[unlikely]] settle_pending_ages();
  }
  /// The work done since the last call (the PMD thread's bound on a pass, dp/off_cpu.h).
  PassWork take_pass_work() {
    const PassWork w = pass_;
    pass_ = PassWork{};
    return w;
  }
  /// Starts output `port`'s longest queue age afresh (`ctl stats-clear`, a port added into
  /// a vacant slot). Control thread; a frame the thread records at that instant may be
  /// lost to the maximum (the histogram is cleared by a baseline, app/counter_base.h).
  void clear_queue_age_max(uint32_t port) {
    age_[port].max_ns.store(0, std::memory_order_relaxed);
    age_on_cpu_[port].max_ns.store(0, std::memory_order_relaxed);
  }
  /// Longest time (ns) between a deadline check and the delivery, at the next check, of a
  /// queue that was due: the "one poll loop" by which interval=US may exceed US.
  uint64_t check_gap_max_ns() const { return gap_max_ns_.load(std::memory_order_relaxed); }

 private:
  /// A frame taken from a sender's transmit queue: its segments live in the burst's arena
  /// while the burst is classified and are copied into `inl` if it stays queued longer.
  static constexpr uint32_t kInlineSegs = 4;
  struct Slot {
    const virtio::Segment* segs;
    uint32_t nsegs;
    uint32_t len;
    uint64_t t_ns;   ///< when its burst was taken (start of its queue age)
    uint16_t head;   ///< the sender's descriptor chain (split: head index; packed: buffer ID)
    uint16_t ring_descs;  ///< packed: ring slots the chain took
    uint16_t next_src;    ///< the sender's next younger slot, or kNoSlot (retire order)
    uint8_t src;     ///< the sender's port
    uint8_t kept_out;  ///< with segs in the kept-segment store: the output charged for it
    uint8_t sq;      ///< the sender's queue pair
    uint8_t refs;    ///< queues holding it, +1 while its burst is classified
    bool done;       ///< every queue it sat in was delivered; waits for older slots
    bool tagged;     ///< with SwitchTables::vlans: it carries an 802.1Q tag at offset 12
    uint16_t vlan;   ///< with SwitchTables::vlans: the VLAN it belongs to (dp/vlan.h)
    virtio::NetHdr hdr;  ///< its virtio-net header (offloads), checked on arrival
    virtio::Segment inl[kInlineSegs];
  };
  static constexpr uint32_t kPoolSlots = 1024;
  /// Segments of frames with more than kInlineSegs that wait past their burst for a retry
  /// (a TSO frame: 18 or so): blocks of kKeptBlockSegs, one per frame, from a free list; a
  /// frame of more segments is not kept. One output may hold at most kKeptBlocksPerOutput,
  /// so a receiver that never refills cannot take the retry from the other ports.
  static constexpr uint32_t kKeptBlockSegs = 64;
  static constexpr uint32_t kKeptBlocks = 128;
  static constexpr uint32_t kKeptBlocksPerOutput = kKeptBlocks / 4;
  static constexpr uint32_t kKeptSegs = kKeptBlockSegs * kKeptBlocks;
  /// One output queue: the frames this thread holds for one output port (output batching).
  static constexpr uint32_t kOutQueueCap = 2 * kMaxBurst;
  struct OutQueue {
    uint16_t slot[kOutQueueCap];
    uint32_t n = 0;
    uint64_t oldest_ns = 0;
  };

  static constexpr uint16_t kNoSlot = 0xffff;
  /// An rxq's poll: returns 0 at once when its ring has nothing new (an empty poll), else
  /// forwards one burst.
  template <class Q>
  uint32_t poll_ring(uint32_t in, uint32_t qi, Q* q, port::QueueShared* shared);
  /// One busy poll, in four steps (forwarder.cpp): take_burst, classify, end_burst.
  template <class Q>
  uint32_t forward_burst(uint32_t in, uint32_t qi, Q* q, port::QueueShared* shared);
  template <class Q>
  uint32_t take_burst(uint32_t in, uint32_t qi, Q* q, port::QueueShared* shared);
  /// take_burst()'s state: where the burst comes from, the sender's settings as locals, and
  /// what was taken (chains, good frames in burst_, their bytes).
  struct BurstTake {
    uint32_t in, qi;
    uint64_t now;       ///< the burst's time (every frame's queue age starts here), ns
    uint32_t hdr_len;   ///< the sender's virtio-net header bytes
    uint64_t features;  ///< the sender's negotiated features (offload checks)
    port::PortCounters& c;
    uint32_t taken = 0, k = 0;
    uint64_t bytes = 0;
  };
  /// take_burst()'s steps: one chain popped with status `st` (`b`: a one-buffer chain;
  /// else `ch`) into a slot; a chain that is not one buffer split into header and frame
  /// (kCount, or why it is refused); a refused chain's slot; the burst's counters and lean
  /// list.
  [[gnu::always_inline]] void take_chain(BurstTake& bt, virtio::PopStatus st,
                                         const virtio::OneBuffer& b, virtio::Chain& ch);
  port::Drop split_into_slot(Slot& sl, const virtio::Chain& ch, uint32_t hdr_len);
  void refuse_taken(port::PortCounters& c, uint32_t k, uint16_t s, port::Drop why);
  void end_take(const BurstTake& bt);
  void classify(uint32_t in);
  /// classify() while a capture or a mirror is on (`mtx`: Observe::mirror_tx): the burst
  /// tapped and mirrored as port `in`'s settings say, then classified with mirror_tx_ set.
  void classify_observed(uint32_t in, uint64_t mtx);
  /// Copies `n` frames (`frame(j)`: a const Slot&) of `port` in direction `dir` into this
  /// thread's capture ring, at most the port's snaplen bytes each (`now`: the tx time;
  /// 0: each frame's own t_ns); frames that find it full are counted in Observe::missed.
  template <class Get>
  void tap(uint32_t port, TapDir dir, Get&& frame, uint32_t n, uint64_t now);
  /// Enqueues slots `s[0..n)` (from port `src`) to mirror port `dst` too, unless it is
  /// their sender or not active. A mirrored frame is not mirrored again.
  void mirror_to(uint32_t src, uint32_t dst, const uint16_t* s, uint32_t n);
  /// classify() with SwitchTables::vlans (kVlans: (VLAN, MAC) keys, flooding within the
  /// VLAN) and port security on `in` (kGuard: guard_sources first).
  template <bool kVlans, bool kGuard>
  void classify_as(uint32_t in);
  /// classify_as for port `in`'s settings (the VLAN and port-security tests, once a burst).
  void classify_any(uint32_t in);
  /// Port security: keeps the frames `from[0..n)` whose source MAC port `in` allows, in
  /// vlan_burst_[0..returned) (`from` may be vlan_burst_ itself); drops the others
  /// (source_not_allowed, on `in`). burst_ is left whole, as by vlan_ingress.
  uint32_t guard_sources(uint32_t in, const uint16_t* from, uint32_t n);
  /// Each frame's VLAN (its tag at offset 12 and port `in`'s mode); drops those `in` does
  /// not take. Returns the frames left, vlan_burst_[0..returned) (burst_ is left whole: its
  /// frames, the dropped ones included, go back to their sender at the end of the burst).
  uint32_t vlan_ingress(uint32_t in, uint32_t k);
  /// Frame `sl` as it leaves port `o`: itself, or (at index j < kOutQueueCap of a batch) an
  /// edited view with its 802.1Q tag removed or added (segments spliced, length and
  /// virtio-net header offsets moved by 4 bytes; the bytes themselves are not copied).
  const Slot& vlan_view(const Slot& sl, uint32_t o, uint32_t j);
  static constexpr uint32_t kMaxEditSegs = 64;
  void end_burst();
  void report_broken(uint32_t in);
  /// enqueue() for `n` slots bound for the same output (a cross-connected burst).
  void enqueue_run(uint32_t out, const uint16_t* s, uint32_t n);
  /// Delivers `n` frames (`frame(j)`: a const Slot&) into guest receive queue `qi` of port
  /// `o`, which this thread writes.
  /// `keep_ns` (0: none): a frame that finds the queue full and is younger than that stops
  /// the delivery, to be retried (port::PortDp::tx_retry_ns). Returns the frames delivered
  /// or dropped: frame(returned value) onwards were kept.
  /// `as_is`: the frames are already as they leave `o` (handed off: edited by hand_off).
  template <class Get>
  uint32_t deliver_to(uint32_t o, uint32_t qi, Get&& frame, uint32_t n, uint64_t now,
                      uint64_t keep_ns = 0, bool as_is = false);
  template <class Q, class Get>
  uint32_t deliver_queue(uint32_t o, uint32_t qi, Q* rq, Get&& frame, uint32_t n, uint64_t now,
                         uint64_t keep_ns);
  /// deliver_to() with VLAN edits to make or a capture of o's sent frames (`tapped`).
  template <class Get>
  uint32_t deliver_observed(uint32_t o, uint32_t qi, Get& frame, uint32_t n, uint64_t now,
                            uint64_t keep_ns, bool as_is, bool tapped);
  /// deliver_queue()'s steps: pass 1 (returns how many of rx[] it filled); a refused
  /// frame's drop counted (false: the receive queue stopped); a stopped receive queue's
  /// drops (`frames`) and log line; the batch's counters.
  template <class Q, class Get>
  uint32_t pop_rx_ahead(Q* rq, Get& frame, uint32_t cnt, uint32_t max_frame,
                        virtio::OneBuffer* rx);
  bool count_refused(uint32_t o, offload::Outcome st, uint32_t src);
  void stop_rx_queue(uint32_t o, uint32_t qi, uint32_t frames, const std::string& state);
  void end_delivery(uint32_t o, uint32_t qi, uint64_t sent, uint64_t bytes, uint64_t nobuf);
  /// Copies `n` slots for guest receive queue `qi` of port `o` (routing generation `gen`)
  /// into the handoff ring to PMD thread `via`, which writes that queue.
  void hand_off(uint32_t o, uint32_t via, uint32_t qi, uint32_t gen, const uint16_t* slots,
                uint32_t n);
  /// A frame handed to this thread, as a slot over the ring's copy, and where it goes.
  struct Handed {
    Slot slot;
    uint32_t gen;   ///< the receiver's PortDp::gen it was routed under
    uint8_t port;   ///< receiving port
    uint8_t queue;  ///< its guest receive queue
  };
  /// Delivers a batch of handed-off frames (all for one port, queue and generation).
  void deliver_handed(const Handed* h, uint32_t n);
  /// Takes a free slot for a chain just popped from (`in`, `qi`).
  uint16_t new_slot(uint32_t in, uint32_t qi, uint16_t head, uint16_t ring_descs);
  /// Appends slot `s` to `in`'s retire order (one order per port, whose sub-order per queue
  /// is each queue's order).
  void link_slot(uint32_t in, uint16_t s);
  /// Returns the sender's done chains, oldest first, up to its first slot still queued.
  void retire(uint32_t src);
  void enqueue(uint32_t out, uint16_t s);
  void flood(uint32_t in, uint16_t s);
  /// Delivers output `out`'s queue. `may_keep`: frames that find its receive queue full
  /// may stay queued for a retry (PortDp::tx_retry_ns); never from flush_all() nor from a
  /// full queue's flush (kOutQueueCap), nor in a burst with a frame of more than kInlineSegs
  /// segments.
  void flush_port(uint32_t out, uint64_t check_ns, bool may_keep = false);
  /// Delivers (or hands off, or drops as no_destination) the frames `slots[0..cnt)` to
  /// output `out`, leaving their references alone. Returns the frames done: with
  /// `may_keep`, slots[returned..cnt) found the receive queue full and may be retried.
  /// Output `out`'s queue holds only frames kept for a retry: its age, held_, kept_ and
  /// the counters say so.
  void note_kept(uint32_t out);
  /// Moves a kept frame's segments out of the burst's arena if they cannot go to its slot
  /// (end_burst copies those); false when the store has no room.
  bool keep_segments(Slot& sl, uint32_t out);
  bool in_arena(const virtio::Segment* p) const {
    return p >= arena_.segs && p < arena_.segs + virtio::SegmentArena::kCapacity;
  }
  bool in_store(const virtio::Segment* p) const { return p >= kept_segs_ && p < kept_segs_ + kKeptSegs; }
  uint32_t send_slots(uint32_t out, const uint16_t* slots, uint32_t cnt, uint64_t check_ns,
                      bool may_keep);
  void flush_due();
  void unref(uint16_t s) {
    if (--pool_[s].refs == 0) complete(s);
  }
  /// Marks a slot done: every queue it sat in was delivered (retired later, in order).
  void complete(uint16_t s);
  /// Retires every sender with done slots, then publishes the used entries of every
  /// sender's transmit queues (one index store each; a call the driver asks for there is
  /// noted for later where the port coalesces completions).
  void publish_senders();
  /// Sends port `p`'s noted calls (a call into its receive queue went out, their time is up,
  /// or the port paused: then from release_paused() only, right after a quiescent point).
  void send_calls(uint32_t p);
  /// publish_senders(): the calls the drivers of port `p`'s queue pairs `asked` for were
  /// noted in their rings; when they go out.
  void note_calls(uint32_t p, const port::PortDp& d, uint32_t asked);
  /// A port coalescing completions calls at once when it took a quarter of its ring's
  /// entries from a sender since its last call: well before a Linux driver, which stops
  /// its queue with 2 + MAX_SKB_FRAGS entries left, waits on a full ring.
  static constexpr uint32_t kCoalesceRingFraction = 4;
  void refresh_policies();
  bool gap_fresh_ = true;         // no check since the queues were last all empty

  SwitchTables* tables_;
  uint64_t (*clock_)();
  uint32_t thread_;
  virtio::SegmentArena arena_;    // segments of the frames taken in this burst
  virtio::Segment kept_segs_[kKeptSegs];  // kept frames' segments (keep_segments)
  uint8_t kept_free_[kKeptBlocks];  // free blocks of kept_segs_
  uint32_t kept_nfree_ = 0;
  uint8_t kept_by_out_[port::kMaxPorts] = {};  // blocks each output holds
  virtio::SegmentArena scratch_;  // segments of the receive buffers being filled
  offload::SoftOffload offload_;  // offload metadata across ports; checksums, TSO in software
  Slot pool_[kPoolSlots];
  uint16_t free_[kPoolSlots];
  uint32_t nfree_ = 0;
  uint16_t burst_[kMaxBurst];     // the slots of the burst being classified
  uint16_t vlan_burst_[kMaxBurst];  // with VLANs, those of them left to forward (vlan_ingress)
  uint32_t nburst_ = 0;
  // A lean burst (take_burst): its slots (every chain taken, good or not) in order, and
  // where they came from. The queues' references to a lean slot never outlive the burst.
  bool lean_ = false;
  bool any_hold_ = false;         // some output's policy holds frames past a burst
  bool hold_unless_loaded_ = false;  // ... and every such policy is budget=US
  bool loaded_ = false;           // the last burst was at least half full (loaded_burst)
  uint16_t lean_slots_[kMaxBurst];
  // The lean list: burst_ itself while every chain taken is a good frame (the common
  // case: nothing to record), else lean_slots_ (lean_split_).
  const uint16_t* lean_list_ = lean_slots_;
  bool lean_split_ = false;
  bool many_segs_ = false;        // a frame of this burst has more than kInlineSegs segments
  uint32_t lean_n_ = 0;
  uint32_t lean_in_ = 0, lean_qi_ = 0;
  bool kept_ = false;             // flush_port kept frames for a retry since take_burst
  uint64_t mirror_tx_ = 0;        // in classify_observed: outputs whose frames are mirrored
  Handed handed_[kMaxBurst];      // a batch of handed-off frames being delivered
  // vlan_view()'s edited frames of the batch being delivered: slots, segments, tags.
  Slot vlan_slot_[kOutQueueCap];
  virtio::Segment vlan_segs_[kOutQueueCap][kMaxEditSegs];
  uint8_t vlan_tag_[kOutQueueCap][kVlanTagLen];
  OutQueue outq_[port::kMaxPorts];
  uint64_t held_ = 0;             // outputs whose queue is not empty
  uint64_t burst_out_ = 0;        // outputs that got frames in this burst
  uint64_t must_flush_ = 0;       // outputs with a frame that cannot be held (too many segments)
  uint64_t retire_due_ = 0;       // senders with done slots not yet retired
  uint64_t senders_dirty_ = 0;    // ports whose transmit queue has unpublished used entries
  uint8_t dirty_q_[port::kMaxPorts] = {};  // per such port: which queue pairs
  // Completion coalescing (publish_senders): ports with noted calls, their queue pairs,
  // when each port's go out (ns), the first of those (UINT64_MAX: none), the chains taken
  // from each sender (a running count), and that count when its first call was noted.
  uint64_t calls_due_ = 0;
  uint8_t call_q_[port::kMaxPorts] = {};
  uint64_t call_at_[port::kMaxPorts] = {};
  uint64_t next_call_ns_ = UINT64_MAX;
  uint32_t taken_[port::kMaxPorts] = {};
  uint32_t call_from_[port::kMaxPorts] = {};
  uint32_t live_from_[port::kMaxPorts] = {};  // slots in use per sender
  uint16_t src_old_[port::kMaxPorts];         // per sender: oldest slot in use, or kNoSlot
  uint16_t src_young_[port::kMaxPorts];       // per sender: youngest slot in use
  uint64_t live_src_ = 0;         // senders with slots in use
  FlushPolicy policy_[port::kMaxPorts];
  uint64_t pol_gen_ = ~0ull;
  CheckGapEstimator gap_;
  std::atomic<uint64_t> gap_max_ns_{0};
  port::PortCounters counters_[port::kMaxPorts];
  port::QueueCounters qcounters_[port::kMaxPorts][port::kMaxQueuePairs];
  std::atomic<uint64_t> routed_[port::kMaxPorts] = {};
  QueueAgeStats age_[port::kMaxPorts];
  QueueAgeStats age_on_cpu_[port::kMaxPorts];
  OffCpuLog off_cpu_;
  PassWork pass_;  // work since take_pass_work()
  void settle_pending_ages();
  /// Records the ages of `n` frames taken at `from_ns` and delivered at `now_ns`: raw, and
  /// for an output under budget=US (the only policy that promises a bound) on CPU, when
  /// the pass has ended (settle_ages()).
  void add_age(uint32_t o, uint64_t from_ns, uint64_t now_ns, uint64_t n) {
    const uint64_t a = now_ns > from_ns ? now_ns - from_ns : 0;
    age_[o].add(a, n);
    if (budget_ns_[o] != UINT64_MAX) [[unlikely]] {
      if (npending_ == kPendingAges) settle_ages();
      pending_[npending_++] = PendingAge{from_ns, now_ns, o, static_cast<uint32_t>(n)};
    }
  }
  struct PendingAge {
    uint64_t from_ns, now_ns;
    uint32_t o, n;
  };
  static constexpr uint32_t kPendingAges = 256;
  PendingAge pending_[kPendingAges];
  uint32_t npending_ = 0;
  uint64_t budget_ns_[port::kMaxPorts];  // budget=US of each output, in ns (else UINT64_MAX)
  std::atomic<uint64_t> over_budget_[port::kMaxPorts] = {};
  std::atomic<uint64_t> over_budget_raw_[port::kMaxPorts] = {};
};

}  // namespace vl::dp
