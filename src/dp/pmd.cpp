#include "dp/pmd.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/cpuset.h"
#include "util/log.h"

namespace vl::dp {

const char* pmd_mode_name(PmdMode m) {
  switch (m) {
    case PmdMode::kPoll: return "poll";
    case PmdMode::kInterrupt: return "interrupt";
    case PmdMode::kAdaptive: return "adaptive";
  }
  return "?";
}

namespace {
uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
constexpr uint64_t kWakeKey = 0xffffffffffffffffull;
}  // namespace

PmdThread::PmdThread(uint32_t index, int cpu, SwitchTables* t, PmdOptions opts)
    : index_(index), cpu_(cpu), t_(t), opts_(opts), fw_(std::make_unique<Forwarder>(t)) {
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

void PmdThread::watch_kick(uint32_t port, int fd) {
  // Edge-triggered: every eventfd write by the front-end queues an event, so the kick
  // counter is never read here. Reading it would race with the control thread closing
  // the fd once this thread has been seen asleep.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = port;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void PmdThread::unwatch_kick(int fd) { epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

bool PmdThread::try_sleep() {
  // Nothing waits in an intermediate queue while this thread sleeps (dp/flush.h), and a
  // sleeping thread holds nothing of any port (it counts as quiescent).
  fw_->flush_all();
  // Ask every queue for a kick, then look once more: a frame that arrived in between
  // would otherwise wait for the next kick.
  bool pending = false;
  for (uint32_t p : ports_) {
    port::VhostPort* vp = t_->ports[p];
    if (!vp->active()) continue;
    const port::PortDp& d = vp->dp();
    if (!d.has_txq() || d.txq_broken()) continue;
    if (d.kickless) {  // nothing would wake us for this queue: keep polling
      pending = true;
      continue;
    }
    d.txq_set_kicks(true);
    if (d.txq_pending() != 0) pending = true;
  }
  if (pending || stop_.load(std::memory_order_relaxed)) return false;
  sleeping_.store(true, std::memory_order_seq_cst);
  epoll_event evs[16];
  const int n = epoll_wait(epoll_.get(), evs, 16, 1000);
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

void PmdThread::run() {
  if (cpu_ >= 0) {
    const int rc = pin_current_thread(cpu_);
    if (rc != 0) spdlog::warn("pmd {}: cannot pin to cpu {}: {}", index_, cpu_, strerror(rc));
  }
  pthread_setname_np(pthread_self(), fmt::format("vl-pmd{}", index_).c_str());
  spdlog::info("pmd {}: {} mode on cpu {}, {} port(s)", index_, pmd_mode_name(opts_.mode),
               cpu_ >= 0 ? std::to_string(cpu_) : std::string("any"), ports_.size());
  uint64_t idle_since = 0;
  bool kicks_on = true;  // a ring starts with kicks enabled (used flags 0, avail_event 0)
  uint64_t seen_gen = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    passes_.fetch_add(1, std::memory_order_seq_cst);  // quiescent point (see pmd.h)
    if (fw_->holding()) fw_->release_paused();  // frames held across passes: pmd.h
    const uint64_t gen = t_->ports_gen.load(std::memory_order_relaxed);
    if (gen != seen_gen) {  // a port (re)started: its ring asks for kicks again
      seen_gen = gen;
      kicks_on = true;
    }
    const uint64_t t0 = __builtin_ia32_rdtsc();
    uint32_t got = 0;
    for (uint32_t p : ports_) got += fw_->poll(p);
    fw_->end_pass();  // held queues whose interval or budget is up
    if (got) {
      const uint64_t t1 = __builtin_ia32_rdtsc();
      busy_passes_.store(busy_passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      busy_cycles_.store(busy_cycles_.load(std::memory_order_relaxed) + (t1 - t0),
                         std::memory_order_relaxed);
      packets_.store(packets_.load(std::memory_order_relaxed) + got, std::memory_order_relaxed);
    }
    if (got || opts_.mode == PmdMode::kPoll) {
      idle_since = 0;
      if (kicks_on) {  // while polling, the driver need not kick (saves it a syscall a burst)
        for (uint32_t p : ports_) {
          port::VhostPort* vp = t_->ports[p];
          if (vp->active() && vp->dp().has_txq() && !vp->dp().txq_broken())
            vp->dp().txq_set_kicks(false);
        }
        kicks_on = false;
      }
      if (got) continue;
    }
    switch (opts_.mode) {
      case PmdMode::kPoll: __builtin_ia32_pause(); break;
      case PmdMode::kInterrupt: kicks_on = true; try_sleep(); break;
      case PmdMode::kAdaptive: {
        const uint64_t now = now_ns();
        if (!idle_since) idle_since = now;
        if (now - idle_since >= uint64_t{opts_.idle_us} * 1000) {
          kicks_on = true;
          try_sleep();
          idle_since = 0;
        } else {
          __builtin_ia32_pause();
        }
        break;
      }
    }
  }
  fw_->flush_all();  // no frame stays behind in an intermediate queue
  exited_.store(true, std::memory_order_release);
}

PmdSet::PmdSet(SwitchTables* t, const std::vector<int>& cpus, PmdOptions opts) : tables_(t) {
  if (cpus.empty()) {
    threads_.push_back(std::make_unique<PmdThread>(0, -1, t, opts));
  } else {
    for (size_t i = 0; i < cpus.size(); ++i)
      threads_.push_back(std::make_unique<PmdThread>(static_cast<uint32_t>(i), cpus[i], t, opts));
  }
}

void PmdSet::assign_round_robin(uint32_t nports) {
  for (uint32_t p = 0; p < nports; ++p) threads_[p % threads_.size()]->assign(p);
}

PmdThread* PmdSet::owner_of(uint32_t port) const {
  for (auto& t : threads_) {
    for (uint32_t p : t->ports()) if (p == port) return t.get();
  }
  return nullptr;
}

namespace {
void on_interrupt_signal(int) {}  // only makes a blocked system call return EINTR
}  // namespace

bool PmdSet::start(std::string* err) {
  // No SA_RESTART: a write a PMD thread is blocked in fails with EINTR (see pmd.h).
  struct sigaction sa {};
  sa.sa_handler = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(kInterruptSignal, &sa, nullptr);
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
    uint64_t next_interrupt = now_ns() + 10000000;
    // Two quiescent points: frames held across passes are released right after one
    // (Forwarder::release_paused) if a port they involve was seen paused there; the
    // first point after our `active = false` may not have seen it, the second has.
    while (threads_[i]->passes() - seen[i] < 2 && !threads_[i]->sleeping()) {
      timespec ts{0, 5000};
      nanosleep(&ts, nullptr);
      // A pass takes microseconds; 10 ms means the thread is blocked on a front-end's fd
      // (pmd.h "Watchdog"). Without this the control thread would wait here forever.
      if (now_ns() >= next_interrupt) {
        // Routine on a loaded machine (the thread was preempted): harmless, since the signal
        // only ends a blocked write; hence debug level.
        VL_LOG_RL(spdlog::level::debug,
                  "pmd {}: a pass took over 10 ms while the control thread waited; "
                  "interrupting it in case it is blocked on a call fd", i);
        threads_[i]->interrupt();
        next_interrupt = now_ns() + 10000000;
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
}

void PmdSet::set_kick_fd(uint32_t port, int old_fd, int new_fd) {
  PmdThread* t = owner_of(port);
  if (!t) return;
  if (old_fd >= 0) t->unwatch_kick(old_fd);
  if (new_fd >= 0) t->watch_kick(port, new_fd);
}

}  // namespace vl::dp
