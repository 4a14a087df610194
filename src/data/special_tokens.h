// The ids of the special tokens that every vocabulary starts with. The model, the batcher and the
// searches need these ids but nothing else of the vocabulary, so they live apart from it.
#pragma once
#include <cstdint>

namespace attnmt {

constexpr int64_t kPadId = 0;  // <pad>: fills batches to a common length; embeds to zeros, never predicted
constexpr int64_t kUnkId = 1;  // <unk>: a token outside the vocabulary
constexpr int64_t kBosId = 2;  // <bos>: the decoder's first input
constexpr int64_t kEosId = 3;  // <eos>: ends a target sentence

}  // namespace attnmt
