#pragma once
// Where the log goes: the journal when systemd connected stderr to it, else stderr; and a
// file on request (`virtlink switch --log-file FILE`, TOML log_file). util/log.h has the
// levels and the rate limit. docs/architecture.md, "Running as a service".
#include <sys/types.h>

#include <string>
#include <vector>

namespace vl {

/// Makes the default logger, "virtlink": the journal (its native protocol through
/// sd_journal_send(3): each line's PRIORITY from its level, SYSLOG_IDENTIFIER=virtlink)
/// when stderr_is_journal(), else stderr (level coloured on a terminal). Lines on stderr
/// and in files read "2026-12-02T10:00:00.123 info message" (local time, ms); the journal
/// keeps its own timestamps.
void init_logging();
/// Appends the log to `path` as well, from now on: created if absent (0644 under the usual
/// umask 022; missing directories too, as spdlog's file sink makes them), never truncated,
/// each line written as it is logged. Call before other threads log (the logger's sink
/// list is not locked). False with `*err` when the file cannot be opened.
bool add_log_file(const std::string& path, std::string* err);
/// While one lives, the error lines this thread logs are also kept in it (the messages,
/// without time or level): a command that fails through code that only logs its reasons
/// (`ctl reload` reading the configuration) can give them to its client. Needs
/// init_logging()'s logger; one per thread at a time.
class ErrorCapture {
 public:
  ErrorCapture();
  ~ErrorCapture();
  ErrorCapture(const ErrorCapture&) = delete;
  ErrorCapture& operator=(const ErrorCapture&) = delete;
  const std::vector<std::string>& errors() const { return errors_; }
  /// Called by the logger's capture sink (util/log_sinks.cpp).
  void add(std::string line) { errors_.push_back(std::move(line)); }

 private:
  std::vector<std::string> errors_;
};

/// True when stderr is the stream systemd connected to the journal: JOURNAL_STREAM holds
/// "DEVICE:INODE" of it (systemd.exec(5), "$JOURNAL_STREAM"), and fd 2 is that file.
bool stderr_is_journal();
/// Whether `journal_stream` (the variable's value, or null) names the file with
/// device `dev` and inode `ino` (decimal numbers, as systemd writes them).
bool journal_stream_names(const char* journal_stream, dev_t dev, ino_t ino);

}  // namespace vl
