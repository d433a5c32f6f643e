// control_kernels.cc: TuttiBarrier, TuttiJoin and the placement ops TuttiSize,
// TuttiLocalSize, TuttiRank, TuttiLocalRank, TuttiProcessSetIncluded
// (Horovod's HorovodJoin, HorovodSize, ... of 0.28.1: their values are read
// when the graph runs, not when it is built).
#include <string>

#include "kernel_base.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace tutti_tf {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

namespace {

class BarrierKernel : public TuttiAsyncKernel {
 public:
  explicit BarrierKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    tutti_handle handle = 0;
    if (!Enqueued(ctx, tutti_barrier_async_opts(Options(), &handle), done)) return;
    FinishWhenDone(ctx, std::move(done), {handle});
  }
};

class JoinKernel : public TuttiAsyncKernel {
 public:
  explicit JoinKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    tutti_handle handle = 0;
    if (!Enqueued(ctx, tutti_join_async(&handle), done)) return;
    FinishWhenDone(ctx, std::move(done), {handle}, [handle](OpKernelContext* c) {
      int last = -1;
      if (tutti_handle_join_result(handle, &last) != TUTTI_OK) {
        return absl::InternalError(std::string("tutti_handle_join_result: ") + tutti_last_error());
      }
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(c->allocate_output(0, tensorflow::TensorShape({}), &out));
      out->scalar<int32_t>()() = last;
      return absl::OkStatus();
    });
  }
};

// A placement query as an int32 scalar; -1 from tutti means "not initialised".
enum class Query { kSize, kLocalSize, kRank, kLocalRank, kIncluded };

template <Query kQuery>
class PlacementKernel : public tensorflow::OpKernel {
 public:
  explicit PlacementKernel(OpKernelConstruction* ctx) : OpKernel(ctx) {
    if (ctx->HasAttr("process_set_id")) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("process_set_id", &process_set_id_));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    int value = -1;
    int set_size = 0, set_rank = -1;
    switch (kQuery) {
      case Query::kSize:
      case Query::kIncluded:
        if (tutti_process_set_info(process_set_id_, &set_size, &set_rank) != TUTTI_OK) {
          int code =
              tutti_is_initialized() ? TUTTI_ERR_INVALID_ARGUMENT : TUTTI_ERR_NOT_INITIALIZED;
          ctx->SetStatus(ToStatus(code, tutti_last_error()));
          return;
        }
        value = kQuery == Query::kSize ? set_size : (set_rank >= 0 ? 1 : 0);
        break;
      case Query::kLocalSize:
        value = tutti_local_size();
        break;
      case Query::kRank:
        value = tutti_rank();
        break;
      case Query::kLocalRank:
        value = tutti_local_rank();
        break;
    }
    OP_REQUIRES(ctx, value >= 0, ToStatus(TUTTI_ERR_NOT_INITIALIZED, tutti_last_error()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  int process_set_id_ = 0;
};

absl::Status ScalarShape(tensorflow::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tutti_tf

namespace tensorflow {

using tutti_tf::PlacementKernel;
using tutti_tf::Query;

// Stateful: not pruned, folded or merged, and run in program order.
REGISTER_OP("TuttiBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(shape_inference::NoOutputs);
REGISTER_KERNEL_BUILDER(Name("TuttiBarrier").Device(DEVICE_CPU), tutti_tf::BarrierKernel);

REGISTER_OP("TuttiJoin").Output("output: int32").SetIsStateful().SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiJoin").Device(DEVICE_CPU), tutti_tf::JoinKernel);

REGISTER_OP("TuttiSize")
    .Attr("process_set_id: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiSize").Device(DEVICE_CPU), PlacementKernel<Query::kSize>);

REGISTER_OP("TuttiProcessSetIncluded")
    .Attr("process_set_id: int = 0")
    .Output("included: int32")
    .SetIsStateful()
    .SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiProcessSetIncluded").Device(DEVICE_CPU),
                        PlacementKernel<Query::kIncluded>);

REGISTER_OP("TuttiLocalSize")
    .Output("local_size: int32")
    .SetIsStateful()
    .SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiLocalSize").Device(DEVICE_CPU),
                        PlacementKernel<Query::kLocalSize>);

REGISTER_OP("TuttiRank").Output("rank: int32").SetIsStateful().SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiRank").Device(DEVICE_CPU), PlacementKernel<Query::kRank>);

REGISTER_OP("TuttiLocalRank")
    .Output("local_rank: int32")
    .SetIsStateful()
    .SetShapeFn(tutti_tf::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("TuttiLocalRank").Device(DEVICE_CPU),
                        PlacementKernel<Query::kLocalRank>);

}  // namespace tensorflow
