#pragma once

// CompressorSet: the runtime's compressors, one per canonical spec in use
// (compression/compressor.h), created on first use and kept for the
// runtime's life, so that error-feedback residuals persist across steps and
// across fusion groupings. Residuals are keyed by tensorKey(set, name)
// (core/message.h): the name itself for the global set, so the same name in
// two process sets keeps two residuals.
//
// Residuals as state: residuals()/setResiduals() give and take every
// compressor's residuals, keyed by canonical spec then tensor key, so that
// elastic training can commit them with the model and restore them after a
// membership change. A residual whose element count no longer matches its
// tensor is reset to zeros on next use (the tensor changed shape).
//
// Threading: the executor (background thread) calls get() and holds
// lockState() while compress() mutates residuals; residuals()/setResiduals()
// take the same lock from any thread, so they never see half a step. A
// Compressor* from get() stays valid for the set's life.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "compression/compressor.h"
#include "core/status.h"

namespace tutti {

// Canonical spec -> that compressor's residuals (tensor name -> float32 values).
using CompressionResiduals = std::map<std::string, ResidualMap>;

class CompressorSet {
 public:
  // The compressor for `spec` (any accepted form; compression/compressor_factory.h),
  // created on first use. kInvalidArgument for a bad spec. Background thread.
  Status get(const std::string& spec, Compressor** out);

  // Held while a compressor's residuals change (compress()).
  std::unique_lock<std::mutex> lockState() { return std::unique_lock<std::mutex>(mu_); }

  // Every non-empty residual map. Any thread.
  CompressionResiduals residuals();
  // Replaces the residuals of the specs in `residuals` (creating their
  // compressors); other compressors keep theirs. kInvalidArgument for a bad
  // spec (nothing is changed then). Any thread.
  Status setResiduals(const CompressionResiduals& residuals);

 private:
  Status getLocked(const std::string& spec, Compressor** out);

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Compressor>> by_spec_;  // key: canonical spec
};

}  // namespace tutti
