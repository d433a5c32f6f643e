#pragma once

// The compression spec string that TUTTI_COMPRESSION, `tuttirun
// --compression`, OpOptions.compression, the C API and Python pass: parsed
// here, in core/, so that the settings registry and the launcher validate it
// with the same parser that compression/compressor_factory.h builds from.
//
// Accepted (case-insensitive; spaces around the spec are ignored):
//   "none" or ""          no compression
//   "fp16", "bf16"        cast to float16 / bfloat16, allreduced
//   "fp16:cross_host", "bf16:cross_host"
//                         the same cast for the bytes that cross hosts only,
//                         where the hierarchical allreduce runs (float32 in a
//                         host); elsewhere the whole buffer is cast
//   "topk:<ratio>"        top-k with error feedback, ratio in (0, 1], e.g. "topk:0.01"
//   "topk:<ratio>:warmup=<N>"  the same after a sparsity warm-up of N steps
//                         per tensor (Deep Gradient Compression's; N in
//                         [0, 10^9], 0 = none): compression/topk_compressor.h
//   "int8", "int8:<B>"    int8 with a scale per block of B elements (default 256,
//                         B in [1, 16777216]) and error feedback
// Anything else is kInvalidArgument quoting the spec and listing what is
// accepted. Pure functions; thread-safe.

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tutti {

struct CompressionSpec {
  enum class Kind { kNone, kFp16, kBf16, kTopK, kInt8 };
  static constexpr uint32_t kDefaultInt8Block = 256;
  static constexpr uint32_t kMaxInt8Block = 1u << 24;

  Kind kind = Kind::kNone;
  double ratio = 0.0;       // kTopK: in (0, 1]
  uint32_t warmup = 0;      // kTopK: sparsity warm-up steps per tensor (0: none)
  uint32_t block = 0;       // kInt8: in [1, kMaxInt8Block]
  bool cross_host = false;  // kFp16, kBf16: only what crosses hosts is cast
};

// On error *out is left unchanged.
Status parseCompressionSpec(const std::string& spec, CompressionSpec* out);

// The canonical spec: "none", "fp16", "bf16" (+ ":cross_host"), "topk:<shortest decimal that
// reads back as the same ratio>" (+ ":warmup=<N>" when N > 0), "int8:<B>". Parsing it gives `spec`
// again.
std::string canonicalCompressionSpec(const CompressionSpec& spec);

// parse + canonical in one: "" and " FP16 " give "none" and "fp16".
Status canonicalizeCompressionSpec(const std::string& spec, std::string* canonical);

// The accepted forms, for help texts and error messages.
const char* compressionSpecHelp();

}  // namespace tutti
