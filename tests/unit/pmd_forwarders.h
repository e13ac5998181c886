#pragma once
// Tests: one Forwarder per PMD thread over one SwitchTables, and the handoff rings between
// every pair of them (dp/handoff.h), as PmdSet sets them up.
#include <cstdint>
#include <memory>
#include <vector>

#include "dp/forwarder.h"
#include "dp/handoff.h"

namespace vl::test {

struct PmdForwarders {
  std::vector<std::unique_ptr<dp::Forwarder>> fws;
  std::vector<std::unique_ptr<dp::HandoffRing>> rings;

  /// `threads` forwarders on `tables` (its pmd_threads and handoff[][] set).
  void build(dp::SwitchTables* tables, uint32_t threads) {
    tables->pmd_threads = threads;
    for (uint32_t t = 0; t < threads; ++t) {
      fws.push_back(std::make_unique<dp::Forwarder>(tables, &dp::tsc_now_ns, t));
      for (uint32_t c = 0; c < threads; ++c) {
        if (c == t) continue;
        rings.push_back(std::make_unique<dp::HandoffRing>());
        tables->handoff[t][c] = rings.back().get();
      }
    }
  }
};

}  // namespace vl::test
