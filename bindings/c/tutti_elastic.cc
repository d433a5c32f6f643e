// The elastic functions of the C ABI (tutti.h, docs/elastic.md) over
// tutti::ElasticWorker. The worker (the session's store client and last
// generation) lives in the process global next to the runtime
// (bindings/c/c_api_state.h) and outlives each runtime.

// clang-format off
#include "bindings/c/tutti.h"
// clang-format on

#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "bindings/c/c_api_state.h"
#include "coordinator/residual_codec.h"
#include "core/settings.h"

namespace tutti_c {

tutti::Status elasticJoinLocked(Global& g, const tutti::Settings& settings) {
  if (!g.elastic || g.elastic->workerId() != settings.elastic_worker_id) {
    std::unique_ptr<tutti::ElasticWorker> worker;
    TUTTI_RETURN_IF_ERROR(tutti::ElasticWorker::create(settings, &worker));
    g.elastic = std::move(worker);
  }
  std::unique_ptr<tutti::Runtime> runtime;
  TUTTI_RETURN_IF_ERROR(g.elastic->join(&runtime));
  g.runtime = std::move(runtime);
  return tutti::Status::ok();
}

}  // namespace tutti_c

namespace {

using tutti_c::fail;
using tutti_c::global;
using tutti_c::Global;

// The runtime's elastic generation (-1: not an elastic runtime).
int64_t generationOf(const tutti::Runtime& runtime) {
  return runtime.settings().elastic_generation;
}

}  // namespace

extern "C" {

int tutti_elastic_enabled(void) {
  const auto value = tutti::processEnv()("TUTTI_ELASTIC_WORKER_ID");
  const tutti::SettingSpec* spec = tutti::findSettingSpec("TUTTI_ELASTIC_WORKER_ID");
  if (!value || !tutti::validateSetting(*spec, *value).isOk()) return 0;
  return std::stoll(*value) >= 0 ? 1 : 0;
}

int64_t tutti_elastic_generation(void) {
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  return g.runtime ? generationOf(*g.runtime) : -1;
}

int tutti_elastic_leave(void) {
  Global& g = global();
  tutti::Status reported;
  {
    std::shared_lock<std::shared_mutex> lock(g.mutex);
    if (!g.runtime) return TUTTI_OK;
    if (g.elastic && generationOf(*g.runtime) >= 0) reported = g.elastic->reportLoss(*g.runtime);
  }
  const int rc = tutti_shutdown();
  if (!reported.isOk()) {
    return fail(tutti::Status(reported.code(),
                              "tutti_elastic_leave: could not report the lost rank to the elastic "
                              "driver (the runtime was shut down): " +
                                  reported.message()));
  }
  return rc;
}

int tutti_elastic_join(void) {
  Global& g = global();
  std::unique_lock<std::shared_mutex> lock(g.mutex);
  if (g.runtime) {
    return fail(tutti::Status::invalidArgument(
        "tutti_elastic_join: tutti is initialised; call tutti_elastic_leave() first"));
  }
  tutti::Settings settings;
  tutti::Status status = tutti::loadSettings(tutti::processEnv(), &settings);
  if (!status.isOk()) return fail(status);
  if (settings.elastic_worker_id < 0) {
    return fail(tutti::Status::invalidArgument(
        "tutti_elastic_join: TUTTI_ELASTIC_WORKER_ID is not set (the job was not started by "
        "tuttirun's elastic driver)"));
  }
  return tutti_c::report(tutti_c::elasticJoinLocked(g, settings));
}

int tutti_elastic_hosts_updated(int* updated) {
  if (updated == nullptr) {
    return fail(tutti::Status::invalidArgument("updated (out) is NULL"));
  }
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  if (!g.runtime) return tutti_c::failNotInitialized();
  if (!g.elastic || generationOf(*g.runtime) < 0) {
    *updated = 0;
    return TUTTI_OK;
  }
  bool any = false;
  tutti::Status status = g.elastic->hostsUpdated(*g.runtime, &any);
  if (!status.isOk()) return fail(status);
  *updated = any ? 1 : 0;
  return TUTTI_OK;
}

int tutti_get_compression_residuals(void* buffer, size_t capacity, size_t* size) {
  if (size == nullptr) return fail(tutti::Status::invalidArgument("size (out) is NULL"));
  return tutti_c::withRuntime([&](tutti::Runtime& runtime) -> int {
    const std::vector<uint8_t> bytes = tutti::encodeResiduals(runtime.compressionResiduals());
    *size = bytes.size();
    if (buffer == nullptr) return TUTTI_OK;
    if (capacity < bytes.size()) {
      return fail(tutti::Status::invalidArgument(
          "tutti_get_compression_residuals: capacity " + std::to_string(capacity) +
          " bytes, the residuals need " + std::to_string(bytes.size()) +
          " (call with buffer NULL to ask the size)"));
    }
    std::memcpy(buffer, bytes.data(), bytes.size());
    return TUTTI_OK;
  });
}

int tutti_set_compression_residuals(const void* data, size_t size) {
  if (data == nullptr && size > 0) {
    return fail(tutti::Status::invalidArgument("data is NULL but size is " + std::to_string(size)));
  }
  tutti::CompressionResiduals residuals;
  tutti::Status status =
      tutti::decodeResiduals(static_cast<const uint8_t*>(data), size, &residuals);
  if (!status.isOk()) return fail(status);
  return tutti_c::withRuntime([&](tutti::Runtime& runtime) -> int {
    return tutti_c::report(runtime.setCompressionResiduals(residuals));
  });
}

}  // extern "C"
