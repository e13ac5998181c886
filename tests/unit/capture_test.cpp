// ctl capture's request as the switch parses it (app/capture.h parse_capture_options): the
// options, and the BPF program a client sends, checked before any session starts.
#include <gtest/gtest.h>

#include <pcap/pcap.h>

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/capture.h"

namespace vl::app {
namespace {

/// The program libpcap compiles for `expr`, in the request's form "CODE:JT:JF:K,...".
std::string compiled(const char* expr) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 262144);
  bpf_program prog{};
  EXPECT_EQ(pcap_compile(dead, &prog, expr, 1, PCAP_NETMASK_UNKNOWN), 0);
  std::string out;
  for (u_int i = 0; i < prog.bf_len; ++i) {
    const bpf_insn& x = prog.bf_insns[i];
    out += fmt::format("{}{}:{}:{}:{}", i ? "," : "", x.code, x.jt, x.jf, x.k);
  }
  pcap_freecode(&prog);
  pcap_close(dead);
  return out;
}

TEST(CaptureOptions, TakesCountSnaplenDurationAndAFilter) {
  CaptureRequest r;
  std::string err;
  ASSERT_TRUE(parse_capture_options({"--count", "10", "--snaplen", "128", "--duration", "3", "--bpf",
                                     compiled("ether broadcast")},
                                    &r, &err))
      << err;
  EXPECT_EQ(r.count, 10u);
  EXPECT_EQ(r.snaplen, 128u);
  EXPECT_EQ(r.duration_ns, 3000000000ull);
  ASSERT_FALSE(r.filter.empty());
  // The program runs: a broadcast frame matches, a unicast one does not.
  uint8_t f[60] = {};
  std::memset(f, 0xff, 6);
  EXPECT_NE(bpf_filter(r.filter.data(), f, sizeof f, sizeof f), 0u);
  f[0] = 0x02;
  EXPECT_EQ(bpf_filter(r.filter.data(), f, sizeof f, sizeof f), 0u);
}

TEST(CaptureOptions, RefusesBadValuesAndPrograms) {
  const std::vector<std::vector<std::string>> bad = {
      {"--count"},                       // no value
      {"--count", "-1"},                 // not a number
      {"--count", "12x"},
      {"--snaplen", "13"},               // below an Ethernet header
      {"--snaplen", "262145"},           // above tcpdump's largest
      {"--duration", "99999999999"},
      {"--color", "red"},                // unknown
      {"--bpf", ""},                     // empty program
      {"--bpf", "6:0:0"},                // three fields
      {"--bpf", "6:0:0:70000000000"},    // k over 32 bits
      {"--bpf", "6:0:0:x"},
      {"--bpf", "21:5:0:2048"},          // a jump out of the program, no return
      {"--bpf", "6:0:0:65535,6:0:0:0,"}, // a trailing comma: an empty instruction
  };
  for (const auto& words : bad) {
    CaptureRequest r;
    std::string err;
    EXPECT_FALSE(parse_capture_options(words, &r, &err)) << fmt::format("{}", fmt::join(words, " "));
    EXPECT_FALSE(err.empty());
  }
  // Programs libpcap's bpf_validate() accepts but its bpf_filter() cannot run: an opcode
  // it does not implement (bpf_filter calls abort(): the switch died on its first tapped
  // frame), a BPF_JA whose offset wraps around to itself or backwards (the capture thread
  // looped for ever, and the switch could not stop).
  for (const char* prog : {"65535:0:0:0,6:0:0:1",      // BPF_MISC, no such op
                           "56:0:0:0,6:0:0:1",         // BPF_LD|BPF_ABS, size bits 0x18
                           "24:0:0:0,6:0:0:1", "8:0:0:0,6:0:0:1", "14:0:0:0,6:0:0:1",
                           "5:0:0:4294967295,6:0:0:1",  // JA -1: to itself
                           "7:0:0:0,5:0:0:4294967294,6:0:0:1",  // JA -2: back to 0
                           "5:0:0:1,6:0:0:1"}) {       // JA past the end
    CaptureRequest r;
    std::string err;
    EXPECT_FALSE(parse_capture_options({"--bpf", prog}, &r, &err)) << prog;
    EXPECT_NE(err.find("not a valid BPF program"), std::string::npos) << err;
  }
  // What tcpdump's expressions compile to still passes (a forward JA included).
  for (const char* expr : {"ether broadcast or ip", "tcp port 80 and (ip or ip6)",
                           "vlan 10 and udp", "ip[2:2] > 576", "len <= 128 or ether[0] & 1 = 1",
                           "icmp6 or arp or (ip and (ip[6:2] & 0x1fff) != 0)"}) {
    CaptureRequest r;
    std::string err;
    EXPECT_TRUE(parse_capture_options({"--bpf", compiled(expr)}, &r, &err)) << expr << ": " << err;
  }
  // Over 4096 instructions (the classic BPF limit).
  std::string big;
  for (int i = 0; i < 4097; ++i) big += (i ? "," : "") + std::string("6:0:0:65535");
  CaptureRequest r;
  std::string err;
  EXPECT_FALSE(parse_capture_options({"--bpf", big}, &r, &err));
}

}  // namespace
}  // namespace vl::app
