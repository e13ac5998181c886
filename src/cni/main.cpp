// virtlink-cni: the CNI plugin (CNI spec 1.1) that gives pods vhost-user ports on the node's
// virtlink switch. A runtime runs it with CNI_* in the environment and the network
// configuration on stdin (docs/kubernetes.md); by hand, --help and --defaults.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

#include "cni/cni_config.h"
#include "cni/cni_plugin.h"
#include "virtlink_version.h"

namespace {

constexpr const char* kHelp =
    "virtlink-cni: a CNI plugin (CNI 0.3.0 to 1.1.0) that gives pods vhost-user ports on the\n"
    "node's virtlink switch. A container runtime runs it with CNI_COMMAND (ADD, DEL, CHECK,\n"
    "STATUS, GC, VERSION), CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH in\n"
    "the environment and the network configuration on stdin; it prints the result or a CNI\n"
    "error object on stdout. See docs/kubernetes.md.\n\n"
    "  virtlink-cni --defaults   print the defaults (control socket, socketDir, versions) as JSON\n"
    "  virtlink-cni --version    print the version\n";

}  // namespace

int main(int argc, char** argv) {
  using vl::cni::Json;
  if (argc > 1) {
    const std::string a = argv[1];
    if (a == "--defaults") {
      std::cout << Json({{"control", vl::cni::kDefaultControl},
                         {"socketDir", vl::cni::kDefaultSocketDir},
                         {"cniVersions", vl::cni::supported_versions()}}).dump() << "\n";
      return 0;
    }
    if (a == "--version") {
      std::cout << "virtlink-cni " << VIRTLINK_VERSION << "\n";
      return 0;
    }
    std::cout << kHelp;
    return a == "--help" || a == "-h" ? 0 : 2;
  }
  vl::cni::Env env;
  vl::cni::Error e;
  if (!vl::cni::read_env([](const char* n) { return getenv(n); }, &env, &e)) {
    std::cout << vl::cni::error_json(e, "").dump() << "\n";
    return 1;
  }
  // STATUS and VERSION may come without a config; the others read it whole.
  std::string in(std::istreambuf_iterator<char>(std::cin), {});
  const vl::cni::Outcome o = vl::cni::run_command(env, in);
  std::cout << o.out;
  std::cout.flush();
  return o.status;
}
