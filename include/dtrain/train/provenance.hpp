// dtrain/train/provenance.hpp — what a run was made with, for the log header and results.json:
// dtrain's version (git describe at build time), the compiler, the MPI / oneDNN / HDF5 library
// versions (and CUDA / cuDNN / NCCL when a rank uses the GPU backend), every rank's host, GPU model
// and OpenMP threads, and a CRC-32 of the effective configuration.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/train/report.hpp"

namespace dtrain {

struct Provenance {
  /// In print order: dtrain_version, compiler, mpi_version, onednn_version, hdf5_version,
  /// config_crc32, and with the GPU backend cuda_runtime_version, cuda_driver_version,
  /// cudnn_version, nccl_version. Values are "major.minor.patch" style strings.
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<std::string> hosts;     ///< per world rank (MPI_Get_processor_name)
  std::vector<std::string> gpus;      ///< per world rank: GPU model, "" on CPU ranks
  std::vector<std::int64_t> threads;  ///< per world rank: omp_get_max_threads()
  bool uses_gpu = false;              ///< some rank runs the CUDA backend
};

/// Compiler name and version of this build, e.g. "GCC 12.2.0" or "Clang 16.0.6".
std::string compiler_version();

/// CRC-32 (Boost.CRC's crc_32_type: the IEEE 802.3 / zlib polynomial) of the configuration's
/// canonical text, as 8 lowercase hex digits. Canonical text: the `key = value` lines of an INI
/// text (comments, blank lines and [section] headers dropped, surrounding spaces trimmed), stably
/// sorted by key (so repeated keys such as `layer` keep their order), joined by '\n'.
std::string config_crc32(const std::string& effective_ini);

/// Gathers the provenance over cluster.world() to the chief (collective: every rank must call it
/// once, after set_threads and after the backend exists; waits with the communication deadline).
/// `device` is this rank's device name ("cpu", "cuda:N"). Only the chief's result is complete;
/// other ranks get their own fields. Throws LibraryError on an MPI or CUDA failure.
Provenance gather_provenance(const Cluster& cluster, const std::string& device,
                             const std::string& effective_ini);

/// Log header lines: "# dtrain <version> | <compiler> | <MPI> | oneDNN .. | HDF5 .. | config_crc32
/// ..", GPU versions when used, then "# hosts: ...; threads per rank: ...; GPUs: ...".
std::string describe_provenance(const Provenance& p);

/// Adds every field, `hosts`, `threads_per_rank` and (GPU runs) `gpu_models` to a results map.
void add_provenance(std::map<std::string, JsonValue>& results, const Provenance& p);

}  // namespace dtrain
