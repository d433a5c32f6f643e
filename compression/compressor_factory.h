#pragma once

// Builds a Compressor from the spec string that TUTTI_COMPRESSION,
// `tuttirun --compression`, the C API and Python pass.

#include <memory>
#include <string>

#include "compression/compressor.h"
#include "core/status.h"

namespace tutti {

// Accepted specs (case-insensitive; spaces around the spec are ignored):
//   "none" or ""          no compression
//   "fp16", "bf16"        cast to float16 / bfloat16, allreduced
//   "topk:<ratio>"        top-k with error feedback, ratio in (0, 1], e.g. "topk:0.01"
//   "int8", "int8:<B>"    int8 with a scale per block of B elements (default 256,
//                         B in [1, 16777216]) and error feedback
// kInvalidArgument, quoting the spec and listing what is accepted, otherwise.
// On error *out is left unchanged.
Status makeCompressor(const std::string& spec, std::unique_ptr<Compressor>* out);

// The accepted forms, for help texts and error messages.
const char* compressorSpecHelp();

}  // namespace tutti
