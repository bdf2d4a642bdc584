// dtrain/train/batch_upload.hpp (private) — a worker's batch from the host reader into the
// model's input buffer. On a GPU, uint8 files (decoded pixels or encoded images) travel as bytes —
// a quarter of a float batch over PCIe — and one kernel (Backend::normalize_uint8) looks them up
// in the file's table (io/dataset.hpp's uint8_lut: the host reader's values bit for bit) and
// writes them as the model's first layer reads them (its layout, bf16 under --precision bf16):
// the model takes that batch as is (InputForm::network), with no conversion pass and no fp32
// intermediate of its own. float32 files, and every file on the CPU, arrive normalized by the
// reader's own pass, as fp32 NCHW (InputForm::f32_nchw), which the model converts if it must.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

class BatchUpload {
 public:
  /// Batches of `info` (a configured training or test file) of at most max_samples samples for
  /// backend `be` (which must outlive this), for a model whose first layer reads `layout`
  /// (Model::input_layout()). uint8 batches when be is a GPU backend and the file holds uint8
  /// pixels: the table (C×256 fp32) then goes to the device here, and a staging buffer of
  /// max_samples samples is allocated. Throws LibraryError on a failed allocation.
  BatchUpload(Backend& be, const DatasetInfo& info, int max_samples, Layout layout);
  /// Whether this file's reader should hand out uint8 batches (BatchReader's uint8_batches).
  [[nodiscard]] bool uint8_batches() const { return lut_.size() > 0; }
  /// The form of the batches operator() writes (Model::set_input_form): network for uint8
  /// batches, f32_nchw otherwise.
  [[nodiscard]] InputForm form() const {
    return uint8_batches() ? InputForm::network : InputForm::f32_nchw;
  }
  /// Queues `batch` into x (device, n = batch.n ≤ max_samples samples n×C×H×W in form(): fp32
  /// NCHW, or the layout given and Backend::act_dtype(); room for n·C·H·W floats suffices) and y
  /// (device, n int32): its raw bytes uploaded and normalized there in one kernel, or its float
  /// pixels uploaded. Returns once batch may be reused (Backend::upload).
  void operator()(const HostBatch& batch, void* x, std::int32_t* y);

 private:
  Backend& be_;
  Shape sample_;  ///< 1×C×H×W
  Layout layout_;
  DeviceBuffer<float> lut_;         ///< the file's uint8_lut() on the device (uint8 batches)
  DeviceBuffer<std::uint8_t> raw_;  ///< the batch's bytes on the device (uint8 batches)
};

}  // namespace dtrain
