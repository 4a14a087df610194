#include "kernels/packed_product.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "common/runtime.h"
#include "kernels/additive_scores.h"
#include "kernels/lanes.h"
#include "kernels/mode.h"
#include "kernels/share_threads.h"

namespace attnmt {

namespace {
// The packed product. A panel holds 2N output columns for all K inputs ([K, 2N]); R rows of x at a time
// accumulate against it in R x 2 vector registers (16 of AVX-512's 32), one broadcast of x[r][k] and two
// loads of the panel per k. Rows are taken in blocks of kRowBlock and inputs in blocks of kDepthBlock, so that
// the block of x ([128, 512] floats, 256 KB) stays in the L2 cache while every panel's part ([512, 32], 64 KB)
// passes by once per block. After the first input block the sums continue from y as stored (float to float:
// the same sums in the same order as without blocks).
constexpr int kPanelLanes = 16;
constexpr int kPanel = 2 * kPanelLanes;  // output columns per panel
constexpr int kRows = 8;                  // rows per register block
constexpr int64_t kRowBlock = 128;
constexpr int64_t kDepthBlock = 512;

// init: where the sums start, bias (a row broadcast to all rows, ldi 0) or y's earlier partial sums.
// x's element (r, k) is x[r * sr + k * sk]: rows of a row-major matrix (sk 1) or of a transposed one (sr 1).
template <int N, int R>
__attribute__((always_inline)) inline void panel_rows(const float* x, int64_t sr, int64_t sk, int64_t kc, const float* panel,
                                                      const float* init, int64_t ldi, float* y, int64_t ldy) {
  using F = typename Lanes<N>::type;
  F acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    std::memcpy(&acc[r][0], init + r * ldi, sizeof(F));
    std::memcpy(&acc[r][1], init + r * ldi + N, sizeof(F));
  }
  for (int64_t k = 0; k < kc; ++k) {
    F w0, w1;
    std::memcpy(&w0, panel + k * 2 * N, sizeof w0);
    std::memcpy(&w1, panel + k * 2 * N + N, sizeof w1);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const F xr = F{} + x[r * sr + k * sk];
      acc[r][0] += xr * w0;
      acc[r][1] += xr * w1;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    std::memcpy(y + r * ldy, &acc[r][0], sizeof(F));
    std::memcpy(y + r * ldy + N, &acc[r][1], sizeof(F));
  }
}

struct PackedArgs {
  const float* x;       // [B, K], element (b, k) at x[b * sr + k * sk]
  int64_t sr, sk;
  const float* tail;    // [kRows, K] row-major: x's last B % kRows rows, then zeros
  const float* panels;  // [P, K, kPanel]
  const float* bias;    // [P * kPanel]
  float* y;             // [B, V]
  int64_t B, K, V;
};

template <int N>
__attribute__((always_inline)) inline void packed_panels(const PackedArgs& a, int64_t j0, int64_t j1) {
  constexpr int W = 2 * N;
  alignas(64) float part[kRows * W];
  const int64_t full_rows = a.B / kRows * kRows;
  for (int64_t k0 = 0; k0 < a.K || k0 == 0; k0 += kDepthBlock) {
    const int64_t kc = std::min(kDepthBlock, a.K - k0);
    const bool first = k0 == 0;
    for (int64_t rb = 0; rb < a.B; rb += kRowBlock) {
      const int64_t re = std::min(a.B, rb + kRowBlock);
      for (int64_t j = j0; j < j1; ++j) {
        const float* panel = a.panels + (j * a.K + k0) * W;
        const float* bias = a.bias + j * W;
        const int64_t col = j * W, cols = std::min<int64_t>(W, a.V - col);
        for (int64_t b = rb; b < re; b += kRows) {
          const bool whole_rows = b < full_rows;
          const float* x = whole_rows ? a.x + b * a.sr + k0 * a.sk : a.tail + k0;
          const int64_t sr = whole_rows ? a.sr : a.K, sk = whole_rows ? a.sk : 1;
          float* y = a.y + b * a.V + col;
          if (whole_rows && cols == W) {
            panel_rows<N, kRows>(x, sr, sk, kc, panel, first ? bias : y, first ? 0 : a.V, y, a.V);
            continue;
          }
          // A part of the panel or of the rows: through a buffer, which holds the partial sums between blocks.
          const int64_t rows = std::min<int64_t>(kRows, a.B - b);
          if (!first)
            for (int64_t r = 0; r < rows; ++r) std::memcpy(part + r * W, y + r * a.V, sizeof(float) * cols);
          panel_rows<N, kRows>(x, sr, sk, kc, panel, first ? bias : part, first ? 0 : W, part, W);
          for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * a.V, part + r * W, sizeof(float) * cols);
        }
      }
    }
  }
}

// panel_rows for R = rows (1 .. kRows) chosen at run time: the last rows of a batched product.
template <int N>
__attribute__((always_inline)) inline void some_panel_rows(int64_t rows, const float* x, int64_t sr, int64_t sk, int64_t kc,
                                                           const float* panel, const float* init, float* y, int64_t ldy) {
  switch (rows) {
    case 8: return panel_rows<N, 8>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 7: return panel_rows<N, 7>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 6: return panel_rows<N, 6>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 5: return panel_rows<N, 5>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 4: return panel_rows<N, 4>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 3: return panel_rows<N, 3>(x, sr, sk, kc, panel, init, 0, y, ldy);
    case 2: return panel_rows<N, 2>(x, sr, sk, kc, panel, init, 0, y, ldy);
    default: return panel_rows<N, 1>(x, sr, sk, kc, panel, init, 0, y, ldy);
  }
}

// A batch of products a_i [M, K] . b_i [K, N] (see batched_product in packed_product.h): element (i, m, k) of a at
// a[i * as0 + m * as1 + k * as2], likewise b; y [Bt, M, N] contiguous.
struct BatchedArgs {
  const float* a;
  int64_t as0, as1, as2;
  const float* b;
  int64_t bs0, bs1, bs2;
  float* y;
  int64_t M, K, N;
};

// Products i0 .. i1 - 1: b_i packed into panels of kPanel columns ([P, K, kPanel], zero beyond N), then every
// kRows rows of a_i through each panel. Each output is one sum over k in order.
template <int N>
__attribute__((always_inline)) inline void batched_panels(const BatchedArgs& x, int64_t i0, int64_t i1) {
  constexpr int W = 2 * N;
  const int64_t M = x.M, K = x.K, Nc = x.N, P = (Nc + W - 1) / W;
  std::vector<float> panels(static_cast<size_t>(P * K * W));
  alignas(64) float part[kRows * W];
  alignas(64) const float zero[W] = {};
  for (int64_t i = i0; i < i1; ++i) {
    const float* b = x.b + i * x.bs0;
    if (x.bs2 == 1) {  // rows of b lie contiguous: each panel row is a piece of one
      for (int64_t p = 0; p < P; ++p) {
        const int64_t cols = std::min<int64_t>(W, Nc - p * W);
        for (int64_t k = 0; k < K; ++k) {
          float* dst = panels.data() + (p * K + k) * W;
          std::memcpy(dst, b + k * x.bs1 + p * W, sizeof(float) * static_cast<size_t>(cols));
          if (cols < W) std::memset(dst + cols, 0, sizeof(float) * static_cast<size_t>(W - cols));
        }
      }
    } else {  // a column of b at a time (its columns lie contiguous when b is a transposed view)
      if (Nc % W != 0) std::memset(panels.data() + (P - 1) * K * W, 0, sizeof(float) * static_cast<size_t>(K * W));
      for (int64_t n = 0; n < Nc; ++n) {
        float* dst = panels.data() + (n / W) * K * W + n % W;
        const float* src = b + n * x.bs2;
        for (int64_t k = 0; k < K; ++k) dst[k * W] = src[k * x.bs1];
      }
    }
    for (int64_t m = 0; m < M; m += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, M - m);
      const float* a = x.a + i * x.as0 + m * x.as1;
      float* y = x.y + (i * M + m) * Nc;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t cols = std::min<int64_t>(W, Nc - p * W);
        const float* panel = panels.data() + p * K * W;
        if (cols == W) {
          some_panel_rows<N>(rows, a, x.as1, x.as2, K, panel, zero, y + p * W, Nc);
          continue;
        }
        some_panel_rows<N>(rows, a, x.as1, x.as2, K, panel, zero, part, W);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * Nc + p * W, part + r * W, sizeof(float) * static_cast<size_t>(cols));
      }
    }
  }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx512f"))) void packed_panels_avx512(const PackedArgs& a, int64_t j0, int64_t j1) {
  packed_panels<kPanelLanes>(a, j0, j1);
}
__attribute__((target("avx512f"))) void batched_panels_avx512(const BatchedArgs& a, int64_t i0, int64_t i1) {
  batched_panels<kPanelLanes>(a, i0, i1);
}
#endif
}  // namespace

bool PackedLinear::available() {
#ifdef ATTNMT_X86_LANES
  return cpu_lanes() == 16;
#else
  return false;
#endif
}

void PackedLinear::refresh(const torch::Tensor& weight, const torch::Tensor& bias) {
  const void* bias_impl = bias.defined() ? bias.unsafeGetTensorImpl() : nullptr;
  const int64_t bias_version = bias.defined() ? bias._version() : 0;
  if (panels_.defined() && weight.unsafeGetTensorImpl() == weight_impl_ && weight.data_ptr() == weight_data_ &&
      weight._version() == weight_version_ && bias_impl == bias_impl_ && bias_version == bias_version_)
    return;
  torch::NoGradGuard ng;
  const int64_t V = weight.size(0), K = weight.size(1), P = (V + kPanel - 1) / kPanel;
  if (weight.t().is_contiguous()) {
    // W^T [K, V] lies row by row (a transposed weight, or a gradient): a panel is a strip of its columns.
    torch::Tensor wt = weight.t();
    if (V % kPanel != 0) {
      torch::Tensor padded = torch::zeros({K, P * kPanel}, weight.options());
      padded.narrow(1, 0, V).copy_(wt);
      wt = padded;
    }
    panels_ = wt.view({K, P, kPanel}).permute({1, 0, 2}).contiguous();  // [P, K, kPanel]
  } else {
    torch::Tensor w = torch::zeros({P * kPanel, K}, weight.options());
    w.narrow(0, 0, V).copy_(weight);
    panels_ = w.view({P, kPanel, K}).transpose(1, 2).contiguous();  // [P, K, kPanel]
  }
  bias_ = torch::zeros({P * kPanel}, weight.options());
  if (bias.defined()) bias_.narrow(0, 0, V).copy_(bias);
  weight_impl_ = weight.unsafeGetTensorImpl();
  weight_data_ = weight.data_ptr();
  weight_version_ = weight._version();
  bias_impl_ = bias_impl;
  bias_version_ = bias_version;
}

namespace {
// x W^T + b as ATen's one operation (on a GPU one product with the bias added in it, for any leading axes), where the
// C++ frontend's functional linear dispatches a product and then an addition for inputs of more than two axes.
torch::Tensor aten_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return at::linear(x, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
}
}  // namespace

torch::Tensor PackedLinear::operator()(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       int threads) {
  TORCH_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "PackedLinear: x ", x.sizes(),
              " does not fit weight ", weight.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "PackedLinear: bias ",
              bias.sizes(), " does not fit weight ", weight.sizes());
  const bool kernel = available() && kernels_for(x) && kernels_for(weight) && kernels_for(bias) &&
                      !(torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad()));
  if (!kernel) return aten_linear(x, weight, bias);
#ifdef ATTNMT_X86_LANES
  refresh(weight, bias);
  const int64_t K = weight.size(1), V = weight.size(0);
  // Rows of a row-major matrix, or of a transposed one (a gradient's transpose: no copy).
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  torch::Tensor x2 = x.reshape({rows, K});
  if (!(x2.stride(1) == 1 && x2.stride(0) >= K) && !(x2.stride(0) == 1 && x2.stride(1) >= x2.size(0))) x2 = x2.contiguous();
  const int64_t B = x2.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = V;
  torch::Tensor y = torch::empty({B, V}, x2.options());
  if (B == 0 || V == 0) return y.view(out_shape);
  torch::Tensor tail = torch::zeros({kRows, K}, x2.options());
  const int64_t tail_rows = B % kRows;
  if (tail_rows > 0) tail.narrow(0, 0, tail_rows).copy_(x2.narrow(0, B - tail_rows, tail_rows));
  const PackedArgs a{x2.data_ptr<float>(), x2.stride(0), x2.stride(1), tail.data_ptr<float>(), panels_.data_ptr<float>(), bias_.data_ptr<float>(),
                     y.data_ptr<float>(), B, K, V};
  // The columns in as many contiguous shares as threads, the caller's thread taking the first.
  const int64_t P = panels_.size(0);
  const int64_t n = std::min<int64_t>(P, threads > 0 ? threads : blas_threads());
  run_shares(n, [&a, n, P](int64_t t) { packed_panels_avx512(a, P * t / n, P * (t + 1) / n); });
  return y.view(out_shape);
#else
  return aten_linear(x, weight, bias);
#endif
}

namespace {
std::atomic<int> g_product_kernel{static_cast<int>(ProductKernel::kAuto)};

bool blas_is_narrower_than_cpu() {
  if (!PackedLinear::available()) return false;
  const std::string core = blas_kernel();
  if (core.empty()) return false;  // not OpenBLAS: its own choice of kernel stands
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == wide) return false;
  return true;
}

// y = x W^T + b with the packed kernel for all three products. Without a bias, bias is an empty placeholder
// (LibTorch 1.13's apply needs defined tensors) and has_bias false.
struct PackedLinearFunction : public torch::autograd::Function<PackedLinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool has_bias) {
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    ctx->save_for_backward({x.reshape({rows, x.size(-1)}), weight});
    ctx->saved_data["bias"] = has_bias;
    ctx->saved_data["shape"] = x.sizes().vec();
    PackedLinear p;
    return p(x, weight, has_bias ? bias : torch::Tensor());
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &x2 = s[0], &weight = s[1];
    const torch::Tensor dy = grads[0].reshape({-1, weight.size(0)}).contiguous();  // [N, V]
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = product(dy, weight).view(ctx->saved_data["shape"].toIntVector());
    if (ctx->needs_input_grad(1)) dw = product(dy.t(), x2);  // [V, K], dy read column by column, not copied
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) db = dy.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }
};

bool float_cpu(const torch::Tensor& t) { return kernels_for(t); }

// a [Bt, M, K] . b [Bt, K, N] on the packed kernel (any strides), outside autograd; the products shared between threads.
torch::Tensor batched_panels_product(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t Bt = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (Bt > 0 && M == 1 && K > 0 && N > 0) {
    // One row per product (a decoder step's query when input feeding makes the decoder step in training, and that
    // step's gradient): packing b would cost about as much as the product, so the row kernels of
    // kernels/additive_scores.h read it in place, as decoding's steps do.
    if (b.transpose(1, 2).is_contiguous()) return value_dots(b.transpose(1, 2), a.squeeze(1)).unsqueeze(1);
    return weighted_values(a.squeeze(1), b).unsqueeze(1);
  }
  if (K == 1) return a * b;  // [Bt, M, 1] * [Bt, 1, N]: the outer products of a one-query step's weight gradient
  torch::Tensor y = torch::empty({Bt, M, N}, a.options());
  if (Bt == 0 || M == 0 || N == 0) return y;
#ifdef ATTNMT_X86_LANES
  const BatchedArgs x{a.data_ptr<float>(), a.stride(0), a.stride(1), a.stride(2), b.data_ptr<float>(), b.stride(0),
                      b.stride(1), b.stride(2), y.data_ptr<float>(), M, K, N};
  share_rows(Bt, 1, [&x](int64_t i0, int64_t i1) { batched_panels_avx512(x, i0, i1); });
#endif
  return y;
}

// c = a . b with both gradients through the same kernel: da = g b^T; db = a^T g, or (g^T a)^T where b is narrower
// than it is deep (the keys' transpose of a score product), so that the kernel's output rows stay long.
struct BatchedProductFunction : public torch::autograd::Function<BatchedProductFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return batched_panels_product(a, b);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const torch::Tensor &a = s[0], &b = s[1], &g = grads[0];
    torch::Tensor da, db;
    if (ctx->needs_input_grad(0)) da = batched_panels_product(g, b.transpose(1, 2));
    if (ctx->needs_input_grad(1))
      db = b.size(2) >= b.size(1) ? batched_panels_product(a.transpose(1, 2), g)
                                  : batched_panels_product(g.transpose(1, 2), a).transpose(1, 2);
    return {da, db};
  }
};
}  // namespace

void set_product_kernel(ProductKernel k) { g_product_kernel.store(static_cast<int>(k)); }

bool parse_product_kernel(const std::string& s, ProductKernel* k) {
  if (s == "auto") *k = ProductKernel::kAuto;
  else if (s == "packed") *k = ProductKernel::kPacked;
  else if (s == "blas") *k = ProductKernel::kBlas;
  else return false;
  return true;
}

bool packed_products() {
  if (kernel_mode() == KernelMode::kReference) return false;
  switch (static_cast<ProductKernel>(g_product_kernel.load())) {
    case ProductKernel::kPacked: return PackedLinear::available();
    case ProductKernel::kBlas: return false;
    case ProductKernel::kAuto: break;
  }
  static const bool narrower = blas_is_narrower_than_cpu();
  return narrower;
}

std::string product_kernel_choice() {
  const auto k = static_cast<ProductKernel>(g_product_kernel.load());
  const std::string core = blas_kernel().empty() ? std::string("not OpenBLAS") : "OpenBLAS " + blas_kernel();
  if (kernel_mode() == KernelMode::kReference) return "torch's (--kernels reference; " + core + ")";
  if (k == ProductKernel::kBlas) return "BLAS (set by a test; " + core + ")";
  if (k == ProductKernel::kPacked)
    return PackedLinear::available() ? "packed AVX-512 (set by a test)" : "BLAS (packed set by a test, but no AVX-512)";
  if (packed_products()) return "packed AVX-512 (the BLAS runs " + core + ", a narrower kernel than this CPU's)";
  if (!PackedLinear::available()) return "BLAS (" + core + "; no AVX-512 for the packed kernel)";
  return "BLAS (" + core + ")";
}

torch::Tensor train_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!packed_products() || !float_cpu(x) || !float_cpu(weight) || !float_cpu(bias) || weight.dim() != 2 || x.dim() < 1 ||
      x.size(-1) != weight.size(1))
    return aten_linear(x, weight, bias);
  return PackedLinearFunction::apply(x, weight, bias.defined() ? bias : torch::empty({0}, weight.options()), bias.defined());
}

torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "product: a [M, K] and b [K, N] expected, got ",
              a.sizes(), " and ", b.sizes());
  if (!packed_products() || !float_cpu(a) || !float_cpu(b) ||
      (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())))
    return torch::mm(a, b);
  PackedLinear p;
  return p(a, b.t(), torch::Tensor());
}

torch::Tensor batched_product(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "batched_product: a [B, M, K] and b [B, K, N] expected, got ", a.sizes(), " and ", b.sizes());
  if (!packed_products() || !float_cpu(a) || !float_cpu(b)) return torch::bmm(a, b);
  if (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) return BatchedProductFunction::apply(a, b);
  return batched_panels_product(a, b);
}

}  // namespace attnmt
