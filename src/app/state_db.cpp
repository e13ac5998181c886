#include "app/state_db.h"
#include "control/json_depth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace vl::app {

namespace {

using Json = nlohmann::json;

/// FNV-1a over the state's text: catches a file changed by hand or by a disk in a way that
/// still parses (JSON parsing catches truncation).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Json to_json(const SavedState& s) {
  Json ports = Json::array();
  for (const SavedPort& p : s.ports)
    ports.push_back({{"name", p.name},
                     {"runtime", p.runtime},
                     {"type", p.type},
                     {"arg", p.arg},
                     {"settings", p.settings},
                     {"external_ids", p.external_ids}});
  Json links = Json::array();
  for (const auto& [a, b] : s.links) links.push_back({{"a", a}, {"b", b}});
  return {{"ports", ports}, {"links", links}, {"deleted", s.deleted}, {"flush", s.flush}};
}

bool from_json(const Json& j, SavedState* s, std::string* err) {
  try {
    SavedState out;
    for (const Json& p : j.at("ports")) {
      SavedPort sp;
      sp.name = p.at("name").get<std::string>();
      sp.runtime = p.at("runtime").get<bool>();
      sp.type = p.at("type").get<std::string>();
      sp.arg = p.at("arg").get<std::string>();
      sp.settings = p.at("settings").get<std::vector<std::string>>();
      sp.external_ids = p.at("external_ids").get<std::map<std::string, std::string>>();
      if (sp.name.empty()) {
        *err = "a port without a name";
        return false;
      }
      out.ports.push_back(std::move(sp));
    }
    for (const Json& l : j.at("links"))
      out.links.emplace_back(l.at("a").get<std::string>(), l.at("b").get<std::string>());
    out.deleted = j.at("deleted").get<std::vector<std::string>>();
    out.flush = j.at("flush").get<std::string>();
    *s = std::move(out);
    return true;
  } catch (const Json::exception& e) {
    *err = fmt::format("not a virtlink state: {}", e.what());
    return false;
  }
}

constexpr size_t kMaxDepth = control::kMaxJsonDepth;

bool write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string dir_of(const std::string& file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : file.substr(0, slash);
}

}  // namespace

bool save_state(const std::string& file, const SavedState& s, std::string* err) {
  const std::string state = to_json(s).dump();
  const Json doc = {{"format", "virtlink-state"},
                    {"version", kStateVersion},
                    {"checksum", fmt::format("{:016x}", fnv1a(state))},
                    {"state", Json::parse(state)}};
  const std::string text = doc.dump(2) + "\n";
  const std::string tmp = file + ".tmp";
  // A new file, never one that is there: a symlink FILE.tmp (planted in a directory
  // someone else may write) would otherwise have this root process truncate and write its
  // target, and the rename make FILE that symlink. One that is there is a leftover (or a
  // plant): it goes first, and then O_EXCL | O_NOFOLLOW refuses whatever appears meanwhile.
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *err = fmt::format("state file {}: cannot create {}: {}", file, tmp, strerror(errno));
    return false;
  }
  const bool ok = write_all(fd, text) && fsync(fd) == 0;
  const int saved = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), file.c_str()) != 0) {
    *err = fmt::format("state file {}: cannot write it: {}", file, strerror(ok ? errno : saved));
    unlink(tmp.c_str());
    return false;
  }
  // The rename itself is durable once the directory is synced.
  const int dfd = open(dir_of(file).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return true;
}

LoadStatus load_state(const std::string& file, SavedState* s, std::string* err) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return LoadStatus::kMissing;
    *err = fmt::format("state file {}: cannot read it: {}", file, strerror(errno));
    return LoadStatus::kRefused;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    *err = fmt::format("state file {}: cannot read it: {}", file, strerror(errno));
    return LoadStatus::kRefused;
  }
  const std::string text = buf.str();
  // Writing a JSON value out (the checksum is over the state's text) recurses once per
  // level: a file nested thousands deep overflowed the stack. A state is 5 levels deep.
  if (control::json_depth(text) > kMaxDepth) {
    *err = fmt::format("state file {}: nested more than {} levels deep: not a virtlink state", file,
                       kMaxDepth);
    return LoadStatus::kRefused;
  }
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *err = fmt::format("state file {}: not valid JSON ({} bytes: truncated or corrupt)", file,
                       text.size());
    return LoadStatus::kRefused;
  }
  if (!doc.is_object() || doc.value("format", std::string()) != "virtlink-state" ||
      !doc.contains("state") || !doc.contains("checksum") || !doc["checksum"].is_string()) {
    *err = fmt::format("state file {}: not a virtlink state file (no format, state or checksum)", file);
    return LoadStatus::kRefused;
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kStateVersion) {
    *err = fmt::format("state file {}: version {} (this virtlink reads version {})", file,
                       doc.contains("version") ? doc["version"].dump() : "none", kStateVersion);
    return LoadStatus::kRefused;
  }
  const std::string state = doc["state"].dump();
  if (doc["checksum"].get<std::string>() != fmt::format("{:016x}", fnv1a(state))) {
    *err = fmt::format("state file {}: checksum mismatch (changed after it was written)", file);
    return LoadStatus::kRefused;
  }
  std::string why;
  if (!from_json(doc["state"], s, &why)) {
    *err = fmt::format("state file {}: {}", file, why);
    return LoadStatus::kRefused;
  }
  return LoadStatus::kOk;
}

std::string state_to_text(const SavedState& s) { return to_json(s).dump(); }

bool state_from_text(const std::string& text, SavedState* s, std::string* err) {
  if (control::json_depth(text) > kMaxDepth) {
    *err = "state nested too deep";
    return false;
  }
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *err = "state is not JSON";
    return false;
  }
  return from_json(j, s, err);
}

void put_setting(std::vector<std::string>* settings, const std::string& key, const std::string& value) {
  const std::string kv = key + "=" + value;
  for (std::string& s : *settings) {
    if (s.compare(0, key.size() + 1, key + "=") == 0) {
      s = kv;
      return;
    }
  }
  settings->push_back(kv);
}

}  // namespace vl::app
