#include "cni/cni_env.h"

#include <cctype>

#include <fmt/format.h>

namespace vl::cni {

namespace {

bool container_id_ok(const std::string& s) {
  if (s.empty() || s.size() > 256 || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-') return false;
  return true;
}

/// Linux's rules for an interface name (dev_valid_name): 1-15 bytes, not "." or "..", no
/// '/', ':' or whitespace.
bool ifname_ok(const std::string& s) {
  if (s.empty() || s.size() > 15 || s == "." || s == "..") return false;
  for (char ch : s)
    if (ch == '/' || ch == ':' || std::isspace(static_cast<unsigned char>(ch)) || !std::isprint(static_cast<unsigned char>(ch)))
      return false;
  return true;
}

bool parse_args(const std::string& s, std::map<std::string, std::string>* out, Error* e) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(';', i);
    if (j == std::string::npos) j = s.size();
    const std::string kv = s.substr(i, j - i);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      *e = {kInvalidEnv, "CNI_ARGS: expected KEY=VALUE pairs separated by ';'", kv};
      return false;
    }
    (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
    i = j + 1;
  }
  return true;
}

}  // namespace

bool read_env(const std::function<const char*(const char*)>& get, Env* env, Error* e) {
  auto var = [&](const char* name) {
    const char* v = get(name);
    return std::string(v ? v : "");
  };
  env->command = var("CNI_COMMAND");
  env->container_id = var("CNI_CONTAINERID");
  env->netns = var("CNI_NETNS");
  env->ifname = var("CNI_IFNAME");
  const std::string& c = env->command;
  if (c != "ADD" && c != "DEL" && c != "CHECK" && c != "STATUS" && c != "GC" && c != "VERSION") {
    *e = {kInvalidEnv, c.empty() ? "CNI_COMMAND is not set" : fmt::format("unknown CNI_COMMAND '{}'", c),
          "ADD, DEL, CHECK, STATUS, GC or VERSION"};
    return false;
  }
  const bool attach = c == "ADD" || c == "DEL" || c == "CHECK";
  if (attach && !container_id_ok(env->container_id)) {
    *e = {kInvalidEnv, "CNI_CONTAINERID is missing or malformed",
          "letters, digits, '_', '.' and '-', starting with a letter or digit"};
    return false;
  }
  if (attach && !ifname_ok(env->ifname)) {
    *e = {kInvalidEnv, "CNI_IFNAME is missing or not a valid interface name", env->ifname};
    return false;
  }
  if ((c == "ADD" || c == "CHECK") && env->netns.empty()) {
    *e = {kInvalidEnv, "CNI_NETNS is not set", ""};
    return false;
  }
  if (!parse_args(var("CNI_ARGS"), &env->args, e)) return false;
  const std::string path = var("CNI_PATH");
  for (size_t i = 0; i < path.size();) {
    size_t j = path.find(':', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) env->path.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return true;
}

}  // namespace vl::cni
