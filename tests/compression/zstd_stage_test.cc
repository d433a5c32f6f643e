#include "ops/tcp/zstd_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace tutti {
namespace {

std::unique_ptr<ZstdStage> makeStage(ZstdStageOptions options = {}) {
  std::unique_ptr<ZstdStage> stage;
  const Status st = ZstdStage::create(options, &stage);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return stage;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(gen());
  return v;
}

// Float32 values with few distinct bit patterns: what sparse or quantised
// gradients look like on the wire.
std::vector<uint8_t> compressibleBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> v(n, 0);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const float f = gen() % 8 == 0 ? static_cast<float>(gen() % 16) * 0.125f : 0.0f;
    std::memcpy(&v[i], &f, 4);
  }
  return v;
}

void expectRoundTrip(ZstdStage* stage, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> segment;
  ASSERT_TRUE(stage->compressSegment(data.data(), data.size(), &segment).isOk());
  ASSERT_LE(segment.size(), ZstdStage::maxSegmentBytes(data.size()));
  size_t raw = 0;
  ASSERT_TRUE(ZstdStage::segmentRawBytes(segment.data(), segment.size(), &raw).isOk());
  ASSERT_EQ(raw, data.size());
  std::vector<uint8_t> out(data.size() + 1, 0xee);  // one canary byte past the end
  ASSERT_TRUE(
      stage->decompressSegment(segment.data(), segment.size(), out.data(), data.size()).isOk());
  EXPECT_EQ(out[data.size()], 0xee);
  out.pop_back();
  EXPECT_EQ(out, data);
}

TEST(ZstdStage, RoundTripIsExact) {
  auto stage = makeStage();
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    expectRoundTrip(stage.get(), randomBytes(n, static_cast<uint32_t>(n)));
    expectRoundTrip(stage.get(), compressibleBytes(n, static_cast<uint32_t>(n)));
    expectRoundTrip(stage.get(), std::vector<uint8_t>(n, 0));
  }
}

TEST(ZstdStage, CompressesWhenItPaysAndNotOtherwise) {
  auto stage = makeStage();
  const auto zeros = compressibleBytes(1 << 16, 1);
  std::vector<uint8_t> segment;
  ASSERT_TRUE(stage->compressSegment(zeros.data(), zeros.size(), &segment).isOk());
  EXPECT_EQ(segment[0], ZstdStage::kModeZstd);
  EXPECT_LT(segment.size(), zeros.size() / 2);

  const auto noise = randomBytes(1 << 16, 2);
  ASSERT_TRUE(stage->compressSegment(noise.data(), noise.size(), &segment).isOk());
  EXPECT_EQ(segment[0], ZstdStage::kModeRaw);
  EXPECT_EQ(segment.size(), noise.size() + ZstdStage::kHeaderBytes);

  const std::vector<uint8_t> small(10, 0);
  ASSERT_TRUE(stage->compressSegment(small.data(), small.size(), &segment).isOk());
  EXPECT_EQ(segment[0], ZstdStage::kModeRaw);  // below min_segment_bytes
}

TEST(ZstdStage, BacksOffWhenItDoesNotPayAndProbesAgain) {
  ZstdStageOptions options;
  options.initial_backoff_segments = 4;
  options.max_backoff_segments = 16;
  auto stage = makeStage(options);
  std::vector<uint8_t> segment;
  for (uint32_t i = 0; i < 40; ++i) {
    const auto noise = randomBytes(4096, i);
    ASSERT_TRUE(stage->compressSegment(noise.data(), noise.size(), &segment).isOk());
  }
  const ZstdStage::Stats after_noise = stage->stats();
  EXPECT_EQ(after_noise.compressed_segments, 0u);
  EXPECT_GT(after_noise.skipped_segments, 20u);  // most were not even tried
  EXPECT_GT(after_noise.running_ratio, 0.95);

  // Data turns compressible: within the longest backoff it compresses again.
  for (uint32_t i = 0; i < 40; ++i) {
    const auto data = compressibleBytes(4096, i);
    ASSERT_TRUE(stage->compressSegment(data.data(), data.size(), &segment).isOk());
  }
  const ZstdStage::Stats& s = stage->stats();
  EXPECT_GE(s.compressed_segments, 40u - 16u);
  EXPECT_LT(s.running_ratio, 0.5);
  EXPECT_EQ(s.segments, 80u);
  EXPECT_EQ(s.raw_bytes, 80u * 4096u);
  EXPECT_LT(s.wire_bytes, s.raw_bytes);
}

TEST(ZstdStage, CorruptSegmentsAreErrors) {
  auto stage = makeStage();
  const auto data = compressibleBytes(10000, 3);
  std::vector<uint8_t> compressed;
  ASSERT_TRUE(stage->compressSegment(data.data(), data.size(), &compressed).isOk());
  ASSERT_EQ(compressed[0], ZstdStage::kModeZstd);
  const auto noise = randomBytes(500, 4);
  std::vector<uint8_t> raw;
  ASSERT_TRUE(stage->compressSegment(noise.data(), noise.size(), &raw).isOk());
  ASSERT_EQ(raw[0], ZstdStage::kModeRaw);

  std::vector<uint8_t> out(data.size());
  // Every truncation of both kinds.
  for (size_t n = 0; n < compressed.size(); ++n) {
    std::vector<uint8_t> cut(compressed.begin(), compressed.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_FALSE(stage->decompressSegment(cut.data(), n, out.data(), data.size()).isOk()) << n;
  }
  for (size_t n = 0; n < raw.size(); ++n) {
    EXPECT_FALSE(stage->decompressSegment(raw.data(), n, out.data(), noise.size()).isOk()) << n;
  }
  // Bad mode byte, wrong expected size, trailing garbage.
  std::vector<uint8_t> bad = compressed;
  bad[0] = 7;
  EXPECT_FALSE(stage->decompressSegment(bad.data(), bad.size(), out.data(), data.size()).isOk());
  EXPECT_FALSE(
      stage->decompressSegment(compressed.data(), compressed.size(), out.data(), 9999).isOk());
  bad = compressed;
  bad.push_back(0);
  EXPECT_FALSE(stage->decompressSegment(bad.data(), bad.size(), out.data(), data.size()).isOk());
  // A header announcing a huge size is refused before any write.
  bad = raw;
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(bad.data() + 1, &huge, 8);
  EXPECT_FALSE(stage->decompressSegment(bad.data(), bad.size(), out.data(), noise.size()).isOk());
  // A single-byte flip in the frame is an error, or (a flip in bits the
  // decoder never reads) decodes to the exact original: the checksum rules
  // out silently wrong data.
  size_t detected = 0;
  for (size_t i = ZstdStage::kHeaderBytes; i < compressed.size(); ++i) {
    bad = compressed;
    bad[i] ^= 0x5a;
    std::fill(out.begin(), out.end(), 0);
    if (stage->decompressSegment(bad.data(), bad.size(), out.data(), data.size()).isOk()) {
      EXPECT_EQ(out, data) << "flip at " << i << " decoded to wrong data";
    } else {
      ++detected;
    }
  }
  EXPECT_GT(detected, (compressed.size() - ZstdStage::kHeaderBytes) * 9 / 10);
  // The stage still works after all that.
  std::vector<uint8_t> again(data.size());
  ASSERT_TRUE(
      stage->decompressSegment(compressed.data(), compressed.size(), again.data(), again.size())
          .isOk());
  EXPECT_EQ(again, data);
}

TEST(ZstdStage, RandomGarbageNeverCrashes) {
  auto stage = makeStage();
  std::mt19937 gen(5);
  std::vector<uint8_t> out(4096);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> garbage = randomBytes(gen() % 600, gen());
    if (!garbage.empty()) garbage[0] = static_cast<uint8_t>(gen() % 2);  // plausible mode
    (void)stage->decompressSegment(garbage.data(), garbage.size(), out.data(), gen() % 4096);
  }
}

TEST(ZstdStage, RejectsBadOptions) {
  std::unique_ptr<ZstdStage> stage;
  ZstdStageOptions options;
  options.level = 23;
  Status st = ZstdStage::create(options, &stage);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("zstd level 23"), std::string::npos) << st.message();
  options.level = 3;
  options.min_saving = 1.0;
  EXPECT_FALSE(ZstdStage::create(options, &stage).isOk());
  options.min_saving = 0.05;
  options.initial_backoff_segments = 0;
  EXPECT_FALSE(ZstdStage::create(options, &stage).isOk());
  EXPECT_EQ(stage, nullptr);
}

}  // namespace
}  // namespace tutti
