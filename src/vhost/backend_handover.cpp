// A connection's state given to, and taken by, a successor process (`ctl upgrade`).
// docs/architecture.md "Upgrade".
#include <sys/eventfd.h>

#include <fmt/format.h>

#include "util/log.h"
#include "vhost/backend.h"
#include "virtio/virtio_defs.h"

namespace vl::vhost {

using namespace vl::virtio;

void Backend::snapshot(BackendSnapshot* s) const {
  *s = BackendSnapshot{};
  s->conn = chan_.fd();
  s->link_chan = link_chan_.get();
  s->features = features_;
  s->features_set = features_set_;
  s->protocol_features = proto_features_;
  s->mtu = mtu_;
  s->rarp_mac_set = rarp_mac_set_;
  __builtin_memcpy(s->rarp_mac, rarp_mac_, 6);
  s->nregions = mem_ ? mem_->region_count() : 0;
  for (uint32_t i = 0; i < s->nregions; ++i) {
    s->regions[i] = mem_regions_[i];
    s->mem_fds[i] = mem_fds_[i].get();
  }
  s->nrings = num_vrings();
  for (uint32_t i = 0; i < s->nrings; ++i) {
    const Vring& v = vrings_[i];
    BackendSnapshot::Ring& r = s->rings[i];
    r.num = v.num;
    r.addr = v.addr;
    r.addr_set = v.addr_set;
    // Paused at a burst boundary: every chain taken is used, so the position is one index
    // (split) or the avail slot and wrap counters (packed, used side equal).
    r.base_set = v.attached() || v.base_set;
    r.base = !v.attached() ? v.base : v.packed ? v.pq.vring_base() : v.q.last_avail();
    r.started = v.started;
    r.enabled = v.enabled;
    r.kick = v.kick.get();
    r.call = v.call.get();
    r.err = v.err.get();
  }
}

namespace {

/// Owns every fd of a snapshot until adopt() has moved them on.
struct SnapshotFds {
  UniqueFd conn, link_chan, mem[GuestMemory::kMaxRegions];
  UniqueFd kick[kMaxVrings], call[kMaxVrings], err[kMaxVrings];
  explicit SnapshotFds(BackendSnapshot& s) {
    conn.reset(std::exchange(s.conn, -1));
    link_chan.reset(std::exchange(s.link_chan, -1));
    for (uint32_t i = 0; i < GuestMemory::kMaxRegions; ++i) mem[i].reset(std::exchange(s.mem_fds[i], -1));
    for (uint32_t i = 0; i < kMaxVrings; ++i) {
      kick[i].reset(std::exchange(s.rings[i].kick, -1));
      call[i].reset(std::exchange(s.rings[i].call, -1));
      err[i].reset(std::exchange(s.rings[i].err, -1));
    }
  }
};

}  // namespace

bool Backend::adopt(BackendSnapshot& s, std::string* err) {
  SnapshotFds fds(s);
  if (chan_.open()) {
    *err = "the port is already connected";
    return false;
  }
  if (s.nrings != num_vrings()) {
    *err = fmt::format("{} vrings handed, this port has {} ({} queue pairs)", s.nrings,
                       num_vrings(), opts_.queue_pairs);
    return false;
  }
  if (s.features & ~opts_.features) {
    *err = fmt::format("features {:#x} negotiated, not offered here", s.features & ~opts_.features);
    return false;
  }
  if (!fds.conn.valid() || s.nregions > GuestMemory::kMaxRegions) {
    *err = "no connection fd, or too many memory regions";
    return false;
  }
  std::unique_ptr<GuestMemory> mem;
  MemoryBudget::Share share;
  if (s.nregions) {
    int mfd[GuestMemory::kMaxRegions];
    for (uint32_t i = 0; i < s.nregions; ++i) mfd[i] = fds.mem[i].get();
    uint64_t bytes = 0;
    if (!GuestMemory::table_bytes(s.regions, s.nregions, &bytes, err)) return false;
    if (MemoryBudget* budget = opts_.memory_budget; budget && !budget->take(bytes, mem_share_, &share)) {
      *err = fmt::format("memory table of {} MiB is over --max-total-guest-memory", bytes >> 20);
      return false;
    }
    mem = std::make_unique<GuestMemory>();
    if (!mem->build(s.regions, mfd, s.nregions, err, opts_.max_mapped_bytes)) return false;
  }
  host_->pause_datapath();
  attach(std::move(fds.conn));
  features_ = s.features;
  features_set_ = s.features_set;
  proto_features_ = s.protocol_features & opts_.protocol_features;
  mtu_ = s.mtu;
  rarp_mac_set_ = s.rarp_mac_set;
  __builtin_memcpy(rarp_mac_, s.rarp_mac, 6);
  mem_ = std::move(mem);
  mem_share_ = std::move(share);
  for (uint32_t i = 0; i < GuestMemory::kMaxRegions; ++i) {
    mem_fds_[i] = i < s.nregions ? std::move(fds.mem[i]) : UniqueFd();
    mem_regions_[i] = i < s.nregions ? s.regions[i] : MemRegionDesc{};
  }
  link_chan_ = std::move(fds.link_chan);
  for (uint32_t i = 0; i < s.nrings; ++i) {
    const BackendSnapshot::Ring& r = s.rings[i];
    Vring& v = vrings_[i];
    v.detach();
    v = Vring{};
    v.num = r.num;
    v.addr = r.addr;
    v.addr_set = r.addr_set;
    if (r.base_set) v.set_base(r.base);
    v.started = r.started;
    v.enabled = r.enabled;
    v.kick = std::move(fds.kick[i]);
    v.call = std::move(fds.call[i]);
    v.err = std::move(fds.err[i]);
  }
  refresh();
  for (uint32_t i = 0; i < s.nrings; ++i)
    if (vrings_[i].ready && vrings_[i].call.valid()) eventfd_write(vrings_[i].call.get(), 1);
  host_->resume_datapath();
  VL_LOG_RL(spdlog::level::info, "{}: connection taken over ({} regions, features {:#x})",
            opts_.log_name, s.nregions, s.features);
  return true;
}

}  // namespace vl::vhost
