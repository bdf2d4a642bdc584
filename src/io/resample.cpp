// dtrain/io/resample.cpp — io/image.hpp's resample_source(), resample_window() and
// resample_crop(): Pillow 9's bilinear ImagingResample (libImaging/Resample.c) for 8-bit L and
// RGB images, transcribed — the same fixed-point coefficients, the horizontal pass rounded to
// uint8, then the vertical pass. The inner sums run in SSE2 where the build has it: pmaddwd
// multiplies 16-bit pairs, so each 22-bit coefficient k is split as k = 2^11·kh + kl (kh, kl <
// 2^11 + 1) and Σ p·k = 2^11·Σ p·kh + Σ p·kl, every term exact in 32 bits: the integer sums, and so
// the pixels, are Pillow's bit for bit (tests/cli/test_encoded_images.sh compares them). Where the
// CPU has AVX2 (GCC on x86-64, picked at run time), the same operations run on two source rows at
// once in the horizontal pass (one per 128-bit lane) and on 16 bytes in the vertical one: about
// 1.8× fewer instructions for the resampler, the same bits (tests/unit/test_image.cpp compares
// the levels, src/io/resample_isa.hpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dtrain/io/image.hpp"
#include "resample_isa.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
// The AVX2 paths: GCC on x86-64 (a target attribute, picked at run time), unless the clones are
// off (core/simd.hpp: -DDTRAIN_NO_CLONES, as the thread-sanitizer build has it).
#if defined(__SSE2__) && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(DTRAIN_NO_CLONES)
#include <immintrin.h>
#define DT_RESAMPLE_AVX2 1
#else
#define DT_RESAMPLE_AVX2 0
#endif

namespace dtrain {
namespace {

std::atomic<int> isa_limit{static_cast<int>(ResampleIsa::avx2)};

ResampleIsa best_isa() {
#if DT_RESAMPLE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return ResampleIsa::avx2;
#endif
#if defined(__SSE2__)
  return ResampleIsa::sse2;
#else
  return ResampleIsa::scalar;
#endif
}

constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int kHalf = 1 << (kPrecisionBits - 1);
constexpr int kSplitBits = 11;  ///< k = (kh << 11) + kl for pmaddwd's 16-bit operands

struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  ///< per output: xmin, count
  std::vector<int> k;       ///< per output: ksize fixed-point weights
};

/// precompute_coeffs() + normalize_coeffs_8bpc() for the bilinear (triangle) filter, for the
/// `count` outputs from `first` of the `out_size` (the window: each output's weights depend on its
/// own position alone, so they are Pillow's, bit for bit, and cost the window's size, not the
/// resized image's — a 1 × 2^20 image resized to 256 wide is 2^28 rows tall). Output first + i
/// is entry i.
void precompute(int in_size, double in0, double in1, int out_size, int first, int count,
                Coeffs& c) {
  double scale = (in1 - in0) / out_size, filterscale = scale;
  if (filterscale < 1.0) filterscale = 1.0;
  const double support = 1.0 * filterscale;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.assign(static_cast<std::size_t>(count) * 2, 0);
  c.k.assign(static_cast<std::size_t>(count) * c.ksize, 0);
  std::vector<double> kk(static_cast<std::size_t>(c.ksize));
  for (int i = 0; i < count; ++i) {
    const int xx = first + i;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double t = (x + xmin - center + 0.5) * ss;
      if (t < 0) t = -t;
      const double w = t < 1.0 ? 1.0 - t : 0.0;
      kk[static_cast<std::size_t>(x)] = w;
      ww += w;
    }
    int* k = c.k.data() + static_cast<std::size_t>(i) * c.ksize;
    for (int x = 0; x < xmax; ++x) {
      const double v =
          ww != 0.0 ? kk[static_cast<std::size_t>(x)] / ww : kk[static_cast<std::size_t>(x)];
      k[x] = v < 0 ? static_cast<int>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int>(0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[static_cast<std::size_t>(i) * 2] = xmin;
    c.bounds[static_cast<std::size_t>(i) * 2 + 1] = xmax;
  }
}

/// The source range [first, last) that outputs [w0, w0 + n) of `c` read.
void support_of(const Coeffs& c, int w0, int n, int& first, int& last) {
  first = c.bounds[static_cast<std::size_t>(w0) * 2];
  last = first;
  for (int i = w0; i < w0 + n; ++i) {
    first = std::min(first, c.bounds[static_cast<std::size_t>(i) * 2]);
    last = std::max(last, c.bounds[static_cast<std::size_t>(i) * 2] +
                              c.bounds[static_cast<std::size_t>(i) * 2 + 1]);
  }
}

inline std::uint8_t clip8(int v) {
  v >>= kPrecisionBits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

/// The taps of one output as pairs for pmaddwd: per pair, (k[2t], k[2t+1]) as two int16 in one
/// int32, low halves (kl) and high halves (kh); an odd last tap is paired with a zero weight.
/// Pillow's bilinear weights are ≥ 0 and ≤ 2^22, so kh ≤ 2^11 and kl < 2^11 fit in int16.
struct TapPairs {
  std::vector<int> first;  ///< per output: index of its first pair
  std::vector<int> count;  ///< per output: number of pairs
  std::vector<std::int32_t> lo, hi;
};

void make_pairs(const Coeffs& c, int w0, int n, TapPairs& t) {
  t.first.resize(static_cast<std::size_t>(n));
  t.count.resize(static_cast<std::size_t>(n));
  t.lo.clear();
  t.hi.clear();
  auto pack = [](int a, int b) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b)
                                                                         << 16);
  };
  const int mask = (1 << kSplitBits) - 1;
  for (int i = 0; i < n; ++i) {
    const int xmax = c.bounds[static_cast<std::size_t>(w0 + i) * 2 + 1];
    const int* k = c.k.data() + static_cast<std::size_t>(w0 + i) * c.ksize;
    t.first[static_cast<std::size_t>(i)] = static_cast<int>(t.lo.size());
    t.count[static_cast<std::size_t>(i)] = (xmax + 1) / 2;
    for (int x = 0; x < xmax; x += 2) {
      const int a = k[x], b = x + 1 < xmax ? k[x + 1] : 0;
      t.lo.push_back(pack(a & mask, b & mask));
      t.hi.push_back(pack(a >> kSplitBits, b >> kSplitBits));
    }
  }
}

/// Taps y and y + 1 of a vertical-pass output at byte i: the two source rows (the second one the
/// first again, with weight 0, when y is the last tap) and their weights for pmaddwd, split at bit
/// 11 into low (lo) and high (hi) int16 pairs packed in an int32 each.
struct RowPair {
  const std::uint8_t* a;
  const std::uint8_t* b;
  int lo, hi;
};
inline RowPair row_pair(const std::uint8_t* temp, std::size_t trow, int ymin, int y, int taps,
                        const int* k, std::size_t i) {
  const int mask = (1 << kSplitBits) - 1;
  const std::uint8_t* a = temp + static_cast<std::size_t>(ymin + y) * trow + i;
  const bool pair = y + 1 < taps;
  const int ka = k[y], kb = pair ? k[y + 1] : 0;
  return RowPair{a, pair ? a + trow : a, (ka & mask) | (kb & mask) << 16,
                 (ka >> kSplitBits) | (kb >> kSplitBits) << 16};
}

/// Pillow's horizontal pass for one source row `in` (pixel 0 of the resampler's image; C
/// interleaved channels), outputs [a, b) of window column offset wx, scalar.
template <int C>
void horizontal_scalar(const std::uint8_t* in, const Coeffs& ch, int wx, int a, int b,
                       std::uint8_t* o) {
  for (int xx = a; xx < b; ++xx) {
    const int xmin = ch.bounds[static_cast<std::size_t>(wx + xx) * 2];
    const int xmax = ch.bounds[static_cast<std::size_t>(wx + xx) * 2 + 1];
    const int* k = ch.k.data() + static_cast<std::size_t>(wx + xx) * ch.ksize;
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(xmin) * C;
    int ss[C];
    for (int c = 0; c < C; ++c) ss[c] = kHalf;
    for (int x = 0; x < xmax; ++x)
      for (int c = 0; c < C; ++c) ss[c] += p[x * C + c] * k[x];
    for (int c = 0; c < C; ++c) o[xx * C + c] = clip8(ss[c]);
  }
}

#if defined(__SSE2__)
/// (Σ_t hi-pairs · pixels) · 2^11 + Σ_t lo-pairs · pixels + half, shifted and clipped to uint8 in
/// lanes 0..3 (pack of the four int32 lanes).
inline int clip_lanes(__m128i lo, __m128i hi) {
  __m128i s =
      _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi, kSplitBits), lo), _mm_set1_epi32(kHalf));
  s = _mm_srai_epi32(s, kPrecisionBits);
  s = _mm_packs_epi32(s, s);
  return _mm_cvtsi128_si32(_mm_packus_epi16(s, s));
}

/// The RGB horizontal pass of outputs [0, n): two taps a step, each pmaddwd taking (R0, R1),
/// (G0, G1), (B0, B1) from 8 bytes loaded at the pair's first pixel. Reads up to 6·pairs + 2
/// bytes from an output's first pixel, so the caller keeps the outputs near the end of the row
/// on the scalar path. o gets 4 bytes per output (the fourth is overwritten by the next).
void horizontal_rgb_sse2(const std::uint8_t* in, const Coeffs& ch, const TapPairs& tp, int wx,
                         int n, std::uint8_t* o) {
  const __m128i zero = _mm_setzero_si128();
  for (int xx = 0; xx < n; ++xx) {
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(ch.bounds[(wx + xx) * 2ull]) * 3;
    const std::int32_t* lo = tp.lo.data() + tp.first[static_cast<std::size_t>(xx)];
    const std::int32_t* hi = tp.hi.data() + tp.first[static_cast<std::size_t>(xx)];
    __m128i slo = zero, shi = zero;
    for (int t = 0; t < tp.count[static_cast<std::size_t>(xx)]; ++t, p += 6) {
      __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), zero);
      v = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 6));  // R0 R1 G0 G1 B0 B1 (R1 R2)
      slo = _mm_add_epi32(slo, _mm_madd_epi16(v, _mm_set1_epi32(lo[t])));
      shi = _mm_add_epi32(shi, _mm_madd_epi16(v, _mm_set1_epi32(hi[t])));
    }
    const int px = clip_lanes(slo, shi);
    std::memcpy(o + static_cast<std::size_t>(xx) * 3, &px, 4);
  }
}
#endif

#if DT_RESAMPLE_AVX2
/// horizontal_rgb_sse2() on two source rows at once, `in0` in the low 128-bit lane and `in1` in
/// the high one (every AVX2 unpack, shift and pmaddwd stays within its lane): outputs [0, n) of
/// both rows into o0 and o1, 3 bytes each (the last output's fourth byte is not written: o1's
/// first pixel may lie there).
__attribute__((target("avx2"))) void horizontal_rgb_avx2(const std::uint8_t* in0,
                                                         const std::uint8_t* in1, const Coeffs& ch,
                                                         const TapPairs& tp, int wx, int n,
                                                         std::uint8_t* o0, std::uint8_t* o1) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  for (int xx = 0; xx < n; ++xx) {
    const std::ptrdiff_t at = static_cast<std::ptrdiff_t>(ch.bounds[(wx + xx) * 2ull]) * 3;
    const std::uint8_t* p0 = in0 + at;
    const std::uint8_t* p1 = in1 + at;
    const std::int32_t* lo = tp.lo.data() + tp.first[static_cast<std::size_t>(xx)];
    const std::int32_t* hi = tp.hi.data() + tp.first[static_cast<std::size_t>(xx)];
    __m256i slo = _mm256_setzero_si256(), shi = _mm256_setzero_si256();
    for (int t = 0; t < tp.count[static_cast<std::size_t>(xx)]; ++t, p0 += 6, p1 += 6) {
      const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                                           _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)));
      __m256i v = _mm256_cvtepu8_epi16(b);                    // row 0 | row 1, 8 pixels bytes each
      v = _mm256_unpacklo_epi16(v, _mm256_srli_si256(v, 6));  // R0 R1 G0 G1 B0 B1 (R1 R2), per lane
      slo = _mm256_add_epi32(slo, _mm256_madd_epi16(v, _mm256_set1_epi32(lo[t])));
      shi = _mm256_add_epi32(shi, _mm256_madd_epi16(v, _mm256_set1_epi32(hi[t])));
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(shi, kSplitBits), slo), half);
    s = _mm256_srai_epi32(s, kPrecisionBits);
    s = _mm256_packs_epi32(s, s);
    s = _mm256_packus_epi16(s, s);  // lane 0: row 0's R G B x; lane 1: row 1's
    const int px0 = _mm256_cvtsi256_si32(s);
    const int px1 = _mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1));
    const std::size_t o = static_cast<std::size_t>(xx) * 3;
    std::memcpy(o0 + o, &px0, xx + 1 < n ? 4 : 3);
    std::memcpy(o1 + o, &px1, xx + 1 < n ? 4 : 3);
  }
}

/// vertical_row()'s SSE2 loop on 16 bytes a step, from i while 16 remain; returns where it ended.
__attribute__((target("avx2"))) std::size_t vertical_row_avx2(const std::uint8_t* temp,
                                                              std::size_t trow, int ymin, int taps,
                                                              const int* k, std::size_t n,
                                                              std::uint8_t* o) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i lo0 = _mm256_setzero_si256(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
    for (int y = 0; y < taps; y += 2) {
      const RowPair r = row_pair(temp, trow, ymin, y, taps, k, i);
      const __m256i wl = _mm256_set1_epi32(r.lo), wh = _mm256_set1_epi32(r.hi);
      // Bytes 0-7 in lane 0, 8-15 in lane 1; the unpacks pair a and b within each lane.
      const __m256i va =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.a)));
      const __m256i vb =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.b)));
      const __m256i m0 = _mm256_unpacklo_epi16(va, vb), m1 = _mm256_unpackhi_epi16(va, vb);
      lo0 = _mm256_add_epi32(lo0, _mm256_madd_epi16(m0, wl));  // bytes 0-3 | 8-11
      lo1 = _mm256_add_epi32(lo1, _mm256_madd_epi16(m1, wl));  // bytes 4-7 | 12-15
      hi0 = _mm256_add_epi32(hi0, _mm256_madd_epi16(m0, wh));
      hi1 = _mm256_add_epi32(hi1, _mm256_madd_epi16(m1, wh));
    }
    __m256i s0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi0, kSplitBits), lo0), half);
    __m256i s1 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi1, kSplitBits), lo1), half);
    s0 = _mm256_packs_epi32(_mm256_srai_epi32(s0, kPrecisionBits),
                            _mm256_srai_epi32(s1, kPrecisionBits));  // bytes 0-7 | 8-15
    s0 = _mm256_packus_epi16(s0, s0);
    s0 = _mm256_permute4x64_epi64(s0, 0x08);  // 64-bit words 0 and 2: bytes 0-15 in order
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm256_castsi256_si128(s0));
  }
  return i;
}
#endif

/// Pillow's horizontal pass over `rows` source rows from `first`, output columns [wx, wx + ww),
/// into `out` (ww × C bytes a row, plus 4 bytes of slack at the end); `last`: the source
/// column after the last one any output reads.
template <int C>
void horizontal_pass(const SourceImage& src, int first, int rows, int last, const Coeffs& ch,
                     int wx, int ww, std::uint8_t* out) {
  const ResampleIsa isa = resample_isa();
  auto row_in = [&](int r) {
    return src.data + static_cast<std::ptrdiff_t>(first + r - src.y0) * std::ptrdiff_t(src.stride) -
           static_cast<std::ptrdiff_t>(src.x0) * C;
  };
  int simd = 0;  // outputs [0, simd) take a SIMD path: their reads end before column `last`
  int r = 0;
#if defined(__SSE2__)
  thread_local TapPairs tp;
  if (C == 3 && isa >= ResampleIsa::sse2) {
    make_pairs(ch, wx, ww, tp);
    while (simd < ww && (ch.bounds[(wx + simd) * 2ull] + 2 * tp.count[simd]) * 3 + 2 <= last * 3)
      ++simd;
  }
#if DT_RESAMPLE_AVX2
  if (C == 3 && isa >= ResampleIsa::avx2)
    for (; r + 1 < rows; r += 2) {
      std::uint8_t* o = out + static_cast<std::size_t>(r) * ww * C;
      horizontal_rgb_avx2(row_in(r), row_in(r + 1), ch, tp, wx, simd, o, o + ww * C);
      horizontal_scalar<C>(row_in(r), ch, wx, simd, ww, o);
      horizontal_scalar<C>(row_in(r + 1), ch, wx, simd, ww, o + ww * C);
    }
#endif
#endif
  for (; r < rows; ++r) {
    const std::uint8_t* in = row_in(r);
    std::uint8_t* o = out + static_cast<std::size_t>(r) * ww * C;
#if defined(__SSE2__)
    if (C == 3 && simd > 0) horizontal_rgb_sse2(in, ch, tp, wx, simd, o);
#endif
    horizontal_scalar<C>(in, ch, wx, simd, ww, o);
  }
}

/// One output row of the vertical pass: Σ_y k[y] · rows[ymin + y] over `n` elements (bytes) of
/// the horizontally resampled rows `temp` (`trow` bytes apart), clipped to uint8 in o.
void vertical_row(const std::uint8_t* temp, std::size_t trow, int ymin, int taps, const int* k,
                  std::size_t n, std::uint8_t* o) {
  std::size_t i = 0;
  const ResampleIsa isa = resample_isa();
#if DT_RESAMPLE_AVX2
  if (isa >= ResampleIsa::avx2) i = vertical_row_avx2(temp, trow, ymin, taps, k, n, o);
#endif
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (; isa >= ResampleIsa::sse2 && i + 8 <= n; i += 8) {  // 8 bytes, two rows (a tap pair) a step
    __m128i lo0 = zero, lo1 = zero, hi0 = zero, hi1 = zero;
    for (int y = 0; y < taps; y += 2) {
      const RowPair r = row_pair(temp, trow, ymin, y, taps, k, i);
      const __m128i wl = _mm_set1_epi32(r.lo), wh = _mm_set1_epi32(r.hi);
      const __m128i va =
          _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r.a)), zero);
      const __m128i vb =
          _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r.b)), zero);
      const __m128i m0 = _mm_unpacklo_epi16(va, vb), m1 = _mm_unpackhi_epi16(va, vb);
      lo0 = _mm_add_epi32(lo0, _mm_madd_epi16(m0, wl));
      lo1 = _mm_add_epi32(lo1, _mm_madd_epi16(m1, wl));
      hi0 = _mm_add_epi32(hi0, _mm_madd_epi16(m0, wh));
      hi1 = _mm_add_epi32(hi1, _mm_madd_epi16(m1, wh));
    }
    const __m128i half = _mm_set1_epi32(kHalf);
    __m128i s0 = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi0, kSplitBits), lo0), half);
    __m128i s1 = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi1, kSplitBits), lo1), half);
    s0 = _mm_packs_epi32(_mm_srai_epi32(s0, kPrecisionBits), _mm_srai_epi32(s1, kPrecisionBits));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(o + i), _mm_packus_epi16(s0, s0));
  }
#endif
  for (; i < n; ++i) {
    int s = kHalf;
    for (int y = 0; y < taps; ++y) s += temp[static_cast<std::size_t>(ymin + y) * trow + i] * k[y];
    o[i] = clip8(s);
  }
}

/// Writes one output row (ww × C interleaved bytes) to dst in `layout`.
template <int C>
void store_row(const std::uint8_t* row, int ww, int wh, int yy, OutLayout layout,
               std::uint8_t* dst) {
  if (!layout.planar) {
    std::copy(row, row + ww * C, dst + static_cast<std::size_t>(yy) * ww * C);
    return;
  }
  const std::size_t plane = static_cast<std::size_t>(ww) * wh;
  std::uint8_t* o = dst + static_cast<std::size_t>(yy) * ww;
  for (int xx = 0; xx < ww; ++xx) {
    const int to = layout.mirror ? ww - 1 - xx : xx;
    for (int c = 0; c < C; ++c) o[c * plane + static_cast<std::size_t>(to)] = row[xx * C + c];
  }
}

template <int C>
void resample_channels(const SourceImage& src, const ResizeSpec& r, OutLayout layout,
                       std::uint8_t* dst) {
  thread_local Coeffs ch, cv;  // the window's outputs (precompute)
  thread_local std::vector<std::uint8_t> temp, row;
  precompute(src.width, r.x0, r.x1, r.out_w, r.window.x, r.window.w, ch);
  precompute(src.height, r.y0, r.y1, r.out_h, r.window.y, r.window.h, cv);
  // Source rows the vertical window needs, resampled horizontally first (Pillow's imTemp).
  int first = 0, last = 0, xfirst = 0, xlast = 0;
  support_of(cv, 0, r.window.h, first, last);
  support_of(ch, 0, r.window.w, xfirst, xlast);
  const std::size_t trow = static_cast<std::size_t>(r.window.w) * C;
  temp.resize(static_cast<std::size_t>(last - first) * trow + 4);
  horizontal_pass<C>(src, first, last - first, xlast, ch, 0, r.window.w, temp.data());
  row.resize(trow);
  for (int yy = 0; yy < r.window.h; ++yy) {
    const auto at = static_cast<std::size_t>(yy);
    vertical_row(temp.data(), trow, cv.bounds[at * 2] - first, cv.bounds[at * 2 + 1],
                 cv.k.data() + at * cv.ksize, trow, row.data());
    store_row<C>(row.data(), r.window.w, r.window.h, yy, layout, dst);
  }
}

}  // namespace

ResampleIsa resample_isa() {
  return static_cast<ResampleIsa>(
      std::min(static_cast<int>(best_isa()), isa_limit.load(std::memory_order_relaxed)));
}

void limit_resample_isa(ResampleIsa limit) {
  isa_limit.store(static_cast<int>(limit), std::memory_order_relaxed);
}

CropBox resample_source(int width, int height, const ResizeSpec& r) {
  thread_local Coeffs ch, cv;
  precompute(width, r.x0, r.x1, r.out_w, r.window.x, r.window.w, ch);
  precompute(height, r.y0, r.y1, r.out_h, r.window.y, r.window.h, cv);
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  support_of(ch, 0, r.window.w, x0, x1);
  support_of(cv, 0, r.window.h, y0, y1);
  return CropBox{x0, y0, x1 - x0, y1 - y0};
}

void resample_window(const SourceImage& src, const ResizeSpec& r, std::uint8_t* dst,
                     OutLayout layout) {
  if (src.channels == 3) resample_channels<3>(src, r, layout, dst);
  else resample_channels<1>(src, r, layout, dst);
}

void resample_crop(const Image8& img, const CropBox& box, int out_w, int out_h, std::uint8_t* dst) {
  const std::size_t stride = static_cast<std::size_t>(img.width) * img.channels;
  const SourceImage src{img.pixels.data() + static_cast<std::size_t>(box.y) * stride +
                            static_cast<std::size_t>(box.x) * img.channels,
                        stride, img.channels, box.w, box.h};
  resample_window(
      src,
      ResizeSpec{0, 0, double(box.w), double(box.h), out_w, out_h, CropBox{0, 0, out_w, out_h}},
      dst);
}

}  // namespace dtrain
