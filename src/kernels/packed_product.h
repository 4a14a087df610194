// The packed matrix product (AVX-512): x W^T + b with W packed once into panels of 32 output columns, for a
// decoder step's few rows (PackedLinear) and for training's products (train_linear, product, batched_product).
// Reference: torch's linear, mm and bmm, which every function here falls back to where the kernel does not apply
// (--kernels reference, another device, not float, no AVX-512) or where the BLAS runs as wide a kernel.
#pragma once
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace attnmt {

// x W^T + b (a decoder step's few rows through model/linear.h, or training's products through train_linear), with W [V, K] packed into panels of 32 output
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
// BLAS). Under --kernels reference always torch's products. kPacked and kBlas force one or the other, for tests
// that compare the two (set_product_kernel).
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

}  // namespace attnmt
