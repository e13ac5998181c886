#include "util/log_sinks.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace vl {

namespace {
constexpr const char* kStderrPattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v";
constexpr const char* kFilePattern = "%Y-%m-%dT%H:%M:%S.%e %l %v";

thread_local ErrorCapture* t_capture = nullptr;

/// Hands error lines to the logging thread's ErrorCapture, if it has one (a sink runs on
/// the thread that logs: the default logger is synchronous).
class CaptureSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    if (t_capture && m.level >= spdlog::level::err)
      t_capture->add(std::string(m.payload.data(), m.payload.size()));
  }
  void flush_() override {}
};
}  // namespace

ErrorCapture::ErrorCapture() { t_capture = this; }
ErrorCapture::~ErrorCapture() { t_capture = nullptr; }

void init_logging() {
  spdlog::sink_ptr sink;
  if (stderr_is_journal()) {
    sink = std::make_shared<spdlog::sinks::systemd_sink_mt>("virtlink");
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern(kStderrPattern);
  }
  auto logger = std::make_shared<spdlog::logger>(
      "virtlink", spdlog::sinks_init_list{sink, std::make_shared<CaptureSink>()});
  spdlog::set_default_logger(logger);
}

bool add_log_file(const std::string& path, std::string* err) {
  spdlog::sink_ptr sink;
  try {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  } catch (const spdlog::spdlog_ex& e) {
    *err = fmt::format("--log-file {}: {}", path, e.what());
    return false;
  }
  sink->set_pattern(kFilePattern);
  auto logger = spdlog::default_logger();
  logger->sinks().push_back(std::move(sink));
  logger->flush_on(spdlog::level::trace);  // each line reaches the file as it is logged
  return true;
}

bool stderr_is_journal() {
  struct stat st{};
  if (fstat(2, &st) != 0) return false;
  return journal_stream_names(getenv("JOURNAL_STREAM"), st.st_dev, st.st_ino);
}

bool journal_stream_names(const char* journal_stream, dev_t dev, ino_t ino) {
  if (!journal_stream) return false;
  const char* const end = journal_stream + strlen(journal_stream);
  uintmax_t d = 0, i = 0;
  // Digits only: from_chars takes no sign, space or base prefix.
  auto r = std::from_chars(journal_stream, end, d);
  if (r.ec != std::errc() || r.ptr == journal_stream || r.ptr == end || *r.ptr != ':') return false;
  const char* const ino_text = r.ptr + 1;
  r = std::from_chars(ino_text, end, i);
  if (r.ec != std::errc() || r.ptr == ino_text || r.ptr != end) return false;
  return d == static_cast<uintmax_t>(dev) && i == static_cast<uintmax_t>(ino);
}

}  // namespace vl
