// dtrain/train/host_mirror.hpp (private) — host view of a device buffer for MPI (Debian's Open MPI
// is not CUDA-aware): the buffer itself on the CPU backend, else a staging copy in the backend's
// host memory (pinned on CUDA, so the copies run at full PCIe/NVLink speed).
#pragma once

#include <cstddef>

#include "dtrain/dnn/backend.hpp"

namespace dtrain {

class HostMirror {
 public:
  /// A mirror of n floats on `be` (no allocation on the CPU backend).
  HostMirror(Backend& be, std::size_t n) : be_(be), n_(n) {
    if (be.device() != Device::cpu)
      host_ = static_cast<float*>(be.allocate_host(n * sizeof(float)));
  }
  ~HostMirror() {
    if (host_) be_.deallocate_host(host_);
  }
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;
  /// Copies device buffer `dev` (n floats) to the host and returns the host view.
  float* to_host(const float* dev) {
    if (!host_) return const_cast<float*>(dev);
    be_.copy_to_host(host_, dev, n_ * sizeof(float));
    return host_;
  }
  /// The host view of `dev` without copying (to receive into).
  float* buffer(float* dev) { return host_ ? host_ : dev; }
  /// Copies the host view back to device buffer `dev`.
  void to_device(float* dev) {
    if (host_) be_.copy_to_device(dev, host_, n_ * sizeof(float));
  }

 private:
  Backend& be_;
  std::size_t n_;
  float* host_ = nullptr;
};

}  // namespace dtrain
