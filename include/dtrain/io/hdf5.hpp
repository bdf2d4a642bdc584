// dtrain/io/hdf5.hpp — RAII owners, error checking and small read/write helpers over the HDF5 C
// API.
//
// Used by the dataset reader (io/dataset.hpp) and by checkpoints. Follows the HDF5 1.10 C API
// (H5F/H5D/H5S/H5T/H5P/H5A/H5G).
//
// Thread-safety. Debian's parallel HDF5 is built without its thread-safety option, so the library
// must never be entered by two threads at once. Every function in dtrain that calls HDF5 — all the
// helpers below, the handle destructors, the dataset prefetch thread and the checkpoint writer —
// holds hdf5_mutex() (a recursive mutex) while it does. Code outside this file that calls H5*
// directly must lock it too:
//     std::lock_guard lock(dtrain::hdf5_mutex());
// All helpers here lock it themselves and are therefore safe to call from any thread. Note that
// the H5T_NATIVE_* / H5T_STD_* / H5P_<CLASS> "constants" are macros that call H5open(): evaluate
// them only while holding the lock.
//
// Errors. HDF5's automatic printing of its error stack is switched off the first time hdf5_mutex()
// is called; failed calls instead throw dtrain::LibraryError (DT_CHECK_HDF5) whose message carries
// the call text, the innermost messages of HDF5's error stack, file:line and the object involved.
// Problems that are the user's fault (a missing or corrupt input file, a missing attribute of the
// wrong type) throw dtrain::InputError naming the file and object.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {

/// The process-wide lock that serializes every HDF5 call in dtrain. Recursive, so helpers may nest.
/// The first call also silences HDF5's automatic error printing (H5Eset_auto2(H5E_DEFAULT, 0, 0)).
std::recursive_mutex& hdf5_mutex();

/// Text of HDF5's current error stack for this thread (innermost descriptions, "; "-separated),
/// then clears the stack. Returns "" when the stack is empty. Caller must hold hdf5_mutex().
std::string hdf5_error_text();

namespace detail {
/// Throws LibraryError "HDF5 call `call` failed on what: <stack> (file:line)". Holds hdf5_mutex().
[[noreturn]] void throw_hdf5_error(const char* call, const std::string& what, const char* file,
                                   int line);
/// Returns v if it is ≥ 0 (the HDF5 success convention for herr_t, htri_t, hid_t, hssize_t),
/// else throws via throw_hdf5_error().
template <typename T>
T check_hdf5(T v, const char* call, const std::string& what, const char* file, int line) {
  if (v < 0) throw_hdf5_error(call, what, file, line);
  return v;
}
}  // namespace detail

/// Owns one hid_t and closes it with Close (H5Fclose, H5Dclose, …) under hdf5_mutex().
/// Non-copyable, movable; a default-constructed or moved-from handle holds H5I_INVALID_HID.
/// The destructor never throws (a failed close is ignored: there is nothing left to do about it).
template <herr_t (*Close)(hid_t)>
class Hdf5Handle {
 public:
  Hdf5Handle() = default;
  /// Takes ownership of id (which may be negative: then the handle is empty).
  explicit Hdf5Handle(hid_t id) noexcept : id_(id) {}
  ~Hdf5Handle() { reset(); }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle(Hdf5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Hdf5Handle& operator=(Hdf5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  /// The owned id (still owned).
  [[nodiscard]] hid_t get() const noexcept { return id_; }
  /// True when an id is held.
  explicit operator bool() const noexcept { return id_ >= 0; }
  /// Gives up ownership and returns the id.
  hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
  /// Closes the held id (if any). Never throws.
  void reset() noexcept {
    if (id_ >= 0) {
      try {
        std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
        Close(id_);
        H5Eclear2(H5E_DEFAULT);
      } catch (...) {  // locking can only fail on a broken system; never throw from a destructor
      }
      id_ = H5I_INVALID_HID;
    }
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using H5File = Hdf5Handle<H5Fclose>;
using H5Dataset = Hdf5Handle<H5Dclose>;
using H5Dataspace = Hdf5Handle<H5Sclose>;
using H5Datatype = Hdf5Handle<H5Tclose>;  ///< only for types we own (H5Tcopy, H5Dget_type…)
using H5PropList = Hdf5Handle<H5Pclose>;
using H5Attribute = Hdf5Handle<H5Aclose>;
using H5Group = Hdf5Handle<H5Gclose>;

// ---- files
// ----------------------------------------------------------------------------------------

/// Opens an existing file read-only (default POSIX driver), with HDF5's file locks where its file
/// system takes them and without where it has none (NFS without lockd; warned once per process:
/// src/io/hdf5_locks.hpp). Throws InputError naming the path when it does not exist, is not a
/// regular file, is not an HDF5 file (H5Fis_hdf5), is locked by another process, or cannot be
/// opened (truncated, corrupt, no permission).
H5File open_file_read(const std::string& path);

/// Opens an existing HDF5 file for reading and writing. Throws InputError like open_file_read().
H5File open_file_rw(const std::string& path);

/// Creates (truncating any existing file) an HDF5 file, file locks as open_file_read(). Throws
/// InputError when another process holds it locked, LibraryError on any other failure.
H5File create_file(const std::string& path);

/// Flushes all buffers of an open file to the OS (H5Fflush, global scope). Throws LibraryError.
void flush_file(hid_t file, const std::string& what);

/// Creates an HDF5 file held in memory only (the core driver, no backing store), `name` naming
/// it in errors: a writer that puts its bytes on disk itself (file_image()) so that a full disk
/// is a failed write of its own, not an HDF5 file left half-open. Throws LibraryError.
H5File create_memory_file(const std::string& name);

/// The bytes of the open file `file` as they would stand on disk (H5Fflush, then
/// H5Fget_file_image). Throws LibraryError naming `what`.
std::string file_image(hid_t file, const std::string& what);

// ---- objects
// --------------------------------------------------------------------------------------

/// True when `name` (a path relative to loc, no intermediate groups required to exist) names a
/// link. Never throws: a failed H5Lexists (an invalid loc too) answers false.
bool has_link(hid_t loc, const std::string& name);

/// True when object obj has an attribute called name. Throws LibraryError when H5Aexists fails
/// (e.g. obj is not an open object).
bool has_attribute(hid_t obj, const std::string& name);

/// Opens dataset `name` under loc with access property list dapl (e.g. a chunk-cache setting).
/// `where` names the file for messages.
/// Throws InputError "<where>: no dataset `name`" when missing or not a dataset.
H5Dataset open_dataset(hid_t loc, const std::string& name, const std::string& where,
                       hid_t dapl = H5P_DEFAULT);

/// Number of filters (compression, checksum…) in a dataset's pipeline; 0 for contiguous or plain
/// chunked storage. Throws LibraryError.
int dataset_filter_count(hid_t dset);

/// Creates (or opens, when it already exists) group `name` under loc. Throws LibraryError.
H5Group create_group(hid_t loc, const std::string& name);

/// Opens group `name` under loc; InputError naming `where` when missing.
H5Group open_group(hid_t loc, const std::string& name, const std::string& where);

/// Dimensions of a dataset's (simple) dataspace; {} for a scalar. Throws LibraryError, or
/// InputError naming the dataset and file when a dimension passes its stored maximum (corrupt
/// metadata, which HDF5 1.10 would otherwise read as fill values).
std::vector<hsize_t> dataset_dims(hid_t dset);

/// "60000×1×28×28" ("scalar" for {}): a shape in messages.
std::string dims_text(const std::vector<hsize_t>& dims);

/// A dataset's or attribute's element type, in numpy spelling: "uint8", "int16", "int64",
/// "float32", "float64", "string", or the HDF5 class name ("compound", "enum", …) otherwise.
struct H5TypeInfo {
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;                   ///< bytes per element
  bool is_signed = false;                 ///< integers only
  std::string vlen_of;                    ///< variable-length types: the element type's str()
  [[nodiscard]] std::string str() const;  ///< the name above ("uint8", "compound", …)
  [[nodiscard]] bool is_integer() const { return cls == H5T_INTEGER; }
  [[nodiscard]] bool is_float() const { return cls == H5T_FLOAT; }
  [[nodiscard]] bool is_numeric() const { return is_integer() || is_float(); }
};
/// Type of a dataset. Throws LibraryError.
H5TypeInfo dataset_type(hid_t dset);

// ---- attributes (on a file's root group, a group or a dataset)
// ----------------------------------- Readers throw InputError "<where>: attribute `name` …" when
// the attribute is missing or of a type that cannot be converted (a string where a number is
// expected, or the reverse). Writers replace an existing attribute of the same name; they throw
// LibraryError on failure.

/// Reads a numeric scalar (or 1-element) attribute converted to int64. Floats must be integral.
std::int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& where);
/// Reads a numeric scalar (or 1-element) attribute converted to double.
double read_attr_double(hid_t obj, const std::string& name, const std::string& where);
/// Reads a numeric attribute of any shape as a flat float vector (HDF5 converts the type).
std::vector<float> read_attr_floats(hid_t obj, const std::string& name, const std::string& where);
/// Reads a string attribute (fixed or variable length, scalar or 1-element). Trailing NULs and
/// spaces of fixed-length strings are removed.
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& where);
/// Reads a string attribute of any shape as a flat list (fixed or variable length).
std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name,
                                           const std::string& where);

/// Writes a scalar int64 attribute.
void write_attr_int(hid_t obj, const std::string& name, std::int64_t value);
/// Writes a scalar float64 attribute.
void write_attr_double(hid_t obj, const std::string& name, double value);
/// Writes a 1-D float32 attribute of values.size() elements (may be empty).
void write_attr_floats(hid_t obj, const std::string& name, const std::vector<float>& values);
/// Writes a scalar variable-length UTF-8 string attribute (h5py reads it as str).
void write_attr_string(hid_t obj, const std::string& name, const std::string& value);
/// Writes a 1-D variable-length UTF-8 string attribute.
void write_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& values);

// ---- whole datasets
// -------------------------------------------------------------------------------

/// Reads a whole numeric dataset of any rank as float32 (HDF5 converts the type; a Fletcher32
/// checksum, when present, is verified). dims, when given, receives the dimensions.
/// Throws InputError when `name` is missing or not numeric, LibraryError when the read fails
/// (a checksum mismatch reads "data error detected by Fletcher32 checksum").
std::vector<float> read_dataset_floats(hid_t loc, const std::string& name, const std::string& where,
                                       std::vector<hsize_t>* dims = nullptr);
/// As read_dataset_floats(), converted to int64 (integer datasets only).
std::vector<std::int64_t> read_dataset_int64s(hid_t loc, const std::string& name,
                                              const std::string& where,
                                              std::vector<hsize_t>* dims = nullptr);

/// Creates dataset `name` (float32, dims; product(dims) == data.size()) under loc and writes data.
/// The dataset is chunked along its first dimension (≈1 MiB chunks) with the Fletcher32 checksum
/// filter, so a corrupted checkpoint is detected on read. An empty dataset (a zero dimension) is
/// stored contiguous without a filter. Throws LibraryError.
void write_dataset_floats(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const float* data);
/// As write_dataset_floats() for int64 data (data cursors, RNG state, counters).
void write_dataset_int64s(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const std::int64_t* data);
/// As write_dataset_floats() for int32 data (class predictions).
void write_dataset_int32s(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims,
                          const std::int32_t* data);

}  // namespace dtrain

/// Checks an HDF5 C call: evaluates to its result when ≥ 0, else throws dtrain::LibraryError naming
/// the call text, HDF5's own error messages, file:line and `what` (the file/object involved).
/// The caller must hold dtrain::hdf5_mutex().
#define DT_CHECK_HDF5(call, what) \
  (::dtrain::detail::check_hdf5((call), #call, (what), __FILE__, __LINE__))
