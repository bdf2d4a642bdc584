// dtrain/io/safetensors.hpp — reading and writing the safetensors format (Hugging Face,
// https://github.com/huggingface/safetensors): what `dtrain export --format safetensors` writes and
// `--init-from` reads, and what PyTorch's `safetensors.torch.load_file` / `save_file` exchange.
//
// File: 8 bytes N (unsigned little-endian), then N bytes of JSON header, then the data. The header
// is one object: for each tensor name {"dtype": "F32" | "BF16" | ..., "shape": [d0, ...],
// "data_offsets": [begin, end]} (bytes into the data, row-major, little-endian), plus an optional
// "__metadata__" object of string → string. The header is built and parsed with nlohmann::json
// and padded with spaces to a multiple of 8 bytes (as the reference writer does).
//
// Reading checks everything before trusting it, each failure one InputError naming the file: a
// file shorter than 8 bytes or than 8 + N, a header over 100 MB (the reference reader's limit),
// JSON that does not parse or is not an object, an entry without dtype/shape/data_offsets, an
// unknown dtype, a negative or non-integer dimension, offsets that are reversed, beyond the data,
// of another length than shape × dtype size, or overlapping another tensor's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain {

/// One tensor of a safetensors file.
struct SafeTensor {
  std::string name;
  std::string dtype;                ///< safetensors dtype: "F32", "BF16", "F16", "F64", "I64", ...
  std::vector<std::int64_t> shape;  ///< [] for a scalar
  /// Row-major little-endian bytes (shape's element count × dtype_size(dtype)).
  std::vector<std::uint8_t> data;
};

/// Bytes per element of a safetensors dtype; 0 for a string that is no safetensors dtype.
std::size_t safetensors_dtype_size(const std::string& dtype);

/// The tensor's values as float32: F32 as is, BF16/F16 widened, F64 rounded. Throws InputError
/// naming `file` and the tensor for any other dtype (integers, bool, fp8).
std::vector<float> safetensor_floats(const SafeTensor& t, const std::string& file);

/// Writes `tensors` (in this order, data back to back) and `metadata` (the "__metadata__" entry,
/// omitted when empty) to `path` atomically: `<path>.tmp`, fsync, then a hard link to `path`, so
/// `path` appears only complete and an existing file is never replaced. Throws InputError naming
/// `path` when it exists or its directory does not take files; LibraryError on a write failure
/// (the temporary file is removed); Error when a tensor's data size does not fit its shape/dtype.
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

/// A parsed safetensors file.
struct SafetensorsFile {
  std::vector<SafeTensor> tensors;              ///< in header order
  std::map<std::string, std::string> metadata;  ///< "__metadata__" (empty when absent)
};

/// Reads and validates `path` (see the top of this file). Throws InputError naming the file and
/// what is wrong.
SafetensorsFile read_safetensors(const std::string& path);

/// The largest header read_safetensors() accepts: 100,000,000 bytes.
inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;

}  // namespace dtrain
