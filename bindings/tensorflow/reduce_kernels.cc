// reduce_kernels.cc: TuttiAllreduce, TuttiGroupedAllreduce, TuttiReducescatter
// and TuttiGroupedReducescatter (Horovod's HorovodAllreduce, ... of 0.28.1,
// with the same attrs, plus `compression` for the allreduces).
#include <string>
#include <vector>

#include "kernel_base.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tutti_tf {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

namespace {

// The attrs of a reduction.
struct ReduceAttrs {
  int op = TUTTI_SUM;
  float prescale = 1.0f;  // float attrs, as Horovod's (TensorFlow has no double attr)
  float postscale = 1.0f;

  void read(OpKernelConstruction* ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("prescale_factor", &prescale));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("postscale_factor", &postscale));
  }
};

class AllreduceKernel : public TuttiAsyncKernel {
 public:
  explicit AllreduceKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) { attrs_.read(ctx); }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    tutti_tensor in, out;
    std::vector<std::vector<int64_t>> shapes;
    if (!SameShapeOutput(ctx, 0, &in, &out, &shapes)) return done();
    tutti_handle handle = 0;
    int rc = tutti_allreduce_async_opts(&in, &out, TensorName().c_str(), attrs_.op, attrs_.prescale,
                                        attrs_.postscale, Options(), &handle);
    if (!Enqueued(ctx, rc, done)) return;
    FinishWhenDone(ctx, std::move(done), {handle});
  }

 private:
  ReduceAttrs attrs_;
};

class GroupedAllreduceKernel : public TuttiAsyncKernel {
 public:
  explicit GroupedAllreduceKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {
    attrs_.read(ctx);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    int n = ctx->num_inputs();
    std::vector<std::vector<int64_t>> shapes;
    shapes.reserve(2 * n);  // the views point into it: no reallocation
    std::vector<tutti_tensor> ins(n), outs(n);
    for (int i = 0; i < n; ++i) {
      if (!SameShapeOutput(ctx, i, &ins[i], &outs[i], &shapes)) return done();
    }
    std::vector<tutti_handle> handles(n);
    int rc = tutti_grouped_allreduce_async_opts(n, ins.data(), outs.data(), TensorName().c_str(),
                                                attrs_.op, attrs_.prescale, attrs_.postscale,
                                                Options(), handles.data());
    if (!Enqueued(ctx, rc, done)) return;
    FinishWhenDone(ctx, std::move(done), std::move(handles));
  }

 private:
  ReduceAttrs attrs_;
};

// Reducescatter of each input (one for TuttiReducescatter, num_tensors for
// the grouped op, named <name>.<i> there); the outputs come from the handles.
class ReducescatterKernel : public TuttiAsyncKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* ctx) : TuttiAsyncKernel(ctx) {
    attrs_.read(ctx);
    grouped_ = ctx->HasAttr("num_tensors");
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto handles = EnqueueEach(
        ctx, grouped_, [this](const tutti_tensor& in, const char* name, tutti_handle* handle) {
          return tutti_reducescatter_async_opts(&in, name, attrs_.op, attrs_.prescale,
                                                attrs_.postscale, Options(), handle);
        });
    FinishWithHandleOutputs(ctx, std::move(done), std::move(handles));
  }

 private:
  ReduceAttrs attrs_;
  bool grouped_ = false;
};

}  // namespace
}  // namespace tutti_tf

namespace tensorflow {

using tutti_tf::FirstDimUnknown;
using tutti_tf::SameShapes;

// reduce_op: a tutti_reduce_op (Sum 0, Average 1, Min 2, Max 3, Product 4,
// Adasum 5). compression: a spec as tutti_allreduce_async_ex's ("" = the
// job's TUTTI_COMPRESSION).
REGISTER_OP("TuttiAllreduce")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("process_set_id: int = 0")
    .Attr("compression: string = ''")
    .Input("tensor: T")
    .Output("sum: T")
    .SetShapeFn(SameShapes);
REGISTER_KERNEL_BUILDER(Name("TuttiAllreduce").Device(DEVICE_CPU), tutti_tf::AllreduceKernel);

REGISTER_OP("TuttiGroupedAllreduce")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int >= 1")
    .Attr("process_set_id: int = 0")
    .Attr("compression: string = ''")
    .Input("tensors: num_tensors * T")
    .Output("sum: num_tensors * T")
    .SetShapeFn(SameShapes);
REGISTER_KERNEL_BUILDER(Name("TuttiGroupedAllreduce").Device(DEVICE_CPU),
                        tutti_tf::GroupedAllreduceKernel);

REGISTER_OP("TuttiReducescatter")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(FirstDimUnknown);
REGISTER_KERNEL_BUILDER(Name("TuttiReducescatter").Device(DEVICE_CPU),
                        tutti_tf::ReducescatterKernel);

REGISTER_OP("TuttiGroupedReducescatter")
    .Attr("T: " TUTTI_TF_TYPES)
    .Attr("reduce_op: int")
    .Attr("ignore_name_scope: bool = False")
    .Attr("num_tensors: int >= 1")
    .Attr("process_set_id: int = 0")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Input("tensors: num_tensors * T")
    .Output("outputs: num_tensors * T")
    .SetShapeFn(FirstDimUnknown);
REGISTER_KERNEL_BUILDER(Name("TuttiGroupedReducescatter").Device(DEVICE_CPU),
                        tutti_tf::ReducescatterKernel);

}  // namespace tensorflow
