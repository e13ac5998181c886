#include "cni/cni_error.h"

#include "cni/cni_config.h"

namespace vl::cni {

Json error_json(const Error& e, const std::string& version) {
  const bool known = compare_versions(version, supported_versions().front()) >= 0 &&
                     compare_versions(version, supported_versions().back()) <= 0;
  Json j = {{"cniVersion", known ? version : supported_versions().back()},
            {"code", e.code},
            {"msg", e.msg}};
  if (!e.details.empty()) j["details"] = e.details;
  return j;
}

}  // namespace vl::cni
