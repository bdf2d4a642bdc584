// src/dnn/cuda/backend_desc.hpp — an owner of one cuDNN graph-API (backend) descriptor
// (cudnn_graph.h: cudnnBackendCreateDescriptor / SetAttribute / Finalize / DestroyDescriptor),
// with typed setters for the attribute kinds dtrain uses. The raw backend API, not the cuDNN
// frontend library: a convolution needs a dozen descriptors, which this keeps short.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda_check.hpp"

namespace dtrain::cuda {

class BackendDesc {
 public:
  BackendDesc() = default;
  /// Creates a descriptor of `type`; LibraryError when cuDNN refuses.
  explicit BackendDesc(cudnnBackendDescriptorType_t type) {
    DT_CHECK_CUDNN(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~BackendDesc() {
    if (d_ != nullptr) DT_CHECK_CUDNN_NOTHROW(cudnnBackendDestroyDescriptor(d_));
  }
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  BackendDesc(BackendDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  BackendDesc& operator=(BackendDesc&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) DT_CHECK_CUDNN_NOTHROW(cudnnBackendDestroyDescriptor(d_));
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  [[nodiscard]] cudnnBackendDescriptor_t get() const noexcept { return d_; }

  /// Sets attribute `name` to `n` elements of `type` at `values`; LibraryError on refusal.
  BackendDesc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                   std::int64_t n, const void* values) {
    DT_CHECK_CUDNN(cudnnBackendSetAttribute(d_, name, type, n, values));
    return *this;
  }
  BackendDesc& set_i64(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& v) {
    return set(name, CUDNN_TYPE_INT64, static_cast<std::int64_t>(v.size()), v.data());
  }
  BackendDesc& set_float(cudnnBackendAttributeName_t name, float v) {
    return set(name, CUDNN_TYPE_FLOAT, 1, &v);
  }
  BackendDesc& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t t) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t);
  }
  /// Sets a descriptor-valued attribute to `d` (cuDNN keeps the handle: `d` must outlive this).
  BackendDesc& set_desc(cudnnBackendAttributeName_t name, const BackendDesc& d) {
    cudnnBackendDescriptor_t raw = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  BackendDesc& set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t h) {
    return set(name, CUDNN_TYPE_HANDLE, 1, &h);
  }
  /// Finalizes; LibraryError on failure.
  void finalize() { DT_CHECK_CUDNN(cudnnBackendFinalize(d_)); }
  /// Finalizes and returns cuDNN's status (an engine configuration that does not build is
  /// CUDNN_STATUS_NOT_SUPPORTED*, not an error).
  [[nodiscard]] cudnnStatus_t try_finalize() noexcept { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

}  // namespace dtrain::cuda
