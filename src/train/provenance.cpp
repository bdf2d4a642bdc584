// dtrain/train/provenance.cpp — library versions from the libraries themselves
// (MPI_Get_library_version, dnnl_version, H5get_libversion; cudaRuntimeGetVersion,
// cudnnGetVersion, ncclGetVersion), gathered from every rank to the chief.
#include "dtrain/train/provenance.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <oneapi/dnnl/dnnl.h>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/version.hpp"
#include "dtrain/io/hdf5.hpp"

#ifdef DTRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#endif

namespace dtrain {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// "Open MPI v4.1.4, package: ..." → its first line, up to the first comma.
std::string mpi_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<std::size_t>(std::max(len, 0)));
  s = s.substr(0, s.find_first_of(",\n"));
  return trim(s);
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string hdf5_version() {
  unsigned maj = 0, min = 0, rel = 0;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    H5get_libversion(&maj, &min, &rel);
  }
  return std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel);
}

/// "12.4" from CUDA's 1000·major + 10·minor encoding.
[[maybe_unused]] std::string cuda_encoded(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

/// This rank's GPU model for device "cuda:N", else "".
std::string gpu_model([[maybe_unused]] const std::string& device) {
#ifdef DTRAIN_HAVE_CUDA
  if (device.rfind("cuda:", 0) == 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, std::stoi(device.substr(5))) == cudaSuccess)
      return prop.name;
    return "unknown CUDA device";
  }
#endif
  return "";
}

/// Fixed-size record exchanged by the gather: host, GPU model, threads.
struct RankRecord {
  char host[MPI_MAX_PROCESSOR_NAME];
  char gpu[128];
  std::int64_t threads;
};

}  // namespace

std::string compiler_version() {
#if defined(__clang__)
  return "Clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." +
         std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
  return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown compiler";
#endif
}

std::string config_crc32(const std::string& effective_ini) {
  std::vector<std::pair<std::string, std::string>> kv;
  std::istringstream in(effective_ini);
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    kv.emplace_back(trim(line.substr(0, eq)), trim(line.substr(eq + 1)));
  }
  std::stable_sort(kv.begin(), kv.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canon;
  for (const auto& [k, v] : kv) canon += k + "=" + v + "\n";
  boost::crc_32_type crc;
  crc.process_bytes(canon.data(), canon.size());
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc.checksum());
  return hex;
}

Provenance gather_provenance(const Cluster& cluster, const std::string& device,
                             const std::string& effective_ini) {
  Provenance p;
  p.fields = {{"dtrain_version", dtrain_version()}, {"compiler", compiler_version()},
              {"mpi_version", mpi_version()},       {"onednn_version", onednn_version()},
              {"hdf5_version", hdf5_version()},     {"config_crc32", config_crc32(effective_ini)}};
  RankRecord mine{};
  std::snprintf(mine.host, sizeof mine.host, "%s", cluster.me().host.c_str());
  std::snprintf(mine.gpu, sizeof mine.gpu, "%s", gpu_model(device).c_str());
  mine.threads = omp_get_max_threads();
  const int n = cluster.world_size();
  std::vector<RankRecord> all(static_cast<std::size_t>(n));
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                           cluster.worker_rank(0), cluster.world(), &req));
  wait_one(req, comm_timeout(), "gathering every rank's host, GPU and threads (provenance)");
  if (!cluster.is_chief()) all.assign(1, mine);
  for (const auto& r : all) {
    p.hosts.emplace_back(r.host);
    p.gpus.emplace_back(r.gpu);
    p.threads.push_back(r.threads);
    p.uses_gpu = p.uses_gpu || r.gpu[0] != 0;
  }
#ifdef DTRAIN_HAVE_CUDA
  if (p.uses_gpu) {
    int rt = 0, drv = 0, nccl = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    ncclGetVersion(&nccl);
    const std::size_t dnn = cudnnGetVersion();
    p.fields.emplace_back("cuda_runtime_version", cuda_encoded(rt));
    p.fields.emplace_back("cuda_driver_version", cuda_encoded(drv));
    p.fields.emplace_back("cudnn_version", std::to_string(dnn / 10000) + "." +
                                               std::to_string(dnn / 100 % 100) + "." +
                                               std::to_string(dnn % 100));
    // NCCL ≥ 2.9 encodes major·10000 + minor·100 + patch.
    p.fields.emplace_back("nccl_version", std::to_string(nccl / 10000) + "." +
                                              std::to_string(nccl / 100 % 100) + "." +
                                              std::to_string(nccl % 100));
  }
#endif
  return p;
}

std::string describe_provenance(const Provenance& p) {
  std::string line = "# dtrain";
  for (const auto& [k, v] : p.fields) line += (k == "dtrain_version" ? " " : " | " + k + " ") + v;
  auto join = [](const auto& v) {
    std::ostringstream os;
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    return os.str();
  };
  line += "\n# hosts by rank: " + join(p.hosts) + "; OpenMP threads by rank: " + join(p.threads);
  if (p.uses_gpu) line += "; GPUs by rank: " + join(p.gpus);
  return line;
}

void add_provenance(std::map<std::string, JsonValue>& results, const Provenance& p) {
  for (const auto& [k, v] : p.fields) results[k] = v;
  results["hosts"] = p.hosts;
  results["threads_per_rank"] = p.threads;
  if (p.uses_gpu) results["gpu_models"] = p.gpus;
}

}  // namespace dtrain
