#pragma once
// What the kernel says of a network interface by name (ioctls on a throwaway socket): index,
// MTU, flags. Shared by the wires of kernel interfaces.
#include <cstdint>
#include <string>

namespace vl::wire {

/// The interface's index, 0 when there is none.
uint32_t if_index(const std::string& name);
/// The interface's MTU (bytes of L3 payload), 0 on error.
uint32_t if_mtu(const std::string& name);
/// IFF_UP and the carrier (IFF_RUNNING): frames can flow.
bool if_running(const std::string& name);
/// Sets the interface's MTU (false with `*err`).
bool if_set_mtu(const std::string& name, uint32_t mtu, std::string* err);
/// Sets IFF_UP (false with `*err`).
bool if_set_up(const std::string& name, std::string* err);
/// A packet socket that only sends, on interface `ifindex` (it receives nothing: protocol
/// 0). -1 with `*err`.
int open_send_socket(uint32_t ifindex, std::string* err);

}  // namespace vl::wire
