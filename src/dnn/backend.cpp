// src/dnn/backend.cpp — shape arithmetic of the backend descriptors (ConvDesc, PoolDesc), layout
// names and, in builds without CUDA, the stubs of the CUDA entry points.
//
// Output sizes follow the cuDNN/oneDNN/PyTorch convention P = ⌊(H + 2·pad − R)/stride⌋ + 1.
#include "dtrain/dnn/backend.hpp"

#include <chrono>
#include <cmath>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

/// Checks the window arithmetic shared by convolution and pooling and returns the output size.
int window_output(const char* what, const Shape& in, int kernel, int stride, int pad, int dim,
                  const char* axis) {
  DT_REQUIRE(kernel >= 1,
             std::string(what) + ": kernel must be >= 1, got " + std::to_string(kernel));
  DT_REQUIRE(stride >= 1,
             std::string(what) + ": stride must be >= 1, got " + std::to_string(stride));
  DT_REQUIRE(pad >= 0, std::string(what) + ": pad must be >= 0, got " + std::to_string(pad));
  DT_REQUIRE(kernel <= dim + 2 * pad, std::string(what) + ": kernel " + std::to_string(kernel) +
                                          " is larger than the " + axis + " of the padded input (" +
                                          std::to_string(dim) + " + 2*" + std::to_string(pad) +
                                          " = " + std::to_string(dim + 2 * pad) + ") for input " +
                                          in.str());
  return (dim + 2 * pad - kernel) / stride + 1;
}

void require_input(const char* what, const Shape& in) {
  DT_REQUIRE(in.n >= 1 && in.c >= 1 && in.h >= 1 && in.w >= 1,
             std::string(what) + ": input shape must be positive (NxCxHxW), got " + in.str());
}

}  // namespace

void ConvOp::set_accumulate_dx(bool on) {
  if (on) throw LibraryError("conv: this backend's convolution cannot accumulate into dx");
}

void ConvOp::backward_relu(const void* /*x*/, const void* /*y*/, const float* /*w*/, void* /*dy*/,
                           void* /*dx*/, float* /*dw*/, float* /*db*/) {
  throw LibraryError("conv: backward_relu without a fused relu (enable_relu() said false)");
}

void BatchNormOp::backward_relu(const void* /*x*/, const void* /*y*/, const float* /*gamma*/,
                                const float* /*beta*/, const void* /*dy*/, void* /*dx*/,
                                float* /*dgamma*/, float* /*dbeta*/) {
  throw LibraryError("batchnorm: backward_relu without a fused relu (enable_relu() said false)");
}

void BatchNormOp::forward_add_relu(const void* /*x*/, const void* /*z*/, const float* /*gamma*/,
                                   const float* /*beta*/, float* /*running_mean*/,
                                   float* /*running_var*/, void* /*y*/, bool /*training*/) {
  throw LibraryError("batchnorm: forward_add_relu without enable_add_relu()");
}

void BatchNormOp::backward_add_relu(const void* /*x*/, const void* /*y*/, const float* /*gamma*/,
                                    const float* /*beta*/, const void* /*dy*/, void* /*dx*/,
                                    void* /*dz*/, float* /*dgamma*/, float* /*dbeta*/) {
  throw LibraryError("batchnorm: backward_add_relu without enable_add_relu()");
}

void Backend::add_relu(void* y, const void* a, const void* b, std::size_t n, DType t,
                       ActivationOp& relu) {
  if (y == b) std::swap(a, b);  // y = b + a: IEEE addition is commutative, the bits are the same
  if (y != a) copy_device(y, a, n * dtype_size(t));
  add(y, b, n, t);
  relu.forward(y, y);
}

void Backend::relu_backward_fanout(const void* y, const void* dy, void* dx0, void* dx1,
                                   std::size_t n, DType t, ActivationOp& relu) {
  if (dx0 == nullptr) std::swap(dx0, dx1);
  if (dx0 == nullptr) return;
  relu.backward(y, y, dy, dx0);
  if (dx1 != nullptr) copy_device(dx1, dx0, n * dtype_size(t));
}

void Backend::require_mark(int i) {
  DT_REQUIRE(i >= 0 && i < kMarks, "stopwatch point " + std::to_string(i) + " outside [0, " +
                                       std::to_string(kMarks) + ")");
}

void Backend::mark(int i) {
  require_mark(i);
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  host_marks_[i] = std::chrono::duration<double>(now).count();
}

double Backend::seconds_between(int a, int b) {
  require_mark(a);
  require_mark(b);
  DT_REQUIRE(host_marks_[a] >= 0 && host_marks_[b] >= 0,
             "seconds_between: a stopwatch point was not recorded");
  return host_marks_[b] - host_marks_[a];
}

int classes_ranked_before(const float* logits, int classes, int label) {
  const float at = logits[label];
  int before = 0;
  for (int j = 0; j < classes; ++j) before += (logits[j] > at || (logits[j] == at && j < label));
  return before;
}

void check_softmax_xent(int batch, int classes, float smoothing) {
  DT_REQUIRE(batch >= 1 && classes >= 1,
             "softmax cross-entropy: batch and classes must be >= 1, got " + std::to_string(batch) +
                 " and " + std::to_string(classes));
  DT_REQUIRE(smoothing >= 0.0f && smoothing < 1.0f,
             "softmax cross-entropy: label smoothing must be in [0, 1), got " +
                 std::to_string(smoothing));
}

LambCorrections lamb_corrections(const OptimizerUpdate& u) {
  const double t = static_cast<double>(u.step);
  return {static_cast<float>(1.0 / (1.0 - std::pow(double{u.beta1}, t))),
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{u.beta2}, t)))};
}

std::size_t check_layerwise(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments) {
  DT_REQUIRE(u.kind == OptimizerKind::lars || u.kind == OptimizerKind::lamb,
             "layerwise_update: the optimizer must be lars or lamb");
  DT_REQUIRE(u.kind != OptimizerKind::lamb || u.step >= 1,
             "lamb: step must be >= 1, got " + std::to_string(u.step));
  DT_REQUIRE(!segments.empty(), "layerwise_update: no parameter tensors");
  std::size_t at = 0;
  for (const ParamSegment& s : segments) {
    DT_REQUIRE(s.begin == at && s.end > s.begin,
               "layerwise_update: tensor ranges must be non-empty and contiguous from 0, got [" +
                   std::to_string(s.begin) + ", " + std::to_string(s.end) + ") after " +
                   std::to_string(at));
    at = s.end;
  }
  return at;
}

bool Backend::layerwise_update(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments,
                               float* p, const float* g, float* m, float* v) {
  (void)segments, (void)p, (void)g, (void)m, (void)v;
  throw InputError(std::string("option --optimizer: ") +
                   (u.kind == OptimizerKind::lamb ? "lamb" : "lars") + " is not implemented on " +
                   name());
}

bool Backend::optimizer_update_into_grad(const OptimizerUpdate& u, float* p, float* g, float* m,
                                         float* v, std::size_t n) {
  const bool finite = optimizer_update(u, p, g, m, v, n);
  copy_device(g, p, n * sizeof(float));
  return finite;
}

const char* layout_name(Layout l) { return l == Layout::nhwc ? "nhwc" : "nchw"; }
const char* dtype_name(DType t) { return t == DType::bf16 ? "bf16" : "f32"; }
const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

Shape ConvDesc::output() const {
  require_input("conv", input);
  DT_REQUIRE(out_channels >= 1,
             "conv: out_channels (filters) must be >= 1, got " + std::to_string(out_channels));
  const int p = window_output("conv", input, kernel.h, stride.h, pad.h, input.h, "height");
  const int q = window_output("conv", input, kernel.w, stride.w, pad.w, input.w, "width");
  return Shape{input.n, out_channels, p, q};
}

Shape PoolDesc::output() const {
  const char* what = kind == PoolKind::max ? "maxpool" : "avgpool";
  require_input(what, input);
  // Every window must hold at least one real element (PyTorch's rule pad <= kernel/2).
  DT_REQUIRE(2 * pad.h <= kernel.h && 2 * pad.w <= kernel.w,
             std::string(what) + ": pad " + pad.str() + " must be at most half the kernel " +
                 kernel.str());
  const int p = window_output(what, input, kernel.h, stride.h, pad.h, input.h, "height");
  const int q = window_output(what, input, kernel.w, stride.w, pad.w, input.w, "width");
  return Shape{input.n, input.c, p, q};
}

#if !defined(DTRAIN_HAVE_CUDA)
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "dtrain was built without CUDA"; }
std::unique_ptr<Backend> make_cuda_backend(int device) {
  throw Error(
      format_error("cannot use GPU " + std::to_string(device) + ": dtrain was built without CUDA",
                   __FILE__, __LINE__));
}
int select_gpu_for_local_rank(int local_rank, int local_size, bool allow_sharing) {
  (void)local_size;
  (void)allow_sharing;
  throw Error(format_error("cannot pick a GPU for local rank " + std::to_string(local_rank) +
                               ": dtrain was built without CUDA",
                           __FILE__, __LINE__));
}
#endif

}  // namespace dtrain
