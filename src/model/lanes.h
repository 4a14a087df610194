// N floats at a time with GCC/Clang vector extensions, for the hand-written CPU kernels of model/: 4 lanes
// (SSE on x86-64, NEON on ARM, plain code elsewhere) everywhere; on x86-64 also 8 (AVX2) and 16 (AVX-512)
// lanes in functions compiled for those instruction sets, chosen at run time from what the CPU supports
// (a portable build cannot assume them).
#pragma once
#include <algorithm>

#if defined(__GNUC__) && defined(__x86_64__)
#define ATTNMT_X86_LANES 1
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only ever live inside the functions built for them
#endif

namespace attnmt {

template <int N>
struct Lanes {
  typedef float type __attribute__((vector_size(4 * N)));
  typedef int itype __attribute__((vector_size(4 * N)));
};

// The widest lane count of this CPU: 16 (AVX-512), 8 (AVX2) or 4.
inline int cpu_lanes() {
#ifdef ATTNMT_X86_LANES
  static const int cpu = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx2") ? 8 : 4;
#else
  static const int cpu = 4;
#endif
  return cpu;
}

}  // namespace attnmt
