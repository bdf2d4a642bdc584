// dtrain/io/safetensors.cpp — the safetensors format (see safetensors.hpp): header through
// nlohmann::json, validated before any offset is trusted; written by create_new_file() (temporary
// file, fsync, hard link: core/files.hpp).
#include "dtrain/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

/// IEEE half → float (exact).
float half_to_float(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), exp - 25);
  return sign ? -v : v;
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::vector<float> safetensor_floats(const SafeTensor& t, const std::string& file) {
  const std::size_t n = static_cast<std::size_t>(element_count(t.shape));
  std::vector<float> out(n);
  const std::uint8_t* p = t.data.data();
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16" && t.dtype != "F64")
    throw InputError("safetensors file '" + file + "': tensor '" + t.name + "' has dtype " +
                     t.dtype + ", expected a floating-point dtype (F32, BF16, F16, F64)");
  if (n == 0) return out;  // an empty tensor (shape with a 0): no bytes to convert
  if (t.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = t.dtype == "BF16" ? bf16_to_float(h) : half_to_float(h);
    }
  } else {  // F64
    for (std::size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  require_new_file(path, "--out");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t at = 0;
  for (const SafeTensor& t : tensors) {
    const std::size_t size = safetensors_dtype_size(t.dtype);
    DT_ASSERT(size > 0 && t.data.size() == static_cast<std::size_t>(element_count(t.shape)) * size,
              "safetensors tensor '" + t.name + "': " + std::to_string(t.data.size()) +
                  " bytes do not fit its shape and dtype " + t.dtype);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
  }
  // __metadata__ carries the job's paths, bytes on Linux: one not in UTF-8 reads as U+FFFD.
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t n = text.size();

  create_new_file(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafeTensor& t : tensors)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size()));
  });
}

namespace {

/// A tensor's bytes [begin, end) in the data section, for the overlap check.
struct ByteRange {
  std::uint64_t begin, end;
  std::string name;
};

/// The JSON header of the open file `in` (`size` bytes); header_bytes: its length.
nlohmann::json read_header(std::ifstream& in, std::uint64_t size, const std::string& where,
                           std::uint64_t& header_bytes) {
  std::uint64_t& n = header_bytes;
  in.read(reinterpret_cast<char*>(&n), 8);
  DT_REQUIRE(n <= kSafetensorsMaxHeader,
             where + ": its header is " + std::to_string(n) +
                 " bytes, more than the 100 MB "
                 "safetensors allows (corrupt, or not a safetensors file)");
  DT_REQUIRE(n <= size - 8, where + " is truncated: its header says " + std::to_string(n) +
                                " bytes, the file holds " + std::to_string(size - 8) +
                                " after the length");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  DT_REQUIRE(in.good(), where + ": reading its header failed");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": its header is not valid JSON (" + e.what() + ")");
  }
  DT_REQUIRE(header.is_object(), where + ": its header is not a JSON object");
  return header;
}

/// Tensor `name` of the header (`e`: its entry) without its data; range: its bytes in the data
/// section of `data_size` bytes. Throws InputError (`what` names the file and tensor).
SafeTensor parse_entry(const std::string& name, const nlohmann::json& e, const std::string& what,
                       std::uint64_t data_size, ByteRange& range) {
  DT_REQUIRE(e.is_object() && e.contains("dtype") && e.contains("shape") &&
                 e.contains("data_offsets"),
             what + ": expected an object with dtype, shape and data_offsets");
  SafeTensor t;
  t.name = name;
  DT_REQUIRE(e["dtype"].is_string(), what + ": dtype is not a string");
  t.dtype = e["dtype"].get<std::string>();
  const std::size_t esize = safetensors_dtype_size(t.dtype);
  DT_REQUIRE(esize > 0, what + ": unknown dtype '" + t.dtype +
                            "' (expected a safetensors dtype: F32, BF16, F16, F64, I64, ...)");
  DT_REQUIRE(e["shape"].is_array(), what + ": shape is not an array");
  std::uint64_t count = 1;
  for (const auto& d : e["shape"]) {
    DT_REQUIRE(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0),
               what + ": shape " + e["shape"].dump() + " holds a non-integer or negative size");
    const auto x = d.get<std::uint64_t>();
    DT_REQUIRE(x == 0 || count <= data_size / x,
               what + ": shape " + e["shape"].dump() + " is larger than the file's data");
    count *= x;
    t.shape.push_back(static_cast<std::int64_t>(x));
  }
  const auto& off = e["data_offsets"];
  DT_REQUIRE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             what + ": data_offsets " + off.dump() + " is not [begin, end] in bytes");
  const auto b = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
  DT_REQUIRE(b <= end && end <= data_size, what + ": data_offsets [" + std::to_string(b) + ", " +
                                               std::to_string(end) + "] lie outside the " +
                                               std::to_string(data_size) +
                                               " data bytes (truncated file?)");
  DT_REQUIRE(end - b == count * esize, what + ": data_offsets hold " + std::to_string(end - b) +
                                           " bytes, its shape " + e["shape"].dump() + " of " +
                                           t.dtype + " needs " + std::to_string(count * esize));
  range = {b, end, name};
  return t;
}

/// No two non-empty tensors share a byte.
void check_no_overlap(std::vector<ByteRange> ranges, const std::string& where) {
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i)
    DT_REQUIRE(ranges[i].begin >= ranges[i - 1].end || ranges[i].begin == ranges[i].end,
               where + ": tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name +
                   "' overlap (data_offsets [" + std::to_string(ranges[i - 1].begin) + ", " +
                   std::to_string(ranges[i - 1].end) + "] and [" + std::to_string(ranges[i].begin) +
                   ", " + std::to_string(ranges[i].end) + "])");
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string where = "safetensors file '" + path + "'";
  std::error_code ec;
  DT_REQUIRE(fs::is_regular_file(path, ec), where + " does not exist or is not a regular file");
  const std::uint64_t size = fs::file_size(path, ec);
  DT_REQUIRE(!ec, where + ": cannot read its size: " + ec.message());
  DT_REQUIRE(size >= 8, where + " is truncated: " + std::to_string(size) +
                            " bytes, fewer than the 8-byte header length");
  std::ifstream in(path, std::ios::binary);
  DT_REQUIRE(in.good(), where + " cannot be opened");
  std::uint64_t n = 0;
  const nlohmann::json header = read_header(in, size, where, n);
  const std::uint64_t data_size = size - 8 - n;
  SafetensorsFile f;
  std::vector<ByteRange> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      DT_REQUIRE(e.is_object(), where + ": __metadata__ is not an object");
      for (const auto& [k, v] : e.items()) {
        DT_REQUIRE(v.is_string(), where + ": __metadata__ '" + k + "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor '" + name + "'";
    ranges.emplace_back();
    SafeTensor t = parse_entry(name, e, what, data_size, ranges.back());
    t.data.resize(ranges.back().end - ranges.back().begin);
    in.seekg(static_cast<std::streamoff>(8 + n + ranges.back().begin));
    in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
    DT_REQUIRE(in.good(), what + ": reading its data failed");
    f.tensors.push_back(std::move(t));
  }
  check_no_overlap(std::move(ranges), where);
  return f;
}

}  // namespace dtrain
