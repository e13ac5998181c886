#include "util/thread_sched.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vl {

namespace {
/// Reads a small /proc file into buf (NUL-terminated). Returns its length or -1.
long read_small(const char* path, char* buf, size_t cap) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return n;
}

/// The number after "key:" in a status file, or false.
bool status_field(const char* text, const char* key, uint64_t* v) {
  const char* p = strstr(text, key);
  if (!p) return false;
  p += strlen(key);
  char* end = nullptr;
  *v = strtoull(p, &end, 10);
  return end != p;
}
}  // namespace

bool read_thread_sched(int tid, ThreadSched* out) {
  if (tid <= 0) return false;
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
  if (read_small(path, buf, sizeof buf) <= 0) return false;
  ThreadSched s;
  unsigned long long run = 0, wait = 0;
  if (sscanf(buf, "%llu %llu", &run, &wait) != 2) return false;
  s.cpu_ns = run;
  s.wait_ns = wait;
  snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
  if (read_small(path, buf, sizeof buf) <= 0) return false;
  // "voluntary_ctxt_switches:" is also the tail of "nonvoluntary_ctxt_switches:": match
  // the line start.
  if (!status_field(buf, "\nvoluntary_ctxt_switches:", &s.voluntary) ||
      !status_field(buf, "\nnonvoluntary_ctxt_switches:", &s.involuntary))
    return false;
  *out = s;
  return true;
}

OwnWait::~OwnWait() {
  if (fd_ >= 0) close(fd_);
}

bool OwnWait::open() {
  if (fd_ < 0) fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  return fd_ >= 0;
}

uint64_t OwnWait::read() const {
  if (fd_ < 0) return 0;
  char buf[96];
  const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  // "RUN_NS WAIT_NS SLICES\n": the second number.
  const char* p = buf;
  while (*p >= '0' && *p <= '9') ++p;
  while (*p == ' ') ++p;
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
  return v;
}

}  // namespace vl
