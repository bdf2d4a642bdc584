// src/io/resample_isa.hpp — private to src/io and its tests: which instruction set the resampler's
// inner sums use (src/io/resample.cpp). Every level computes Pillow's integer sums exactly, so
// the pixels are the same bits on each; the unit tests compare the levels on random crops.
#pragma once

namespace dtrain {

/// The resampler's paths, each level using those below it for the remainders: scalar C++; SSE2
/// (one RGB output pixel, 8 bytes of a vertical row a step); AVX2 (two source rows' RGB outputs,
/// 16 bytes of a vertical row a step).
enum class ResampleIsa { scalar = 0, sse2 = 1, avx2 = 2 };

/// The level in use: the best one the build and the CPU have, at most the limit last set.
ResampleIsa resample_isa();

/// Tests: caps the level (process-wide; call while no resample runs). The default is avx2.
void limit_resample_isa(ResampleIsa limit);

}  // namespace dtrain
