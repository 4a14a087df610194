// Small deterministic PRNG helpers, independent of the standard library's distributions, so that a seed
// gives the same shuffles and streams on every platform (batching, the toy corpus, per-rank seeds).
#pragma once
#include <cstdint>
#include <vector>

namespace attnmt {

// A well-mixed 64-bit seed for stream `stream` of `seed` (splitmix64 over the pair).
uint64_t mix_seed(uint64_t seed, uint64_t stream);

// Fisher-Yates shuffle driven by mt19937_64 with a fixed reduction.
void deterministic_shuffle(std::vector<int64_t>& v, uint64_t seed);

}  // namespace attnmt
