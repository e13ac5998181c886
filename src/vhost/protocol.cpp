#include "vhost/protocol.h"

namespace vl::vhost {

const char* req_name(uint32_t r) {
  switch (static_cast<Req>(r)) {
    case Req::kNone: return "NONE";
    case Req::kGetFeatures: return "GET_FEATURES";
    case Req::kSetFeatures: return "SET_FEATURES";
    case Req::kSetOwner: return "SET_OWNER";
    case Req::kResetOwner: return "RESET_OWNER";
    case Req::kSetMemTable: return "SET_MEM_TABLE";
    case Req::kSetLogBase: return "SET_LOG_BASE";
    case Req::kSetLogFd: return "SET_LOG_FD";
    case Req::kSetVringNum: return "SET_VRING_NUM";
    case Req::kSetVringAddr: return "SET_VRING_ADDR";
    case Req::kSetVringBase: return "SET_VRING_BASE";
    case Req::kGetVringBase: return "GET_VRING_BASE";
    case Req::kSetVringKick: return "SET_VRING_KICK";
    case Req::kSetVringCall: return "SET_VRING_CALL";
    case Req::kSetVringErr: return "SET_VRING_ERR";
    case Req::kGetProtocolFeatures: return "GET_PROTOCOL_FEATURES";
    case Req::kSetProtocolFeatures: return "SET_PROTOCOL_FEATURES";
    case Req::kGetQueueNum: return "GET_QUEUE_NUM";
    case Req::kSetVringEnable: return "SET_VRING_ENABLE";
    case Req::kSendRarp: return "SEND_RARP";
    case Req::kNetSetMtu: return "NET_SET_MTU";
    case Req::kSetBackendReqFd: return "SET_BACKEND_REQ_FD";
    case Req::kIotlbMsg: return "IOTLB_MSG";
    case Req::kSetVringEndian: return "SET_VRING_ENDIAN";
    case Req::kGetConfig: return "GET_CONFIG";
    case Req::kSetConfig: return "SET_CONFIG";
    case Req::kGetInflightFd: return "GET_INFLIGHT_FD";
    case Req::kSetInflightFd: return "SET_INFLIGHT_FD";
    case Req::kResetDevice: return "RESET_DEVICE";
    case Req::kVringKick: return "VRING_KICK";
    case Req::kGetMaxMemSlots: return "GET_MAX_MEM_SLOTS";
    case Req::kAddMemReg: return "ADD_MEM_REG";
    case Req::kRemMemReg: return "REM_MEM_REG";
    case Req::kSetStatus: return "SET_STATUS";
    case Req::kGetStatus: return "GET_STATUS";
  }
  return "UNKNOWN";
}

}  // namespace vl::vhost
