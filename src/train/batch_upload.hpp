// dtrain/train/batch_upload.hpp (private) — a worker's batch from the host reader into the
// model's input buffer. On a GPU, uint8 files (decoded pixels or encoded images) travel as bytes —
// a quarter of a float batch over PCIe — and are normalized on the device through the file's
// table (Backend::normalize_uint8, io/dataset.hpp's uint8_lut: the host reader's values bit for
// bit); float32 files, and every file on the CPU, arrive normalized by the reader's own pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"

namespace dtrain {

class BatchUpload {
 public:
  /// Batches of `info` (a configured training or test file) of at most max_samples samples for
  /// backend `be` (which must outlive this). uint8 batches when be is a GPU backend and the file
  /// holds uint8 pixels: the table (C×256 fp32) then goes to the device here, and a staging
  /// buffer of max_samples samples is allocated. Throws LibraryError on a failed allocation.
  BatchUpload(Backend& be, const DatasetInfo& info, int max_samples);
  /// Whether this file's reader should hand out uint8 batches (BatchReader's uint8_batches).
  [[nodiscard]] bool uint8_batches() const { return lut_.size() > 0; }
  /// Queues `batch` into x (device, n×C×H×W fp32 normalized, n = batch.n ≤ max_samples) and y
  /// (device, n int32): its raw bytes uploaded and normalized there, or its float pixels
  /// uploaded. Returns once batch may be reused (Backend::upload).
  void operator()(const HostBatch& batch, float* x, std::int32_t* y);

 private:
  Backend& be_;
  int channels_ = 0;
  std::size_t hw_ = 0;
  DeviceBuffer<float> lut_;         ///< the file's uint8_lut() on the device (uint8 batches)
  DeviceBuffer<std::uint8_t> raw_;  ///< the batch's bytes on the device (uint8 batches)
};

}  // namespace dtrain
