// Each of attnmt's CPU kernels against its reference at the benchmark model's shapes (batch 64, hidden 512,
// attention 512, vocabulary 8,000, 30 source and 31 target steps, 1,662 target tokens), in one process, the two
// alternating within each repetition: the measurement behind src/kernels/README.md's choice of what to keep. The
// reference is what --kernels reference runs (plain LibTorch operations); the products are also timed through oneDNN
// (dnnl_sgemm, and its matmul primitive with the weights reordered once, as a decoder keeps them), the library
// LibTorch loads. Built with -DATTNMT_KERNEL_BENCH=ON (it links Debian's libdnnl-dev, which attnmt does not use);
// scripts/kernel_bench.sh builds and runs it. Prints one JSON object; times are the best of REPS, in ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <dnnl.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/runtime.h"
#include "kernels/adam.h"
#include "kernels/additive_scores.h"
#include "kernels/gru_recurrence.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "kernels/softmax_rows.h"
#include "model/attention.h"
#include "model/loss.h"

namespace {

using namespace attnmt;
using torch::Tensor;

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Best times of f under auto and under reference, the two alternating (one warm-up each).
struct Pair {
  double auto_ms = 1e30, reference_ms = 1e30;
};
Pair time_pair(int reps, const std::function<void()>& f) {
  Pair p;
  for (int i = -1; i < reps; ++i)
    for (KernelMode m : {KernelMode::kAuto, KernelMode::kReference}) {
      const ScopedKernelMode mode(m);
      const double t0 = now_ms();
      f();
      const double dt = now_ms() - t0;
      if (i < 0) continue;
      double& best = m == KernelMode::kAuto ? p.auto_ms : p.reference_ms;
      best = std::min(best, dt);
    }
  return p;
}

double best_ms(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_ms();
    f();
    best = std::min(best, now_ms() - t0);
  }
  return best;
}

nlohmann::json row(const std::string& kernel, const std::string& shape, const Pair& p) {
  return {{"kernel", kernel}, {"shape", shape}, {"auto_ms", p.auto_ms}, {"reference_ms", p.reference_ms},
          {"reference_over_auto", p.reference_ms / p.auto_ms}};
}

// C [M, N] = A [M, K] B [K, N], B stored as [N, K] when trans_b (a linear layer's weight).
struct Product {
  const char* name;
  int64_t M, N, K;
  bool trans_b;
  bool decoding;  // the same weights product after product: packed or reordered once
};

nlohmann::json product_row(const Product& s, int reps, const dnnl::engine& eng, dnnl::stream& strm) {
  const Tensor a = torch::randn({s.M, s.K});
  const Tensor b_store = s.trans_b ? torch::randn({s.N, s.K}) : torch::randn({s.K, s.N});
  const Tensor b = s.trans_b ? b_store.t() : b_store;
  const double gflop = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K) / 1e9;
  nlohmann::json r = {{"product", s.name}};
  r["blas_gflops"] = gflop / best_ms(reps, [&] { torch::mm(a, b); }) * 1e3;
  if (PackedLinear::available()) {
    PackedLinear packed;
    r["packed_gflops"] = gflop / best_ms(reps, [&] {
                           if (s.decoding) packed(a, b.t(), Tensor());  // packed once, as decoding keeps it
                           else PackedLinear()(a, b.t(), Tensor());     // packing included, as in training
                         }) * 1e3;
  }
  Tensor c = torch::empty({s.M, s.N});
  const float *pa = a.data_ptr<float>(), *pb = b_store.data_ptr<float>();
  r["dnnl_sgemm_gflops"] = gflop / best_ms(reps, [&] {
                             dnnl_sgemm('N', s.trans_b ? 'T' : 'N', s.M, s.N, s.K, 1.0f, pa, s.K, pb, s.trans_b ? s.K : s.N, 0.0f,
                                        c.data_ptr<float>(), s.N);
                           }) * 1e3;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), b_plain({s.K, s.N}, dt::f32, s.trans_b ? tag::ba : tag::ab),
      b_any({s.K, s.N}, dt::f32, tag::any), c_md({s.M, s.N}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, s.decoding ? b_any : b_plain, c_md), eng);
  dnnl::memory a_mem(a_md, eng, const_cast<float*>(pa)), b_src(b_plain, eng, const_cast<float*>(pb)), b_mem = b_src;
  if (pd.weights_desc() != b_plain) {  // reordered once, outside the timing
    b_mem = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(b_src, b_mem).execute(strm, b_src, b_mem);
    strm.wait();
  }
  dnnl::memory c_mem(c_md, eng, c.data_ptr<float>());
  const dnnl::matmul mm(pd);
  r["dnnl_matmul_gflops"] = gflop / best_ms(reps, [&] {
                              mm.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
                              strm.wait();
                            }) * 1e3;
  const Tensor ref = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
  r["dnnl_matmul_rel_err"] = ((c.to(torch::kDouble) - ref).abs().max() / ref.abs().max()).item<double>();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  if (reps < 1) {
    std::fprintf(stderr, "usage: kernel-bench [REPS >= 1]\n");
    return 2;
  }
  // attnmt's own settings: one intra-op thread, the BLAS on every core (set_num_threads(1) also caps OpenMP, which
  // oneDNN runs on; its products are timed on as many OpenMP threads as the BLAS has).
  torch::manual_seed(1);
  at::set_num_threads(1);
  const int64_t B = 64, S = 30, T = 31, H = 512, A = 512, V = 8000, N = 1662;
  nlohmann::json out = {{"blas", blas_info()}, {"blas_kernel", blas_kernel()}, {"blas_threads", blas_threads()},
                        {"kernel_choice", kernel_choice()}, {"packed_available", PackedLinear::available()}, {"reps", reps},
                        {"dnnl_version", std::to_string(dnnl_version()->major) + "." + std::to_string(dnnl_version()->minor) + "." +
                                             std::to_string(dnnl_version()->patch)},
                        {"kernels", nlohmann::json::array()}, {"products", nlohmann::json::array()}};
  auto& rows = out["kernels"];
  {
    const Tensor x = torch::randn({B, V});
    rows.push_back(row("argmax_log_softmax (greedy pick)", "[64, 8000]", time_pair(reps, [&] { argmax_log_softmax(x); })));
  }
  {
    const Tensor logits = torch::randn({N, V}, torch::requires_grad()), target = torch::randint(4, V, {N});
    rows.push_back(row("cross-entropy rows + gradient (sequence_loss)", "[1662, 8000], eps 0.1", time_pair(reps, [&] {
                         logits.mutable_grad() = Tensor();
                         sequence_loss(logits, target, 0.1).backward();
                       })));
  }
  {
    const Tensor wq = torch::randn({B, T, A}, torch::requires_grad()), keys = torch::randn({B, S, A}, torch::requires_grad());
    const Tensor v = torch::randn({A}, torch::requires_grad());
    rows.push_back(row("additive scores + gradients (training, Luong concat)", "[64, 31, 30, 512]", time_pair(reps, [&] {
                         additive_scores(wq, keys, v).sum().backward();
                       })));
    torch::NoGradGuard ng;
    const Tensor q1 = torch::randn({B, 1, A});
    rows.push_back(row("additive scores (a decoder step)", "[64, 1, 30, 512]", time_pair(reps, [&] { additive_scores(q1, keys, v); })));
  }
  {
    torch::NoGradGuard ng;
    const Tensor a = torch::softmax(torch::randn({B, S}), 1), values = torch::randn({B, S, 2 * H}), dc = torch::randn({B, 2 * H});
    rows.push_back(row("weighted_values + value_dots (one query a sentence)", "[64, 30, 1024]", time_pair(reps, [&] {
                         weighted_values(a, values);
                         value_dots(values, dc);
                       })));
  }
  {
    torch::NoGradGuard ng;
    const Tensor gi = torch::randn({B, 3 * H}), gh = torch::randn({B, 3 * H}), h = torch::randn({B, H});
    rows.push_back(row("GRU cell gates (forward)", "[64, 3 x 512]", time_pair(reps, [&] { gru_cell(gi, gh, h, H); })));
  }
  {
    // One GRU layer over all steps, forward and backward: gru_sequence on the kernels, ATen's GRU as the reference
    // (what Rnn chooses under each switch).
    const Tensor x = torch::randn({B, T, 256}), h0 = torch::zeros({B, H});
    const Tensor w_ih = (torch::randn({3 * H, 256}) * 0.05).requires_grad_(), w_hh = (torch::randn({3 * H, H}) * 0.05).requires_grad_();
    const Tensor b_ih = torch::zeros({3 * H}, torch::requires_grad()), b_hh = torch::zeros({3 * H}, torch::requires_grad());
    rows.push_back(row("GRU layer forward + backward (gru_sequence vs ATen's GRU)", "[64, 31] x 256 -> 512", time_pair(reps, [&] {
                         Tensor y;
                         if (kernels_on(x.device())) y = gru_sequence(train_linear(x, w_ih, b_ih), h0, w_hh, b_hh);
                         else y = std::get<0>(at::gru(x, h0.unsqueeze(0), {w_ih, w_hh, b_ih, b_hh}, true, 1, 0.0, true, false, true));
                         y.sum().backward();
                       })));
  }
  {
    // Adam over the benchmark model's 12.4M parameters in 40 tensors.
    std::vector<Tensor> params;
    for (int i = 0; i < 40; ++i) {
      params.push_back(torch::randn({310000}, torch::requires_grad()));
      params.back().mutable_grad() = torch::randn({310000});
    }
    torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
    rows.push_back(row("Adam step (adam_step vs torch::optim::Adam::step)", "12.4M parameters", time_pair(reps, [&] { adam_step(opt); })));
  }
  // Products: the BLAS, the packed kernel (AVX-512 CPUs) and oneDNN, on as many threads as the BLAS uses.
  at::set_num_threads(std::max(1, blas_threads()));  // LibTorch's OpenMP threads, which oneDNN's products run on
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  for (const Product& p : std::vector<Product>{
           {"output layer forward 1662x8000x512", N, V, H, true, false},
           {"output layer input gradient 1662x512x8000", N, H, V, false, false},
           {"decoder step output layer 64x8000x512", B, V, H, true, true},
           {"GRU step 64x1536x512", B, 3 * H, H, true, true},
           {"readout 1662x512x1024", N, H, 2 * H, true, false},
           {"1024^3", 1024, 1024, 1024, false, false},
       })
    out["products"].push_back(product_row(p, reps, eng, strm));
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
