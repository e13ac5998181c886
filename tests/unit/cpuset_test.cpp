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

}  // namespace
}  // namespace vl
