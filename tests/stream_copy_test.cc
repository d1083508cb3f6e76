// The benchmarks' yardstick copy (tools/moegrad/common): StreamCopy and ParallelCopy copy exactly the bytes
// asked for, and StreamWrite and ParallelWrite set them, whatever the alignment, size and thread count, and write
// nothing around them; the eviction copy is twice the last-level cache and at most an eighth of the memory,
// within its bounds.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tools/moegrad/common/measure.h"
#include "tools/moegrad/common/stream_copy.h"

namespace moegrad::tool {
namespace {

constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0xA5;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Copies `bytes` from src+src_offset to dst+dst_offset of 64-byte aligned buffers with `copy`; checks the copy
// against the source and the guard bytes on both sides of it.
template <typename Copy>
void CheckCopy(size_t bytes, size_t src_offset, size_t dst_offset, const Copy& copy) {
  AlignedBuffer src(bytes + 2 * kGuard), dst(bytes + 2 * kGuard);
  const std::vector<uint8_t> data = RandomBytes(bytes + 2 * kGuard, static_cast<uint32_t>(bytes * 131 + src_offset));
  std::copy(data.begin(), data.end(), static_cast<uint8_t*>(src.data));
  uint8_t* d = static_cast<uint8_t*>(dst.data);
  std::fill(d, d + dst.size, kGuardByte);
  copy(d + kGuard + dst_offset - kGuard / 2, static_cast<const uint8_t*>(src.data) + kGuard + src_offset - kGuard / 2,
       bytes);
  const size_t at = kGuard / 2 + dst_offset;
  const size_t from = kGuard / 2 + src_offset;
  for (size_t i = 0; i < dst.size; ++i) {
    const uint8_t want = i >= at && i < at + bytes ? data[from + i - at] : kGuardByte;
    ASSERT_EQ(d[i], want) << "byte " << i << " of a copy of " << bytes << " bytes at source offset " << src_offset
                          << ", destination offset " << dst_offset;
  }
}

// Sets the yardstick's walk for one test and puts back the one before.
class WalkScope {
 public:
  explicit WalkScope(CopyWalk walk) : before_(YardstickWalk()) { SetYardstickWalk(walk); }
  ~WalkScope() { SetYardstickWalk(before_); }

 private:
  CopyWalk before_;
};

TEST(StreamCopy, EverySizeAndAlignment) {
  // Across the vector, the four-vector step and the four-page block, and both misalignments, with each walk.
  for (CopyWalk walk : kCopyWalks) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65}, size_t{255},
                         size_t{4096}, size_t{16383}, size_t{16384}, size_t{16385}, size_t{3 * 16384 + 4161}}) {
      for (size_t src_offset : {0, 1, 32, 63}) {
        for (size_t dst_offset : {0, 1, 17, 32, 64}) {
          SCOPED_TRACE(CopyWalkName(walk));
          CheckCopy(bytes, src_offset, dst_offset,
                    [walk](uint8_t* d, const uint8_t* s, size_t n) { StreamCopy(d, s, n, walk); });
        }
      }
    }
  }
}

TEST(ParallelCopy, StreamedAndNotEveryThreadCount) {
  // Under kStreamCopyMinBytes memcpy, from it StreamCopy with the yardstick's walk; parts of odd sizes with every
  // team size.
  for (CopyWalk walk : kCopyWalks) {
    const WalkScope scope(walk);
    for (size_t bytes : {size_t{1000}, kStreamCopyMinBytes - 64, kStreamCopyMinBytes, kStreamCopyMinBytes + 4097}) {
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(CopyWalkName(walk));
        CheckCopy(bytes, 3, 0, [&](uint8_t* d, const uint8_t* s, size_t n) { ParallelCopy(d, s, n, threads); });
      }
    }
  }
}

TEST(ChooseCopyWalk, TakesTheFasterAndSetsIt) {
  const WalkScope scope(CopyWalk::kFourPagesInStep);
  const CopyWalkChoice c = ChooseCopyWalk(2, size_t{8} << 20, 3);
  EXPECT_GT(c.in_step_bytes_per_second, 0.0);
  EXPECT_GT(c.in_order_bytes_per_second, 0.0);
  const CopyWalk faster = c.in_order_bytes_per_second > c.in_step_bytes_per_second ? CopyWalk::kSequential
                                                                                   : CopyWalk::kFourPagesInStep;
  EXPECT_EQ(c.walk, faster);
  EXPECT_EQ(YardstickWalk(), faster);
  EXPECT_EQ(c.chosen_bytes_per_second(),
            faster == CopyWalk::kSequential ? c.in_order_bytes_per_second : c.in_step_bytes_per_second);
  EXPECT_STREQ(CopyWalkName(CopyWalk::kFourPagesInStep), "four pages in step");
  EXPECT_STREQ(CopyWalkName(CopyWalk::kSequential), "page after page");
}

// The sum of `bytes` bytes of random data at offset `offset` of an aligned buffer, as StreamRead and as
// ParallelRead with 1-3 threads, with each walk, against a plain loop. A load left out or read twice changes the sum.
void CheckRead(size_t bytes, size_t offset) {
  const std::vector<uint8_t> data = RandomBytes(bytes + 64, static_cast<uint32_t>(bytes * 7 + offset));
  AlignedBuffer src(bytes + 64);
  std::copy(data.begin(), data.end(), static_cast<uint8_t*>(src.data));
  const uint8_t* at = static_cast<const uint8_t*>(src.data) + offset;
  uint64_t want = 0;
  for (size_t i = 0; i < bytes; ++i) want += at[i];
  for (CopyWalk walk : kCopyWalks) {
    SCOPED_TRACE(CopyWalkName(walk));
    EXPECT_EQ(StreamRead(at, bytes, walk), want) << bytes << " bytes at offset " << offset;
    for (int threads : {1, 2, 3}) {
      EXPECT_EQ(ParallelRead(at, bytes, threads, walk), want)
          << bytes << " bytes at offset " << offset << ", " << threads << " threads";
    }
  }
}

TEST(StreamRead, SumsEveryByteOnce) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4095}, size_t{16384},
                       size_t{16385}, size_t{3 * 16384 + 4161}, size_t{1} << 20}) {
    for (size_t offset : {0, 1, 33}) CheckRead(bytes, offset);
  }
}

// Sets `bytes` bytes at offset `offset` of a guarded buffer with StreamWrite and with ParallelWrite on 1-3
// threads; checks them and the guard bytes on both sides.
void CheckWrite(size_t bytes, size_t offset) {
  AlignedBuffer dst(bytes + 2 * kGuard);
  uint8_t* d = static_cast<uint8_t*>(dst.data);
  const auto check = [&](uint8_t value, const char* what) {
    for (size_t i = 0; i < dst.size; ++i) {
      const bool inside = i >= kGuard + offset && i < kGuard + offset + bytes;
      ASSERT_EQ(d[i], inside ? value : kGuardByte)
          << what << ": byte " << i << " of a write of " << bytes << " bytes at offset " << offset;
    }
  };
  std::fill(d, d + dst.size, kGuardByte);
  StreamWrite(d + kGuard + offset, bytes, 0x3C);
  check(0x3C, "StreamWrite");
  for (int threads : {1, 2, 3}) {
    const uint8_t value = static_cast<uint8_t>(0x40 + threads);
    std::fill(d, d + dst.size, kGuardByte);
    ParallelWrite(d + kGuard + offset, bytes, value, threads);
    check(value, "ParallelWrite");
  }
}

TEST(StreamWrite, SetsEveryByteAndNothingAround) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{255}, size_t{4095},
                       size_t{16385}, size_t{3 * 16384 + 4161}}) {
    for (size_t offset : {0, 1, 17, 33, 64}) CheckWrite(bytes, offset);
  }
}

TEST(CopyReadWriteBandwidth, EveryHalfMeasured) {
  const CopyReadWrite r = CopyReadWriteBandwidth(2, size_t{8} << 20, 3);
  EXPECT_GT(r.copy_bytes_per_second, 0.0);
  EXPECT_GT(r.read_bytes_per_second, 0.0);
  EXPECT_GT(r.read_over_copy, 0.0);
  EXPECT_GT(r.write_bytes_per_second, 0.0);
  EXPECT_GT(r.write_over_copy, 0.0);
}

TEST(EvictionBytes, TwiceTheCacheInWholeMiBWithinBounds) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  constexpr uint64_t kPlenty = uint64_t{1} << 40;  // memory that limits nothing
  EXPECT_EQ(EvictionBytes(0, kPlenty), kMinEvictionBytes);  // no cache reported
  EXPECT_EQ(EvictionBytes(32 * kMiB, kPlenty), kMinEvictionBytes);
  EXPECT_EQ(EvictionBytes(128 * kMiB, kPlenty), 256 * kMiB);
  EXPECT_EQ(EvictionBytes(128 * kMiB + 1, kPlenty), 257 * kMiB);  // rounded up to whole MiB
  EXPECT_EQ(EvictionBytes(480 * kMiB, kPlenty), 960 * kMiB);
  EXPECT_EQ(EvictionBytes(2048 * kMiB, kPlenty), kMaxEvictionBytes);
  EXPECT_EQ(EvictionBytes(3 * kMaxEvictionBytes, kPlenty), kMaxEvictionBytes);
  EXPECT_EQ(EvictionBytes(UINT64_MAX, UINT64_MAX), kMaxEvictionBytes);  // no overflow
}

TEST(EvictionBytes, AtMostAnEighthOfTheMemoryButNeverBelowTheFloor) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(EvictionBytes(480 * kMiB, 4 * kGiB), 512 * kMiB);  // 960 MiB asked, 4 GiB / 8 allowed
  EXPECT_EQ(EvictionBytes(512 * kMiB, 8 * kGiB - 1), 1023 * kMiB);  // the eighth rounded down to whole MiB
  EXPECT_EQ(EvictionBytes(480 * kMiB, 8 * kGiB), 960 * kMiB);  // the cache's size fits
  EXPECT_EQ(EvictionBytes(480 * kMiB, kGiB), kMinEvictionBytes);  // little memory: the floor
  EXPECT_EQ(EvictionBytes(480 * kMiB, 0), kMinEvictionBytes);
  EXPECT_EQ(EvictionBytes(2048 * kMiB, 16 * kGiB), 2 * kGiB);
}

// The default is the rule applied to what this machine reports.
TEST(EvictionBytes, DefaultIsTheRuleOnThisMachine) {
  const uint64_t llc = LastLevelCacheBytes();
  const uint64_t before = AvailableMemory();  // the available memory may move between the calls
  const uint64_t bytes = DefaultEvictionBytes();
  const uint64_t after = AvailableMemory();
  EXPECT_GT(before, uint64_t{0});
  EXPECT_GE(bytes, EvictionBytes(llc, std::min(before, after)));
  EXPECT_LE(bytes, EvictionBytes(llc, std::max(before, after)));
}

// Where Linux lists cpu0's caches, the last level is at least each data or unified cache listed.
TEST(LastLevelCacheBytes, AtLeastEveryDataCacheOfCpu0) {
  const uint64_t llc = LastLevelCacheBytes();
  int listed = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream type_file(dir + "type"), size_file(dir + "size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size)) break;
    if (type == "Instruction") continue;
    ++listed;
    ASSERT_FALSE(size.empty());
    uint64_t bytes = std::stoull(size);
    if (size.back() == 'K') bytes <<= 10;
    if (size.back() == 'M') bytes <<= 20;
    EXPECT_GE(llc, bytes) << dir;
  }
  if (listed == 0) GTEST_SKIP() << "no caches listed under /sys/devices/system/cpu/cpu0/cache";
  EXPECT_GT(llc, 0u);
}

}  // namespace
}  // namespace moegrad::tool
