// dtrain/comm/network.hpp — the alpha-beta (latency + bytes / bandwidth) model of one link that
// the scaling model (plan/scaling_model.hpp) prices every transfer with (Hockney 1994; the cost
// model of Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication
// Operations in MPICH"): moving m bytes costs α + m / β.
//
// A link is written as a preset name or as `alpha_us=A,beta_gbps=B[,shared=1]`:
//
//   preset   α (µs)  β (Gb/s)  shared  what
//   25gbe     25      25       no      25 Gigabit Ethernet (TCP), one NIC per node
//   hdr-ib     2     200       no      HDR InfiniBand (200 Gb/s), one HCA per node
//   nvlink     3     3600      no      NVLink 4 (H100/H200): 450 GB/s per direction per GPU
//   shm        2     49.6      yes     one host's memory as MPI's shared-memory transport sees
//                                      it: 6.2 GB/s in all, calibrated from comm_bench on the
//                                      16-core H200 host (docs/scaling/README.md)
//
// β is in gigabits per second (10^9 bit/s, the unit networks are sold in). A `shared` link is one
// bus that the ranks using it at the same time divide (a host's memory bandwidth); an unshared
// link gives every rank (or NIC) its own β. The figures of 25gbe, hdr-ib and nvlink are nominal
// line rates with typical MPI/NCCL latencies, not measurements.
#pragma once

#include <string>

namespace dtrain {

/// One link of the alpha-beta model.
struct Link {
  double alpha_us = 0;   ///< latency per message, µs (≥ 0)
  double beta_gbps = 0;  ///< bandwidth, Gb/s (10^9 bit/s, > 0)
  bool shared = false;   ///< one bus divided among the ranks that use it at once
  std::string name;      ///< the preset's name, or the spec as given

  /// Seconds to move `bytes` over this link while `streams` transfers (≥ 1) share it at once:
  /// α + bytes · streams / β. Whether transfers share it is the caller's model (a node's NIC is
  /// shared by its ranks' streams; a `shared` intra-node bus by every rank of the node).
  [[nodiscard]] double seconds(double bytes, int streams = 1) const;
  /// β in bytes per second.
  [[nodiscard]] double bytes_per_second() const { return beta_gbps * 1e9 / 8; }
};

/// Parses a link spec: a preset (25gbe, hdr-ib, nvlink, shm) or `alpha_us=A,beta_gbps=B` with an
/// optional `,shared=0|1`. `option` names the option it came from ("--network") in errors.
/// Throws InputError naming `option`, the spec and the accepted forms for an unknown preset, a
/// missing or unknown key, or a value that is not a finite number (α ≥ 0, β > 0).
Link parse_link(const std::string& spec, const std::string& option);

/// The preset names, comma-separated (for help texts and errors).
std::string link_presets();

}  // namespace dtrain
