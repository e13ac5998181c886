#pragma once
// DPDK's Environment Abstraction Layer, once per process: initialised lazily when the first
// dpdk port opens (a switch without one never starts it), with arguments that suit a switch
// sharing the machine (no hugepages needed, no PCI scan unless asked, no core taken from the
// PMD threads). No DPDK header here: DPDK's compiler flags stay inside this layer.
#include <string>
#include <vector>

namespace vl::wire {

/// Extra EAL arguments (the switch's `--dpdk-extra`, like OVS's other_config:dpdk-extra),
/// appended after virtlink's own so that they override them. False, and ignored, once EAL has
/// been initialised (or has failed to).
bool set_eal_extra_args(std::vector<std::string> args);

/// Initialises EAL if it is not yet (thread-safe; the control thread calls it). `pci`: PCI
/// addresses to allow (`-a`); none: `--no-pci`, and later PCI devices are refused. The
/// calling thread keeps its CPU affinity.
/// rte_eal_init runs at most once per process, even after a failure: a failed one is
/// reported again (the same message) by every later call. False with `*err`.
bool eal_init(const std::vector<std::string>& pci, std::string* err);

/// EAL is up (eal_init succeeded).
bool eal_initialised();

/// The argument vector rte_eal_init was called with (argv[0] first); empty before.
std::vector<std::string> eal_args();

/// Gives the calling thread (a std::thread, not an EAL lcore) an lcore id, so that mempool
/// caches and per-lcore data work for it (rte_thread_register). Idempotent. Returns the lcore
/// id, or -1 when EAL is not initialised (then nothing happens: call again once a dpdk port
/// exists) or no lcore id is free (RTE_MAX_LCORE; the thread still works, without caches).
int register_pmd_thread();
/// Gives the lcore id back (rte_thread_unregister) before the thread exits; no-op when the
/// thread has none.
void unregister_pmd_thread();

}  // namespace vl::wire
