#include "virtio/virtio_defs.h"

namespace vl::virtio {

const char* feature_name(int b) {
  switch (b) {
    case kNetFCsum: return "CSUM";
    case kNetFGuestCsum: return "GUEST_CSUM";
    case kNetFCtrlGuestOffloads: return "CTRL_GUEST_OFFLOADS";
    case kNetFMtu: return "MTU";
    case kNetFMac: return "MAC";
    case kNetFGuestTso4: return "GUEST_TSO4";
    case kNetFGuestTso6: return "GUEST_TSO6";
    case kNetFGuestEcn: return "GUEST_ECN";
    case kNetFGuestUfo: return "GUEST_UFO";
    case kNetFHostTso4: return "HOST_TSO4";
    case kNetFHostTso6: return "HOST_TSO6";
    case kNetFHostEcn: return "HOST_ECN";
    case kNetFHostUfo: return "HOST_UFO";
    case kNetFMrgRxbuf: return "MRG_RXBUF";
    case kNetFStatus: return "STATUS";
    case kNetFCtrlVq: return "CTRL_VQ";
    case kNetFCtrlRx: return "CTRL_RX";
    case kNetFCtrlVlan: return "CTRL_VLAN";
    case kNetFGuestAnnounce: return "GUEST_ANNOUNCE";
    case kNetFMq: return "MQ";
    case kNetFCtrlMacAddr: return "CTRL_MAC_ADDR";
    case kFNotifyOnEmpty: return "NOTIFY_ON_EMPTY";
    case kFLogAll: return "LOG_ALL";
    case kFAnyLayout: return "ANY_LAYOUT";
    case kRingFIndirectDesc: return "RING_INDIRECT_DESC";
    case kRingFEventIdx: return "RING_EVENT_IDX";
    case kFProtocolFeatures: return "PROTOCOL_FEATURES";
    case kFVersion1: return "VERSION_1";
    case kFAccessPlatform: return "ACCESS_PLATFORM";
    case kFRingPacked: return "RING_PACKED";
    case kFInOrder: return "IN_ORDER";
    default: return nullptr;
  }
}

}  // namespace vl::virtio
