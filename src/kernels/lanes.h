// N floats at a time with GCC/Clang vector extensions, for the hand-written CPU kernels of src/kernels/: 4 lanes
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

// Calls the widest build of one kernel that `lanes` allows: KERNEL_avx512 at 16 lanes, KERNEL_avx2 at 8 (x86-64, each
// compiled for its instruction set), else PLAIN (4 lanes, any CPU), with the same arguments. The one lane switch of
// src/kernels/: a kernel file defines the three builds and says ATTNMT_LANES_CALL(lanes, name, name_rows<4>, args...).
#ifdef ATTNMT_X86_LANES
#define ATTNMT_LANES_CALL(lanes, kernel, plain, ...) \
  ((lanes) == 16 ? kernel##_avx512(__VA_ARGS__) : (lanes) == 8 ? kernel##_avx2(__VA_ARGS__) : plain(__VA_ARGS__))
#else
#define ATTNMT_LANES_CALL(lanes, kernel, plain, ...) ((void)(lanes), plain(__VA_ARGS__))
#endif

namespace attnmt {

template <int N>
struct Lanes {
  typedef float type __attribute__((vector_size(4 * N)));
  typedef int itype __attribute__((vector_size(4 * N)));
};

// tanh as a rational function on [-7.9053, 7.9053] (beyond it tanh rounds to +-1 in float): a minimax fit of
// odd degree 13 over even degree 6; largest error 3.9e-7 against double tanh on a fine grid over [-12, 12].
template <int N>
__attribute__((always_inline)) inline typename Lanes<N>::type tanh_lanes(typename Lanes<N>::type x) {
  using F = typename Lanes<N>::type;
  const F hi = F{} + 7.90531110763549805f;
  x = x > hi ? hi : x;
  x = x < -hi ? -hi : x;
  const F x2 = x * x;
  F p = F{} - 2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  F q = F{} + 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}

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
