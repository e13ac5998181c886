// src/util/log_sinks.h: JOURNAL_STREAM's parsing (systemd.exec(5): "DEVICE:INODE" in
// decimal) and --log-file's appending.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "util/log_sinks.h"

namespace vl {
namespace {

TEST(JournalStream, NamesExactlyTheDeviceAndInode) {
  EXPECT_TRUE(journal_stream_names("8:1234", 8, 1234));
  EXPECT_TRUE(journal_stream_names("64769:18446744073709551615", 64769,
                                   static_cast<ino_t>(18446744073709551615ull)));
  EXPECT_FALSE(journal_stream_names("8:1235", 8, 1234));
  EXPECT_FALSE(journal_stream_names("9:1234", 8, 1234));
  EXPECT_FALSE(journal_stream_names(nullptr, 8, 1234));
  for (const char* bad : {"", ":", "8", "8:", ":1234", "8:1234 ", " 8:1234", "+8:1234",
                          "8:-1234", "8:1234:1", "0x8:1234", "8;1234"})
    EXPECT_FALSE(journal_stream_names(bad, 8, 1234)) << bad;
}

TEST(JournalStream, StderrIsTheJournalOnlyWhenTheVariableNamesIt) {
  struct stat st{};
  ASSERT_EQ(fstat(2, &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  setenv("JOURNAL_STREAM", mine.c_str(), 1);
  EXPECT_TRUE(stderr_is_journal());
  setenv("JOURNAL_STREAM", other.c_str(), 1);  // stderr redirected since systemd set it
  EXPECT_FALSE(stderr_is_journal());
  unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(stderr_is_journal());
}

TEST(LogFile, AppendsLinesAndKeepsWhatWasThere) {
  char dir[] = "/tmp/vl-logfile-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/switch.log";
  { std::ofstream(path) << "an earlier line\n"; }
  auto saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test"));  // no sinks
  std::string err;
  ASSERT_TRUE(add_log_file(path, &err)) << err;
  spdlog::info("port {}: listening", "vm1");
  spdlog::debug("below the level: not written");
  spdlog::set_default_logger(saved);  // the file sink closes with its logger
  std::stringstream got;
  got << std::ifstream(path).rdbuf();
  const std::string text = got.str();
  EXPECT_EQ(text.rfind("an earlier line\n", 0), 0u) << text;
  EXPECT_NE(text.find(" info port vm1: listening\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("below the level"), std::string::npos) << text;
  // Under a regular file: neither the directory nor the file can be made.
  EXPECT_FALSE(add_log_file(path + "/x.log", &err));
  EXPECT_NE(err.find(path + "/x.log"), std::string::npos) << err;
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace vl
