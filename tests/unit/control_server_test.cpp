// control::ControlServer: connections are multiplexed, so a client slow to send its request
// line is still answered and holds no other client; a client past its budget is dropped; a
// command of the table has its arguments checked before its handler runs; a long reply is
// made in slices and a client that does not read it holds no other client and is dropped
// when its socket takes nothing for the drain deadline.
#include "control/control_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "control/command_table.h"

namespace vl::control {
namespace {

using namespace std::chrono_literals;

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = ::testing::TempDir() + "vl-ctl-" + std::to_string(getpid()) + ".sock";
    std::string err;
    ASSERT_TRUE(server.listen(path, &err)) << err;
    server.add("echo", [](const Json& a, Json* r, std::string*) {
      *r = a;
      return true;
    });
    loop = std::thread([this] {
      while (!stop.load()) {
        pollfd p{server.fd(), POLLIN, 0};
        if (poll(&p, 1, server.busy() ? 0 : 20) > 0 || server.busy()) server.on_ready();
        else server.expire();
      }
    });
  }
  void TearDown() override {
    stop.store(true);
    loop.join();
    server.close();
  }
  int connect_client() {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
    return s;
  }
  /// Reads one reply line (or "" when the server closed first), waiting up to `wait`.
  static std::string read_reply(int s, std::chrono::milliseconds wait = 5000ms) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + wait;
    while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < end) {
      pollfd p{s, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(s, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  static void send_str(int s, const std::string& text) {
    ASSERT_EQ(send(s, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  }

  std::string path;
  ControlServer server;
  std::atomic<bool> stop{false};
  std::thread loop;
};

TEST_F(ControlServerTest, AnswersARequest) {
  const int s = connect_client();
  send_str(s, R"({"cmd":"echo","args":{"x":1}})" "\n");
  const Json r = Json::parse(read_reply(s));
  EXPECT_TRUE(r["ok"].get<bool>());
  EXPECT_EQ(r["result"]["x"], 1);
  close(s);
}

// Every reply names the switch that answered: {"control": PATH, "pid": N} beside "ok" and
// "result", an error's and a malformed request's too.
TEST_F(ControlServerTest, RepliesNameTheServer) {
  const Json who = {{"control", path}, {"pid", getpid()}};
  for (const char* req : {R"({"cmd":"echo","args":{"x":1}})", R"({"cmd":"nope"})", "[1"}) {
    const int s = connect_client();
    send_str(s, std::string(req) + "\n");
    const Json r = Json::parse(read_reply(s));
    EXPECT_EQ(r["switch"], who) << req;
    EXPECT_TRUE(r.contains("ok")) << req;
    close(s);
  }
}

// The socket file's mode, owner and group (ListenOptions, --control-mode/-owner/-group),
// and its directory: one that does not exist is an error unless create_dir (the default
// path's), and a failed listen leaves no file behind.
TEST(ControlServerListen, ModeGroupAndDirectory) {
  const std::string dir = ::testing::TempDir() + "vl-ctl-perm-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  ControlServer a;
  std::string err;
  EXPECT_FALSE(a.listen(dir + "/ctl", &err));
  EXPECT_EQ(err, "control socket " + dir + "/ctl: directory " + dir +
                     " does not exist (create it first)");
  EXPECT_FALSE(std::filesystem::exists(dir));
  ControlServer::ListenOptions o;
  o.create_dir = true;
  o.mode = 0660;
  o.group = std::to_string(getegid());
  ASSERT_TRUE(a.listen(dir + "/ctl", o, &err)) << err;
  struct stat st;
  ASSERT_EQ(stat((dir + "/ctl").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, getegid());
  a.close();
  ControlServer b;
  o = {};
  o.owner = "no-such-user-vl";
  EXPECT_FALSE(b.listen(dir + "/ctl2", o, &err));
  EXPECT_EQ(err, "control socket: unknown owner 'no-such-user-vl'");
  o = {};
  o.group = "no-such-group-vl";
  EXPECT_FALSE(b.listen(dir + "/ctl2", o, &err));
  EXPECT_EQ(err, "control socket: unknown group 'no-such-group-vl'");
  EXPECT_FALSE(std::filesystem::exists(dir + "/ctl2"));
  ASSERT_TRUE(b.listen(dir + "/ctl2", &err)) << err;  // default: 0600
  ASSERT_EQ(stat((dir + "/ctl2").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  b.close();
  std::filesystem::remove_all(dir);
}

TEST_F(ControlServerTest, ClientSlowToSendIsStillAnswered) {
  // The client connects, then is descheduled for 600 ms before it writes its line (the
  // hostile MultiQueue test_07's BrokenPipeError: the old server gave it 200 ms from accept).
  const int s = connect_client();
  std::this_thread::sleep_for(600ms);
  send_str(s, R"({"cmd":"echo","args":{"late":true}})" "\n");
  const Json r = Json::parse(read_reply(s));
  EXPECT_TRUE(r["result"]["late"].get<bool>());
  close(s);
}

TEST_F(ControlServerTest, IdleClientsHoldNoOther) {
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(connect_client());
  const auto t0 = std::chrono::steady_clock::now();
  const int s = connect_client();
  send_str(s, R"({"cmd":"echo","args":{}})" "\n");
  EXPECT_NE(read_reply(s).find(R"("ok":true)"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
  close(s);
  for (int c : idle) close(c);
}

TEST_F(ControlServerTest, TricklerDroppedAtItsBudget) {
  server.set_request_budget_ms(300);  // applies to connections accepted from here on
  const int s = connect_client();
  const auto t0 = std::chrono::steady_clock::now();
  bool dropped = false;
  while (!dropped && std::chrono::steady_clock::now() - t0 < 3s) {
    if (send(s, " ", 1, MSG_NOSIGNAL) != 1) dropped = true;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(dropped);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 280ms);
  close(s);
}

TEST_F(ControlServerTest, PendingClientsAreBounded) {
  std::vector<int> idle;
  for (size_t i = 0; i < ControlServer::kMaxPending + 10; ++i) idle.push_back(connect_client());
  const int s = connect_client();
  send_str(s, R"({"cmd":"echo","args":{}})" "\n");
  EXPECT_NE(read_reply(s).find(R"("ok":true)"), std::string::npos);
  // The oldest idle clients were dropped to make room: they read EOF.
  EXPECT_EQ(read_reply(idle[0], 2000ms), "");
  pollfd p{idle[0], POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
  close(s);
  for (int c : idle) close(c);
}

TEST_F(ControlServerTest, AClientWhoseRequestArrivedIsNotEvictedByAFlood) {
  const int early = connect_client();
  send_str(early, R"({"cmd":"echo","args":{"early":1}})" "\n");
  // The control thread is not scheduled between the early client's send and the flood
  // (poll only sees the listen socket ready with it): simulated by a flood right after.
  std::vector<int> idle;
  for (size_t i = 0; i < ControlServer::kMaxPending + 10; ++i) idle.push_back(connect_client());
  EXPECT_NE(read_reply(early).find(R"("early":1)"), std::string::npos);
  close(early);
  for (int c : idle) close(c);
}

TEST_F(ControlServerTest, MalformedAndUnknown) {
  const int a = connect_client();
  send_str(a, "not json\n");
  EXPECT_NE(read_reply(a).find("malformed request"), std::string::npos);
  close(a);
  const int b = connect_client();
  send_str(b, R"({"cmd":"nope"})" "\n");
  EXPECT_NE(read_reply(b).find("unknown command 'nope'"), std::string::npos);
  close(b);
}

// A NUL byte anywhere in the line makes it malformed: nlohmann-json's parser stops at one,
// so a request followed by "\0" and junk was served, and a line the depth check refused for
// brackets after the NUL parsed as a scalar (fuzz_control,
// fuzz/regressions/fuzz_control/nul_byte_ends_parse_not_depth_check).
TEST_F(ControlServerTest, NulByteMakesARequestMalformed) {
  int calls = 0;
  server.add("count", [&calls](const Json&, Json* r, std::string*) {
    *r = ++calls;
    return true;
  });
  for (const std::string& line : {std::string(R"({"cmd":"count","args":{}})") + '\0' + "junk",
                                  std::string(R"({"cmd":"count"})") + '\0',
                                  std::string("\"\"") + '\0' + std::string(17, '[')}) {
    const int s = connect_client();
    send_str(s, line + "\n");
    const Json r = Json::parse(read_reply(s));
    EXPECT_FALSE(r["ok"].get<bool>());
    EXPECT_EQ(r["error"], "malformed request (an object with a string cmd and an object args)");
    close(s);
  }
  EXPECT_EQ(calls, 0);
  const int s = connect_client();
  send_str(s, R"({"cmd":"count","args":{}})" "\n");  // the same request without the NUL
  EXPECT_EQ(Json::parse(read_reply(s))["result"], 1);
  close(s);
}

// A command of the table (command_table.h): its arguments are checked against its row
// before the handler runs, once for every command; the handler gets them as strings.
TEST_F(ControlServerTest, TableCommandArgumentsCheckedBeforeItsHandler) {
  std::atomic<int> calls{0};
  std::vector<std::string> seen;
  server.add(*find_command("set-flush"), [&](const std::vector<std::string>& argv, Json* r,
                                            std::string*) {
    seen = argv;
    ++calls;
    *r = argv.size();
    return true;
  });
  Json r;
  std::string err;
  ASSERT_TRUE(request(path, "set-flush", {{"argv", {"a", "immediate"}}}, &r, &err)) << err;
  EXPECT_EQ(r, 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "immediate"}));
  const std::string usage =
      "usage: set-flush PORT|all POLICY (immediate, rx-batch, interval=US, budget=US)";
  for (const Json& args : {Json::object(), Json{{"argv", {"a"}}}, Json{{"argv", {"a", "b", "c"}}},
                           Json{{"argv", {"a", 2}}}, Json{{"argv", "a b"}}}) {
    EXPECT_FALSE(request(path, "set-flush", args, &r, &err)) << args;
    EXPECT_EQ(err, usage) << args;
  }
  EXPECT_EQ(calls.load(), 1);
}

/// A reply of `n` numbers made `per` at a time: {"ok":true,"result":[0,1,...],"count":n}.
class Numbers final : public ReplyStream {
 public:
  Numbers(uint64_t n, uint64_t per, std::atomic<int>* slices) : n_(n), per_(per), slices_(slices) {}
  bool next(std::string* out) override {
    ++*slices_;
    if (i_ == 0) out->append(R"({"ok":true,"result":[)");
    for (uint64_t k = 0; k < per_ && i_ < n_; ++k, ++i_)
      out->append((i_ ? "," : "") + std::to_string(i_));
    if (i_ < n_) return false;
    out->append(R"(],"count":)" + std::to_string(n_) + "}\n");
    return true;
  }

 private:
  uint64_t n_, per_, i_ = 0;
  std::atomic<int>* slices_;
};

class StreamTest : public ControlServerTest {
 protected:
  void SetUp() override {
    ControlServerTest::SetUp();
    // Registered while the loop runs: add() is not thread-safe, so the loop is paused by
    // registering before any client connects (on_ready touches the maps only on a request).
    server.add_stream(*find_command("fdb"), [this](const std::vector<std::string>& argv,
                                                   std::unique_ptr<ReplyStream>* st,
                                                   std::string* err) {
      if (!argv.empty() && argv[0] == "bad") {
        *err = "no port named 'bad'";
        return false;
      }
      const uint64_t n = argv.empty() ? 1000 : std::stoull(argv[0]);
      *st = std::make_unique<Numbers>(n, 1000, &slices);
      return true;
    });
  }
  std::atomic<int> slices{0};
};

TEST_F(StreamTest, AStreamedReplyArrivesWholeInSlices) {
  Json r, full;
  std::string err;
  ASSERT_TRUE(request(path, "fdb", {{"argv", {"300000"}}}, &r, &err, &full)) << err;
  ASSERT_EQ(r.size(), 300000u);
  EXPECT_EQ(r[299999], 299999);
  EXPECT_EQ(full["count"], 300000);
  EXPECT_EQ(full["switch"], Json({{"control", path}, {"pid", getpid()}}));  // in the first slice
  EXPECT_GE(slices.load(), 300);  // 1000 numbers a slice, one slice a turn
  EXPECT_FALSE(request(path, "fdb", {{"argv", {"bad"}}}, &r, &err));
  EXPECT_EQ(err, "no port named 'bad'");
  EXPECT_FALSE(request(path, "fdb", {{"argv", {"1", "2", "3"}}}, &r, &err));
  EXPECT_EQ(err, "usage: fdb [PORT] [all]");
  EXPECT_EQ(server.counters().streamed, 1u);
}

// The attack: a client asks for a reply of megabytes and never reads it. Other clients are
// answered at once meanwhile (the server used to wait up to 1 s per partial send, 6.3 s in
// all for a 330 KB reply), the reader's buffer stays one slice, and it is dropped once its
// socket took nothing for the drain deadline.
TEST_F(StreamTest, AClientThatNeverReadsHoldsNoOtherAndIsDropped) {
  server.set_drain_stall_ms(400);
  const int slow = connect_client();
  send_str(slow, R"({"cmd":"fdb","args":{"argv":["3000000"]}})" "\n");
  std::this_thread::sleep_for(100ms);  // its socket buffer fills
  const int before = slices.load();
  auto worst = 0ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const int s = connect_client();
    send_str(s, R"({"cmd":"echo","args":{"i":1}})" "\n");
    EXPECT_NE(read_reply(s).find(R"("i":1)"), std::string::npos);
    close(s);
    worst = std::max(worst, std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - t0));
  }
  EXPECT_LT(worst, 200ms);
  EXPECT_LE(slices.load() - before, 1);  // nothing more is made for a client that does not read
  // Dropped after 400 ms without progress (checked at each turn: the loop turns every 20 ms).
  const auto t0 = std::chrono::steady_clock::now();
  while (server.counters().dropped_slow == 0 && std::chrono::steady_clock::now() - t0 < 3s)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server.counters().dropped_slow, 1u);
  // What it can still read is what was buffered (its socket's and at most one slice), then EOF.
  size_t got = 0;
  for (;;) {
    char buf[65536];
    const ssize_t n = recv(slow, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  EXPECT_LT(got, 4u << 20);  // far from the 20 MB reply
  close(slow);
}

}  // namespace
}  // namespace vl::control
