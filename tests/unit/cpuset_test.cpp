#include <gtest/gtest.h>

#include "util/cpuset.h"

namespace vl {
namespace {

TEST(CpuList, ParsesTasksetSyntax) {
  EXPECT_EQ(*parse_cpu_list("1"), (std::vector<int>{1}));
  EXPECT_EQ(*parse_cpu_list("1,3"), (std::vector<int>{1, 3}));
  EXPECT_EQ(*parse_cpu_list("2-5"), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(*parse_cpu_list("0,2-3,2"), (std::vector<int>{0, 2, 3}));
}

TEST(CpuList, RejectsMalformed) {
  for (const char* bad : {"", ",", "1,", "a", "3-1", "-1", "1-", "2048", "1,,2"})
    EXPECT_FALSE(parse_cpu_list(bad).has_value()) << bad;
}

// The switch refuses a PMD core list naming a CPU twice (one thread per CPU): the first one
// named twice, whether written twice or covered by a range.
TEST(CpuList, RepeatedCpu) {
  EXPECT_EQ(repeated_cpu("1,1"), 1);
  EXPECT_EQ(repeated_cpu("0,2-3,2"), 2);
  EXPECT_EQ(repeated_cpu("1-4,6,3-5"), 3);
  for (const char* once : {"1", "1,3", "2-5", "0,2-3,7", "", "1,,1"})
    EXPECT_FALSE(repeated_cpu(once).has_value()) << once;
}

}  // namespace
}  // namespace vl
