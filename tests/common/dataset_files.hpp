// tests/common/dataset_files.hpp — writers of dataset files in the dtrain schema (docs/data.md) for
// tests: learnable synthetic data, exact hand-made arrays, and deliberately broken files for the
// negative tests, and encoded-image files. Shared by the unit tests (test_dataset,
// test_uint8_batches, test_encoded_reader) and the make_dataset tool.
// All functions lock dtrain::hdf5_mutex() (through the io/hdf5.hpp helpers); they throw
// dtrain::LibraryError on HDF5 failures and std::invalid_argument on bad specs.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::testing {

/// Exactly what to write. Pixels are given as float and converted to image_dtype on write
/// (rounded and clipped to the integer range for integer types).
struct RawDataset {
  std::vector<hsize_t> image_dims;    ///< normally N×C×H×W; any rank for negative tests
  std::vector<float> pixels;          ///< product(image_dims) values
  std::string image_dtype = "uint8";  ///< "uint8" | "float32" | "int16"
  std::vector<std::int64_t> labels;   ///< written as a 1-D dataset of labels.size()
  std::string label_dtype = "int64";  ///< "int64" | "int32" | "uint8" | "float32"
  bool write_images = true;
  bool write_labels = true;
  std::vector<float> mean, stddev;       ///< root attributes `mean`, `std` when non-empty
  int num_classes = 0;                   ///< attribute `num_classes` when > 0
  std::vector<std::string> class_names;  ///< attribute `class_names` when non-empty
};

/// Writes d to path (truncating). images are chunked by up to 256 samples.
void write_raw_dataset(const std::string& path, const RawDataset& d);

/// A learnable classification set: each class has a random template image (uniform 0..255); a
/// sample is its class template plus Gaussian noise (σ = 40), clipped to 0..255 for uint8 and
/// divided by 255 (unclipped) for float32. Labels are uniform random in [0, classes).
struct SyntheticSpec {
  std::int64_t n = 64;
  int c = 1, h = 8, w = 8;
  int classes = 4;
  std::string dtype = "uint8";  ///< "uint8" | "float32"
  std::uint64_t seed = 1;
  /// Seed of the class templates; 0 = draw them from `seed` (then only sets with the same seed
  /// share their classes). A train and a test set with equal template_seed and different seeds
  /// have the same classes and independent samples.
  std::uint64_t template_seed = 0;
  bool mean_std = true;  ///< write per-channel `mean`/`std` computed from the data
  bool num_classes_attr =
      true;             ///< write `num_classes` and `class_names` (else the reader infers them)
  std::string corrupt;  ///< "" or one of corrupt_kinds()
};

/// The corruption kinds make_synthetic_dataset() knows, each making a file that
/// dtrain::open_dataset_info() (or the BatchReader, for nan-image) must reject:
/// missing-images, missing-labels, images-rank3, images-int16, labels-float, count-mismatch,
/// zero-samples, label-out-of-range, label-negative, nan-image, truncated, not-hdf5,
/// mean-length (mean has C+1 values), std-zero (a std of 0), label-huge (label 1,000,000 at
/// sample n/2 and no `num_classes` attribute: max label + 1 would leave most classes empty),
/// inf-image (+Inf at sample n/2; like nan-image, caught by the reader).
const std::vector<std::string>& corrupt_kinds();

/// The arrays write_synthetic_dataset() would write for spec with no corruption applied.
RawDataset make_synthetic(const SyntheticSpec& spec);

/// An encoded-image file (docs/data.md, "Encoded images") of n gray JPEGs of assorted sizes (w =
/// 17 + 3i, h = 14 + 5i mod 11: a diagonal ramp with noise, quality 90), row `bad` (−1: none)
/// 50 garbage bytes instead; labels i mod 3, 3 classes, mean 0.3, std 0.27. Writes path.
void write_encoded_dataset(const std::string& path, int n, int bad);

/// Writes the synthetic set of spec to path, corrupted as spec.corrupt says.
/// Throws std::invalid_argument for an unknown corruption kind or invalid sizes.
void write_synthetic_dataset(const std::string& path, const SyntheticSpec& spec);

}  // namespace dtrain::testing
