// The worker-thread count: the limit kMaxThreads, SetNumThreads above it, and MOEGRAD_NUM_THREADS (an integer in
// 1..kMaxThreads; anything else is one warning on stderr per process and the default).
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "moegrad/plan.hpp"
#include "src/testing/thread_count.h"

namespace moegrad {
namespace {

TEST(ThreadCount, PublicLimitIsTheLibrarys) {
  EXPECT_EQ(kMaxThreads, 4096);
  EXPECT_EQ(kMaxThreads, core::kMaxThreads);
}

TEST(ThreadCount, ParsesOnlyIntegersInRange) {
  const struct {
    const char* text;
    int value;
  } good[] = {{"1", 1}, {"2", 2}, {"64", 64}, {"0007", 7}, {"4095", 4095}, {"4096", 4096}};
  for (const auto& g : good) {
    int n = -1;
    EXPECT_TRUE(core::ParseThreadCount(g.text, &n)) << g.text;
    EXPECT_EQ(n, g.value) << g.text;
  }
  const char* bad[] = {"",     "0",   "-1",  "+8",   " 8",  "8 ",         "8\n",        "abc",
                       "1e3",  "8x",  "0x8", "4097", "100000", "2147483648", "4294967297", "99999999999999999999",
                       "-0",   "1.5"};
  for (const char* b : bad) {
    int n = -1;
    EXPECT_FALSE(core::ParseThreadCount(b, &n)) << "'" << b << "'";
    EXPECT_EQ(n, -1) << "'" << b << "'";
  }
  int n = -1;
  EXPECT_FALSE(core::ParseThreadCount(nullptr, &n));
}

TEST(ThreadCount, SetNumThreadsAboveTheLimitUsesTheLimit) {
  SetNumThreads(1);
  EXPECT_EQ(NumThreads(), 1);
  SetNumThreads(kMaxThreads);
  EXPECT_EQ(NumThreads(), kMaxThreads);
  SetNumThreads(kMaxThreads + 1);
  EXPECT_EQ(NumThreads(), kMaxThreads);
  SetNumThreads(100000);
  EXPECT_EQ(NumThreads(), kMaxThreads);
  SetNumThreads(INT_MAX);
  EXPECT_EQ(NumThreads(), kMaxThreads);
  // 0 and below: the default, whatever it is here, within the limit.
  SetNumThreads(-5);
  const int by_default = NumThreads();
  EXPECT_GE(by_default, 1);
  EXPECT_LE(by_default, kMaxThreads);
  SetNumThreads(0);
  EXPECT_EQ(NumThreads(), by_default);
}

// In a fresh process (the default is read once per process): a bad value gives one warning, however often
// the count is asked for, and the default; a good one is used silently.
void ExpectEnvironment(const char* value, const char* expected_stderr) {
  EXPECT_EXIT(
      {
        setenv("MOEGRAD_NUM_THREADS", value, 1);
        const int first = NumThreads();
        SetNumThreads(3);
        SetNumThreads(0);
        const int second = NumThreads();
        std::fprintf(stderr, "threads %d %d\n", first, second);
        std::exit(first == second ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), expected_stderr)
      << "MOEGRAD_NUM_THREADS=" << value;
}

TEST(ThreadCountDeathTest, EnvironmentOutOfRangeWarnsOnceAndUsesTheDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExpectEnvironment("abc",
                    "^moegrad: MOEGRAD_NUM_THREADS=abc is not an integer in 1\\.\\.4096; using [0-9]+ threads "
                    "\\(every CPU\\)\nthreads [0-9]+ [0-9]+\n$");
  ExpectEnvironment("100000",
                    "^moegrad: MOEGRAD_NUM_THREADS=100000 is not an integer in 1\\.\\.4096; using [0-9]+ threads "
                    "\\(every CPU\\)\nthreads [0-9]+ [0-9]+\n$");
  ExpectEnvironment("", "^moegrad: MOEGRAD_NUM_THREADS= is not an integer in 1\\.\\.4096; using [0-9]+ threads "
                        "\\(every CPU\\)\nthreads [0-9]+ [0-9]+\n$");
  ExpectEnvironment("4096", "^threads 4096 4096\n$");
  ExpectEnvironment("3", "^threads 3 3\n$");
}

}  // namespace
}  // namespace moegrad
