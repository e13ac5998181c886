#include "dp/pmd.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "dp/rx_writers.h"
#include "util/clock.h"
#include "util/cpuset.h"
#include "util/log.h"
#include "util/stall_watchdog.h"
#include "util/thread_sched.h"
#include "wire/dpdk_eal.h"

namespace vl::dp {

void PmdSet::assign_rx_writers(port::PortDp& d, uint32_t rotation) const {
  dp::assign_rx_writers(d, static_cast<uint32_t>(threads_.size()), rotation);
}

const char* rxq_assign_name(RxqAssign a) {
  return a == RxqAssign::kCycles ? "cycles" : "roundrobin";
}

const char* pmd_mode_name(PmdMode m) {
  switch (m) {
    case PmdMode::kPoll: return "poll";
    case PmdMode::kInterrupt: return "interrupt";
    case PmdMode::kAdaptive: return "adaptive";
  }
  return "?";
}

namespace {
constexpr uint64_t kWakeKey = 0xffffffffffffffffull;
// A noted call due sooner than this is waited for by polling, not by a timed sleep (whose
// wake-up alone takes the timer slack, 50 us by default).
constexpr uint64_t kMinTimedSleepNs = 5'000;
}  // namespace

PmdThread::PmdThread(uint32_t index, int cpu, SwitchTables* t, PmdOptions opts,
                     RxqLoad (*load)[port::kMaxQueuePairs])
    : index_(index), cpu_(cpu), tables_(t), opts_(opts),
      fw_(std::make_unique<Forwarder>(t, &tsc_now_ns, index)), load_(load),
      idle_(uint64_t{opts.idle_us} * 1000) {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  wake_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
}

PmdThread::~PmdThread() { stop(); }

bool PmdThread::start(std::string* err) {
  if (!epoll_.valid() || !wake_.valid()) {
    *err = "cannot create the PMD thread's epoll or eventfd";
    return false;
  }
  thread_ = std::thread([this] { run(); });
  return true;
}

void PmdThread::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  wake();
  // A thread blocked writing a front-end's fd would never see stop_ (and the watchdog runs
  // on the control thread, which is here): interrupt it until it has left run().
  while (!exited_.load(std::memory_order_acquire)) {
    timespec ts{0, 10000000};
    nanosleep(&ts, nullptr);
    if (!exited_.load(std::memory_order_acquire)) interrupt();
  }
  thread_.join();
}

void PmdThread::wake() { eventfd_write(wake_.get(), 1); }

uint64_t PmdThread::post_rxqs(const std::vector<RxqId>& l) {
  assigned_ = l;
  uint64_t g;
  {
    std::lock_guard<std::mutex> lk(mu_);
    npending_ = 0;
    for (const RxqId& q : l)
      if (npending_ < kMaxRxqs) pending_[npending_++] = q;
    g = posted_gen_.load(std::memory_order_relaxed) + 1;
    posted_gen_.store(g, std::memory_order_release);
    if (!thread_.joinable()) {  // not running: takes effect now
      std::copy(pending_, pending_ + npending_, rxqs_);
      nrxqs_ = npending_;
      seen_gen_ = g;
      applied_gen_.store(g, std::memory_order_release);
    }
  }
  wake();
  return g;
}

void PmdThread::apply_rxqs() {
  // Everything held goes out first: every chain taken from the rxqs being given up is back
  // in its transmit queue's used ring before another thread may poll that queue, with the
  // calls noted for it (that thread then writes the call fd alone). Frames kept for a
  // retry (their receive queue full) get their tx_retry_us first, as on any pass: giving
  // rxqs up (a rebalance, `ctl upgrade`'s hold) is no reason to drop them.
  while (fw_->flush_before_sleep() != 0) {
  }
  fw_->flush_all();
  fw_->send_all_calls();
  send_noted_calls();
  std::lock_guard<std::mutex> lk(mu_);
  std::copy(pending_, pending_ + npending_, rxqs_);
  nrxqs_ = npending_;
  send_noted_calls();  // (a gained queue's ring may hold one from before a pause)
  seen_gen_ = posted_gen_.load(std::memory_order_relaxed);
  applied_gen_.store(seen_gen_, std::memory_order_release);
}

void PmdThread::send_noted_calls() {
  for (uint32_t i = 0; i < nrxqs_; ++i) {
    port::Port* vp = tables_->port(rxqs_[i].port);
    if (vp->active()) vp->dp().qp[rxqs_[i].queue].txq.flush_call();
  }
}

uint64_t PmdThread::elapsed_cycles() const {
  const uint64_t s = start_tsc_.load(std::memory_order_relaxed);
  return s ? rdtsc() - s : 0;
}

void PmdThread::interrupt() {
  if (thread_.joinable()) pthread_kill(thread_.native_handle(), kInterruptSignal);
}

void PmdThread::check_stuck() {
  const uint64_t p = passes();
  if (p == watchdog_passes_ && !sleeping() && thread_.joinable()) {
    VL_LOG_RL(spdlog::level::warn,
              "pmd {}: no pass finished for a second (the thread was not scheduled, or it is "
              "blocked writing a front-end's call fd); "
              "interrupting it",
              index_);
    interrupt();
  }
  watchdog_passes_ = p;
}

void PmdThread::watch_kick(RxqId q, int fd) {
  // Edge-triggered: every eventfd write by the front-end queues an event, so the kick
  // counter is never read here. Reading it would race with the control thread closing
  // the fd once this thread has been seen asleep.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = uint64_t{q.port} << 8 | q.queue;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void PmdThread::unwatch_kick(int fd) { epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

bool PmdThread::try_sleep() {
  // Nothing waits in an intermediate queue while this thread sleeps (dp/flush.h), and a
  // sleeping thread holds nothing of any port (it counts as quiescent). Frames waiting for
  // room in a full receive queue keep the thread polling until they are delivered or their
  // tx_retry_us is up: a sleep would otherwise drop them at once.
  const uint64_t left = fw_->flush_before_sleep();
  fw_->settle_ages();  // what it delivered: none of it waits for the next pass
  if (left) {
    // With more than a nap left, a nap rather than a spin: the guest that must refill its
    // receive queue may need this CPU (a TCG or overcommitted guest refills in ms). A
    // shorter bound (the default 20 us, for fast peers) is spent polling.
    constexpr uint64_t kNapNs = 50'000;  // plus the timer slack (50 us by default)
    if (left > 2 * kNapNs) {
      timespec nap{0, static_cast<long>(kNapNs)};
      nanosleep(&nap, nullptr);
    }
    return false;
  }
  // Ask every queue for a kick, then look once more: a frame that arrived in between
  // would otherwise wait for the next kick.
  bool pending = false;
  if (posted_gen_.load(std::memory_order_acquire) != seen_gen_) return false;  // new rxqs
  for (uint32_t i = 0; i < nrxqs_; ++i) {
    port::Port* vp = tables_->port(rxqs_[i].port);
    if (!vp->active()) continue;
    const port::QueuePairDp& d = vp->dp().qp[rxqs_[i].queue];
    if (!d.has_txq() || d.txq.broken()) continue;
    if (d.kickless) {  // nothing would wake us for this queue: keep polling
      pending = true;
      continue;
    }
    d.txq.set_kicks(true);
    if (d.txq.pending() != 0) pending = true;
    // An uplink's wire may hold frames its last pull had no free buffer for: its fd gives no
    // new edge for them (port/uplink_port.h).
    const port::WireHooks& w = vp->dp().wire;
    if (w.pull && w.pull(w.ctx, rxqs_[i].queue) != 0) pending = true;
  }
  if (pending || stop_.load(std::memory_order_relaxed)) return false;
  // Noted calls (completion coalescing) bound the sleep; one due about now ends it.
  const uint64_t call_ns = fw_->ns_to_next_call();
  if (call_ns && call_ns < kMinTimedSleepNs) return false;
  // A thread asleep with notes is not quiescent (PmdSet::wait_quiescent wakes it): it must
  // pass a quiescent point and send a pausing port's notes first.
  holds_notes_.store(call_ns != 0, std::memory_order_seq_cst);
  sleeping_.store(true, std::memory_order_seq_cst);
  if (fw_->handoff_pending()) {  // after the store: a producer either sees us asleep or we see its frames
    sleeping_.store(false, std::memory_order_seq_cst);
    return false;
  }
  timespec limit{1, 0};
  if (call_ns) limit = timespec{static_cast<time_t>(call_ns / 1'000'000'000),
                                static_cast<long>(call_ns % 1'000'000'000)};
  epoll_event evs[16];
  int n = epoll_pwait2(epoll_.get(), evs, 16, &limit, nullptr);
  if (n < 0 && errno == ENOSYS) [[unlikely]]  // Linux before 5.11: ms, rounded up
    n = epoll_wait(epoll_.get(), evs, 16,
                   static_cast<int>(limit.tv_sec * 1000 + (limit.tv_nsec + 999'999) / 1'000'000));
  sleeping_.store(false, std::memory_order_seq_cst);
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 == kWakeKey) {
      uint64_t v;
      eventfd_read(wake_.get(), &v);
    }
  }
  return true;
}

bool PmdThread::adaptive_idle(const OwnWait& own_wait) {
  const uint64_t now = tsc_now_ns();
  const bool sleep = idle_.idle(now, idle_.wants_wait(now) ? own_wait.read() : 0);
  spin_preempted_.store(idle_.preemptions(), std::memory_order_relaxed);
  if (!sleep) {
    __builtin_ia32_pause();
    return false;
  }
  if (try_sleep()) idle_.slept(now, tsc_now_ns());
  // The window in force (0 while giving way), for pmd-stats.
  spin_window_ns_.store(idle_.effective_window(tsc_now_ns()), std::memory_order_relaxed);
  return true;
}

void PmdThread::note_off_cpu(uint64_t from_tsc, uint64_t to_tsc) {
  const uint64_t a = tsc_to_ns(from_tsc), b = tsc_to_ns(to_tsc);
  if (a && b > a) fw_->off_cpu().record(a, b);
}

uint32_t PmdThread::poll_rxqs(uint64_t t0) {
  uint32_t got = 0;
  uint64_t tprev = t0;
  for (uint32_t i = 0; i < nrxqs_; ++i) {
    const RxqId q = rxqs_[i];
    const uint32_t n = fw_->poll(q.port, q.queue);
    if (n) {  // one TSC read per non-empty burst: the rxq's cycles (for cycles assignment)
      const uint64_t tn = rdtsc();
      RxqLoad& l = load_[q.port][q.queue];
      l.cycles.store(l.cycles.load(std::memory_order_relaxed) + (tn - tprev), std::memory_order_relaxed);
      l.packets.store(l.packets.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
      tprev = tn;
      got += n;
    }
  }
  return got;
}

void PmdThread::note_excess(uint64_t from, uint64_t to, uint64_t handed, uint64_t tpu) {
  // Time beyond what the work since `from` can take was time off the CPU (dp/off_cpu.h),
  // noted as the start of [from, to): it then counts in full for the frames held from
  // before the pass, the ones a deadline is about.
  PassWork w = fw_->take_pass_work();
  w.frames += handed;
  w.polls = nrxqs_;
  const uint64_t bound = pass_work_bound_ns(w) * tpu / 1000;
  if (to - from > bound) [[unlikely]] note_off_cpu(from, to - bound);
}

void PmdThread::account_pass(uint64_t t0, uint64_t t1, uint32_t got, uint32_t handed) {
  if (!got && !handed) return;
  busy_passes_.store(busy_passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  busy_cycles_.store(busy_cycles_.load(std::memory_order_relaxed) + (t1 - t0),
                     std::memory_order_relaxed);
  // Release: a reader that loads packets() (acquire) and then the rxq loads sees loads at
  // least as large (pmd-stats is then never short of its own total).
  packets_.store(packets_.load(std::memory_order_relaxed) + got, std::memory_order_release);
}

void PmdThread::run() {
  if (cpu_ >= 0) {
    const int rc = pin_current_thread(cpu_);
    if (rc != 0) spdlog::warn("pmd {}: cannot pin to cpu {}: {}", index_, cpu_, strerror(rc));
  }
  pthread_setname_np(pthread_self(), fmt::format("vl-pmd{}", index_).c_str());
  tid_.store(static_cast<int>(gettid()), std::memory_order_relaxed);
  const bool dpdk = wire::register_pmd_thread() >= 0;  // an lcore with dpdk ports (dpdk_eal.h)
  OwnWait own_wait;  // adaptive mode: the run-queue wait (0 where unreadable: then unused)
  if (opts_.mode == PmdMode::kAdaptive) {
    own_wait.open();
    spin_window_ns_.store(idle_.effective_window(0), std::memory_order_relaxed);
  }
  spdlog::info("pmd {}: {} mode on cpu {}, {} rxq(s)", index_, pmd_mode_name(opts_.mode),
               cpu_ >= 0 ? std::to_string(cpu_) : std::string("any"), nrxqs_);
  start_tsc_.store(rdtsc(), std::memory_order_relaxed);
  bool kicks_on = true;  // a ring starts with kicks enabled (used flags 0, avail_event 0)
  uint64_t seen_gen = 0;
  // Time off the CPU (dp/off_cpu.h): the TSC at the end of the last pass (0 after a sleep,
  // which is not such time), and the TSC's ticks per us (0: uncalibrated, nothing noted).
  uint64_t prev_end = 0;
  const uint64_t tpu = tsc_ticks_per_us();
  while (!stop_.load(std::memory_order_relaxed)) {
    passes_.fetch_add(1, std::memory_order_seq_cst);  // quiescent point (see pmd.h)
    // Frames held across passes, calls noted for later: pmd.h.
    if (fw_->holding() || fw_->calls_pending()) fw_->release_paused();
    if (posted_gen_.load(std::memory_order_acquire) != seen_gen_) [[unlikely]] {
      apply_rxqs();  // a new rxq list (pmd.h: delivers everything first)
      kicks_on = true;
      prev_end = 0;  // its work is not time off the CPU
    }
    const uint64_t gen = tables_->ports_gen.load(std::memory_order_relaxed);
    if (gen != seen_gen) {  // a port (re)started: its ring asks for kicks again
      seen_gen = gen;
      kicks_on = true;
      send_noted_calls();  // calls noted before it paused
      prev_end = 0;
    }
    // Adaptive mode's clock (idle_policy.h): the pass's start, so a long burst is not
    // mistaken for time off the CPU.
    const uint64_t pass_ns = opts_.mode == PmdMode::kAdaptive ? tsc_now_ns() : 0;
    const uint64_t t0 = rdtsc();
    if (prev_end && t0 - prev_end > kOffCpuMinNs * tpu / 1000) [[unlikely]] note_off_cpu(prev_end, t0);
    const uint32_t got = poll_rxqs(t0);
    // Frames other threads handed to this one (not counted in its packets: they were
    // taken, and counted, by the thread that polled them).
    const uint32_t handed = fw_->drain_handoffs();
    fw_->end_pass();  // held queues whose interval or budget is up
    if (fw_->calls_pending()) [[unlikely]] fw_->send_due_calls();  // completion coalescing
    const uint64_t t1 = rdtsc();
    if (tpu) [[likely]] {
      note_excess(t0, t1, handed, tpu);
      prev_end = t1;
    }
    // Ages on CPU of the frames this pass delivered, now that its time off the CPU is noted.
    fw_->settle_ages();
    account_pass(t0, t1, got, handed);
    if (got || handed || opts_.mode == PmdMode::kPoll) {
      if (opts_.mode == PmdMode::kAdaptive) idle_.busy(pass_ns);
      if (kicks_on) {  // while polling, the driver need not kick (saves it a syscall a burst)
        for (uint32_t i = 0; i < nrxqs_; ++i) {
          port::Port* vp = tables_->port(rxqs_[i].port);
          const port::QueuePairDp& d = vp->dp().qp[rxqs_[i].queue];
          if (vp->active() && d.has_txq() && !d.txq.broken()) d.txq.set_kicks(false);
        }
        kicks_on = false;
      }
      if (got || handed) continue;
    }
    switch (opts_.mode) {
      case PmdMode::kPoll: __builtin_ia32_pause(); break;
      case PmdMode::kInterrupt: kicks_on = true; try_sleep(); prev_end = 0; break;
      case PmdMode::kAdaptive:
        if (adaptive_idle(own_wait)) {
          kicks_on = true;
          prev_end = 0;
        }
        break;
    }
  }
  fw_->flush_all();  // no frame stays behind in an intermediate queue
  fw_->settle_ages();
  fw_->send_all_calls();
  send_noted_calls();
  if (dpdk) wire::unregister_pmd_thread();
  exited_.store(true, std::memory_order_release);
}

PmdSet::PmdSet(SwitchTables* t, const std::vector<int>& cpus, PmdOptions opts)
    : tables_(t), opts_(opts) {
  for (auto& row : owner_) for (int& o : row) o = -1;
  for (auto& row : kick_fd_) for (int& f : row) f = -1;
  if (cpus.empty()) {
    threads_.push_back(std::make_unique<PmdThread>(0, -1, t, opts, load_));
  } else {
    for (size_t i = 0; i < cpus.size() && i < kMaxPmdThreads; ++i)
      threads_.push_back(
          std::make_unique<PmdThread>(static_cast<uint32_t>(i), cpus[i], t, opts, load_));
  }
  // A ring from every thread to every other (T * (T - 1) rings of HandoffRing::kBytes,
  // address space only until used: a ring's pages are touched as frames pass through it).
  const size_t n = threads_.size();
  t->pmd_threads = static_cast<uint32_t>(n);
  for (size_t p = 0; p < n; ++p) {
    for (size_t c = 0; c < n; ++c) {
      if (p == c) continue;
      rings_.push_back(std::make_unique<HandoffRing>(threads_[c]->sleeping_flag(), threads_[c]->wake_fd()));
      t->handoff[p][c] = rings_.back().get();
    }
  }
}

void PmdSet::clear_load(uint32_t port) {
  for (RxqLoad& l : load_[port]) {
    l.cycles.store(0, std::memory_order_relaxed);
    l.packets.store(0, std::memory_order_relaxed);
    l.cycles_mark = 0;
  }
}

PmdThread* PmdSet::owner_of(uint32_t port, uint32_t queue) const {
  if (port >= port::kMaxPorts || queue >= port::kMaxQueuePairs) return nullptr;
  const int o = owner_[port][queue];
  return o >= 0 ? threads_[o].get() : nullptr;
}

std::vector<RxqId> PmdSet::current_rxqs() const {
  std::vector<RxqId> out;
  for (uint32_t p = 0; p < tables_->nports.load(std::memory_order_relaxed); ++p) {
    const port::PortDp& d = tables_->port(p)->dp();
    for (uint32_t q = 0; q < d.nqp; ++q)
      if (d.qp[q].has_txq()) out.push_back({static_cast<uint8_t>(p), static_cast<uint8_t>(q)});
  }
  return out;
}

std::vector<std::vector<RxqId>> plan_rxq_assignment(RxqAssign mode, const std::vector<RxqId>& rxqs,
                                                    const std::vector<uint64_t>& cycles,
                                                    size_t n) {
  std::vector<std::vector<RxqId>> out(n);
  if (mode == RxqAssign::kRoundRobin || cycles.size() != rxqs.size()) {
    for (size_t i = 0; i < rxqs.size(); ++i) out[i % n].push_back(rxqs[i]);
    return out;
  }
  std::vector<std::pair<uint64_t, RxqId>> by_load;
  for (size_t i = 0; i < rxqs.size(); ++i) by_load.push_back({cycles[i], rxqs[i]});
  std::stable_sort(by_load.begin(), by_load.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<uint64_t> sum(n, 0);
  for (const auto& [c, q] : by_load) {
    size_t best = 0;
    for (size_t t = 1; t < n; ++t) {
      if (sum[t] < sum[best] || (sum[t] == sum[best] && out[t].size() < out[best].size())) best = t;
    }
    sum[best] += c;
    out[best].push_back(q);
  }
  return out;
}

std::vector<std::vector<RxqId>> PmdSet::plan(const std::vector<RxqId>& rxqs) {
  std::vector<uint64_t> cycles;
  if (opts_.rxq_assign == RxqAssign::kCycles) {
    for (const RxqId& q : rxqs) {
      const RxqLoad& l = load_[q.port][q.queue];
      const uint64_t c = l.cycles.load(std::memory_order_relaxed);
      cycles.push_back(c > l.cycles_mark ? c - l.cycles_mark : 0);
    }
  }
  return plan_rxq_assignment(opts_.rxq_assign, rxqs, cycles, threads_.size());
}

void PmdSet::post_and_wait(const std::vector<std::vector<RxqId>>& lists) {
  std::vector<uint64_t> want(threads_.size(), 0);
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (lists[i] != threads_[i]->rxqs()) want[i] = threads_[i]->post_rxqs(lists[i]);
  }
  if (!running_) return;
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (!want[i]) continue;
    uint64_t next_interrupt = mono_ns() + 10000000;
    while (threads_[i]->applied() < want[i]) {
      timespec ts{0, 5000};
      nanosleep(&ts, nullptr);
      if (mono_ns() >= next_interrupt) {  // blocked on a call fd? (pmd.h "Watchdog")
        threads_[i]->interrupt();
        threads_[i]->wake();
        next_interrupt = mono_ns() + 10000000;
      }
    }
  }
}

void PmdSet::hold(bool on) {
  held_ = on;
  if (on) post_and_wait(std::vector<std::vector<RxqId>>(threads_.size()));
  else reassign(true);
}

void PmdSet::reassign(bool force) {
  if (held_) return;
  const std::vector<RxqId> rxqs = current_rxqs();
  if (!force) {
    size_t assigned = 0;
    bool same = true;
    for (auto& t : threads_) {
      assigned += t->rxqs().size();
      for (const RxqId& q : t->rxqs())
        if (std::find(rxqs.begin(), rxqs.end(), q) == rxqs.end()) same = false;
    }
    if (same && assigned == rxqs.size()) return;
  }
  const auto target = plan(rxqs);
  const size_t n = threads_.size();
  // Step 1: every thread keeps only what it keeps in the target (delivers all it holds).
  std::vector<std::vector<RxqId>> keep(n);
  for (size_t i = 0; i < n; ++i) {
    for (const RxqId& q : threads_[i]->rxqs())
      if (std::find(target[i].begin(), target[i].end(), q) != target[i].end()) keep[i].push_back(q);
  }
  post_and_wait(keep);
  for (uint32_t p = 0; p < port::kMaxPorts; ++p) {
    for (uint32_t q = 0; q < port::kMaxQueuePairs; ++q) {
      const int o = owner_[p][q];
      if (o < 0) continue;
      const RxqId id{static_cast<uint8_t>(p), static_cast<uint8_t>(q)};
      if (std::find(keep[o].begin(), keep[o].end(), id) != keep[o].end()) continue;
      if (kick_fd_[p][q] >= 0) threads_[o]->unwatch_kick(kick_fd_[p][q]);
      owner_[p][q] = -1;
    }
  }
  // Step 2: the gains (no thread polls them any more).
  post_and_wait(target);
  for (size_t i = 0; i < n; ++i) {
    for (const RxqId& q : target[i]) {
      if (owner_[q.port][q.queue] == static_cast<int>(i)) continue;
      owner_[q.port][q.queue] = static_cast<int>(i);
      if (kick_fd_[q.port][q.queue] >= 0) threads_[i]->watch_kick(q, kick_fd_[q.port][q.queue]);
    }
  }
  for (const RxqId& q : rxqs) {
    RxqLoad& l = load_[q.port][q.queue];
    l.cycles_mark = l.cycles.load(std::memory_order_relaxed);
  }
  ++reassignments_;
  if (running_) {
    std::string desc;
    for (size_t i = 0; i < n; ++i) {
      desc += fmt::format("{}pmd {}:", i ? "; " : "", i);
      for (const RxqId& q : target[i]) desc += fmt::format(" {}/{}", tables_->port(q.port)->name(), q.queue);
    }
    VL_LOG_RL(spdlog::level::info, "rxq assignment ({}): {}", rxq_assign_name(opts_.rxq_assign), desc);
  }
}

bool PmdSet::start(std::string* err) {
  // No SA_RESTART: a write a PMD thread is blocked in fails with EINTR (see pmd.h).
  install_interrupt_handler(kInterruptSignal);
  calibrate_tsc_ns();  // the clock of the intermediate queues (dp/flush.h)
  for (auto& t : threads_) {
    if (!t->start(err)) return false;
  }
  running_ = true;
  return true;
}

void PmdSet::stop() {
  for (auto& t : threads_) t->stop();
  running_ = false;
}

void PmdSet::wait_quiescent() {
  if (!running_) return;
  std::vector<uint64_t> seen;
  seen.reserve(threads_.size());
  for (auto& t : threads_) seen.push_back(t->passes());
  for (size_t i = 0; i < threads_.size(); ++i) {
    uint64_t next_interrupt = mono_ns() + 10000000;
    // Two quiescent points: frames held across passes are released right after one
    // (Forwarder::release_paused) if a port they involve was seen paused there; the
    // first point after our `active = false` may not have seen it, the second has.
    uint64_t woken_at = ~0ull;  // passes() when we last woke it
    while (threads_[i]->passes() - seen[i] < 2 && !threads_[i]->asleep_quiescent()) {
      // Asleep with noted calls: wake it (once per sleep) to pass its quiescent points.
      if (threads_[i]->sleeping() && threads_[i]->passes() != woken_at) {
        woken_at = threads_[i]->passes();
        threads_[i]->wake();
      }
      timespec ts{0, 5000};
      nanosleep(&ts, nullptr);
      // A pass takes microseconds; 10 ms means the thread is blocked on a front-end's fd
      // (pmd.h "Watchdog"). Without this the control thread would wait here forever.
      if (mono_ns() >= next_interrupt) {
        // Routine on a loaded machine (the thread was preempted): harmless, since the signal
        // only ends a blocked write; hence debug level.
        VL_LOG_RL(spdlog::level::debug,
                  "pmd {}: a pass took over 10 ms while the control thread waited; "
                  "interrupting it in case it is blocked on a call fd", i);
        threads_[i]->interrupt();
        next_interrupt = mono_ns() + 10000000;
      }
    }
  }
}

void PmdSet::watchdog() {
  if (!running_) return;
  for (auto& t : threads_) t->check_stuck();
}

void PmdSet::ports_changed() {
  tables_->ports_gen.fetch_add(1, std::memory_order_relaxed);
  for (auto& t : threads_) t->wake();
  reassign(false);
}

uint32_t PmdSet::place_rx_writers() {
  const uint32_t n = static_cast<uint32_t>(threads_.size());
  if (n < 2 || !running_) return 0;
  constexpr uint64_t kMinFramesToMove = 1000;  // in one tick: below that a handoff costs little
  uint32_t moved = 0;
  for (uint32_t p = 0; p < tables_->nports.load(std::memory_order_relaxed); ++p) {
    uint64_t delta[kMaxPmdThreads];
    uint32_t best = 0;
    for (uint32_t t = 0; t < n; ++t) {
      const uint64_t r = threads_[t]->forwarder().routed(p);
      delta[t] = r - routed_seen_[t][p];
      routed_seen_[t][p] = r;
      if (delta[t] > delta[best]) best = t;
    }
    port::Port* vp = tables_->port(p);
    if (!opts_.follow_writers || !vp->active() || vp->linked_away()) continue;
    const port::PortDp& d = vp->dp();
    if (!d.rx_ready || d.rx_ready >= n) continue;  // every thread writes its own queues
    const uint32_t cur = vp->rx_writer_rotation() % n;  // writes the first ready queue
    if (best == cur || delta[best] < kMinFramesToMove || delta[best] <= 2 * delta[cur]) continue;
    vp->move_rx_writers(best);
    ++moved;
    ++writer_moves_;
    VL_LOG_RL(spdlog::level::info,
              "port {}: receive queue writer moved from pmd {} to pmd {} ({} of the {} frames "
              "routed to the port in the last second)",
              vp->name(), cur, best, delta[best], [&] {
                uint64_t s = 0;
                for (uint32_t t = 0; t < n; ++t) s += delta[t];
                return s;
              }());
  }
  return moved;
}

void PmdSet::set_kick_fd(uint32_t port, uint32_t queue, int old_fd, int new_fd) {
  if (port >= port::kMaxPorts || queue >= port::kMaxQueuePairs) return;
  kick_fd_[port][queue] = new_fd;
  PmdThread* t = owner_of(port, queue);
  if (!t) return;
  if (old_fd >= 0) t->unwatch_kick(old_fd);
  if (new_fd >= 0) t->watch_kick({static_cast<uint8_t>(port), static_cast<uint8_t>(queue)}, new_fd);
}

}  // namespace vl::dp
