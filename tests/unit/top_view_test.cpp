// top_view (app/top_view.h): the frame of `virtlink top` from two polls' JSON, its sort
// orders and keys.
#include "app/top_view.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace vl::app {
namespace {

using control::Json;

Json port(const char* name, double rx_pps, double tx_pps, uint64_t no_rx_buffer) {
  return {{"name", name},
          {"state", "connected"},
          {"rx_pps", rx_pps},
          {"rx_bps", rx_pps * 512},
          {"tx_pps", tx_pps},
          {"tx_bps", tx_pps * 512},
          {"drops", {{"no_rx_buffer", no_rx_buffer}, {"too_big", uint64_t{0}}}}};
}

Json pmd(int index, uint64_t busy, uint64_t elapsed, uint64_t packets, uint64_t a_cycles,
         uint64_t b_cycles) {
  return {{"pmd", index},
          {"cpu", index == 0 ? 1 : -1},
          {"mode", "poll"},
          {"packets", packets},
          {"busy_cycles", busy},
          {"elapsed_cycles", elapsed},
          {"busy_pct", 99.0},
          {"cycles_per_packet", 7.0},
          {"rxq_loads",
           {{{"port", "a"}, {"queue", 0}, {"packets", packets}, {"cycles", a_cycles}, {"cycles_share", 0.5}},
            {{"port", "b"}, {"queue", 0}, {"packets", uint64_t{0}}, {"cycles", b_cycles}, {"cycles_share", 0.5}}}}};
}

/// Two polls 2 s apart: a sends 1.5M pps to b, which dropped 40 frames meanwhile; PMD 0
/// was busy a quarter of its cycles, 3M frames at 100 cycles each, 3/4 of them on a/0.
TopSample first() {
  return {{{"ports", {port("a", 0, 0, 0), port("b", 0, 0, 10)}}, {"rates", {{"interval_ns", 1000000000}}}},
          Json::array({pmd(0, 1000, 4000, 0, 500, 500), pmd(1, 0, 4000, 0, 0, 0)}),
          100.0};
}
TopSample second() {
  return {{{"ports", {port("a", 1.5e6, 0, 0), port("b", 0, 1.49e6, 50)}}, {"rates", {{"interval_ns", 1000000000}}}},
          Json::array({pmd(0, 1000 + 300000000, 4000 + 1200000000, 3000000, 500 + 225000000, 500 + 75000000),
                       pmd(1, 0, 4000 + 1200000000, 0, 0, 0)}),
          102.0};
}

/// The first line of `lines` that starts with `prefix` ("" when none).
std::string line_of(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& l : lines)
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}
/// Index of the first line starting with `prefix` (-1 when none).
int index_of(const std::vector<std::string>& lines, const std::string& prefix) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
  return -1;
}

TEST(TopView, PortsWithRatesAndDropsByReason) {
  const TopSample a = first(), b = second();
  TopView v;
  v.title = "switch 1 at /x";
  const std::vector<std::string> lines = top_frame(b, &a, v);
  EXPECT_EQ(lines[0], "virtlink top: switch 1 at /x");
  EXPECT_EQ(lines[1], top_help_line());
  EXPECT_NE(lines[1].find("q quit"), std::string::npos);
  EXPECT_NE(lines[2].find("sorted by rx_pps, largest first"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("over the last 2.00 s"), std::string::npos) << lines[3];
  EXPECT_NE(line_of(lines, "PORT").find("RX_PPS*"), std::string::npos);
  // a: 1.5M pps in, 768 Mbit/s; b: 1.49M pps out, 50 drops, 20/s over the 2 s.
  EXPECT_EQ(line_of(lines, "a "), "a      connected      1.5M     768M        0        0          0        0");
  EXPECT_EQ(line_of(lines, "b "), "b      connected         0        0    1.49M     763M         50       20");
  const int bi = index_of(lines, "b ");
  ASSERT_GE(bi, 0);
  EXPECT_EQ(lines[bi + 1], "         drops: no_rx_buffer 50 (20/s)");
  EXPECT_LT(index_of(lines, "a "), bi);  // rx_pps, largest first
}

TEST(TopView, PmdFiguresOverTheInterval) {
  const TopSample a = first(), b = second();
  const std::vector<std::string> lines = top_frame(b, &a, TopView{});
  // 300M busy of 1200M cycles; 300M cycles / 3M frames; 1.5M frames/s; a/0 3/4 of the cycles.
  EXPECT_EQ(line_of(lines, "  0"),
            "  0    1 poll        25.0        100     1.5M  a/0 (1.5M/s, 75%)  b/0 (0/s, 25%)");
  EXPECT_EQ(line_of(lines, "  1"), "  1  any poll         0.0          -        0  a/0 (0/s, 0%)  b/0 (0/s, 0%)");
}

TEST(TopView, FirstPollShowsSinceStart) {
  const TopSample b = second();
  const std::vector<std::string> lines = top_frame(b, nullptr, TopView{});
  EXPECT_NE(lines[3].find("since the switch started"), std::string::npos);
  EXPECT_EQ(line_of(lines, "  0"), "  0    1 poll        99.0          7        -  a/0 (-/s, 50%)  b/0 (-/s, 50%)");
  EXPECT_NE(line_of(lines, "b ").find("      50        -"), std::string::npos) << line_of(lines, "b ");
}

TEST(TopView, CountersThatWentBackHaveNoRate) {
  TopSample a = second(), b = first();  // stats-clear between the polls
  b.mono_s = a.mono_s + 1;
  const std::vector<std::string> lines = top_frame(b, &a, TopView{});
  EXPECT_NE(line_of(lines, "b ").find("      10        -"), std::string::npos) << line_of(lines, "b ");
  EXPECT_NE(line_of(lines, "  0").find(" -  a/0 (-/s"), std::string::npos) << line_of(lines, "  0");
}

TEST(TopView, KeysChangeTheSort) {
  const TopSample a = first(), b = second();
  TopView v;
  EXPECT_TRUE(top_key('s', &v));
  EXPECT_EQ(kTopSortColumns[v.sort], "rx_bps");
  EXPECT_TRUE(top_key('5', &v));
  EXPECT_EQ(kTopSortColumns[v.sort], "tx_pps");
  std::vector<std::string> lines = top_frame(b, &a, v);
  EXPECT_LT(index_of(lines, "b "), index_of(lines, "a "));
  EXPECT_NE(line_of(lines, "PORT").find("TX_PPS*"), std::string::npos);
  EXPECT_EQ(line_of(lines, "PORT").find("RX_PPS*"), std::string::npos);
  EXPECT_TRUE(top_key('r', &v));
  lines = top_frame(b, &a, v);
  EXPECT_LT(index_of(lines, "a "), index_of(lines, "b "));
  EXPECT_NE(lines[2].find("sorted by tx_pps, smallest first"), std::string::npos);
  EXPECT_TRUE(top_key('1', &v));
  EXPECT_FALSE(v.reverse);
  EXPECT_TRUE(top_key('S', &v));
  EXPECT_EQ(kTopSortColumns[v.sort], "cycles");
  EXPECT_FALSE(top_key('x', &v));
  EXPECT_FALSE(top_key('0', &v));
}

TEST(TopView, BusySortsThePmdThreads) {
  const TopSample a = first(), b = second();
  TopView v;
  v.sort = static_cast<size_t>(top_sort_index("busy"));
  v.reverse = true;  // least busy first
  std::vector<std::string> lines = top_frame(b, &a, v);
  EXPECT_LT(index_of(lines, "  1"), index_of(lines, "  0"));
  EXPECT_NE(line_of(lines, "PMD").find("BUSY%*"), std::string::npos);
  v.reverse = false;
  lines = top_frame(b, &a, v);
  EXPECT_LT(index_of(lines, "  0"), index_of(lines, "  1"));
  EXPECT_LT(index_of(lines, "a "), index_of(lines, "b "));  // the ports by name
  EXPECT_EQ(top_sort_index("nothing"), -1);
}

TEST(TopView, MissingFieldsAndNoThreads) {
  TopSample s{{{"ports", {{{"name", "x"}}}}}, Json::array(), 1.0};
  const std::vector<std::string> lines = top_frame(s, nullptr, TopView{});
  EXPECT_NE(line_of(lines, "x ").find("?"), std::string::npos);
  EXPECT_GE(index_of(lines, "(no PMD threads)"), 0);
  TopView failed;
  failed.error = "cannot reach the switch";
  EXPECT_EQ(top_frame(s, nullptr, failed)[4], "poll failed (the figures are the last answer's): cannot reach the switch");
  TopSample empty{Json::object(), Json(), 0};
  EXPECT_GE(index_of(top_frame(empty, nullptr, TopView{}), "(no ports)"), 0);
}

TEST(TopView, SiPrefixes) {
  EXPECT_EQ(top_si(0), "0");
  EXPECT_EQ(top_si(950), "950");
  EXPECT_EQ(top_si(12345), "12.3k");
  EXPECT_EQ(top_si(1.49e6), "1.49M");
  EXPECT_EQ(top_si(9.87e9), "9.87G");
  EXPECT_EQ(top_si(999.6e3), "1M");  // not "1e+03k"
  EXPECT_EQ(top_si(999.6), "1k");
  EXPECT_EQ(top_si(999.4), "999");
}

}  // namespace
}  // namespace vl::app
