// The state file (app/state_db.h) against a hostile file system and hostile files: a
// symlink planted at FILE.tmp is not followed (the switch runs as root), and a file nested
// thousands of levels deep is refused rather than overflowing the stack.
#include "app/state_db.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace vl::app {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream b;
  b << in.rdbuf();
  return b.str();
}

class StateDb : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ::testing::TempDir() + "vl-state-db-" + std::to_string(getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir;
};

TEST_F(StateDb, SymlinkAtTheTemporaryFileIsNotFollowed) {
  const std::string victim = dir + "/victim", db = dir + "/state.db";
  { std::ofstream(victim) << "precious\n"; }
  std::filesystem::create_symlink(victim, db + ".tmp");
  SavedState s;
  s.ports.push_back({"p", true, "vhost-user", "/x.sock", {}, {}});
  std::string err;
  ASSERT_TRUE(save_state(db, s, &err)) << err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(std::filesystem::is_symlink(db));
  EXPECT_FALSE(std::filesystem::exists(db + ".tmp"));
  SavedState back;
  ASSERT_EQ(load_state(db, &back, &err), LoadStatus::kOk) << err;
  ASSERT_EQ(back.ports.size(), 1u);
  EXPECT_EQ(back.ports[0].name, "p");
}

TEST_F(StateDb, DeeplyNestedFileIsRefused) {
  const std::string db = dir + "/state.db";
  {
    std::ofstream f(db);
    f << R"({"checksum":"0","format":"virtlink-state","version":1,"state":{"x":)"
      << std::string(200000, '[') << std::string(200000, ']') << "}}\n";
  }
  SavedState s;
  std::string err;
  EXPECT_EQ(load_state(db, &s, &err), LoadStatus::kRefused);
  EXPECT_NE(err.find("nested more than"), std::string::npos) << err;
}

}  // namespace
}  // namespace vl::app
