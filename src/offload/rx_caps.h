#pragma once
// What a receiving port negotiated, as the offload delivery needs it (offload/deliver.h):
// its virtio-net header, mergeable receive buffers, offload features and largest frame.
#include <cstdint>

#include "virtio/virtio_defs.h"

namespace vl::offload {

struct RxCaps {
  uint32_t hdr_len = 12;                      ///< virtio-net header bytes (virtio 1.2 §5.1.6)
  bool mrg_rxbuf = false;                     ///< VIRTIO_NET_F_MRG_RXBUF negotiated
  uint64_t features = 0;                      ///< negotiated virtio features (GUEST_CSUM, TSO...)
  uint32_t max_frame = virtio::kMaxFrameLen;  ///< largest frame deliverable (bytes)
};

}  // namespace vl::offload
