// tests/common/dataset_files.cpp — synthetic, exact and corrupt dataset files (dataset_files.hpp).
#include "common/dataset_files.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>

#include "common/jpeg_writer.hpp"
#include "dtrain/io/hdf5.hpp"

namespace dtrain::testing {
namespace {

/// A gray w×h JPEG of a diagonal ramp with noise (quality 90).
std::vector<std::uint8_t> jpeg(int w, int h, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      px[static_cast<std::size_t>(y) * w + x] =
          static_cast<unsigned char>((x * 9 + y * 5 + gen() % 40) % 256);
  return write_jpeg(px, w, h, 1);
}

/// Converts float values to T, rounding and clipping for integer types.
template <typename T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      out[i] = static_cast<T>(v[i]);
    } else {
      const float lo = static_cast<float>(std::numeric_limits<T>::min());
      const float hi = static_cast<float>(std::numeric_limits<T>::max());
      out[i] = static_cast<T>(std::clamp(std::nearbyint(v[i]), lo, hi));
    }
  }
  return out;
}

/// Writes a dataset of `dims` holding `values` converted to dtype, chunked by ≤ 256 along dim 0.
void write_array(hid_t file, const std::string& name, const std::vector<hsize_t>& dims,
                 const std::vector<float>& values, const std::string& dtype) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5Dataspace space(
      DT_CHECK_HDF5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), name));
  H5PropList dcpl(DT_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), name));
  if (std::all_of(dims.begin(), dims.end(), [](hsize_t d) { return d > 0; })) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min<hsize_t>(dims[0], 256);
    DT_CHECK_HDF5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), name);
  }
  auto write = [&](hid_t file_type, hid_t mem_type, const void* data) {
    H5Dataset dset(DT_CHECK_HDF5(H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                            dcpl.get(), H5P_DEFAULT),
                                 name));
    if (!values.empty())
      DT_CHECK_HDF5(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), name);
  };
  if (dtype == "uint8") {
    write(H5T_STD_U8LE, H5T_NATIVE_UINT8, convert<std::uint8_t>(values).data());
  } else if (dtype == "int16") {
    write(H5T_STD_I16LE, H5T_NATIVE_INT16, convert<std::int16_t>(values).data());
  } else if (dtype == "int32") {
    write(H5T_STD_I32LE, H5T_NATIVE_INT32, convert<std::int32_t>(values).data());
  } else if (dtype == "int64") {
    write(H5T_STD_I64LE, H5T_NATIVE_INT64, convert<std::int64_t>(values).data());
  } else if (dtype == "float32") {
    write(H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values.data());
  } else {
    throw std::invalid_argument("unknown dtype " + dtype);
  }
}

}  // namespace

void write_raw_dataset(const std::string& path, const RawDataset& d) {
  const hsize_t total =
      std::accumulate(d.image_dims.begin(), d.image_dims.end(), hsize_t{1}, std::multiplies<>());
  if (d.write_images && total != d.pixels.size())
    throw std::invalid_argument("pixels has " + std::to_string(d.pixels.size()) +
                                " values, image_dims ask for " + std::to_string(total));
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File file = create_file(path);
  if (d.write_images) write_array(file.get(), "images", d.image_dims, d.pixels, d.image_dtype);
  if (d.write_labels) {
    const std::vector<float> as_float(d.labels.begin(), d.labels.end());
    write_array(file.get(), "labels", {d.labels.size()}, as_float, d.label_dtype);
  }
  if (!d.mean.empty()) write_attr_floats(file.get(), "mean", d.mean);
  if (!d.stddev.empty()) write_attr_floats(file.get(), "std", d.stddev);
  if (d.num_classes > 0) write_attr_int(file.get(), "num_classes", d.num_classes);
  if (!d.class_names.empty()) write_attr_strings(file.get(), "class_names", d.class_names);
}

const std::vector<std::string>& corrupt_kinds() {
  static const std::vector<std::string> kinds = {
      "missing-images", "missing-labels", "images-rank3", "images-int16",
      "labels-float",   "count-mismatch", "zero-samples", "label-out-of-range",
      "label-negative", "nan-image",      "truncated",    "not-hdf5",
      "mean-length",    "std-zero",       "label-huge",   "inf-image"};
  return kinds;
}

RawDataset make_synthetic(const SyntheticSpec& s) {
  if (s.n < 0 || s.c < 1 || s.h < 1 || s.w < 1 || s.classes < 1)
    throw std::invalid_argument("synthetic dataset needs n ≥ 0 and c, h, w, classes ≥ 1");
  if (s.dtype != "uint8" && s.dtype != "float32")
    throw std::invalid_argument("dtype must be uint8 or float32, got " + s.dtype);
  const bool u8 = s.dtype == "uint8";
  const std::size_t sample = static_cast<std::size_t>(s.c) * s.h * s.w;
  const std::size_t hw = static_cast<std::size_t>(s.h) * s.w;
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<float> uniform(0.0f, 255.0f);
  std::normal_distribution<float> noise(0.0f, 40.0f);
  std::vector<float> templates(static_cast<std::size_t>(s.classes) * sample);
  if (s.template_seed == 0) {
    for (float& t : templates) t = uniform(rng);
  } else {
    std::mt19937_64 template_rng(s.template_seed);
    for (float& t : templates) t = uniform(template_rng);
  }

  RawDataset d;
  d.image_dims = {static_cast<hsize_t>(s.n), static_cast<hsize_t>(s.c), static_cast<hsize_t>(s.h),
                  static_cast<hsize_t>(s.w)};
  d.image_dtype = s.dtype;
  d.pixels.resize(static_cast<std::size_t>(s.n) * sample);
  d.labels.resize(static_cast<std::size_t>(s.n));
  std::vector<double> sum(s.c, 0.0), sum2(s.c, 0.0);
  for (std::int64_t i = 0; i < s.n; ++i) {
    const auto label = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.classes));
    d.labels[static_cast<std::size_t>(i)] = label;
    for (std::size_t j = 0; j < sample; ++j) {
      float v = templates[static_cast<std::size_t>(label) * sample + j] + noise(rng);
      v = u8 ? std::clamp(std::nearbyint(v), 0.0f, 255.0f) : v / 255.0f;
      d.pixels[static_cast<std::size_t>(i) * sample + j] = v;
      const double scaled = u8 ? v / 255.0 : v;  // mean/std are in units after /255
      sum[j / hw] += scaled;
      sum2[j / hw] += scaled * scaled;
    }
  }
  if (s.mean_std && s.n > 0) {
    const double count = static_cast<double>(s.n) * static_cast<double>(hw);
    for (int c = 0; c < s.c; ++c) {
      const double m = sum[c] / count;
      d.mean.push_back(static_cast<float>(m));
      d.stddev.push_back(static_cast<float>(std::sqrt(std::max(sum2[c] / count - m * m, 1e-12))));
    }
  }
  if (s.num_classes_attr) {
    d.num_classes = s.classes;
    for (int k = 0; k < s.classes; ++k) d.class_names.push_back("class" + std::to_string(k));
  }
  return d;
}

void write_synthetic_dataset(const std::string& path, const SyntheticSpec& spec) {
  const std::string& kind = spec.corrupt;
  if (!kind.empty() &&
      std::find(corrupt_kinds().begin(), corrupt_kinds().end(), kind) == corrupt_kinds().end())
    throw std::invalid_argument("unknown corruption kind " + kind);
  if (kind == "not-hdf5") {
    std::ofstream(path) << "this is a text file, not HDF5\n";
    return;
  }
  SyntheticSpec s = spec;
  if (kind == "zero-samples") s.n = 0;
  if (kind == "nan-image" || kind == "inf-image") s.dtype = "float32";
  if (kind == "label-huge") s.num_classes_attr = false;
  if (s.n < 2 &&
      (kind == "count-mismatch" || kind == "label-out-of-range" || kind == "label-negative" ||
       kind == "nan-image" || kind == "inf-image" || kind == "label-huge"))
    s.n = 2;
  RawDataset d = make_synthetic(s);
  const std::size_t mid = static_cast<std::size_t>(s.n / 2);
  const std::size_t sample = static_cast<std::size_t>(s.c) * s.h * s.w;
  if (kind == "missing-images") d.write_images = false;
  if (kind == "missing-labels") d.write_labels = false;
  if (kind == "images-rank3")
    d.image_dims = {d.image_dims[0], d.image_dims[1] * d.image_dims[2], d.image_dims[3]};
  if (kind == "images-int16") d.image_dtype = "int16";
  if (kind == "labels-float") d.label_dtype = "float32";
  if (kind == "count-mismatch") d.labels.pop_back();
  if (kind == "label-out-of-range") d.labels[mid] = s.classes;
  if (kind == "label-negative") d.labels[mid] = -1;
  if (kind == "nan-image")
    d.pixels[mid * sample + sample / 2] = std::numeric_limits<float>::quiet_NaN();
  if (kind == "inf-image")
    d.pixels[mid * sample + sample / 2] = std::numeric_limits<float>::infinity();
  if (kind == "label-huge") d.labels[mid] = 1000000;
  if (kind == "mean-length") {
    d.mean.assign(static_cast<std::size_t>(s.c) + 1, 0.5f);
    d.stddev.assign(static_cast<std::size_t>(s.c) + 1, 0.25f);
  }
  if (kind == "std-zero") {
    d.mean.assign(static_cast<std::size_t>(s.c), 0.5f);
    d.stddev.assign(static_cast<std::size_t>(s.c), 0.25f);
    d.stddev.back() = 0.0f;
  }
  write_raw_dataset(path, d);
  if (kind == "truncated") std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
}

void write_encoded_dataset(const std::string& path, int n, int bad) {
  std::vector<std::vector<std::uint8_t>> rows;
  std::vector<std::int64_t> shapes, labels;
  for (int i = 0; i < n; ++i) {
    const int w = 17 + 3 * i, h = 14 + (i * 5) % 11;
    rows.push_back(i == bad ? std::vector<std::uint8_t>(50, 7) : jpeg(w, h, 40 + i));
    shapes.insert(shapes.end(), {1, h, w});
    labels.push_back(i % 3);
  }
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File f = create_file(path);
  std::vector<hvl_t> vl;
  for (auto& r : rows) vl.push_back(hvl_t{r.size(), r.data()});
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  const hid_t type = H5Tvlen_create(H5T_NATIVE_UINT8), space = H5Screate_simple(1, dims, nullptr);
  const hid_t dset =
      H5Dcreate2(f.get(), "images", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t written = H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, vl.data());
  H5Dclose(dset);
  H5Sclose(space);
  H5Tclose(type);
  if (dset < 0 || written < 0) throw std::runtime_error(path + ": writing `images` failed");
  write_dataset_int64s(f.get(), "image_shapes", {static_cast<hsize_t>(n), 3}, shapes.data());
  write_dataset_int64s(f.get(), "labels", {static_cast<hsize_t>(n)}, labels.data());
  write_attr_int(f.get(), "channels", 1);
  write_attr_int(f.get(), "num_classes", 3);
  write_attr_floats(f.get(), "mean", {0.3f});
  write_attr_floats(f.get(), "std", {0.27f});
}

}  // namespace dtrain::testing
