#include "compression/compressor_factory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compression/int8_compressor.h"
#include "compression/topk_compressor.h"

namespace tutti {
namespace {

TEST(CompressorFactory, AcceptedSpecs) {
  struct Case {
    const char* spec;
    const char* canonical;
    ExchangeKind kind;
  };
  const std::vector<Case> cases = {
      {"none", "none", ExchangeKind::kAllreduce},
      {"", "none", ExchangeKind::kAllreduce},
      {"  FP16 ", "fp16", ExchangeKind::kAllreduce},
      {"bf16", "bf16", ExchangeKind::kAllreduce},
      {"FP16:Cross_Host", "fp16:cross_host", ExchangeKind::kAllreduce},
      {"bf16:cross_host", "bf16:cross_host", ExchangeKind::kAllreduce},
      {"topk:0.01", "topk:0.01", ExchangeKind::kAllgather},
      {"TopK:1", "topk:1", ExchangeKind::kAllgather},
      {"topk:.25", "topk:0.25", ExchangeKind::kAllgather},
      {"topk:1e-3", "topk:0.001", ExchangeKind::kAllgather},
      {"topk:0.01:warmup=100", "topk:0.01:warmup=100", ExchangeKind::kAllgather},
      {"TOPK:0.01:WARMUP=0", "topk:0.01", ExchangeKind::kAllgather},
      {"int8", "int8:256", ExchangeKind::kQuantisedRing},
      {"int8:512", "int8:512", ExchangeKind::kQuantisedRing},
      {"int8:1", "int8:1", ExchangeKind::kQuantisedRing},
      {"int8:16777216", "int8:16777216", ExchangeKind::kQuantisedRing},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Compressor> comp;
    const Status st = makeCompressor(c.spec, &comp);
    ASSERT_TRUE(st.isOk()) << c.spec << ": " << st.toString();
    EXPECT_EQ(comp->spec(), c.canonical);
    EXPECT_EQ(comp->exchangeKind(), c.kind) << c.spec;
    EXPECT_EQ(comp->crossHostOnly(),
              std::string(c.canonical).find(":cross_host") != std::string::npos)
        << c.spec;
    // The canonical spec builds the same compressor.
    std::unique_ptr<Compressor> again;
    ASSERT_TRUE(makeCompressor(comp->spec(), &again).isOk());
    EXPECT_EQ(again->spec(), comp->spec());
  }
}

TEST(CompressorFactory, RejectedSpecsSayWhatIsAccepted) {
  for (const char* spec : {"fp32",
                           "topk",
                           "topk:",
                           "topk:0",
                           "topk:1.5",
                           "topk:-0.1",
                           "topk:abc",
                           "topk:nan",
                           "topk:inf",
                           "topk:0.1x",
                           "topk:0x1p-3",
                           "int8:0",
                           "int8:-1",
                           "int8:16777217",
                           "int8:9999999999",
                           "int8:2.5",
                           "int8:",
                           "fp16:2",
                           "none:1",
                           "none:cross_host",
                           "topk:cross_host",
                           "fp16:cross_host:x",
                           "fp16:crosshost",
                           "bf16:x",
                           "top-k:0.01",
                           ":",
                           "gzip",
                           "topk:0.01:",
                           "topk:0.01:warmup=",
                           "topk:0.01:warmup=-1",
                           "topk:0.01:warmup=1e3",
                           "topk:0.01:warmup=1000000000",
                           "topk:0.01:steps=5",
                           "topk::warmup=5"}) {
    std::unique_ptr<Compressor> comp;
    const Status st = makeCompressor(spec, &comp);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_EQ(comp, nullptr) << spec;
    EXPECT_NE(st.message().find(std::string("'") + spec + "'"), std::string::npos) << st.message();
    EXPECT_NE(
        st.message().find("accepted: none, fp16, bf16, fp16:cross_host, bf16:cross_host, topk:"),
        std::string::npos)
        << st.message();
  }
}

TEST(CompressorFactory, IntegerTensorsPassThrough) {
  const std::vector<DataType> integers = {DataType::kUInt8, DataType::kInt8,  DataType::kInt16,
                                          DataType::kInt32, DataType::kInt64, DataType::kBool};
  for (const char* spec : {"none", "fp16", "bf16", "topk:0.01", "int8"}) {
    std::unique_ptr<Compressor> comp;
    ASSERT_TRUE(makeCompressor(spec, &comp).isOk());
    for (DataType dtype : integers) {
      EXPECT_FALSE(comp->appliesTo(dtype)) << spec << " " << dataTypeName(dtype);
      // Called anyway, a compressor refuses rather than mangling the tensor.
      std::vector<int32_t> values = {1, -2, 3, 4};
      std::vector<uint8_t> packed;
      if (std::string(spec) != "none") {
        const Status st = comp->compress(values.data(), 4, dtype, "ints", &packed);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << spec;
        EXPECT_NE(st.message().find("ints"), std::string::npos) << st.message();
      }
    }
    EXPECT_EQ(comp->appliesTo(DataType::kFloat32), std::string(spec) != "none");
  }
  // "none" is the identity on the bytes, whatever the dtype.
  std::unique_ptr<Compressor> none;
  ASSERT_TRUE(makeCompressor("none", &none).isOk());
  std::vector<int64_t> values = {5, -6, 7};
  std::vector<uint8_t> packed;
  ASSERT_TRUE(none->compress(values.data(), 3, DataType::kInt64, "n", &packed).isOk());
  std::vector<int64_t> out(3);
  ASSERT_TRUE(
      none->decompress(packed.data(), packed.size(), out.data(), 3, DataType::kInt64).isOk());
  EXPECT_EQ(out, values);
}

TEST(CompressorFactory, AccumulateOnAnAllreduceKindIsABug) {
  std::unique_ptr<Compressor> comp;
  ASSERT_TRUE(makeCompressor("fp16", &comp).isOk());
  float dense[1] = {0};
  uint8_t packed[2] = {0, 0};
  EXPECT_EQ(comp->accumulate(packed, 2, dense, 1).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tutti
