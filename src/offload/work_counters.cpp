#include "offload/work_counters.h"

namespace vl::offload {

const char* work_name(Work w) {
  switch (w) {
    case Work::kGsoPassed: return "gso_passed";
    case Work::kGsoFrames: return "sw_gso_frames";
    case Work::kGsoSegments: return "sw_gso_segments";
    case Work::kCsumFilled: return "sw_csum_filled";
    case Work::kCount: break;
  }
  return "unknown";
}

}  // namespace vl::offload
