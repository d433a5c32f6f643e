// RuntimeImpl's process sets (coordinator/process_sets.h): registration and
// removal (collective over the global set, negotiated as ops of their own),
// and running a Response on the executor of its set.

#include <algorithm>

#include "coordinator/runtime_impl.h"
#include "core/logging.h"

namespace tutti {

namespace {

std::string rankList(const std::vector<int>& ranks) {
  return shapeToString(std::vector<int64_t>(ranks.begin(), ranks.end()));
}

}  // namespace

Status RuntimeImpl::runProcessSetOp(Request request, Completion* done) {
  TUTTI_RETURN_IF_ERROR(queue_.closedStatus());
  TensorEntry entry;
  entry.request = std::move(request);
  std::vector<TensorEntry> entries;
  entries.push_back(std::move(entry));
  std::vector<Handle> handles;
  TUTTI_RETURN_IF_ERROR(submit(std::move(entries), &handles));
  const Handle handle = handles[0];
  Status st = handles_.wait(handle, -1);
  done->join_result = handles_.joinResult(handle);
  (void)handles_.release(handle);
  done->status = st;
  return st;
}

Status RuntimeImpl::addProcessSet(const std::vector<int>& ranks, int32_t* id) {
  if (id == nullptr) return Status::invalidArgument("add_process_set: id must not be null");
  Request r;
  r.rank = rank_;
  r.type = OpType::kAddProcessSet;
  r.name = "__process_set." + std::to_string(set_op_counter_++);
  std::vector<int64_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  r.splits = sorted;
  Status valid = validateProcessSetRanks(sorted, size_);
  if (!valid.isOk()) {
    // Every rank must fail, not only this one: announce the error.
    r.splits.clear();
    return announceInvalid({std::move(r)}, valid);
  }
  Completion done;
  TUTTI_RETURN_IF_ERROR(runProcessSetOp(std::move(r), &done));
  *id = done.join_result;
  return Status::ok();
}

Status RuntimeImpl::removeProcessSet(int32_t id) {
  Request r;
  r.rank = rank_;
  r.type = OpType::kRemoveProcessSet;
  r.name = "__process_set." + std::to_string(set_op_counter_++);
  r.root = id;
  Completion done;
  return runProcessSetOp(std::move(r), &done);
}

Status RuntimeImpl::executeAddProcessSet(const Response& resp, Completion* done) {
  std::vector<int> ranks(resp.sizes.begin(), resp.sizes.end());
  if (std::optional<int32_t> existing = sets_.findByRanks(ranks)) {
    done->status = Status::invalidArgument(
        "add_process_set: a process set with ranks " + rankList(ranks) + " exists already (id " +
        std::to_string(*existing) + "); remove it first or use it");
    return Status::ok();
  }
  SetExecution exec;
  if (bundle_.connect_set) TUTTI_RETURN_IF_ERROR(bundle_.connect_set(ranks, &exec.data));
  const int32_t id = sets_.add(ranks);
  ProcessSetInfo set;
  TUTTI_RETURN_IF_ERROR(sets_.lookup(id, &set));
  if (exec.data.backend) {
    allowHierarchical(*exec.data.backend);  // as autotune last set them
    exec.executor = std::make_unique<Executor>(*exec.data.backend, set.rankOf(rank_), set.size(),
                                               &executor_state_);
    set_exec_.emplace(id, std::move(exec));
  } else if (set.rankOf(rank_) >= 0) {
    return Status::internal("process set " + std::to_string(id) +
                            ": this backend opened no data path for a member");
  }
  TUTTI_LOG(kDebug) << "process set " << id << " registered: ranks " << rankList(ranks);
  done->join_result = id;
  return Status::ok();
}

Status RuntimeImpl::executeRemoveProcessSet(const Response& resp, Completion* done) {
  const int32_t id = resp.root;
  if (id == kGlobalProcessSet) {
    done->status = Status::invalidArgument(
        "remove_process_set: the global process set (id 0) cannot be removed");
    return Status::ok();
  }
  if (!sets_.remove(id)) {
    ProcessSetInfo unused;
    done->status =
        Status::invalidArgument("remove_process_set: " + sets_.lookup(id, &unused).message());
    return Status::ok();
  }
  set_exec_.erase(id);
  closeLanes(Status::invalidArgument("ordered collective of process set " + std::to_string(id) +
                                     ": the set was removed before it ran"),
             id);
  device_->removeSet(id);  // its NCCL communicator, if one was opened
  const std::string why = "was pending when process set " + std::to_string(id) + " was removed";
  for (TensorEntry& e : queue_.takeProcessSet(id)) {
    handles_.complete(
        e.handle,
        Completion::failure(Status::invalidArgument(std::string(opTypeName(e.request.type)) + " '" +
                                                    e.request.name + "' " + why)));
  }
  if (controller_) controller_->failProcessSet(id, why);
  return Status::ok();
}

Status RuntimeImpl::executeResponse(const Response& resp,
                                    const std::vector<const TensorEntry*>& present,
                                    std::vector<Completion>* completions, bool* executed) {
  *executed = false;
  if (resp.type == OpType::kAddProcessSet || resp.type == OpType::kRemoveProcessSet) {
    completions->assign(resp.names.size(), Completion{});
    *executed = true;
    return resp.type == OpType::kAddProcessSet ? executeAddProcessSet(resp, &(*completions)[0])
                                               : executeRemoveProcessSet(resp, &(*completions)[0]);
  }
  if (resp.type == OpType::kSend &&
      std::none_of(present.begin(), present.end(), [](auto* e) { return e; })) {
    // A point-to-point message between two other ranks: nothing to do here.
    completions->assign(resp.names.size(), Completion{});
    return Status::ok();
  }
  Executor* executor = executor_.get();
  last_executor_ = executor;
  if (resp.process_set != kGlobalProcessSet) {
    auto it = set_exec_.find(resp.process_set);
    if (it == set_exec_.end()) {
      // Not a member (nothing to do), or the set was removed meanwhile.
      completions->assign(resp.names.size(), Completion::failure(Status::invalidArgument(
                                                 "process set " + std::to_string(resp.process_set) +
                                                 " was removed before this op ran")));
      *executed = std::any_of(present.begin(), present.end(), [](auto* e) { return e; });
      return Status::ok();
    }
    executor = it->second.executor.get();
    last_executor_ = executor;
  }
  *executed = true;
  return executor->execute(resp, present, completions);
}

}  // namespace tutti
