#include "compression/compressor_factory.h"

#include "compression/cast_compressor.h"
#include "compression/int8_compressor.h"
#include "compression/none_compressor.h"
#include "compression/topk_compressor.h"
#include "core/compression_spec.h"

namespace tutti {

const char* compressorSpecHelp() {
  return compressionSpecHelp();
}

Status makeCompressor(const std::string& spec, std::unique_ptr<Compressor>* out) {
  CompressionSpec parsed;
  TUTTI_RETURN_IF_ERROR(parseCompressionSpec(spec, &parsed));
  switch (parsed.kind) {
    case CompressionSpec::Kind::kNone:
      *out = std::make_unique<NoneCompressor>();
      break;
    case CompressionSpec::Kind::kFp16:
      *out = std::make_unique<CastCompressor>(DataType::kFloat16, parsed.cross_host);
      break;
    case CompressionSpec::Kind::kBf16:
      *out = std::make_unique<CastCompressor>(DataType::kBFloat16, parsed.cross_host);
      break;
    case CompressionSpec::Kind::kTopK:
      *out = std::make_unique<TopKCompressor>(parsed.ratio, parsed.warmup);
      break;
    case CompressionSpec::Kind::kInt8:
      *out = std::make_unique<Int8Compressor>(parsed.block);
      break;
  }
  return Status::ok();
}

}  // namespace tutti
