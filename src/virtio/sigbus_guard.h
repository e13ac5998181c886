#pragma once
// Survives a front-end that truncates the file behind its shared memory (ftruncate of a
// memfd after SET_MEM_TABLE): our next access to those pages would raise SIGBUS and kill
// the switch. A process-wide SIGBUS handler looks the faulting address up among the
// registered guest mappings; if it is one, it maps private zero pages over that whole
// mapping (so the access completes, reading zeros or writing into pages nobody sees; one
// fault and one mapping per region, however many pages were truncated) and marks the
// mapping as faulted. The owner polls faulted() and drops that connection.
// A SIGBUS outside guest memory gets the default action (the process dies, as it should).
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vl::virtio {

class SigbusGuard {
 public:
  /// Installs the handler once (idempotent, thread-safe).
  static void install();
  /// Registers [base, base+len) and returns a slot id, or -1 when the table is full (then
  /// the mapping is unprotected, and the call logs nothing: callers may refuse it).
  static int add(void* base, size_t len);
  /// Unregisters a slot (before munmap).
  static void remove(int slot);
  /// True once an access to that mapping faulted.
  static bool faulted(int slot);
  /// Faults repaired since start (all mappings).
  static uint64_t repairs();
};

}  // namespace vl::virtio
