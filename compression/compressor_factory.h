#pragma once

// Builds a Compressor from the spec string that TUTTI_COMPRESSION,
// `tuttirun --compression`, the C API and Python pass.

#include <memory>
#include <string>

#include "compression/compressor.h"
#include "core/status.h"

namespace tutti {

// Accepted specs: core/compression_spec.h (the parser is shared with the
// settings registry and tuttirun). kInvalidArgument, quoting the spec and
// listing what is accepted, otherwise. On error *out is left unchanged.
Status makeCompressor(const std::string& spec, std::unique_ptr<Compressor>* out);

// The accepted forms (compressionSpecHelp()), for help texts and error messages.
const char* compressorSpecHelp();

}  // namespace tutti
