// Hand-written CPU kernels for the output layer, kept apart from their callers as SIMD code is: the greedy choice
// over rows of logits without a log-softmax and the training loss's rows and gradient (4, 8 (AVX2) or 16
// (AVX-512) lanes chosen at run time), and the output layer's product with its weights packed once (AVX-512).
#pragma once
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace attnmt {

struct RowArgmax {
  torch::Tensor ids;   // [B] int64: the first index of each row's largest logit
  torch::Tensor logp;  // [B] float: that token's log-probability, -log(sum_v exp(x_v - max))
};

// What log_softmax(logits).max(-1) gives, in two passes over each row (max, then the sum of exponentials)
// where ATen's log_softmax and max make four and write a [B, V] tensor. logits: [B, V]. Float rows on the
// CPU use the kernel (at most max_lanes lanes: 4, 8 or 16; for tests), anything else ATen's ops.
RowArgmax argmax_log_softmax(const torch::Tensor& logits, int max_lanes = 16);

// The rows of the label-smoothed cross-entropy over logits [N, V] (float, CPU; false and nothing written
// otherwise): lse_i = log sum_v exp(x_iv) and loss_i = (1 - eps) (lse_i - x_i[t_i]) + eps (lse_i - mean_v x_iv),
// loss_i = 0 where valid_i is false. Two passes over a row (its maximum and sum, then the sum of exponentials),
// where ATen's logsumexp, gather and mean make five and write a [N, V] temporary. A row with a non-finite
// logit is computed in double with the C library (its loss is then NaN or infinite, as ATen's would be). Rows
// are shared between as many threads as the BLAS uses; each row's result does not depend on that.
struct CrossEntropyRows {
  torch::Tensor loss;  // [N] float
  torch::Tensor lse;   // [N] float (0 where not valid)
};
bool cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& valid, double eps,
                        CrossEntropyRows* out, int max_lanes = 16);
// Its gradient in one pass, scale_i (softmax(x_i) - eps / V - (1 - eps) onehot(t_i)), written into a new [N, V]
// tensor (zero rows where scale_i is 0); logits, target and lse as above, scale [N] float. False and nothing
// written where the kernel does not apply.
bool cross_entropy_grad(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& lse,
                        const torch::Tensor& scale, double eps, torch::Tensor* grad, int max_lanes = 16);

// x W^T + b (a decoder step's few rows, or training's products through train_linear), with W [V, K] packed into panels of 32 output
// columns ([V/32, K, 32]) that each step reads as they lie. ATen hands such a product to the BLAS, which packs
// the whole [V, K] matrix again for every call: with 64 rows that copy took 40% as long as the product's
// arithmetic (21% against 49% of a greedy search's samples). Each output is one sum over k in order, whatever the thread count: the result does not depend on it.
// The packed copy is refreshed when the weight or bias changes (another tensor, or an in-place update: their
// version counters). Float CPU tensors on a CPU with AVX-512 take the kernel; anything else ATen's linear.
class PackedLinear {
 public:
  // Whether the kernel runs on this CPU (AVX-512).
  static bool available();
  // x [..., K] -> [..., V]. threads: how many threads share the output columns (0 = as many as the BLAS uses).
  torch::Tensor operator()(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int threads = 0);

 private:
  void refresh(const torch::Tensor& weight, const torch::Tensor& bias);
  torch::Tensor panels_;  // [ceil(V/32), K, 32], zero beyond V
  torch::Tensor bias_;    // [ceil(V/32) * 32], zero beyond V
  const void* weight_impl_ = nullptr;
  const void* bias_impl_ = nullptr;
  const void* weight_data_ = nullptr;
  int64_t weight_version_ = -1, bias_version_ = -1;
};

// Which kernel runs training's products (the output layer, the readout, the input gates, the recurrences'
// weight gradients). kAuto: the packed kernel where the CPU has AVX-512 and the BLAS runs a narrower kernel
// family (OpenBLAS's Haswell or Zen kernels, for instance because OPENBLAS_CORETYPE says so: there the packed
// kernel runs these products about 1.8x faster); the BLAS otherwise (an OpenBLAS AVX-512 family, or another
// BLAS). ATTNMT_PRODUCTS=blas|packed|auto in the environment sets it for a process (set_product_kernel).
enum class ProductKernel { kAuto, kPacked, kBlas };
void set_product_kernel(ProductKernel k);
// Parses "auto" | "packed" | "blas"; false for anything else.
bool parse_product_kernel(const std::string& s, ProductKernel* k);
// Whether training's products run on the packed kernel in this process (after kAuto is resolved).
bool packed_products();
// One line for the log and bench: which kernel and why, e.g. "packed AVX-512 (the BLAS runs Haswell, 8 lanes)".
std::string product_kernel_choice();

// x W^T + b (x [..., K], W [V, K]) as one autograd node whose three products (y, x's and W's gradients) run on
// the packed kernel where packed_products() and the tensors are float CPU ones; torch's linear otherwise.
torch::Tensor train_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// a [M, K] . b [K, N] outside autograd (inside a custom backward): the packed kernel where packed_products()
// (a or b may be transposed views: neither is copied), torch::mm otherwise.
torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b);

// a [B, M, K] . b [B, K, N] -> [B, M, N]: attention's scores and contexts for all target steps at once and their
// gradients, as one autograd node whose products run on the packed kernel where packed_products() and the tensors are
// float CPU ones (torch::bmm otherwise). Per sentence, b is packed into panels and a's rows (any strides: transposed
// views are not copied) run through them, the sentences shared between threads. ATen's bmm hands the BLAS one small
// product per sentence instead, each waking the BLAS's threads: the Luong benchmark's six batched products took 9.4 ms
// a step with OpenBLAS's Haswell kernels, 2.4 ms with its SkylakeX kernels, 2.0 ms here.
torch::Tensor batched_product(const torch::Tensor& a, const torch::Tensor& b);

// layer(x); while decoding (the owning module in eval mode, no gradients) the same product through packed.
torch::Tensor decoding_linear(const torch::nn::Module& owner, torch::nn::Linear& layer, PackedLinear& packed,
                              const torch::Tensor& x);

}  // namespace attnmt
