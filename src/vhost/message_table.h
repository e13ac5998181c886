#pragma once
// The vhost-user message table: every request the back-end serves, with the exact payload
// size it must carry and how many fds it may bring (vhost-user.rst "Front-end message
// types"). Backend::dispatch refuses anything else before a handler runs.
// docs/architecture.md "The vhost-user back-end".
#include <cstdint>

#include "vhost/backend.h"
#include "vhost/protocol.h"

namespace vl::vhost {

/// MessageSpec::size of a request whose handler validates a variable payload.
inline constexpr uint32_t kVarSize = 0xffffffffu;

struct MessageSpec {
  Req req;
  uint32_t size;     ///< exact payload bytes, or kVarSize
  uint32_t max_fds;  ///< most fds the message may carry
  bool (Backend::*fn)(Message&, Backend::Reply&);
};

/// The table's entry for `request` (a VhostUserHeader request code), or nullptr.
const MessageSpec* find_message(uint32_t request);

}  // namespace vl::vhost
