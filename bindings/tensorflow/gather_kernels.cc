// gather_kernels.cc: TuttiAllgather, TuttiGroupedAllgather, TuttiBroadcast and
// TuttiAlltoall (Horovod's HorovodAllgather, ... of 0.28.1, same attrs).
#include <string>
#include <vector>

#include "kernel_base.h"
#include "tensorflow/core/framework/op.h"

namespace tutti_tf {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

namespace {

// Allgather of each input (one for TuttiAllgather, num_tensors for the
// grouped op, named <name>.<i> there).
class AllgatherKernel : public TuttiAsyncKernel {
 public:
  explicit AllgatherKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {
    grouped_ = ctx->HasAttr("num_tensors");
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto handles = EnqueueEach(
        ctx, grouped_, [this](const tutti_tensor& in, const char* name, tutti_handle* handle) {
          return tutti_allgather_async_opts(&in, name, Options(), handle);
        });
    FinishWithHandleOutputs(ctx, std::move(done), std::move(handles));
  }

 private:
  bool grouped_ = false;
};

class BroadcastKernel : public TuttiAsyncKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    tutti_tensor in, out;
    std::vector<std::vector<int64_t>> shapes;
    if (!SameShapeOutput(ctx, 0, &in, &out, &shapes)) return done();
    tutti_handle handle = 0;
    int rc =
        tutti_broadcast_async_opts(&in, &out, root_rank_, TensorName().c_str(), Options(), &handle);
    if (!Enqueued(ctx, rc, done)) return;
    FinishWhenDone(ctx, std::move(done), {handle});
  }

 private:
  int root_rank_ = 0;
};

// Output 1 of an alltoall: the rows received from each rank (int32).
absl::Status ReceivedSplits(OpKernelContext* ctx, tutti_handle handle) {
  int count = 0;
  if (tutti_handle_received_splits(handle, nullptr, 0, &count) != TUTTI_OK) {
    return absl::InternalError(std::string("tutti_handle_received_splits: ") + tutti_last_error());
  }
  std::vector<int64_t> splits(count);
  tutti_handle_received_splits(handle, splits.data(), count, &count);
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, tensorflow::TensorShape({count}), &out));
  auto flat = out->flat<int32_t>();
  for (int i = 0; i < count; ++i) flat(i) = static_cast<int32_t>(splits[i]);
  return absl::OkStatus();
}

class AlltoallKernel : public TuttiAsyncKernel {
 public:
  explicit AlltoallKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    const Tensor& splits_in = ctx->input(1);
    if (!CheckDtype(ctx, input, 0)) return done();
    OP_REQUIRES_ASYNC(ctx, splits_in.dims() == 1,
                      absl::InvalidArgumentError("tutti alltoall " + name() +
                                                 ": splits must be a vector (rank 1), got shape " +
                                                 splits_in.shape().DebugString()),
                      done);
    std::vector<int64_t> splits;
    auto flat = splits_in.flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) splits.push_back(flat(i));
    std::vector<int64_t> shape;
    tutti_tensor in = Describe(input, &shape);
    tutti_handle handle = 0;
    int rc = tutti_alltoall_async_opts(&in, splits.empty() ? nullptr : splits.data(),
                                       static_cast<int>(splits.size()), TensorName().c_str(),
                                       Options(), &handle);
    if (!Enqueued(ctx, rc, done)) return;
    FinishWhenDone(ctx, std::move(done), {handle}, [handle](OpKernelContext* c) {
      TF_RETURN_IF_ERROR(CopyHandleOutput(c, 0, handle));
      return ReceivedSplits(c, handle);
    });
  }
};

}  // namespace
}  // namespace tutti_tf

namespace tensorflow {

REGISTER_OP("TuttiAllgather")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(tutti_tf::FirstDimUnknown);
REGISTER_KERNEL_BUILDER(Name("TuttiAllgather").Device(DEVICE_CPU), tutti_tf::AllgatherKernel);

REGISTER_OP("TuttiGroupedAllgather")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int >= 1")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors * T")
    .Output("outputs: num_tensors * T")
    .SetShapeFn(tutti_tf::FirstDimUnknown);
REGISTER_KERNEL_BUILDER(Name("TuttiGroupedAllgather").Device(DEVICE_CPU),
                        tutti_tf::AllgatherKernel);

// root_rank: a global rank (a member of the process set), as Horovod's.
REGISTER_OP("TuttiBroadcast")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("root_rank: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(tutti_tf::SameShapes);
REGISTER_KERNEL_BUILDER(Name("TuttiBroadcast").Device(DEVICE_CPU), tutti_tf::BroadcastKernel);

// splits: rows of `tensor` for each rank of the set, or empty for an even split.
REGISTER_OP("TuttiAlltoall")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn(tutti_tf::FirstDimUnknown);
REGISTER_KERNEL_BUILDER(Name("TuttiAlltoall").Device(DEVICE_CPU), tutti_tf::AlltoallKernel);

}  // namespace tensorflow
