// How the CPU kernels split their work, tested directly (white box, through src/testing/work_split.h): the
// inverse index they build over the tokens (src/backend/cpu/inverse_index.h) and the partitions of
// src/backend/cpu/parallel.h. Every expected value is written out here or counted by a plain loop over the
// inputs, never taken from the code under test.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "src/testing/work_split.h"

namespace {

using moegrad::internal::Balance211;
using moegrad::internal::BalanceByCost;
using moegrad::internal::BalanceColumns;
using moegrad::internal::BuildInverseIndex;
using moegrad::internal::ChunkQueue;
using moegrad::internal::KeyOfPosition;
using moegrad::internal::UnevenTokens;
using moegrad::internal::TailChunks;
using moegrad::internal::WalkChunks;

TEST(InverseIndex, ListsPositionsPerKeyAscendingAndReturnsTheLargestList) {
  // Keys of 9 positions over 4 keys; -1 and 4 belong to no key and are left out.
  const std::vector<int64_t> key = {2, 0, 2, -1, 3, 2, 4, 0, 2};
  std::vector<int64_t> offsets(5, -7), list(key.size(), -7);
  const int64_t largest = BuildInverseIndex(
      4, static_cast<int64_t>(key.size()), [&](int64_t i) { return key[i]; }, offsets.data(), list.data());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 2, 2, 6, 7}));
  // Key 0: positions 1, 7; key 1: none; key 2: 0, 2, 5, 8; key 3: 4. The two left-out positions leave the
  // last two entries of the list unwritten.
  EXPECT_EQ(list, (std::vector<int64_t>{1, 7, 0, 2, 5, 8, 4, -7, -7}));
  EXPECT_EQ(largest, 4);
}

TEST(InverseIndex, EmptyAndAllLeftOut) {
  std::vector<int64_t> offsets(4, -7);
  int64_t unused = -7;
  EXPECT_EQ(BuildInverseIndex(3, 0, [](int64_t) { return int64_t{0}; }, offsets.data(), &unused), 0);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(BuildInverseIndex(3, 5, [](int64_t) { return int64_t{-1}; }, offsets.data(), &unused), 0);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(unused, -7);
}

TEST(InverseIndex, OneKeyTakesEveryPosition) {
  // The padding token of a drop-and-pad call at decode sizes: every slot names token 0.
  constexpr int64_t kSlots = 256;
  std::vector<int64_t> offsets(2), list(kSlots);
  EXPECT_EQ(BuildInverseIndex(1, kSlots, [](int64_t) { return int64_t{0}; }, offsets.data(), list.data()), kSlots);
  for (int64_t i = 0; i < kSlots; ++i) ASSERT_EQ(list[i], i);
}

TEST(InverseIndex, KeyOfPositionSkipsEmptyKeys) {
  // offsets of 6 keys, keys 1, 2 and 5 empty: positions 0-1 are key 0's, 2-4 key 3's, 5 key 4's.
  const std::vector<int64_t> offsets = {0, 2, 2, 2, 5, 6, 6};
  const std::vector<int64_t> expected = {0, 0, 3, 3, 3, 4};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(KeyOfPosition(offsets.data(), 6, i), expected[i]) << "position " << i;
  // Every position of every key of a larger index, against a walk from the first position.
  std::vector<int64_t> big(1001);
  for (int64_t k = 0; k < 1000; ++k) big[k + 1] = big[k] + (k * 7919) % 5;  // 0..4 positions per key
  int64_t k = 0;
  for (int64_t i = 0; i < big[1000]; ++i) {
    while (big[k + 1] <= i) ++k;
    ASSERT_EQ(KeyOfPosition(big.data(), 1000, i), k) << "position " << i;
  }
}

TEST(Balance211, PartsDifferByAtMostOneAndCoverTheRange) {
  for (int64_t n : {0, 1, 5, 7, 64, 1000}) {
    for (int parts = 1; parts <= 9; ++parts) {
      int64_t expected_begin = 0;
      for (int i = 0; i < parts; ++i) {
        int64_t b, e;
        Balance211(n, parts, i, &b, &e);
        ASSERT_EQ(b, expected_begin) << n << " " << parts << " " << i;
        ASSERT_TRUE(e - b == n / parts || e - b == n / parts + 1) << n << " " << parts << " " << i;
        expected_begin = e;
      }
      ASSERT_EQ(expected_begin, n) << n << " " << parts;
    }
  }
}

TEST(UnevenTokens, HalfAShareByDefaultAWholeShareOnRequest) {
  // 2 parts of a total of 100: a share is 50; half of it 25.
  EXPECT_FALSE(UnevenTokens(25, 100, 2));
  EXPECT_TRUE(UnevenTokens(26, 100, 2));
  EXPECT_FALSE(UnevenTokens(50, 100, 2, /*per_share=*/1));
  EXPECT_TRUE(UnevenTokens(51, 100, 2, /*per_share=*/1));
  // One part never splits otherwise.
  EXPECT_FALSE(UnevenTokens(100, 100, 1));
  // One token routed to every one of 256 slots (its cost 257 of 257).
  EXPECT_TRUE(UnevenTokens(257, 257, 2, 1));
  // 16 tokens of 8 pairs each: 9 of 144 is under half of a share of 72.
  EXPECT_FALSE(UnevenTokens(9, 144, 2));
}

TEST(BalanceColumns, CoversTheRowOnCacheLineBoundaries) {
  for (int64_t size : {2, 4}) {
    const int64_t line = 64 / size;
    for (int64_t h : {1, 15, 16, 17, 2085, 4096, 7168}) {
      for (int parts = 1; parts <= 5; ++parts) {
        int64_t expected_begin = 0;
        std::vector<int64_t> widths;
        for (int i = 0; i < parts; ++i) {
          int64_t b, e;
          BalanceColumns(h, size, parts, i, &b, &e);
          ASSERT_EQ(b, expected_begin) << size << " " << h << " " << parts << " " << i;
          ASSERT_LE(b, e);
          if (b < h) {
            ASSERT_EQ(b % line, 0) << size << " " << h << " " << parts << " " << i;
          }
          widths.push_back(e - b);
          expected_begin = e;
        }
        ASSERT_EQ(expected_begin, h) << size << " " << h << " " << parts;
        // Shares differ by at most one line (the last part may hold a partial line).
        for (int64_t w : widths) {
          for (int64_t v : widths) ASSERT_LE(w - v, 2 * line) << size << " " << h << " " << parts;
        }
      }
    }
  }
  // bf16 rows of DeepSeek-V3 (7168 columns, 224 lines) over 2 parts: 112 lines each.
  int64_t b, e;
  BalanceColumns(7168, 2, 2, 1, &b, &e);
  EXPECT_EQ(b, 3584);
  EXPECT_EQ(e, 7168);
}

TEST(BalanceByCost, SplitsAtTheFirstItemReachingEachShare) {
  // Item costs 1, 1, 10, 1, 1, 1, 1, 1, 1, 1 (total 19); prefix(k) = cost of items [0, k).
  const std::vector<int64_t> cost = {1, 1, 10, 1, 1, 1, 1, 1, 1, 1};
  std::vector<int64_t> prefix(cost.size() + 1, 0);
  for (size_t i = 0; i < cost.size(); ++i) prefix[i + 1] = prefix[i] + cost[i];
  auto part = [&](int parts, int i) {
    std::pair<int64_t, int64_t> range;
    BalanceByCost(10, parts, i, [&](int64_t k) { return prefix[k]; }, &range.first, &range.second);
    return range;
  };
  using Range = std::pair<int64_t, int64_t>;
  // Two parts: part 1 starts at the first k with prefix(k) >= 19 / 2 = 9, k = 3 (prefix 12).
  EXPECT_EQ(part(2, 0), Range(0, 3));
  EXPECT_EQ(part(2, 1), Range(3, 10));
  // Three parts: targets 6 and 12, both first reached at k = 3; the middle part is empty.
  EXPECT_EQ(part(3, 0), Range(0, 3));
  EXPECT_EQ(part(3, 1), Range(3, 3));
  EXPECT_EQ(part(3, 2), Range(3, 10));
}

TEST(ChunkQueue, OneThreadTakesEveryChunkInOrder) {
  ChunkQueue queue;
  std::vector<int64_t> taken;
  queue.Take(5, [&](int64_t c) { taken.push_back(c); });
  EXPECT_EQ(taken, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // The queue is spent: a second walk on it takes nothing.
  queue.Take(5, [&](int64_t c) { taken.push_back(c); });
  EXPECT_EQ(taken.size(), 5u);
}

TEST(ChunkQueue, ThreadsTakeEveryChunkOnceEachInAscendingOrder) {
  constexpr int64_t kChunks = 5000;
  constexpr int kThreads = 4;
  ChunkQueue queue;
  std::vector<std::vector<int64_t>> taken(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { queue.Take(kChunks, [&](int64_t c) { taken[i].push_back(c); }); });
  }
  for (std::thread& t : threads) t.join();
  std::vector<int64_t> all;
  for (const std::vector<int64_t>& mine : taken) {
    EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kChunks));
  for (int64_t c = 0; c < kChunks; ++c) ASSERT_EQ(all[c], c);
}

TEST(ChunkQueue, RangesAreFixedByTheChunkNumberNotTheThread) {
  // 10 items in 4 chunks of Balance211: [0, 3), [3, 6), [6, 8), [8, 10), whoever takes them.
  using Range = std::pair<int64_t, int64_t>;
  const std::vector<Range> expected = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int threads = 1; threads <= 3; ++threads) {
    ChunkQueue queue;
    std::vector<std::vector<Range>> taken(threads);
    std::vector<std::thread> team;
    for (int i = 0; i < threads; ++i) {
      team.emplace_back([&, i] {
        queue.TakeRanges(10, 4, [&](int64_t b, int64_t e) { taken[i].emplace_back(b, e); });
      });
    }
    for (std::thread& t : team) t.join();
    std::vector<Range> all;
    for (const std::vector<Range>& mine : taken) all.insert(all.end(), mine.begin(), mine.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, expected) << threads << " threads";
  }
  // By cost (items 1, 1, 10, 1, ... as in BalanceByCost above): three chunks, the middle one empty and not
  // handed out.
  const std::vector<int64_t> prefix = {0, 1, 2, 12, 13, 14, 15, 16, 17, 18, 19};
  ChunkQueue queue;
  std::vector<Range> ranges;
  queue.TakeRangesByCost(10, 3, [&](int64_t k) { return prefix[k]; },
                         [&](int64_t b, int64_t e) { ranges.emplace_back(b, e); });
  EXPECT_EQ(ranges, (std::vector<Range>{{0, 3}, {3, 10}}));
}

TEST(WalkChunks, OneForOneThreadElseByBytesBetweenTheThreadsAndEightEach) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(WalkChunks(1000 * kMiB, 1, kMiB), 1);
  // Fewer bytes than a chunk per thread: one chunk per thread, never fewer.
  EXPECT_EQ(WalkChunks(kMiB / 2, 2, kMiB), 2);
  EXPECT_EQ(WalkChunks(0, 4, kMiB), 4);
  // In between: one chunk per chunk_bytes.
  EXPECT_EQ(WalkChunks(11 * kMiB, 2, kMiB), 11);
  EXPECT_EQ(WalkChunks(11 * kMiB + kMiB / 2, 2, kMiB), 11);
  // Many bytes: eight per thread, or per_thread.
  EXPECT_EQ(WalkChunks(1000 * kMiB, 2, kMiB), 16);
  EXPECT_EQ(WalkChunks(1000 * kMiB, 3, kMiB, 4), 12);
}

TEST(TailChunks, OneForOneThreadElseFourEach) {
  EXPECT_EQ(TailChunks(1), 1);
  EXPECT_EQ(TailChunks(2), 8);
  EXPECT_EQ(TailChunks(3), 12);
}

}  // namespace
