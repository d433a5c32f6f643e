#pragma once

// One point of tutti-bench: a collective of a given size, dtype and reduce op
// on a Runtime, with inputs chosen so that every result is exact (small
// integers, also in float16/bfloat16) and a check of the outputs.
//
// Sizes follow nccl-tests: bytes() is the buffer of one rank for allreduce
// and broadcast, the whole gathered output for allgather, the whole input for
// reducescatter, and everything one rank sends for alltoall; count() is
// bytes() in elements. Each rank's share is at least one element, so bytes()
// can differ from the size asked for.
//
// Threading: one thread uses a case at a time. Inputs are written once, in
// the constructor, and never change; run() borrows them.

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/runtime.h"

namespace tutti::bench {

enum class Collective { kAllreduce, kAllgather, kBroadcast, kReducescatter, kAlltoall };

const char* collectiveName(Collective op);
// The collectives in the order `--op all` runs them.
const std::vector<Collective>& allCollectives();
bool parseCollective(const std::string& name, Collective* op);
bool parseReduceOp(const std::string& name, ReduceOp* op);

class CollectiveCase {
 public:
  // `set`: the process set it runs over (nullptr: every rank); this rank
  // must be a member. Ranks and sizes above are then the set's. `root`: the
  // broadcast root's rank among them, 0 <= root < their number. `ordered`:
  // the ordered lane (OpOptions::ordered; the name is then not used).
  CollectiveCase(Runtime& runtime, Collective op, DataType dtype, ReduceOp reduce_op, int64_t bytes,
                 const ProcessSetInfo* set = nullptr, int root = 0, bool ordered = false);

  int64_t bytes() const { return per_rank_ * numRanksInSize() * elementSize(); }
  int64_t count() const { return per_rank_ * numRanksInSize(); }
  // "none" for the collectives that do not reduce.
  const char* reduceOpLabel() const;

  // Enqueues the op under `name`, waits for it and releases its handle. With
  // `wrong` set, first poisons the outputs and afterwards counts the output
  // elements of this rank that differ from the expected values.
  Status run(const std::string& name, int64_t* wrong);

 private:
  int64_t numRanksInSize() const;
  int64_t elementSize() const;
  Status enqueue(const std::string& name, Handle* handle);
  int64_t countWrong(const void* output, int64_t elements) const;
  double expected(int64_t index) const;

  Runtime& runtime_;
  Collective op_;
  DataType dtype_;
  ReduceOp reduce_op_;
  int rank_;
  int ranks_;
  int32_t set_id_ = kGlobalProcessSet;
  int root_member_ = 0;   // broadcast root among the set's (the world's) ranks
  int root_ = 0;          // the same, a global rank
  bool ordered_ = false;  // OpOptions::ordered
  int64_t per_rank_ = 1;  // elements each rank contributes or receives per block
  std::vector<uint8_t> input_;
  std::vector<uint8_t> output_;  // allreduce and broadcast; the others' outputs are the handle's
};

// values[i] = max over ranks of values[i] (float64 allreduce named `name`).
Status maxOverRanks(Runtime& runtime, const std::string& name, std::vector<double>* values,
                    int32_t process_set = kGlobalProcessSet);
// Sum over ranks of `value`.
Status sumOverRanks(Runtime& runtime, const std::string& name, int64_t* value,
                    int32_t process_set = kGlobalProcessSet);

}  // namespace tutti::bench
