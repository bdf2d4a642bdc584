// src/dnn/cuda/layerwise_update.cpp — CudaBackend::layerwise_update: LARS (You, Gitman, Ginsburg
// 2017) and LAMB (You et al. 2020) on the GPU, the rules of dtrain/dnn/backend.hpp. The segment
// list becomes a device chunk table once (layerwise.hpp); every step is then two kernel launches
// over all tensors, guarded on the device by the latest check_gradient().
#include <string>
#include <vector>

#include "cuda_backend.hpp"
#include "layerwise.hpp"

namespace dtrain::cuda {

void CudaBackend::prepare_layerwise(const std::vector<ParamSegment>& segments) {
  if (segments == layerwise_.segments && layerwise_.num_chunks > 0) return;
  std::vector<LayerwiseTensor> tensors;
  tensors.reserve(segments.size());
  for (const ParamSegment& s : segments) tensors.push_back({s.begin, s.end, s.adapt});
  const LayerwiseTables t = layerwise_tables(tensors);
  // Queued updates may still read the old tables: wait before freeing them.
  DT_CHECK_CUDA(cudaStreamSynchronize(stream_));
  layerwise_ = Layerwise();
  Layerwise next;
  next.chunks = DeviceMemory::create(t.chunks.size() * sizeof(LayerwiseChunk));
  next.spans = DeviceMemory::create(t.spans.size() * sizeof(LayerwiseSpan));
  next.partials = DeviceMemory::create(2 * t.chunks.size() * sizeof(double));
  copy_to_device(next.chunks.get(), t.chunks.data(), t.chunks.size() * sizeof(LayerwiseChunk));
  copy_to_device(next.spans.get(), t.spans.data(), t.spans.size() * sizeof(LayerwiseSpan));
  next.num_chunks = static_cast<int>(t.chunks.size());
  next.segments = segments;
  layerwise_ = std::move(next);
}

bool CudaBackend::layerwise_update(const OptimizerUpdate& u,
                                   const std::vector<ParamSegment>& segments, float* p,
                                   const float* g, float* m, float* v) {
  const std::size_t n = check_layerwise(u, segments);
  DT_ASSERT(m != nullptr, "lars and lamb need their state buffer m");
  DT_ASSERT(u.kind != OptimizerKind::lamb || v != nullptr, "lamb needs its state buffer v");
  DT_REQUIRE(n / kLayerwiseChunk + segments.size() < (std::size_t{1} << 31),
             "layerwise_update: " + std::to_string(n) + " parameters in " +
                 std::to_string(segments.size()) + " tensors exceed the chunk table's int index");
  // After check_gradient() the device skips the step itself; otherwise a finiteness pass, read
  // back (optimizer_update's rule).
  const bool finite = guard_ != nullptr || all_finite(g, n);
  prepare_layerwise(segments);
  LayerwiseParams k{.lamb = u.kind == OptimizerKind::lamb ? 1 : 0,
                    .lr = u.lr,
                    .momentum = u.momentum,
                    .nesterov = u.nesterov ? 1 : 0,
                    .weight_decay = u.weight_decay,
                    .lars_eta = u.lars_eta,
                    .lars_epsilon = u.lars_epsilon,
                    .beta1 = u.beta1,
                    .beta2 = u.beta2,
                    .epsilon = u.epsilon};
  if (k.lamb) {  // the same two floats as the CPU backend's
    const LambCorrections bc = lamb_corrections(u);
    k.inv_bc1 = bc.inv_bc1;
    k.inv_sqrt_bc2 = bc.inv_sqrt_bc2;
  }
  launch_layerwise_update(stream_, k, layerwise_.chunks.as<LayerwiseChunk>(),
                          layerwise_.spans.as<LayerwiseSpan>(), layerwise_.num_chunks,
                          layerwise_.partials.as<double>(), p, g, m, v, guard_);
  return finite;
}

}  // namespace dtrain::cuda
