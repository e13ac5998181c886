#include "gen/pacer.h"

namespace vl::gen {

uint64_t planned_slots(double rate_pps, double duration_s) {
  const double slots = (rate_pps > 0 ? rate_pps : 30e6) * duration_s;
  if (!(slots >= 0)) return 1;
  return slots >= 0x1p62 ? uint64_t{1} << 62 : static_cast<uint64_t>(slots) + 1;
}

Pacer::Pacer(double rate_pps, double tick_hz, double duration_s, uint32_t burst,
             uint32_t max_lag_slots)
    : period_(rate_pps > 0 ? tick_hz / rate_pps : 0),
      max_lag_(static_cast<double>(max_lag_slots) * period_),
      planned_(planned_slots(rate_pps, duration_s)),
      planned_d_(static_cast<double>(planned_)),
      burst_(burst),
      duration_(static_cast<uint64_t>(duration_s * tick_hz)),
      end_(duration_) {}

uint64_t Pacer::next_send(const PaceState& st) const {
  if (st.slot >= planned_) return UINT64_MAX;
  if (!paced()) return start_;
  const double t = std::ceil(static_cast<double>(st.slot) * period_);
  if (t >= static_cast<double>(end_ - start_)) return UINT64_MAX;
  return start_ + static_cast<uint64_t>(t);
}

}  // namespace vl::gen
