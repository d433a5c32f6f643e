// A GPU job of processes (run by scripts/device-check under
// `tuttirun -np 3 --backend nccl`): CUDA tensors over a two-member process
// set {0, 2} on its own NCCL communicator, and a one-member set {1}, against
// references computed from every member's inputs; Adasum on CUDA tensors over
// {0, 2} against the CPU Adasum; then the set is removed and registered
// again (a new communicator) and checked once more.
//
// One GPU for every rank: NCCL refuses two ranks of a communicator on one
// device of one host ("Duplicate GPU detected"), so each process sets
// NCCL_HOSTID to its own value (unless set) before NCCL starts, which makes
// NCCL treat the ranks as separate hosts and connect them over its socket
// transport (NCCL_NET=Socket, P2P and SHM off, unless set). With one GPU
// per rank on one host, run it with TUTTI_GPU_SET_JOB_SAME_HOST=1 to keep
// NCCL's own host detection.
//
// Prints one line per rank; exits 0 when every check matched, 1 otherwise.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/runtime.h"
#include "core/settings.h"
#include "tests/cuda/gpu_set_checks.h"

namespace {

std::string addAndCheck(tutti::Runtime& rt, const std::vector<int>& pair, int round) {
  using tutti::test::checkAdasumOnCuda;
  using tutti::test::checkSetCollectivesOnCuda;
  int32_t pair_id = -1, single_id = -1;
  tutti::Status st = rt.addProcessSet(pair, &pair_id);
  if (st.isOk()) st = rt.addProcessSet({1}, &single_id);
  if (!st.isOk()) return "add_process_set: " + st.toString();
  tutti::ProcessSetInfo set;
  const int32_t id = rt.rank() == 1 ? single_id : pair_id;
  st = rt.processSet(id, &set);
  if (!st.isOk()) return st.toString();
  std::string errors = checkSetCollectivesOnCuda(rt, set);
  if (set.size() == 2) errors += checkAdasumOnCuda(rt, set);
  for (int32_t x : {pair_id, single_id}) {
    st = rt.removeProcessSet(x);
    if (!st.isOk()) errors += "remove_process_set: " + st.toString() + "; ";
  }
  if (!errors.empty()) errors = "round " + std::to_string(round) + ": " + errors;
  return errors;
}

}  // namespace

int main() {
  tutti::Settings settings;
  tutti::Status st = tutti::loadSettings(tutti::processEnv(), &settings);
  if (st.isOk() && settings.size != 3) {
    st = tutti::Status::invalidArgument("run with 3 ranks (tuttirun -np 3 --backend nccl)");
  }
  if (st.isOk() && std::getenv("TUTTI_GPU_SET_JOB_SAME_HOST") == nullptr) {
    const std::string host = "tutti-gpu-set-job-" + std::to_string(settings.rank);
    setenv("NCCL_HOSTID", host.c_str(), 0);
    setenv("NCCL_NET", "Socket", 0);
    setenv("NCCL_P2P_DISABLE", "1", 0);
    setenv("NCCL_SHM_DISABLE", "1", 0);
  }
  int devices = 0;
  if (st.isOk() && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
    st = tutti::Status::invalidArgument("no CUDA device: this job needs a GPU");
  }
  std::unique_ptr<tutti::Runtime> rt;
  if (st.isOk()) st = tutti::Runtime::create(settings, &rt);
  if (!st.isOk()) {
    std::fprintf(stderr, "gpu_set_job: %s\n", st.toString().c_str());
    return 1;
  }
  std::string errors;
  for (int round = 0; round < 2; ++round) errors += addAndCheck(*rt, {0, 2}, round);
  st = rt->shutdown();
  if (!st.isOk()) errors += "shutdown: " + st.toString();
  if (errors.empty()) {
    std::printf("gpu_set_job: rank %d of 3: OK (set {0, 2} on NCCL, set {1}, Adasum)\n",
                settings.rank);
    return 0;
  }
  std::printf("gpu_set_job: rank %d of 3: FAILED: %s\n", settings.rank, errors.c_str());
  return 1;
}
