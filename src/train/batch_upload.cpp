// src/train/batch_upload.cpp — see batch_upload.hpp.
#include "batch_upload.hpp"

#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

BatchUpload::BatchUpload(Backend& be, const DatasetInfo& info, int max_samples)
    : be_(be), channels_(info.sample.c),
      hw_(static_cast<std::size_t>(info.sample.h) * static_cast<std::size_t>(info.sample.w)) {
  if (be.device() != Device::cuda || !info.is_uint8) return;
  const std::vector<float> lut = uint8_lut(info);
  lut_ = DeviceBuffer<float>(be, lut.size());
  be.copy_to_device(lut_.data(), lut.data(), lut.size() * sizeof(float));
  raw_ = DeviceBuffer<std::uint8_t>(be, static_cast<std::size_t>(max_samples) *
                                            info.sample.sample_count());
}

void BatchUpload::operator()(const HostBatch& batch, float* x, std::int32_t* y) {
  if (batch.n <= 0) return;
  const auto n = static_cast<std::size_t>(batch.n);
  if (uint8_batches()) {
    DT_ASSERT(batch.raw.size() == n * static_cast<std::size_t>(channels_) * hw_ &&
                  batch.raw.size() <= raw_.size(),
              "BatchUpload: a uint8 batch of the wrong size");
    be_.upload(raw_.data(), batch.raw.data(), batch.raw.size());
    be_.normalize_uint8(raw_.data(), lut_.data(), x, n, channels_, hw_);
  } else {
    be_.upload(x, batch.x.data(), batch.x.size() * sizeof(float));
  }
  be_.upload(y, batch.y.data(), batch.y.size() * sizeof(std::int32_t));
}

}  // namespace dtrain
