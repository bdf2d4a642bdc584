// src/train/batch_upload.cpp — see batch_upload.hpp.
#include "batch_upload.hpp"

#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

BatchUpload::BatchUpload(Backend& be, const DatasetInfo& info, int max_samples, Layout layout)
    : be_(be), sample_(info.sample), layout_(layout) {
  if (be.device() != Device::cuda || !info.is_uint8) return;
  const std::vector<float> lut = uint8_lut(info);
  lut_ = DeviceBuffer<float>(be, lut.size());
  be.copy_to_device(lut_.data(), lut.data(), lut.size() * sizeof(float));
  raw_ = DeviceBuffer<std::uint8_t>(be, static_cast<std::size_t>(max_samples) *
                                            info.sample.sample_count());
}

void BatchUpload::operator()(const HostBatch& batch, void* x, std::int32_t* y) {
  if (batch.n <= 0) return;
  if (uint8_batches()) {
    const Shape s = sample_.with_n(batch.n);
    DT_ASSERT(batch.raw.size() == s.count() && batch.raw.size() <= raw_.size(),
              "BatchUpload: a uint8 batch of the wrong size");
    be_.upload(raw_.data(), batch.raw.data(), batch.raw.size());
    be_.normalize_uint8(raw_.data(), lut_.data(), x, s, layout_, be_.act_dtype());
  } else {
    be_.upload(x, batch.x.data(), batch.x.size() * sizeof(float));
  }
  be_.upload(y, batch.y.data(), batch.y.size() * sizeof(std::int32_t));
}

}  // namespace dtrain
