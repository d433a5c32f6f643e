#include "coordinator/compressor_set.h"

#include "compression/compressor_factory.h"
#include "core/compression_spec.h"

namespace tutti {

Status CompressorSet::get(const std::string& spec, Compressor** out) {
  std::lock_guard<std::mutex> lock(mu_);
  return getLocked(spec, out);
}

Status CompressorSet::getLocked(const std::string& spec, Compressor** out) {
  auto it = by_spec_.find(spec);
  if (it == by_spec_.end()) {
    std::string canonical;
    TUTTI_RETURN_IF_ERROR(canonicalizeCompressionSpec(spec, &canonical));
    it = by_spec_.find(canonical);
    if (it == by_spec_.end()) {
      std::unique_ptr<Compressor> made;
      TUTTI_RETURN_IF_ERROR(makeCompressor(canonical, &made));
      it = by_spec_.emplace(canonical, std::move(made)).first;
    }
  }
  *out = it->second.get();
  return Status::ok();
}

CompressionResiduals CompressorSet::residuals() {
  std::lock_guard<std::mutex> lock(mu_);
  CompressionResiduals out;
  for (const auto& [spec, compressor] : by_spec_) {
    if (!compressor->residuals().empty()) out[spec] = compressor->residuals();
  }
  return out;
}

Status CompressorSet::setResiduals(const CompressionResiduals& residuals) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<Compressor*, const ResidualMap*> targets;
  for (const auto& [spec, map] : residuals) {
    Compressor* c = nullptr;
    TUTTI_RETURN_IF_ERROR(getLocked(spec, &c));
    targets[c] = &map;
  }
  for (const auto& [compressor, map] : targets) compressor->setResiduals(*map);
  return Status::ok();
}

}  // namespace tutti
