#pragma once
// CNI error objects (CNI spec 1.1 "Error" and its table of well-known codes): what the
// plugin prints on stdout when a command fails, with a non-zero exit status.
#include <nlohmann/json.hpp>

#include <string>

namespace vl::cni {

using Json = nlohmann::json;

/// Codes 1-99 are the spec's; 100 and up are the plugin's own (docs/kubernetes.md "Errors").
enum ErrorCode : int {
  kIncompatibleVersion = 1,  ///< a cniVersion the plugin does not speak, or CHECK before 0.4.0
  kUnsupportedField = 2,     ///< a network-config field with a value the plugin cannot honour
  kUnknownContainer = 3,
  kInvalidEnv = 4,           ///< a missing or malformed CNI_* environment variable
  kIoFailure = 5,            ///< a file of the pod could not be written or removed
  kDecodeFailure = 6,        ///< stdin is not a JSON object
  kInvalidConfig = 7,        ///< a network-config field is missing or out of range
  kTryAgainLater = 11,       ///< the node's switch is not reachable (yet)
  kNotAvailable = 50,        ///< STATUS: the switch is not reachable
  kSwitchRefused = 100,      ///< the switch refused a request (its message in msg)
  kCheckFailed = 101,        ///< CHECK: the port, socket or file is missing or differs
};

struct Error {
  int code = 0;
  std::string msg;
  std::string details;
};

/// The error object for `version` (the config's cniVersion; the newest when unknown).
Json error_json(const Error& e, const std::string& version);

}  // namespace vl::cni
