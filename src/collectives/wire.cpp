// dtrain/collectives/wire.cpp — 16-bit gradients on the wire, summed in fp32 (see
// collectives/wire.hpp).
#include "dtrain/collectives/wire.hpp"

#include <climits>
#include <cstring>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace dtrain {
namespace {

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t fp16_from(float f) {
  // Maratyszcza/FP16 fp16_ieee_from_fp32_value: scaling by 2^112 then 2^-110 rounds the
  // mantissa to 10 bits (to nearest even, in the FPU) and saturates to Inf; the bias term puts
  // the rounding at fp16's exponent, subnormals included.
  const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
  float base = ((f < 0 ? -f : f) * scale_to_inf) * scale_to_zero;
  const std::uint32_t w = bits_of(f), shl1_w = w + w, sign = w & 0x80000000u;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t b = bits_of(base);
  const std::uint32_t nonsign = ((b >> 13) & 0x00007C00u) + (b & 0x00000FFFu);
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float fp16_value(std::uint16_t h) {
  // Maratyszcza/FP16 fp16_ieee_to_fp32_value: normals by an exponent shift and one multiply,
  // subnormals by the magic-number subtraction.
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16, sign = w & 0x80000000u,
                      two_w = w + w;
  const float normalized = float_of((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  return float_of(sign | (two_w < (1u << 27) ? bits_of(denormalized) : bits_of(normalized)));
}

DT_SIMD_CLONES void encode_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}
DT_SIMD_CLONES void decode_bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
DT_SIMD_CLONES void encode_fp16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_from(src[i]);
}
DT_SIMD_CLONES void decode_fp16(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_value(src[i]);
}
/// acc[i] += decode(src[i]).
DT_SIMD_CLONES void add_bf16(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += bf16_to_float(src[i]);
}
DT_SIMD_CLONES void add_fp16(const std::uint16_t* src, float* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += fp16_value(src[i]);
}

}  // namespace

WireDtype parse_wire_dtype(const std::string& text, const std::string& option) {
  if (text == "fp32") return WireDtype::fp32;
  if (text == "bf16") return WireDtype::bf16;
  if (text == "fp16") return WireDtype::fp16;
  throw InputError(option + ": expected fp32, bf16 or fp16, got '" + text + "'");
}

const char* to_string(WireDtype w) {
  switch (w) {
    case WireDtype::bf16:
      return "bf16";
    case WireDtype::fp16:
      return "fp16";
    default:
      return "fp32";
  }
}

std::size_t wire_bytes(WireDtype w) { return w == WireDtype::fp32 ? 4 : 2; }

std::uint16_t float_to_fp16(float f) { return fp16_from(f); }

float fp16_to_float(std::uint16_t h) { return fp16_value(h); }

void encode_wire(WireDtype w, const float* src, std::uint16_t* dst, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "encode_wire: fp32 travels as it is");
  if (w == WireDtype::bf16) encode_bf16(src, dst, n);
  else encode_fp16(src, dst, n);
}

void decode_wire(WireDtype w, const std::uint16_t* src, float* dst, std::size_t n) {
  DT_ASSERT(w != WireDtype::fp32, "decode_wire: fp32 travels as it is");
  if (w == WireDtype::bf16) decode_bf16(src, dst, n);
  else decode_fp16(src, dst, n);
}

WireAllreduce::WireAllreduce(MPI_Comm comm, WireDtype w) : comm_(comm), wire_(w) {
  DT_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  DT_CHECK_MPI(MPI_Comm_size(comm, &size_));
  counts_.resize(size_);
  displs_.resize(size_);
}

void WireAllreduce::sum(float* data, std::size_t n, bool blocking, double timeout_s,
                        const std::string& what) {
  if (n == 0) return;
  DT_REQUIRE(n < static_cast<std::size_t>(INT_MAX),
             "--wire-dtype: a sum of " + std::to_string(n) + " values exceeds MPI's count limit");
  if (wire_ == WireDtype::fp32) {
    if (blocking) {
      DT_CHECK_MPI(
          MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_));
    } else {
      MPI_Request req = MPI_REQUEST_NULL;
      DT_CHECK_MPI(
          MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req));
      wait_one(req, timeout_s, what);
    }
    return;
  }
  // Segment j of the buffer, [displs_[j], displs_[j] + counts_[j]), is summed by rank j.
  const auto W = static_cast<std::size_t>(size_);
  for (std::size_t j = 0; j < W; ++j) {
    const std::size_t lo = j * n / W, hi = (j + 1) * n / W;
    displs_[j] = static_cast<int>(lo);
    counts_[j] = static_cast<int>(hi - lo);
  }
  const int mine = counts_[rank_];
  send_.resize(n);
  recv_.resize(W * static_cast<std::size_t>(mine));
  acc_.resize(static_cast<std::size_t>(mine));
  encode_wire(wire_, data, send_.data(), n);
  std::vector<int> rcounts(W, mine), rdispls(W);
  for (std::size_t i = 0; i < W; ++i) rdispls[i] = static_cast<int>(i) * mine;
  auto run = [&](auto post_blocking, auto post_nonblocking, const char* phase) {
    if (blocking) {
      DT_CHECK_MPI(post_blocking());
    } else {
      MPI_Request req = MPI_REQUEST_NULL;
      DT_CHECK_MPI(post_nonblocking(&req));
      wait_one(req, timeout_s, what + " (" + phase + ")");
    }
  };
  // 1. Reduce-scatter: everyone's segment j to rank j, 16 bits a value.
  run(
      [&] {
        return MPI_Alltoallv(send_.data(), counts_.data(), displs_.data(), MPI_UINT16_T,
                             recv_.data(), rcounts.data(), rdispls.data(), MPI_UINT16_T, comm_);
      },
      [&](MPI_Request* r) {
        return MPI_Ialltoallv(send_.data(), counts_.data(), displs_.data(), MPI_UINT16_T,
                              recv_.data(), rcounts.data(), rdispls.data(), MPI_UINT16_T, comm_, r);
      },
      "16-bit reduce-scatter");
  // 2. The segment's sum in fp32, in rank order (the same bits whatever the arrival order).
  const auto m = static_cast<std::size_t>(mine);
  if (m > 0) {
    decode_wire(wire_, recv_.data(), acc_.data(), m);
    for (std::size_t i = 1; i < W; ++i) {
      if (wire_ == WireDtype::bf16) add_bf16(recv_.data() + i * m, acc_.data(), m);
      else add_fp16(recv_.data() + i * m, acc_.data(), m);
    }
    encode_wire(wire_, acc_.data(), send_.data() + displs_[rank_], m);
  }
  // 3. Allgather of the 16-bit sums; every rank decodes the same bits.
  run(
      [&] {
        return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send_.data(), counts_.data(),
                              displs_.data(), MPI_UINT16_T, comm_);
      },
      [&](MPI_Request* r) {
        return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send_.data(), counts_.data(),
                               displs_.data(), MPI_UINT16_T, comm_, r);
      },
      "16-bit allgather");
  decode_wire(wire_, send_.data(), data, n);
}

}  // namespace dtrain
