#include "vhost/message_table.h"

#include "virtio/guest_memory.h"

namespace vl::vhost {

namespace {

using virtio::GuestMemory;

constexpr MessageSpec kSpecs[] = {
    {Req::kGetFeatures, 0, 0, &Backend::h_get_features},
    {Req::kSetFeatures, 8, 0, &Backend::h_set_features},
    {Req::kSetOwner, 0, 0, &Backend::h_set_owner},
    {Req::kResetOwner, 0, 0, &Backend::h_reset_owner},
    {Req::kSetMemTable, kVarSize, GuestMemory::kMaxRegions, &Backend::h_set_mem_table},
    {Req::kSetVringNum, sizeof(VringState), 0, &Backend::h_set_vring_num},
    {Req::kSetVringAddr, sizeof(VringAddr), 0, &Backend::h_set_vring_addr},
    {Req::kSetVringBase, sizeof(VringState), 0, &Backend::h_set_vring_base},
    {Req::kGetVringBase, sizeof(VringState), 0, &Backend::h_get_vring_base},
    {Req::kSetVringKick, 8, 1, &Backend::h_set_vring_fd},
    {Req::kSetVringCall, 8, 1, &Backend::h_set_vring_fd},
    {Req::kSetVringErr, 8, 1, &Backend::h_set_vring_fd},
    {Req::kGetProtocolFeatures, 0, 0, &Backend::h_get_protocol_features},
    {Req::kSetProtocolFeatures, 8, 0, &Backend::h_set_protocol_features},
    {Req::kGetQueueNum, 0, 0, &Backend::h_get_queue_num},
    {Req::kSetVringEnable, sizeof(VringState), 0, &Backend::h_set_vring_enable},
    {Req::kSendRarp, 8, 0, &Backend::h_send_rarp},
    {Req::kSetLogBase, 16, 1, &Backend::h_set_log_base},
    {Req::kNetSetMtu, 8, 0, &Backend::h_net_set_mtu},
    {static_cast<Req>(kReqVlLinkChannel), 0, 0, &Backend::h_vl_link_channel},
};

}  // namespace

const MessageSpec* find_message(uint32_t request) {
  for (const MessageSpec& s : kSpecs) {
    if (static_cast<uint32_t>(s.req) == request) return &s;
  }
  return nullptr;
}

}  // namespace vl::vhost
