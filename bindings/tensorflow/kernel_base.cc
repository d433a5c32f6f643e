// kernel_base.cc: helpers shared by the tutti TensorFlow kernels (kernel_base.h).
#include "kernel_base.h"

#include <cstring>
#include <utility>

#include "tensorflow/core/framework/tensor_shape.h"

namespace tutti_tf {

using tensorflow::DataType;

namespace {

struct DtypePair {
  DataType tf;
  int code;
};

constexpr DtypePair kDtypes[] = {
    {tensorflow::DT_UINT8, TUTTI_UINT8},       {tensorflow::DT_INT8, TUTTI_INT8},
    {tensorflow::DT_INT16, TUTTI_INT16},       {tensorflow::DT_INT32, TUTTI_INT32},
    {tensorflow::DT_INT64, TUTTI_INT64},       {tensorflow::DT_HALF, TUTTI_FLOAT16},
    {tensorflow::DT_BFLOAT16, TUTTI_BFLOAT16}, {tensorflow::DT_FLOAT, TUTTI_FLOAT32},
    {tensorflow::DT_DOUBLE, TUTTI_FLOAT64},    {tensorflow::DT_BOOL, TUTTI_BOOL},
    {tensorflow::DT_UINT16, TUTTI_UINT16},     {tensorflow::DT_UINT32, TUTTI_UINT32},
    {tensorflow::DT_UINT64, TUTTI_UINT64},
};

}  // namespace

int DtypeCode(DataType dtype) {
  for (const auto& p : kDtypes) {
    if (p.tf == dtype) return p.code;
  }
  return -1;
}

DataType TfDtype(int code) {
  for (const auto& p : kDtypes) {
    if (p.code == code) return p.tf;
  }
  return tensorflow::DT_INVALID;
}

absl::Status ToStatus(int status, const std::string& message) {
  switch (status) {
    case TUTTI_OK:
      return absl::OkStatus();
    case TUTTI_ERR_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case TUTTI_ERR_MISMATCH:
    case TUTTI_ERR_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    case TUTTI_ERR_PEER_LOST:
    case TUTTI_ERR_IO:
      return absl::UnavailableError(message);
    case TUTTI_ERR_SHUTDOWN:
      return absl::AbortedError(message);
    case TUTTI_ERR_TIMEOUT:
    case TUTTI_ERR_STALLED:
      return absl::DeadlineExceededError(message);
    case TUTTI_ERR_DUPLICATE_NAME:
      return absl::AlreadyExistsError(message);
    default:
      return absl::InternalError(message);
  }
}

tutti_tensor Describe(const tensorflow::Tensor& tensor, std::vector<int64_t>* shape) {
  shape->clear();
  for (int i = 0; i < tensor.dims(); ++i) shape->push_back(tensor.dim_size(i));
  tutti_tensor t;
  t.data = const_cast<char*>(tensor.tensor_data().data());
  t.dtype = DtypeCode(tensor.dtype());
  t.ndim = tensor.dims();
  t.shape = shape->data();
  t.device = TUTTI_DEVICE_CPU;
  t.device_id = -1;
  return t;
}

absl::Status CopyHandleOutput(tensorflow::OpKernelContext* ctx, int index, tutti_handle handle) {
  tutti_tensor desc;
  if (tutti_handle_output(handle, &desc) != TUTTI_OK) {
    return absl::InternalError(std::string("tutti_handle_output: ") + tutti_last_error());
  }
  tensorflow::TensorShape shape;
  TF_RETURN_IF_ERROR(tensorflow::TensorShapeUtils::MakeShape(desc.shape, desc.ndim, &shape));
  tensorflow::Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  if (TfDtype(desc.dtype) != out->dtype()) {
    return absl::InternalError("tutti returned an output of another dtype than the op's");
  }
  size_t bytes = out->tensor_data().size();
  if (bytes > 0) std::memcpy(const_cast<char*>(out->tensor_data().data()), desc.data, bytes);
  return absl::OkStatus();
}

absl::Status SameShapes(tensorflow::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

absl::Status FirstDimUnknown(tensorflow::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs() && i < c->num_inputs(); ++i) {
    tensorflow::shape_inference::ShapeHandle in, out;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &in));
    TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

TuttiAsyncKernel::TuttiAsyncKernel(tensorflow::OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
  if (ctx->HasAttr("ignore_name_scope")) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ignore_name_scope", &ignore_name_scope_));
  }
  if (ctx->HasAttr("process_set_id")) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("process_set_id", &process_set_id_));
  }
  if (ctx->HasAttr("compression")) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("compression", &compression_));
  }
  tutti_op_options_init(&options_);
  options_.process_set_id = process_set_id_;
  options_.compression = compression_.empty() ? nullptr : compression_.c_str();
}

std::string TuttiAsyncKernel::TensorName() const {
  std::string node = name();
  if (ignore_name_scope_) {
    auto pos = node.find_last_of('/');
    if (pos != std::string::npos) node = node.substr(pos + 1);
  }
  return node;
}

bool TuttiAsyncKernel::CheckDtype(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& t,
                                  int index) {
  if (DtypeCode(t.dtype()) >= 0) return true;
  ctx->SetStatus(absl::InvalidArgumentError(
      "tutti op " + name() + ": input " + std::to_string(index) + " has dtype " +
      tensorflow::DataTypeString(t.dtype()) +
      "; accepted: uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, "
      "float32, float64, bool"));
  return false;
}

bool TuttiAsyncKernel::SameShapeOutput(tensorflow::OpKernelContext* ctx, int i, tutti_tensor* in,
                                       tutti_tensor* out,
                                       std::vector<std::vector<int64_t>>* shapes) {
  const tensorflow::Tensor& input = ctx->input(i);
  if (!CheckDtype(ctx, input, i)) return false;
  tensorflow::Tensor* output = nullptr;
  absl::Status status = ctx->forward_input_or_allocate_output({i}, i, input.shape(), &output);
  if (!status.ok()) {
    ctx->SetStatus(status);
    return false;
  }
  shapes->resize(shapes->size() + 2);
  *in = Describe(input, &(*shapes)[shapes->size() - 2]);
  *out = Describe(*output, &(*shapes)[shapes->size() - 1]);
  return true;
}

bool TuttiAsyncKernel::Enqueued(tensorflow::OpKernelContext* ctx, int rc,
                                const DoneCallback& done) {
  if (rc == TUTTI_OK) return true;
  ctx->SetStatus(ToStatus(rc, tutti_last_error()));
  done();
  return false;
}

void TuttiAsyncKernel::FinishWhenDone(
    tensorflow::OpKernelContext* ctx, DoneCallback done, std::vector<tutti_handle> handles,
    std::function<absl::Status(tensorflow::OpKernelContext*)> outputs) {
  std::vector<tutti_handle> watched = handles;
  Watch(watched, [ctx, done = std::move(done), handles = std::move(handles),
                  outputs = std::move(outputs)](const Outcome& outcome) {
    absl::Status status = ToStatus(outcome.status, outcome.message);
    if (status.ok() && outputs) status = outputs(ctx);
    ReleaseAll(handles);
    ctx->SetStatus(status);
    done();
  });
}

std::vector<tutti_handle> TuttiAsyncKernel::EnqueueEach(
    tensorflow::OpKernelContext* ctx, bool grouped,
    const std::function<int(const tutti_tensor&, const char*, tutti_handle*)>& enqueue) {
  std::vector<tutti_handle> handles;
  std::string base = TensorName();
  for (int i = 0; i < ctx->num_inputs(); ++i) {
    const tensorflow::Tensor& input = ctx->input(i);
    if (!CheckDtype(ctx, input, i)) break;
    std::vector<int64_t> shape;
    tutti_tensor in = Describe(input, &shape);
    std::string name = grouped ? base + "." + std::to_string(i) : base;
    tutti_handle handle = 0;
    int rc = enqueue(in, name.c_str(), &handle);
    if (rc != TUTTI_OK) {
      ctx->SetStatus(ToStatus(rc, tutti_last_error()));
      break;
    }
    handles.push_back(handle);
  }
  return handles;
}

void TuttiAsyncKernel::FinishWithHandleOutputs(tensorflow::OpKernelContext* ctx, DoneCallback done,
                                               std::vector<tutti_handle> handles) {
  if (handles.empty()) return done();  // the status says why
  absl::Status enqueue_status = ctx->status();
  std::vector<tutti_handle> copy = handles;
  FinishWhenDone(ctx, std::move(done), std::move(handles),
                 [copy, enqueue_status](tensorflow::OpKernelContext* c) {
                   if (!enqueue_status.ok()) return enqueue_status;
                   for (size_t i = 0; i < copy.size(); ++i) {
                     TF_RETURN_IF_ERROR(CopyHandleOutput(c, static_cast<int>(i), copy[i]));
                   }
                   return absl::OkStatus();
                 });
}

}  // namespace tutti_tf
