#include "wire/dpdk_eal.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_log.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace vl::wire {

namespace {

enum class State { kNotTried, kUp, kFailed };

struct Eal {
  std::mutex mu;
  State state = State::kNotTried;  // written under mu
  bool up = false;                 // published with release once state is kUp
  std::string error;               // the failure, reported again by every later eal_init
  std::vector<std::string> extra;  // set_eal_extra_args
  std::vector<std::string> args;   // what rte_eal_init got
  std::vector<char*> argv;         // into args; EAL may keep pointers, so both live forever
};

Eal& eal() {
  static Eal* e = new Eal;  // never destroyed: DPDK's destructors may run after ours
  return *e;
}

/// Bytes of free hugepages of every size (/sys/kernel/mm/hugepages/hugepages-<kB>kB).
uint64_t free_hugepage_bytes() {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator("/sys/kernel/mm/hugepages", ec)) {
    const std::string name = d.path().filename().string();
    uint64_t kb = 0, pages = 0;
    if (std::sscanf(name.c_str(), "hugepages-%lukB", &kb) != 1) continue;
    std::ifstream f(d.path() / "free_hugepages");
    if (f >> pages) total += pages * kb * 1024;
  }
  return total;
}

/// The CPUs of `set` as a list of ranges ("0-3,6").
std::string cpu_list(const cpu_set_t& set) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out += ',';
    out += last == c ? fmt::format("{}", c) : fmt::format("{}-{}", c, last);
    c = last;
  }
  return out;
}

/// DPDK's log lines (rte_log) into spdlog at the matching level, instead of EAL's default
/// stream (stderr and syslog).
ssize_t log_write(void*, const char* buf, size_t size) {
  const uint32_t level = rte_log_cur_msg_loglevel();
  const auto lv = level <= RTE_LOG_ERR       ? spdlog::level::err
                  : level == RTE_LOG_WARNING ? spdlog::level::warn
                  : level <= RTE_LOG_INFO    ? spdlog::level::info
                                             : spdlog::level::debug;
  std::string_view text(buf, size);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (!line.empty()) spdlog::log(lv, "dpdk: {}", line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return static_cast<ssize_t>(size);
}

void route_logs() {
  static cookie_io_functions_t fns{nullptr, log_write, nullptr, nullptr};
  if (FILE* f = fopencookie(nullptr, "w", fns)) {
    setvbuf(f, nullptr, _IOLBF, 0);
    rte_openlog_stream(f);
  }
}

bool is_pci(const std::string& s) { return s.find(':') != std::string::npos; }

std::vector<std::string> build_args(const std::vector<std::string>& pci,
                                    const cpu_set_t& allowed, const std::vector<std::string>& x) {
  std::vector<std::string> a{"virtlink"};
  // Lcore 0 (the main lcore: the thread that initialises EAL) may run on every CPU that
  // thread may: EAL pins no core of its own, so none is taken from the PMD threads, and its
  // control threads (interrupts) float over the same set.
  a.push_back("--lcores");
  a.push_back(fmt::format("0@({})", cpu_list(allowed)));
  a.push_back("--proc-type=primary");
  // No shared configuration files (no secondary processes): several switches coexist, and
  // nothing is left in /var/run/dpdk. With hugepages, --in-memory (it implies --no-shconf);
  // without, malloc'd memory (--no-huge implies --legacy-mem, which --in-memory refuses).
  if (free_hugepage_bytes() >= (uint64_t{256} << 20)) {
    a.push_back("--in-memory");
  } else {
    a.insert(a.end(), {"--no-huge", "-m", "256", "--no-shconf"});
  }
  a.push_back(fmt::format("--file-prefix=virtlink-{}", getpid()));
  a.push_back("--no-telemetry");
  a.push_back("--log-level=*:notice");
  if (pci.empty()) a.push_back("--no-pci");
  for (const auto& p : pci) a.insert(a.end(), {"-a", p});
  a.insert(a.end(), x.begin(), x.end());
  return a;
}

}  // namespace

bool set_eal_extra_args(std::vector<std::string> args) {
  Eal& e = eal();
  std::lock_guard lock(e.mu);
  if (e.state != State::kNotTried) return false;
  e.extra = std::move(args);
  return true;
}

bool eal_init(const std::vector<std::string>& pci, std::string* err) {
  Eal& e = eal();
  std::lock_guard lock(e.mu);
  for (const auto& p : pci) {
    if (!is_pci(p)) {
      *err = fmt::format("EAL: {} is not a PCI address", p);
      return false;
    }
  }
  if (e.state == State::kUp && !pci.empty() &&
      std::find(e.args.begin(), e.args.end(), "--no-pci") != e.args.end()) {
    *err = "EAL runs without PCI (--no-pci: the first dpdk port was a virtual device); "
           "open PCI ports first";
    return false;
  }
  if (e.state == State::kUp) return true;
  if (e.state == State::kFailed) {
    *err = e.error;
    return false;
  }
  e.state = State::kFailed;  // whatever happens below, rte_eal_init is not called again
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (int r = pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed); r != 0) {
    e.error = fmt::format("EAL: pthread_getaffinity_np: {}", std::strerror(r));
    *err = e.error;
    return false;
  }
  e.args = build_args(pci, allowed, e.extra);
  for (auto& s : e.args) e.argv.push_back(s.data());
  e.argv.push_back(nullptr);
  spdlog::info("dpdk: EAL: {}", fmt::join(e.args, " "));
  route_logs();
  const int r = rte_eal_init(static_cast<int>(e.args.size()), e.argv.data());
  const int eal_errno = rte_errno;
  // rte_eal_init pinned this thread to lcore 0's CPUs: give it back what it had.
  pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
  if (r < 0) {
    e.error = fmt::format("EAL initialisation failed: {} (arguments: {})",
                          rte_strerror(eal_errno), fmt::join(e.args, " "));
    *err = e.error;
    return false;
  }
  // Empty with --no-shconf/--in-memory and --no-telemetry; it would stay behind otherwise.
  ::rmdir(rte_eal_get_runtime_dir());
  e.state = State::kUp;
  __atomic_store_n(&e.up, true, __ATOMIC_RELEASE);
  return true;
}

bool eal_initialised() { return __atomic_load_n(&eal().up, __ATOMIC_ACQUIRE); }

std::vector<std::string> eal_args() {
  Eal& e = eal();
  std::lock_guard lock(e.mu);
  return e.args;
}

int register_pmd_thread() {
  if (!eal_initialised()) return -1;
  if (rte_lcore_id() != LCORE_ID_ANY) return static_cast<int>(rte_lcore_id());
  if (rte_thread_register() != 0) return -1;
  return static_cast<int>(rte_lcore_id());
}

void unregister_pmd_thread() {
  if (eal_initialised() && rte_lcore_id() != LCORE_ID_ANY) rte_thread_unregister();
}

}  // namespace vl::wire
