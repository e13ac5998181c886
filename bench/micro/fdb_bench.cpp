// Micro-benchmark of the bridge's per-frame lookup work against the number of flows: the
// destination MAC lookup in the forwarding database (dp/fdb.h: 2^16 buckets of 8 MACs,
// one 64-byte cache line per bucket, one hash and one line per lookup) plus the source-MAC
// learn of a steady flow (a read of the same bucket shape, no write). virtlink's datapath
// keeps no other per-flow state: the intermediate queues are per output port, so a flow
// count changes the lookup's cache footprint only.
//
// With N flows the generator varies the destination MAC over N addresses (INTERFACES.md
// "Flows"); here the N MACs are looked up in a shuffled order (a bench trial interleaves
// flows, so consecutive frames rarely share a bucket).
//
// Run: build/bench/micro/fdb_bench   (ns per frame; noisy on a shared machine)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "dp/fdb.h"

using vl::dp::Fdb;
using vl::dp::Mac;

namespace {

// MACs as virtlink gen makes them: a base address plus the flow number.
constexpr Mac kBase = 0x02'00'00'00'10'00ull;

void BM_FdbLookup(benchmark::State& state) {
  const uint32_t flows = static_cast<uint32_t>(state.range(0));
  // The switch's default size (2^16 buckets, 524288 MACs), or 4 x the flows when more
  // (--mac-table-buckets: a full table evicts and floods).
  Fdb fdb(std::max<uint32_t>(1u << 16, flows / 2));
  for (uint32_t f = 0; f < flows; ++f) fdb.learn(kBase + f, 1 + (f & 1), 100);
  std::vector<uint32_t> order(std::max<uint32_t>(flows, 4096));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i % flows);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  size_t i = 0;
  uint64_t found = 0;
  const Mac src = 0x02'00'00'00'00'01ull;
  fdb.learn(src, 0, 100);
  for (auto _ : state) {
    // One frame: learn its source (steady: no write), look up its destination.
    fdb.learn(src, 0, 100);
    const uint32_t port = fdb.lookup(kBase + order[i]);
    found += port != Fdb::kNoPort;
    benchmark::DoNotOptimize(port);
    if (++i == order.size()) i = 0;
  }
  if (found != static_cast<uint64_t>(state.iterations())) state.SkipWithError("a learned MAC was not found");
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["flows"] = flows;
  state.counters["table_bytes"] = static_cast<double>(fdb.capacity()) * 12;  // 8 B word + 4 B time
}
BENCHMARK(BM_FdbLookup)->Arg(10)->Arg(1000)->Arg(100000)->Arg(400000)->Arg(1000000);

}  // namespace

BENCHMARK_MAIN();
