#pragma once
// vhost-user wire protocol (QEMU docs/interop/vhost-user.rst): message header, request
// codes, payload layouts and protocol feature bits. Shared by the back-end (device side,
// the switch) and the front-end (driver side, gen/vnf).
#include <cstdint>

namespace vl::vhost {

/// Message header: 12 bytes, then `size` bytes of payload (vhost-user.rst "Message format").
struct MsgHeader {
  uint32_t request;
  uint32_t flags;  ///< bits 0-1 version (1), bit 2 reply, bit 3 need_reply
  uint32_t size;   ///< payload bytes
};
static_assert(sizeof(MsgHeader) == 12);

inline constexpr uint32_t kVersion = 0x1;
inline constexpr uint32_t kVersionMask = 0x3;
inline constexpr uint32_t kFlagReply = 1u << 2;
inline constexpr uint32_t kFlagNeedReply = 1u << 3;

/// Largest payload virtlink accepts (bytes). The biggest message it handles is a full
/// SET_MEM_TABLE (8 + 8 * 32 = 264 bytes).
inline constexpr uint32_t kMaxPayload = 4096;
/// Most fds one message may carry (SET_MEM_TABLE: one per region).
inline constexpr uint32_t kMaxFds = 8;

/// Front-end -> back-end requests (vhost-user.rst "Front-end message types").
enum class Req : uint32_t {
  kNone = 0,
  kGetFeatures = 1,
  kSetFeatures = 2,
  kSetOwner = 3,
  kResetOwner = 4,
  kSetMemTable = 5,
  kSetLogBase = 6,
  kSetLogFd = 7,
  kSetVringNum = 8,
  kSetVringAddr = 9,
  kSetVringBase = 10,
  kGetVringBase = 11,
  kSetVringKick = 12,
  kSetVringCall = 13,
  kSetVringErr = 14,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
  kSetVringEnable = 18,
  kSendRarp = 19,
  kNetSetMtu = 20,
  kSetBackendReqFd = 21,
  kIotlbMsg = 22,
  kSetVringEndian = 23,
  kGetConfig = 24,
  kSetConfig = 25,
  kGetInflightFd = 31,
  kSetInflightFd = 32,
  kResetDevice = 34,
  kVringKick = 35,
  kGetMaxMemSlots = 36,
  kAddMemReg = 37,
  kRemMemReg = 38,
  kSetStatus = 39,
  kGetStatus = 40,
};

/// Name of a request code for logs ("SET_MEM_TABLE"), "UNKNOWN" otherwise.
const char* req_name(uint32_t request);

// ---- Protocol feature bits (vhost-user.rst "Protocol features") ----
inline constexpr int kProtoMq = 0;
inline constexpr int kProtoLogShmfd = 1;
inline constexpr int kProtoRarp = 2;
inline constexpr int kProtoReplyAck = 3;
inline constexpr int kProtoMtu = 4;
inline constexpr int kProtoBackendReq = 5;
inline constexpr int kProtoConfig = 9;
inline constexpr int kProtoStatus = 16;

// ---- Payloads ----
/// "A vring state description": SET_VRING_NUM/BASE/ENABLE, GET_VRING_BASE.
struct VringState {
  uint32_t index;
  uint32_t num;
};
static_assert(sizeof(VringState) == 8);

/// "A vring address description": SET_VRING_ADDR. Addresses are front-end virtual.
struct VringAddr {
  uint32_t index;
  uint32_t flags;  ///< bit 0: VHOST_VRING_F_LOG
  uint64_t desc_user_addr;
  uint64_t used_user_addr;
  uint64_t avail_user_addr;
  uint64_t log_guest_addr;
};
static_assert(sizeof(VringAddr) == 40);

/// "Memory region description".
struct MemRegion {
  uint64_t guest_phys_addr;
  uint64_t memory_size;
  uint64_t userspace_addr;
  uint64_t mmap_offset;
};
static_assert(sizeof(MemRegion) == 32);

/// "Multiple Memory regions description" header; `nregions` MemRegion follow.
struct MemTableHeader {
  uint32_t nregions;
  uint32_t padding;
};

/// VringAddr::flags bit 0 (VHOST_VRING_F_LOG): log_guest_addr is valid, log the used ring.
inline constexpr uint32_t kVringFLog = 1;

/// SET_LOG_BASE payload ("Log description"); the log's fd comes with it (LOG_SHMFD).
struct LogDesc {
  uint64_t mmap_size;    ///< bytes of bitmap
  uint64_t mmap_offset;  ///< where the bitmap starts in the fd
};
static_assert(sizeof(LogDesc) == 16);

/// SET_VRING_KICK/CALL/ERR u64 payload: bits 0-7 vring index, bit 8 "no fd" (polling).
inline constexpr uint64_t kVringIdxMask = 0xff;
inline constexpr uint64_t kVringNoFd = 1u << 8;

}  // namespace vl::vhost
