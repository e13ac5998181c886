#pragma once
// The state file (`virtlink switch --db FILE`): what was changed at run time (ports added
// or deleted, their settings and external ids, links, flush policies), kept as the ctl
// requests that would make it again, written atomically after every change and read at
// start. The rule with the config file: README "Ports at run time"; format:
// docs/architecture.md, "State file".
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vl::app {

/// A port of the state file.
struct SavedPort {
  std::string name;
  /// Added at run time (`ctl add-port`): it is re-added at start. Else a port of the config
  /// file or the command line, of which only the run-time changes are kept.
  bool runtime = false;
  std::string type;  ///< as `--port NAME=TYPE:ARG` spells it
  std::string arg;   ///< its socket path, interface, DEVARGS or vxlan argument
  /// KEY=VALUE settings in the order given (add-port's, then set-port's; a later one of a
  /// key replaces the earlier), including flush=POLICY.
  std::vector<std::string> settings;
  std::map<std::string, std::string> external_ids;
};

struct SavedState {
  std::vector<SavedPort> ports;
  std::vector<std::pair<std::string, std::string>> links;
  /// Ports of the config file deleted at run time (a start brings them back, and says so).
  std::vector<std::string> deleted;
  /// `ctl set-flush all POLICY` at run time (empty: the config's).
  std::string flush;
};

/// Format version written and the one read (a file of another version is refused).
inline constexpr int kStateVersion = 1;

/// Writes `s` to `file`: a temporary file beside it, fsync, rename over it, fsync of the
/// directory, so a crash leaves the old file or the new one. False with `*err`.
bool save_state(const std::string& file, const SavedState& s, std::string* err);

enum class LoadStatus : uint8_t { kOk, kMissing, kRefused };
/// Reads `file`. kMissing: there is none yet (a first start). kRefused with `*err` naming
/// the file and the problem: unreadable, truncated or corrupt (a checksum over the state
/// guards against changes that still parse), or of another version; the file is left as
/// it is.
LoadStatus load_state(const std::string& file, SavedState* s, std::string* err);

/// `s` as the JSON text the state file keeps under "state" (the hand-over of `ctl upgrade`
/// carries it too), and back. state_from_text: false with `*err` for a text that is not one.
std::string state_to_text(const SavedState& s);
bool state_from_text(const std::string& text, SavedState* s, std::string* err);

/// Sets `key` to `value` in a settings list (KEY=VALUE strings): replaces an earlier value of
/// the key, else appends.
void put_setting(std::vector<std::string>* settings, const std::string& key, const std::string& value);

}  // namespace vl::app
