// BoundSocketFile (util/unix_socket.h): a socket file's permissions are set, and the file
// removed, only while its path still names the file bind() made.
#include "util/unix_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "util/fd.h"

namespace vl {
namespace {

class BoundSocketFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vl-bsf-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/s.sock";
    other_ = dir_ + "/other";
    std::ofstream(other_) << "not yours";
    ASSERT_EQ(chmod(other_.c_str(), 0644), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Binds a socket at path_ (kept open in sock_) and records its file in f_.
  void bind_and_record() {
    sockaddr_un a;
    std::string err;
    ASSERT_TRUE(make_unix_addr(path_, &a, &err)) << err;
    sock_ = UniqueFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(bind(sock_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_TRUE(f_.record(path_));
  }

  static mode_t mode_of(const std::string& p) {
    struct stat st;
    EXPECT_EQ(lstat(p.c_str(), &st), 0);
    return st.st_mode & 07777;
  }

  std::string dir_, path_, other_;
  UniqueFd sock_;
  BoundSocketFile f_;
};

TEST_F(BoundSocketFileTest, SetsTheModeOfItsOwnFileAndRemovesIt) {
  bind_and_record();
  ASSERT_TRUE(f_.set_access(0660, static_cast<uint32_t>(-1), static_cast<uint32_t>(-1)));
  EXPECT_EQ(mode_of(path_), 0660u);
  ASSERT_TRUE(f_.set_access(0600, static_cast<uint32_t>(-1), 0));  // group root
  struct stat st;
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 0u);
  f_.remove();
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_FALSE(f_.valid());
}

TEST_F(BoundSocketFileTest, ASymlinkPutInItsPlaceIsNeitherChangedNorRemoved) {
  bind_and_record();
  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_EQ(symlink(other_.c_str(), path_.c_str()), 0);
  errno = 0;
  EXPECT_FALSE(f_.set_access(0666, static_cast<uint32_t>(-1), static_cast<uint32_t>(-1)));
  EXPECT_EQ(mode_of(other_), 0644u);
  f_.remove();
  EXPECT_TRUE(std::filesystem::is_symlink(path_));
  EXPECT_TRUE(std::filesystem::exists(other_));
}

TEST_F(BoundSocketFileTest, AnotherSocketAtThePathIsNotRemoved) {
  bind_and_record();
  // Another process's socket at the same path (the first one's file unlinked first).
  ASSERT_EQ(unlink(path_.c_str()), 0);
  UniqueFd theirs(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a;
  std::string err;
  ASSERT_TRUE(make_unix_addr(path_, &a, &err)) << err;
  ASSERT_EQ(bind(theirs.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_FALSE(f_.set_access(0666, static_cast<uint32_t>(-1), static_cast<uint32_t>(-1)));
  EXPECT_EQ(errno, ESTALE);
  f_.remove();
  EXPECT_TRUE(std::filesystem::exists(path_));
}

TEST_F(BoundSocketFileTest, ARegularFileIsNotRecorded) {
  EXPECT_FALSE(f_.record(other_));
  EXPECT_FALSE(f_.valid());
  f_.remove();
  EXPECT_TRUE(std::filesystem::exists(other_));
}

}  // namespace
}  // namespace vl
