// dtrain/io/hdf5.cpp — the HDF5 lock, error translation and the attribute/dataset helpers of
// io/hdf5.hpp. Every function here locks hdf5_mutex() before its first H5* call.
#include "dtrain/io/hdf5.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <type_traits>

#include "dtrain/core/error.hpp"
#include "hdf5_locks.hpp"
#include "input_fail.hpp"

namespace dtrain {
namespace {

using Lock = std::lock_guard<std::recursive_mutex>;

/// One HDF5 error description, on one line.
struct ErrorLine {
  std::string text;
  bool system = false;  ///< it carries the system's reason for a failed call (errno)
};

/// The sec2 driver describes a failed system call as "<what>: time = <ctime>\n, filename = ...,
/// errno = N, error message = '<strerror>', buf = ...": that becomes "<what>: <strerror>" (the
/// caller names the file), marked as the system's reason.
ErrorLine tidy_description(std::string d) {
  const std::string key = "error message = '";
  const auto at = d.find(key);
  const auto what_end = d.find(": time = ");
  bool system = false;
  if (at != std::string::npos && what_end != std::string::npos && what_end < at) {
    const auto from = at + key.size();
    const auto to = d.find('\'', from);
    if (to != std::string::npos) {
      d = d.substr(0, what_end) + ": " + d.substr(from, to - from);
      system = true;
    }
  }
  std::replace(d.begin(), d.end(), '\n', ' ');
  return {d, system};
}

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::vector<ErrorLine>*>(data);
  if (err != nullptr && err->desc != nullptr && err->desc[0] != '\0') {
    ErrorLine line = tidy_description(err->desc);
    const auto same = [&line](const ErrorLine& l) { return l.text == line.text; };
    if (std::none_of(out->begin(), out->end(), same)) out->push_back(std::move(line));
  }
  return 0;
}

std::string quoted(const std::string& s) { return "`" + s + "`"; }

// The H5T_NATIVE_* / H5T_STD_* names are macros that call H5open(): only evaluate them while
// holding hdf5_mutex(), hence these functions instead of passing type ids around.
template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
  else return H5T_NATIVE_INT64;
}
template <typename T>
hid_t file_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_IEEE_F32LE;
  else if constexpr (std::is_same_v<T, double>) return H5T_IEEE_F64LE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_STD_I32LE;
  else return H5T_STD_I64LE;
}

/// Product of dims (1 for a scalar).
hsize_t element_count(const std::vector<hsize_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<>());
}

/// Deletes attribute `name` of obj when it exists (writers replace).
void delete_attr_if_present(hid_t obj, const std::string& name) {
  if (has_attribute(obj, name))
    DT_CHECK_HDF5(H5Adelete(obj, name.c_str()), "attribute " + quoted(name));
}

H5Dataspace simple_space(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return H5Dataspace(DT_CHECK_HDF5(H5Screate(H5S_SCALAR), "scalar dataspace"));
  return H5Dataspace(DT_CHECK_HDF5(
      H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "dataspace"));
}

/// Writes a numeric attribute of `dims` (empty → scalar) elements of T (float, double, int64).
template <typename T>
void write_numeric_attr(hid_t obj, const std::string& name, const std::vector<hsize_t>& dims,
                        const T* data) {
  Lock lock(hdf5_mutex());
  const std::string what = "attribute " + quoted(name);
  delete_attr_if_present(obj, name);
  H5Dataspace space = simple_space(dims);
  H5Attribute attr(DT_CHECK_HDF5(
      H5Acreate2(obj, name.c_str(), file_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT), what));
  DT_CHECK_HDF5(H5Awrite(attr.get(), native_type<T>(), data), what);
}

/// Opens attribute `name`; InputError naming `where` when it is missing.
H5Attribute open_attr(hid_t obj, const std::string& name, const std::string& where) {
  if (!has_attribute(obj, name)) DT_INPUT_FAIL(where + ": missing attribute " + quoted(name));
  return H5Attribute(
      DT_CHECK_HDF5(H5Aopen(obj, name.c_str(), H5P_DEFAULT), where + " attribute " + quoted(name)));
}

H5TypeInfo type_info_of(hid_t type) {
  H5TypeInfo t;
  t.cls = H5Tget_class(type);
  t.size = H5Tget_size(type);
  if (t.cls == H5T_INTEGER) t.is_signed = H5Tget_sign(type) == H5T_SGN_2;
  if (t.cls == H5T_VLEN) {
    H5Datatype base(H5Tget_super(type));
    if (base.get() >= 0) t.vlen_of = type_info_of(base.get()).str();
  }
  return t;
}

/// Reads a numeric attribute as T (float, double, int64) into a flat vector.
template <typename T>
std::vector<T> read_numeric_attr(hid_t obj, const std::string& name, const std::string& where) {
  Lock lock(hdf5_mutex());
  const std::string what = where + " attribute " + quoted(name);
  H5Attribute attr = open_attr(obj, name, where);
  H5Datatype type(DT_CHECK_HDF5(H5Aget_type(attr.get()), what));
  const H5TypeInfo ti = type_info_of(type.get());
  if (!ti.is_numeric()) DT_INPUT_FAIL(what + " has type " + ti.str() + ", expected a number");
  H5Dataspace space(DT_CHECK_HDF5(H5Aget_space(attr.get()), what));
  const hssize_t n = DT_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()), what);
  std::vector<T> out(static_cast<std::size_t>(n));
  if (n > 0) DT_CHECK_HDF5(H5Aread(attr.get(), native_type<T>(), out.data()), what);
  return out;
}

/// Reads a dataset stored as unsigned 64-bit integers into int64 `out` and returns true; any other
/// dataset (or a T other than int64) returns false, read by the caller. HDF5's conversion would
/// clamp a value above INT64_MAX to INT64_MAX (a wrong value in a message, a wrong size for a
/// shape): the bits are read as stored and such a value is an InputError naming it and its index.
template <typename T>
bool read_wide_unsigned(hid_t /*dset*/, const H5TypeInfo& /*ti*/, const std::string& /*what*/,
                        std::vector<T>& /*out*/) {
  return false;
}
bool read_wide_unsigned(hid_t dset, const H5TypeInfo& ti, const std::string& what,
                        std::vector<std::int64_t>& out) {
  if (!ti.is_integer() || ti.is_signed || ti.size < sizeof(std::uint64_t)) return false;
  std::vector<std::uint64_t> raw(out.size());
  DT_CHECK_HDF5(H5Dread(dset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), what);
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] > kMax)
      DT_INPUT_FAIL(what + " has value " + std::to_string(raw[i]) + " at index " +
                    std::to_string(i) + ", expected at most " + std::to_string(kMax));
    out[i] = static_cast<std::int64_t>(raw[i]);
  }
  return true;
}

/// Reads a numeric dataset as T; `integers_only` rejects float datasets.
template <typename T>
std::vector<T> read_numeric_dataset(hid_t loc, const std::string& name, const std::string& where,
                                    std::vector<hsize_t>* dims, bool integers_only) {
  Lock lock(hdf5_mutex());
  const std::string what = where + " dataset " + quoted(name);
  H5Dataset dset = open_dataset(loc, name, where);
  const H5TypeInfo ti = dataset_type(dset.get());
  if (!ti.is_numeric() || (integers_only && !ti.is_integer()))
    DT_INPUT_FAIL(what + " has dtype " + ti.str() + ", expected " +
                  (integers_only ? "an integer type" : "a numeric type"));
  std::vector<hsize_t> d = dataset_dims(dset.get());
  std::vector<T> out;
  try {
    out.resize(static_cast<std::size_t>(element_count(d)));
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    DT_INPUT_FAIL(what + " has " + std::to_string(element_count(d)) + " elements (shape " +
                  dims_text(d) + "), more than this process can hold");
  }
  if (!out.empty() && !read_wide_unsigned(dset.get(), ti, what, out))
    DT_CHECK_HDF5(H5Dread(dset.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                  what);
  if (dims != nullptr) *dims = std::move(d);
  return out;
}

/// Creates a (chunked + Fletcher32 when non-empty) dataset of T and writes data.
template <typename T>
void write_checked_dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                           const T* data) {
  constexpr std::size_t elem_size = sizeof(T);
  Lock lock(hdf5_mutex());
  const std::string what = "dataset " + quoted(name);
  H5Dataspace space = simple_space(dims);
  H5PropList dcpl(DT_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), what));
  // No creation / modification times in the object header: the same data, the same bytes.
  DT_CHECK_HDF5(H5Pset_obj_track_times(dcpl.get(), false), what);
  const hsize_t total = element_count(dims);
  if (!dims.empty() && total > 0) {
    constexpr hsize_t kChunkBytes = hsize_t{1} << 20;
    const hsize_t row = total / dims[0];  // elements per index of the first dimension
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::clamp<hsize_t>(kChunkBytes / std::max<hsize_t>(1, row * elem_size), 1, dims[0]);
    DT_CHECK_HDF5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), what);
    DT_CHECK_HDF5(H5Pset_fletcher32(dcpl.get()), what);
  }
  H5Dataset dset(DT_CHECK_HDF5(H5Dcreate2(loc, name.c_str(), file_type<T>(), space.get(),
                                          H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                               what));
  if (total > 0)
    DT_CHECK_HDF5(H5Dwrite(dset.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                  what);
}

/// Memory type for variable-length strings in character set cset.
H5Datatype vlen_string_type(H5T_cset_t cset) {
  H5Datatype t(DT_CHECK_HDF5(H5Tcopy(H5T_C_S1), "string type"));
  DT_CHECK_HDF5(H5Tset_size(t.get(), H5T_VARIABLE), "string type");
  DT_CHECK_HDF5(H5Tset_cset(t.get(), cset), "string type");
  return t;
}

void write_string_attr(hid_t obj, const std::string& name, const std::vector<std::string>& values,
                       bool scalar) {
  Lock lock(hdf5_mutex());
  const std::string what = "attribute " + quoted(name);
  delete_attr_if_present(obj, name);
  H5Datatype type = vlen_string_type(H5T_CSET_UTF8);
  H5Dataspace space =
      simple_space(scalar ? std::vector<hsize_t>{} : std::vector<hsize_t>{values.size()});
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  H5Attribute attr(DT_CHECK_HDF5(
      H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), what));
  if (!ptrs.empty()) DT_CHECK_HDF5(H5Awrite(attr.get(), type.get(), ptrs.data()), what);
}

/// Opens a file after checking it exists and is HDF5; flags is H5F_ACC_RDONLY or H5F_ACC_RDWR.
H5File open_existing(const std::string& path, unsigned flags) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) DT_INPUT_FAIL(path + ": no such file");
  if (!std::filesystem::is_regular_file(st)) DT_INPUT_FAIL(path + ": not a regular file");
  Lock lock(hdf5_mutex());
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 < 0) DT_INPUT_FAIL(path + ": cannot be read (" + hdf5_error_text() + ")");
  if (is_h5 == 0) DT_INPUT_FAIL(path + ": not an HDF5 file (no HDF5 signature)");
  const H5PropList fapl = detail::file_access(path, false);
  const hid_t id = H5Fopen(path.c_str(), flags, fapl ? fapl.get() : H5P_DEFAULT);
  if (id < 0)
    DT_INPUT_FAIL(path + ": cannot open HDF5 file — truncated, corrupt or unreadable (HDF5: " +
                  hdf5_error_text() + ")");
  return H5File(id);
}

}  // namespace

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mu;
  static const bool silenced = [] {
    std::lock_guard<std::recursive_mutex> lock(mu);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
  return mu;
}

std::string hdf5_error_text() {
  std::vector<ErrorLine> descs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &descs);
  H5Eclear2(H5E_DEFAULT);
  // Keep the outermost description, any carrying the system's reason (a full disk: "file write
  // failed: No space left on device") and the innermost two: enough to see what failed and why.
  std::string out;
  for (std::size_t i = 0; i < descs.size(); ++i)
    if (i == 0 || descs[i].system || i + 2 >= descs.size())
      out += (out.empty() ? "" : "; ") + descs[i].text;
  return out;
}

namespace detail {
void throw_hdf5_error(const char* call, const std::string& what, const char* file, int line) {
  std::string stack;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    stack = hdf5_error_text();
  }
  throw LibraryError(format_error("HDF5 call " + std::string(call) + " failed on " + what +
                                      (stack.empty() ? "" : ": " + stack),
                                  file, line));
}
}  // namespace detail

H5File open_file_read(const std::string& path) { return open_existing(path, H5F_ACC_RDONLY); }

H5File open_file_rw(const std::string& path) { return open_existing(path, H5F_ACC_RDWR); }

H5File create_file(const std::string& path) {
  Lock lock(hdf5_mutex());
  const H5PropList fapl = detail::file_access(path, true);
  return H5File(DT_CHECK_HDF5(
      H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl ? fapl.get() : H5P_DEFAULT),
      "file " + path));
}

void flush_file(hid_t file, const std::string& what) {
  Lock lock(hdf5_mutex());
  DT_CHECK_HDF5(H5Fflush(file, H5F_SCOPE_GLOBAL), what);
}

H5File create_memory_file(const std::string& name) {
  Lock lock(hdf5_mutex());
  const H5PropList fapl(DT_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "file access list"));
  DT_CHECK_HDF5(H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/0), "core driver");
  return H5File(DT_CHECK_HDF5(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                              "in-memory file " + name));
}

std::string file_image(hid_t file, const std::string& what) {
  Lock lock(hdf5_mutex());
  flush_file(file, what);
  const ssize_t size = DT_CHECK_HDF5(H5Fget_file_image(file, nullptr, 0), what + " (its size)");
  std::string bytes(static_cast<std::size_t>(size), '\0');
  DT_CHECK_HDF5(H5Fget_file_image(file, bytes.data(), bytes.size()), what);
  return bytes;
}

bool has_link(hid_t loc, const std::string& name) {
  Lock lock(hdf5_mutex());
  const htri_t r = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);  // a missing intermediate group is "no", not an error
  return r > 0;
}

bool has_attribute(hid_t obj, const std::string& name) {
  Lock lock(hdf5_mutex());
  return DT_CHECK_HDF5(H5Aexists(obj, name.c_str()), "attribute " + quoted(name)) > 0;
}

H5Dataset open_dataset(hid_t loc, const std::string& name, const std::string& where, hid_t dapl) {
  Lock lock(hdf5_mutex());
  if (!has_link(loc, name)) DT_INPUT_FAIL(where + ": no dataset " + quoted(name));
  const hid_t id = H5Dopen2(loc, name.c_str(), dapl);
  if (id < 0)
    DT_INPUT_FAIL(where + ": " + quoted(name) +
                  " is not a readable dataset (HDF5: " + hdf5_error_text() + ")");
  return H5Dataset(id);
}

int dataset_filter_count(hid_t dset) {
  Lock lock(hdf5_mutex());
  H5PropList dcpl(DT_CHECK_HDF5(H5Dget_create_plist(dset), "dataset creation properties"));
  return DT_CHECK_HDF5(H5Pget_nfilters(dcpl.get()), "dataset creation properties");
}

H5Group create_group(hid_t loc, const std::string& name) {
  Lock lock(hdf5_mutex());
  if (has_link(loc, name))
    return H5Group(
        DT_CHECK_HDF5(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), "group " + quoted(name)));
  return H5Group(DT_CHECK_HDF5(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                               "group " + quoted(name)));
}

H5Group open_group(hid_t loc, const std::string& name, const std::string& where) {
  Lock lock(hdf5_mutex());
  if (!has_link(loc, name)) DT_INPUT_FAIL(where + ": no group " + quoted(name));
  const hid_t id = H5Gopen2(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0)
    DT_INPUT_FAIL(where + ": " + quoted(name) + " is not a group (" + hdf5_error_text() + ")");
  return H5Group(id);
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s;
  for (hsize_t d : dims) s += (s.empty() ? "" : "×") + std::to_string(d);
  return dims.empty() ? "scalar" : s;
}

std::vector<hsize_t> dataset_dims(hid_t dset) {
  Lock lock(hdf5_mutex());
  H5Dataspace space(DT_CHECK_HDF5(H5Dget_space(dset), "dataspace"));
  const int rank = DT_CHECK_HDF5(H5Sget_simple_extent_ndims(space.get()), "dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), max(dims.size());
  if (rank > 0)
    DT_CHECK_HDF5(H5Sget_simple_extent_dims(space.get(), dims.data(), max.data()), "dataspace");
  // HDF5 1.10 reads a dataspace whose size passes its maximum (a flipped bit in the object
  // header, which no checksum covers) and fills the missing elements in.
  for (std::size_t i = 0; i < dims.size(); ++i)
    if (max[i] != H5S_UNLIMITED && dims[i] > max[i]) {
      char name[512] = "?", file[4096] = "?";
      H5Iget_name(dset, name, sizeof name);
      H5Fget_name(dset, file, sizeof file);
      DT_INPUT_FAIL(std::string(file) + ": dataset " + quoted(name) + ": dimension " +
                    std::to_string(i) + " has size " + std::to_string(dims[i]) +
                    ", more than its maximum " + std::to_string(max[i]) +
                    ": the file's metadata is corrupt");
    }
  return dims;
}

std::string H5TypeInfo::str() const {
  switch (cls) {
    case H5T_INTEGER:
      return (is_signed ? "int" : "uint") + std::to_string(size * 8);
    case H5T_FLOAT:
      return "float" + std::to_string(size * 8);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length " + (vlen_of.empty() ? std::string("unknown") : vlen_of);
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_REFERENCE:
      return "reference";
    case H5T_TIME:
      return "time";
    default:
      return "unknown";
  }
}

H5TypeInfo dataset_type(hid_t dset) {
  Lock lock(hdf5_mutex());
  H5Datatype type(DT_CHECK_HDF5(H5Dget_type(dset), "datatype"));
  return type_info_of(type.get());
}

std::int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& where) {
  const std::vector<double> v = read_numeric_attr<double>(obj, name, where);
  const std::string what = where + " attribute " + quoted(name);
  if (v.size() != 1)
    DT_INPUT_FAIL(what + " has " + std::to_string(v.size()) + " values, expected 1");
  if (!std::isfinite(v[0]) || std::floor(v[0]) != v[0] || std::fabs(v[0]) > 9.0e15)
    DT_INPUT_FAIL(what + " = " + std::to_string(v[0]) + " is not an integer");
  return static_cast<std::int64_t>(v[0]);
}

double read_attr_double(hid_t obj, const std::string& name, const std::string& where) {
  const std::vector<double> v = read_numeric_attr<double>(obj, name, where);
  if (v.size() != 1)
    DT_INPUT_FAIL(where + " attribute " + quoted(name) + " has " + std::to_string(v.size()) +
                  " values, expected 1");
  return v[0];
}

std::vector<float> read_attr_floats(hid_t obj, const std::string& name, const std::string& where) {
  return read_numeric_attr<float>(obj, name, where);
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& where) {
  std::vector<std::string> v = read_attr_strings(obj, name, where);
  if (v.size() != 1)
    DT_INPUT_FAIL(where + " attribute " + quoted(name) + " has " + std::to_string(v.size()) +
                  " strings, expected 1");
  return v[0];
}

std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name,
                                           const std::string& where) {
  Lock lock(hdf5_mutex());
  const std::string what = where + " attribute " + quoted(name);
  H5Attribute attr = open_attr(obj, name, where);
  H5Datatype ftype(DT_CHECK_HDF5(H5Aget_type(attr.get()), what));
  if (H5Tget_class(ftype.get()) != H5T_STRING)
    DT_INPUT_FAIL(what + " has type " + type_info_of(ftype.get()).str() + ", expected strings");
  H5Dataspace space(DT_CHECK_HDF5(H5Aget_space(attr.get()), what));
  const auto n =
      static_cast<std::size_t>(DT_CHECK_HDF5(H5Sget_simple_extent_npoints(space.get()), what));
  std::vector<std::string> out;
  out.reserve(n);
  if (n == 0) return out;
  if (DT_CHECK_HDF5(H5Tis_variable_str(ftype.get()), what) > 0) {
    H5Datatype mtype = vlen_string_type(H5Tget_cset(ftype.get()));
    std::vector<char*> ptrs(n, nullptr);
    DT_CHECK_HDF5(H5Aread(attr.get(), mtype.get(), ptrs.data()), what);
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    H5Dvlen_reclaim(mtype.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const std::size_t len = H5Tget_size(ftype.get());
    H5Datatype mtype(DT_CHECK_HDF5(H5Tcopy(ftype.get()), what));
    std::vector<char> buf(n * len);
    DT_CHECK_HDF5(H5Aread(attr.get(), mtype.get(), buf.data()), what);
    for (std::size_t i = 0; i < n; ++i) {
      std::string s(buf.data() + i * len, len);
      s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out.push_back(std::move(s));
    }
  }
  return out;
}

void write_attr_int(hid_t obj, const std::string& name, std::int64_t value) {
  write_numeric_attr<std::int64_t>(obj, name, {}, &value);
}

void write_attr_double(hid_t obj, const std::string& name, double value) {
  write_numeric_attr<double>(obj, name, {}, &value);
}

void write_attr_floats(hid_t obj, const std::string& name, const std::vector<float>& values) {
  write_numeric_attr<float>(obj, name, {values.size()}, values.data());
}

void write_attr_string(hid_t obj, const std::string& name, const std::string& value) {
  write_string_attr(obj, name, {value}, /*scalar=*/true);
}

void write_attr_strings(hid_t obj, const std::string& name,
                        const std::vector<std::string>& values) {
  write_string_attr(obj, name, values, /*scalar=*/false);
}

std::vector<float> read_dataset_floats(hid_t loc, const std::string& name, const std::string& where,
                                       std::vector<hsize_t>* dims) {
  return read_numeric_dataset<float>(loc, name, where, dims, false);
}

std::vector<std::int64_t> read_dataset_int64s(hid_t loc, const std::string& name,
                                              const std::string& where,
                                              std::vector<hsize_t>* dims) {
  return read_numeric_dataset<std::int64_t>(loc, name, where, dims, true);
}

void write_dataset_floats(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const float* data) {
  write_checked_dataset<float>(loc, name, dims, data);
}

void write_dataset_int64s(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const std::int64_t* data) {
  write_checked_dataset<std::int64_t>(loc, name, dims, data);
}

void write_dataset_int32s(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const std::int32_t* data) {
  write_checked_dataset<std::int32_t>(loc, name, dims, data);
}

}  // namespace dtrain
