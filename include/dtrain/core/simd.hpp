// dtrain/core/simd.hpp — DT_SIMD_CLONES: an element-wise host loop compiled twice, for AVX2 and
// for baseline x86-64, the copy picked once at load time by the CPU it runs on (GCC function
// multiversioning, an ifunc; https://gcc.gnu.org/onlinedocs/gcc/Common-Function-Attributes.html,
// target_clones). The binary stays portable to any x86-64, and where AVX2 is present a loop over
// cache-resident floats runs about twice as fast (tests/benchmarks/ps_update_bench.cpp). Target
// "avx2" does not enable FMA, so nothing is contracted: both copies perform the same IEEE
// operations per element and give the same bits. Elsewhere (other compilers or CPUs, or
// -DDTRAIN_NO_CLONES) it expands to nothing.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(DTRAIN_NO_CLONES)
#define DT_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_SIMD_CLONES
#endif
