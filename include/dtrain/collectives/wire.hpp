// dtrain/collectives/wire.hpp — gradients on the wire in 16 bits, summed in fp32 at the receiver
// (`--wire-dtype fp32|bf16|fp16`; Horovod's Compression.fp16, PyTorch DDP's bf16_compress_hook).
//
// Horovod and DDP cast the gradient to 16 bits and let the collective add in 16 bits, so every
// partial sum is rounded again. dtrain's wire sum rounds each contribution once, adds in fp32 and
// rounds the sum once: a reduce-scatter done as an MPI_Alltoallv of 16-bit segments (worker j
// receives everyone's segment j and adds them in fp32, in rank order), then an MPI_Allgatherv of
// the 16-bit sums (Rabenseifner's reduce-scatter + allgather, with the same bytes per rank as a
// ring allreduce: half of fp32's). Every worker ends with the same bits (the allgather hands out
// one rounding of one fp32 sum), so replicas stay bit-identical.
//
// Error (documented tolerance, tests/mpi/test_wire.cpp): with u the wire's unit roundoff (bf16:
// 2^-8, fp16: 2^-11 in its normal range) and W workers, each element of the result differs from
// the exact Σ_r x_r by at most (2u + W·2^-24)·Σ_r |x_r|, plus (W + 1)·2^-25 for fp16, whose
// subnormals are spaced 2^-24. fp16 overflows to ±Inf past 65504 (the step then fails the
// finiteness check, as any non-finite gradient); bf16 has fp32's range.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/core/options.hpp"  // WireDtype: the number format of gradients between ranks
#include "dtrain/dnn/float16.hpp"   // encode_wire, decode_wire, add_wire: the 16-bit codec

namespace dtrain {

// WireDtype's names ("fp32", "bf16", "fp16") are core/options.hpp's: to_string(w),
// parse_enum<WireDtype>(text, "wire-dtype"); the codec is dnn/float16.hpp's.

/// data[i] = Σ_workers data[i] over `comm` with the values on the wire in `w` (see the file
/// comment; fp32: one MPI_Allreduce, as the plain path). Collective: every rank of comm calls
/// it with the same n, w and order. `blocking`: blocking MPI collectives (a caller with a
/// watchdog of its own: collectives/bucketed.hpp's communication thread); false: non-blocking ones
/// waited for with `timeout_s` seconds (TimeoutError naming `what`). Keeps its scratch buffers
/// (about 2n bytes each, twice) in the object between calls; not thread-safe. Throws
/// LibraryError when an MPI call fails, InputError when n ≥ INT_MAX.
class WireAllreduce {
 public:
  /// Sums over `comm` (not owned; it must outlive this object) with values in `w` on the wire.
  WireAllreduce(MPI_Comm comm, WireDtype w);
  /// data (n fp32 values, host memory) = the sum over comm's ranks, in place; see the class
  /// comment for the rules, deadline and errors.
  void sum(float* data, std::size_t n, bool blocking, double timeout_s, const std::string& what);
  /// The same sum on values already encoded in dtype() (bf16 or fp16; fp32 is a programming
  /// error): v[i] = encode(Σ_workers decode(v[i])), in place — the reduce-scatter sends from v
  /// and the allgather writes into it (v may be shared memory: collectives/hierarchical.hpp's
  /// leaders sum their nodes' 16-bit totals so, where they lie, without widening them first).
  /// Rounds once, the sum of each value. Same collective rules, deadline and errors as sum().
  void sum_encoded(std::uint16_t* v, std::size_t n, bool blocking, double timeout_s,
                   const std::string& what);
  [[nodiscard]] WireDtype dtype() const { return wire_; }

 private:
  MPI_Comm comm_;
  WireDtype wire_;
  int rank_ = 0, size_ = 1;
  std::vector<std::uint16_t> send_, recv_;  ///< the rank's encoding; the received segments
  std::vector<int> counts_, displs_;
};

}  // namespace dtrain
