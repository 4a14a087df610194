#include "bench_rows.h"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <spdlog/spdlog.h>

#include <torch/cuda.h>
#include "common/errors.h"
#include "common/host.h"
#include "common/progress.h"
#include "common/runtime.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "model/attention.h"
#include "model/flops.h"
#include "model/seq2seq.h"
#include "train/trainer.h"
#include "translate/search.h"

namespace attnmt::cli {

namespace {

// Seconds of the fastest of `reps` products a . b (synchronised on CUDA).
double best_mm_seconds(const torch::Tensor& a, const torch::Tensor& b, int reps) {
  torch::NoGradGuard ng;
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    double t0 = monotonic_s();
    torch::Tensor c = torch::mm(a, b);
    if (c.is_cuda()) torch::cuda::synchronize(c.device().index());
    best = std::min(best, monotonic_s() - t0);
  }
  return best;
}

// Seconds of the fastest of `reps` products a . b on attnmt's packed kernel, packing b included (as the BLAS
// packs its operands in every call); 0 where the kernel does not run (no AVX-512, or not the CPU).
double best_packed_mm_seconds(const torch::Tensor& a, const torch::Tensor& b, int reps) {
  if (!a.is_cpu() || !PackedLinear::available()) return 0;
  torch::NoGradGuard ng;
  const ScopedKernelMode kernels(KernelMode::kAuto);  // the machine's rate, under either --kernels
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    double t0 = monotonic_s();
    PackedLinear packed;
    torch::Tensor c = packed(a, b.t(), torch::Tensor());
    best = std::min(best, monotonic_s() - t0);
  }
  return best;
}

// The fastest of `reps` products a . b through the BLAS and through the packed kernel (where it runs): the
// best rate this process can give, which training uses wherever it is the faster one (kernels/packed_product.h).
double best_product_seconds(const torch::Tensor& a, const torch::Tensor& b, int reps) {
  const double blas = best_mm_seconds(a, b, reps), packed = best_packed_mm_seconds(a, b, reps);
  return packed > 0 ? std::min(blas, packed) : blas;
}

// Best of `reps` float32 products [M x K] . [K x N] (after one warm-up), in GFLOP/s: through the BLAS, or
// through the packed kernel (packed true; 0 where it does not run).
double gemm_gflops(const torch::Device& dev, int64_t M, int64_t K, int64_t N, int reps, bool packed = false) {
  auto a = torch::randn({M, K}, torch::TensorOptions().device(dev));
  auto b = torch::randn({K, N}, torch::TensorOptions().device(dev));
  const double flop = 2.0 * static_cast<double>(M * K * N);
  if (packed) {
    if (best_packed_mm_seconds(a, b, 1) == 0) return 0;
    return flop / best_packed_mm_seconds(a, b, reps) / 1e9;
  }
  best_mm_seconds(a, b, 1);
  return flop / best_mm_seconds(a, b, reps) / 1e9;
}

// Best of `reps` output-layer products x W^T ([M x K] rows, W [N x K]) through the packed copy of W that decoding
// uses (kernels/packed_product.h), in GFLOP/s; 0 where decoding does not use it (no AVX-512, or not the CPU).
double packed_gflops(const torch::Device& dev, int64_t M, int64_t K, int64_t N, int reps) {
  if (!dev.is_cpu() || !PackedLinear::available()) return 0;
  torch::NoGradGuard ng;
  const ScopedKernelMode kernels(KernelMode::kAuto);  // what the kernel gives, under either --kernels
  const torch::Tensor x = torch::randn({M, K}), w = torch::randn({N, K}), b = torch::zeros({N});
  PackedLinear packed;
  packed(x, w, b);  // packs W once, as a decoder does for a whole search
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    const double t0 = monotonic_s();
    packed(x, w, b);
    best = std::min(best, monotonic_s() - t0);
  }
  return 2.0 * static_cast<double>(M * K * N) / best / 1e9;
}

// Best of 20 1024x1024x1024 float32 products, through the BLAS and through the packed kernel: the roofline is
// the faster of the two.
double matmul_gflops(const torch::Device& dev) { return gemm_gflops(dev, 1024, 1024, 1024, 20); }
double packed_matmul_gflops(const torch::Device& dev) { return gemm_gflops(dev, 1024, 1024, 1024, 20, true); }

// The matmul rate sampled between the timed pieces of one row (after each training step and each search), so
// that the row's MFU is taken against what the machine could give during the same minutes: on a shared
// machine the rate moves by a third within a run (29 to 49 GFLOP/s within minutes here), and one roofline
// measured at the start made MFU swing from 59% to 76% between two runs of the same binary and settings.
class RoofSampler {
 public:
  explicit RoofSampler(const torch::Device& dev)
      : a_(torch::randn({1024, 1024}, torch::TensorOptions().device(dev))), b_(torch::randn({1024, 1024}, torch::TensorOptions().device(dev))) {}
  // The fastest of three back-to-back products: the first after other work pays for cold caches and for
  // waking BLAS threads, which the timed work does not pay at that rate.
  void sample() {
    const double best = best_product_seconds(a_, b_, 3);
    seconds_ += best;
    fastest_ = std::min(fastest_, best);
    ++n_;
  }
  // The best sample: the roofline as the issue defines it (best of several), taken during the row. It is the
  // conservative choice: the mean rate of the samples runs 10-25% lower on this machine.
  double best_gflops() const { return n_ == 0 ? 0.0 : 2.0 * 1024 * 1024 * 1024 / fastest_ / 1e9; }
  // Total FLOPs over total time of the samples (the rate the timed work saw on average).
  double mean_gflops() const { return n_ == 0 ? 0.0 : 2.0 * 1024 * 1024 * 1024 * n_ / seconds_ / 1e9; }

 private:
  torch::Tensor a_, b_;
  double seconds_ = 0, fastest_ = 1e9;
  int n_ = 0;
};


// One training step's dispatch count.
template <class F>
DispatchCount counted(F&& f) {
  DispatchCounter counter;
  f();
  return counter.count();
}

// Per decoder step: the difference between two searches of different lengths over the steps they differ by, so that
// the encoder, the keys and the read-back of the hypotheses cancel out.
struct PerStep {
  double ops = 0, reads = 0;
};
template <class Search>
PerStep per_decoder_step(Search&& search) {
  int64_t long_steps = 0, short_steps = 0;
  const DispatchCount a = counted([&] { long_steps = search(true); });
  const DispatchCount b = counted([&] { short_steps = search(false); });
  if (long_steps <= short_steps) return {};
  const double n = static_cast<double>(long_steps - short_steps);
  return {static_cast<double>(a.dispatched_ops - b.dispatched_ops) / n, static_cast<double>(a.host_reads - b.host_reads) / n};
}

// The variant's model: the base with the row's attention (and, for self_attention, 3 self-attention layers a side of
// 8 heads, unless the base is a self-attention model already: then the base as it is), checked as a config is.
ModelConfig row_model(const std::string& name, const AttentionConfig& att, const ModelConfig& base, const BenchOptions& o) {
  ModelConfig m = base;
  const bool base_as_it_is = name == "self_attention" && base.encoder.type == LayerType::kSelfAttention &&
                             base.decoder.type == LayerType::kSelfAttention;
  if (!base_as_it_is) {
    m.attention = att;
    if (name == "self_attention") {
      m.encoder.type = m.decoder.type = LayerType::kSelfAttention;
      m.encoder.heads = m.decoder.heads = 8;
      m.encoder_layers = m.decoder_layers = 3;
    }
  }
  {
    Config check;  // a --config model that the row's heads do not divide: one line, not an abort
    check.model = m;
    validate(check);
  }
  const bool rnn_decoder = m.decoder.type == LayerType::kRnn;
  m.input_feeding = o.input_feeding && rnn_decoder && attention_traits(att).after_rnn;
  return m;
}

// Training: five warm-up steps, o.steps timed ones (sampling the roofline between them), one counted, and with
// --op-names one by operation name. Returns the process group's counters as the timed steps began.
CommStats time_training(BenchRow& r, Trainer& trainer, const ModelConfig& m, const BenchData& d, const BenchOptions& o,
                   const torch::Device& dev, Distributed* dist, RoofSampler& sampler) {
  Batch dbatch = d.dbatch;
  // FLOPs from the padded batch shape, as configured (padding included, same for every type).
  FlopCount fc = count_flops(m, o.vocab, d.batch.src.size(0), d.S, d.T);
  r.train_flops_step = fc.train_step();
  // On a GPU a step returns before its work is done (the loss stays there): wait for it, so that the time is the step's.
  auto train_step = [&]() {
    trainer.step(&dbatch, d.batch.tgt_tokens);
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
  };
  // Warm-up: a process's first steps run slower than the rest, the fourth among them here (by 40-70 ms with
  // training's products on the packed kernel, the third with OpenBLAS's), so five steps before timing.
  for (int i = 0; i < 5; ++i) train_step();
  const CommStats before = dist ? dist->stats() : CommStats{};
  double dt = 0;
  for (int i = 0; i < o.steps; ++i) {
    double t0 = monotonic_s();
    train_step();
    dt += monotonic_s() - t0;
    if (!dist) sampler.sample();
  }
  r.train_step_count = counted(train_step);
  if (dev.is_cuda()) r.cuda_kernels_per_training_step = count_cuda_kernels(train_step);
  if (o.op_names) {
    DispatchCounter by_name(/*by_name=*/true);
    train_step();
    r.train_step_ops = by_name.by_name();
  }
  r.ops_per_target_position = static_cast<double>(r.train_step_count.dispatched_ops) / static_cast<double>(d.T);
  r.train_tok_s = static_cast<double>(d.batch.tgt_tokens) * o.steps / dt;
  r.train_gflops = r.train_flops_step * o.steps / dt / 1e9;
  r.rss_after_train_mb = peak_rss_mb();
  return before;
}

// A data-parallel row: the gradient all-reduce inside the timed steps (since BEFORE) and alone.
void time_allreduce(BenchRow& r, Distributed& dist, const CommStats& before, double roof, const std::string& name) {
  r.roof = roof;
  r.train_mfu = r.train_gflops / r.roof;
  const CommStats& after = dist.stats();
  r.allreduce_step_ms = 1e3 * (after.gradient_seconds - before.gradient_seconds) /
                        static_cast<double>(after.gradient_allreduces - before.gradient_allreduces);
  r.gradient_mb = static_cast<double>(after.gradient_bytes) / 1e6;
  dist.barrier();
  const CommStats alone = dist.stats();
  const int reps = 10;
  for (int i = 0; i < reps; ++i) dist.allreduce_gradients();
  r.allreduce_alone_ms = 1e3 * (dist.stats().gradient_seconds - alone.gradient_seconds) / reps;
  spdlog::info("{}: {:.0f} target tok/s over {} ranks, gradient all-reduce {:.1f} ms in the step, {:.1f} ms alone ({:.1f} MB)",
               name, r.train_tok_s, dist.world(), r.allreduce_step_ms, r.allreduce_alone_ms, r.gradient_mb);
}

// What one decoding measurement needs: the model, and the sources of the whole batch (greedy) and of the first
// sentences (beam 5, at most 16).
struct Decoding {
  Seq2Seq& model;
  const ModelConfig& m;
  const BenchData& d;
  const BenchOptions& o;
  const torch::Device& dev;
  RoofSampler& sampler;
  Batch src_only, sub;
  std::vector<int64_t> first;  // the sentences of sub
};

// Batched greedy over the whole batch, a fixed length so that every type does the same work: seconds per search and
// the FLOPs of the steps run. The search options are returned for the dispatch counts.
SearchOptions time_greedy(BenchRow& r, const Decoding& c, double* seconds, double* flops) {
  const Batch& src_only = c.src_only;
  SearchOptions gs;
  // The batch runs max over rows of (ratio * src_len + 10) steps: 20 + 10 = 30 for the longest (S) source, as many as
  // the Python peer's greedy runs (its per-sentence rate compares directly).
  gs.max_len_ratio = 20.5 / static_cast<double>(std::max<int64_t>(1, c.d.S));
  gs.stop_at_eos = false;  // every row runs to the limit: the work is known exactly
  r.greedy_cuda_graph = greedy_step_graphed(c.model, gs, c.dev);
  SearchOptions eager = gs;
  eager.cuda_graph = false;
  greedy_search(c.model, src_only, gs, c.dev);  // warm-up
  if (r.greedy_cuda_graph) greedy_search(c.model, src_only, eager, c.dev);
  const int reps = 3;
  double gdt = 0, edt = 0;
  for (int i = 0; i < reps; ++i) {  // with a graph, the two alternate
    double g0 = monotonic_s();
    greedy_search(c.model, src_only, gs, c.dev);
    gdt += monotonic_s() - g0;
    c.sampler.sample();
    if (!r.greedy_cuda_graph) continue;
    g0 = monotonic_s();
    greedy_search(c.model, src_only, eager, c.dev);
    edt += monotonic_s() - g0;
  }
  gdt /= reps;
  if (r.greedy_cuda_graph) r.greedy_eager_sent_s = static_cast<double>(c.o.batch) / (edt / reps);
  r.greedy_sent_s = static_cast<double>(c.o.batch) / gdt;
  // FLOPs of the steps run: the batch advances max over rows of (ratio * src_len + 10) steps.
  int64_t steps = 0;
  for (const auto& sv : c.d.srcs)
    steps = std::max<int64_t>(steps, static_cast<int64_t>(std::floor(gs.max_len_ratio * static_cast<double>(sv.size()))) + 10);
  r.greedy_steps = steps;
  *seconds = gdt;
  *flops = count_flops(c.m, c.o.vocab, c.o.batch, c.d.S, steps).forward();
  return gs;
}

// Beam 5 on the first 16 sentences at once and on the first 4 one at a time, alternating over two rounds so that both
// see the same machine: sentences per second and MFU of each. Returns the batched search's options.
SearchOptions time_beam(BenchRow& r, const Decoding& c) {
  SearchOptions bs;
  bs.beam_size = 5;
  bs.max_len_ratio = 20.0 / static_cast<double>(std::max<int64_t>(1, c.o.min_len));  // >= 30 steps per sentence
  const int nb = static_cast<int>(c.first.size());
  const std::vector<int64_t>& first = c.first;
  const Batch& sub = c.sub;
  // Beam FLOPs: encoder and keys once per sentence, then decoder step and output layer per row advanced (finished
  // sentences leave the batch, so the rows are counted as the search ran them).
  auto beam_flops = [&](const Batch& b, const SearchStats& st) {
    const int64_t Sb = b.src.size(1);
    FlopCount per_row = count_flops(c.m, c.o.vocab, 1, Sb, 1);
    return count_flops(c.m, c.o.vocab, b.src.size(0), Sb, 0).forward() +
           static_cast<double>(st.row_steps) * (per_row.decoder + per_row.output);
  };
  const int single = std::min(4, nb), rounds = 2;
  double bdt = 0, sdt = 0, batched_flops = 0, single_flops = 0;
  auto timed_beam = [&](const Batch& b, double& seconds, double& flops) {
    SearchStats st;
    double t0 = monotonic_s();
    beam_search(c.model, b, bs, c.dev, &st);
    seconds += monotonic_s() - t0;
    flops += beam_flops(b, st);
  };
  for (int round = 0; round < rounds; ++round) {
    timed_beam(sub, bdt, batched_flops);
    c.sampler.sample();
    for (int i = 0; i < single; ++i) timed_beam(make_src_batch(c.d.srcs, {first[static_cast<size_t>(i)]}), sdt, single_flops);
    c.sampler.sample();
  }
  r.beam_sent_s = nb * rounds / bdt;
  r.beam_single_sent_s = single * rounds / sdt;
  r.roof = c.sampler.best_gflops();
  r.roof_mean = c.sampler.mean_gflops();
  r.beam_mfu = batched_flops / bdt / 1e9 / r.roof;
  r.beam_single_mfu = single_flops / sdt / 1e9 / r.roof;
  return bs;
}

// Dispatch counts per decoder step: greedy over its full length and 10 steps, beam over two length limits (and with
// --op-names, the greedy step by operation name).
void count_decoder_steps(BenchRow& r, const Decoding& c, const SearchOptions& gs, const SearchOptions& bs) {
  const Batch& src_only = c.src_only;
  SearchOptions g = gs;
  // Operations and reads per step (the difference of a full-length search and one of 10 steps), and on CUDA the
  // kernels of the same two searches; with and without the graph where greedy records one.
  const auto greedy_counts = [&](bool graph, double* ops, double* reads, double* kernels) {
    g.cuda_graph = graph;
    const PerStep per = per_decoder_step([&](bool longer) {
      g.max_len_ratio = longer ? gs.max_len_ratio : 0.0;  // every row to its limit: r.greedy_steps or 10 steps
      greedy_search(c.model, src_only, g, c.dev);
      return longer ? r.greedy_steps : int64_t{10};
    });
    *ops = per.ops;
    if (reads != nullptr) *reads = per.reads;
    if (c.dev.is_cuda() && r.greedy_steps > 10) {
      const auto count = [&](bool longer) {
        g.max_len_ratio = longer ? gs.max_len_ratio : 0.0;
        return count_cuda_kernels([&] { greedy_search(c.model, src_only, g, c.dev); });
      };
      const int64_t longer = count(true), shorter = count(false);
      if (longer >= 0 && shorter >= 0)
        *kernels = static_cast<double>(longer - shorter) / static_cast<double>(r.greedy_steps - 10);
    }
    g = gs;
  };
  greedy_counts(gs.cuda_graph, &r.ops_per_greedy_step, &r.reads_per_greedy_step, &r.cuda_kernels_per_greedy_step);
  if (r.greedy_cuda_graph)
    greedy_counts(false, &r.ops_per_greedy_step_eager, nullptr, &r.cuda_kernels_per_greedy_step_eager);
  if (c.o.op_names) {  // the same difference of two searches, by operation
    auto names = [&](bool longer) {
      DispatchCounter by_name(/*by_name=*/true);
      g.max_len_ratio = longer ? gs.max_len_ratio : 0.0;
      greedy_search(c.model, src_only, g, c.dev);
      return by_name.by_name();
    };
    const auto longer = names(true), shorter = names(false);
    const double n = static_cast<double>(r.greedy_steps - 10);
    for (const auto& [op, count] : longer) {
      const auto it = shorter.find(op);
      const double dd = static_cast<double>(count - (it == shorter.end() ? 0 : it->second)) / n;
      if (n > 0 && dd != 0) r.greedy_step_ops[op] = dd;
    }
  }
  const Batch& sub = c.sub;
  SearchOptions b = bs;
  const PerStep beam = per_decoder_step([&](bool longer) {
    b.max_len_ratio = longer ? 1.0 : 0.0;  // len + 10 or 10 steps at most
    SearchStats st;
    beam_search(c.model, sub, b, c.dev, &st);
    return st.steps;
  });
  r.ops_per_beam_step = beam.ops;
  r.reads_per_beam_step = beam.reads;
}

}  // namespace

std::vector<std::pair<std::string, AttentionConfig>> variants(const std::string& which) {
  std::vector<std::pair<std::string, AttentionConfig>> all = {
      {"none", {attention_type_from_string("none"), LuongScore::kDefault, 1, 0}},
      {"bahdanau", {attention_type_from_string("bahdanau"), LuongScore::kDefault, 1, 0}},
      {"luong_dot", {attention_type_from_string("luong"), LuongScore::kDot, 1, 0}},
      {"luong_general", {attention_type_from_string("luong"), LuongScore::kGeneral, 1, 0}},
      {"luong_concat", {attention_type_from_string("luong"), LuongScore::kConcat, 1, 0}},
      {"scaled_dot", {attention_type_from_string("scaled_dot"), LuongScore::kDefault, 4, 0}},
      {"self_attention", {attention_type_from_string("scaled_dot"), LuongScore::kDefault, 8, 0}}};
  if (which == "all") return all;
  for (auto& v : all)
    if (v.first == which || (v.first != "self_attention" && to_string(v.second.type) == which)) return {v};
  throw UsageError("--attention: unknown value '" + which +
                   "'. Valid options: all, none, bahdanau, luong, luong_dot, luong_general, luong_concat, scaled_dot, self_attention");
}

ModelConfig bench_base_model(const BenchOptions& o) {
  ModelConfig base;
  base.rnn = RnnCell::kGru;
  base.embed_dim = 256;
  base.hidden_dim = 512;
  base.bidirectional = true;
  base.dropout = 0.0;
  if (!o.config.empty()) base = load_config(o.config, {}).model;
  return base;
}

Roofline measure_roofline(const torch::Device& dev, const ModelConfig& base, const BenchOptions& o, Distributed* dist) {
  Roofline f;
  f.blas = matmul_gflops(dev);
  f.packed = packed_matmul_gflops(dev);
  f.best = std::max(f.blas, f.packed);
  if (dist) {  // the ranks measure at the same time; the machine's roofline is their sum
    torch::Tensor t = torch::tensor({f.best}, torch::kDouble);
    dist->allreduce_sum_(t);
    f.best = host_scalar<double>(t);
  }
  spdlog::info("matmul 1024^3 float32: {:.1f} GFLOP/s (best of 20{}; BLAS {:.1f}, packed kernel {:.1f})", f.best,
               dist ? ", summed over the ranks" : "", f.blas, f.packed);
  // The output layer's product for the rows of one beam-5 sentence and of 16 such sentences, next to each other: how
  // much of the machine five rows already use bounds what batching beams can gain.
  f.out5 = gemm_gflops(dev, 5, base.hidden_dim, o.vocab, 50);
  f.out80 = gemm_gflops(dev, 80, base.hidden_dim, o.vocab, 20);
  spdlog::info("output layer [rows x {}] . [{} x {}]: 5 rows {:.1f} GFLOP/s, 80 rows {:.1f} GFLOP/s", base.hidden_dim,
               base.hidden_dim, o.vocab, f.out5, f.out80);
  // The same products through the packed weights that decoding uses.
  f.packed5 = packed_gflops(dev, 5, base.hidden_dim, o.vocab, 50);
  f.packed80 = packed_gflops(dev, 80, base.hidden_dim, o.vocab, 20);
  if (f.packed5 > 0)
    spdlog::info("the same with packed weights, as decoding runs it: 5 rows {:.1f} GFLOP/s, 80 rows {:.1f} GFLOP/s", f.packed5,
                 f.packed80);
  return f;
}

BenchData bench_data(const BenchOptions& o, Distributed* dist, const torch::Device& dev) {
  BenchData d;
  torch::manual_seed(1);
  for (int i = 0; i < o.batch; ++i) {
    int64_t s = o.min_len + i % (o.max_len - o.min_len + 1);
    int64_t t = o.min_len + (i * 7) % (o.max_len - o.min_len + 1);
    auto rs = torch::randint(4, o.vocab, {s}, torch::kLong), rt = torch::randint(4, o.vocab, {t}, torch::kLong);
    d.data.push_back({cpu_vector<int64_t>(rs), cpu_vector<int64_t>(rt)});
  }
  for (const auto& p : d.data) d.srcs.push_back(p.src);
  d.all.resize(d.data.size());
  std::iota(d.all.begin(), d.all.end(), 0);
  d.batch = make_batch(d.data, d.all);
  d.dbatch = (dist ? make_batch(d.data, shard_rows(d.all, dist->rank(), dist->world())) : d.batch).to(dev);
  d.S = d.batch.src.size(1);
  d.T = d.batch.tgt_out.size(1);
  return d;
}

BenchRow measure_row(const std::string& name, const AttentionConfig& att, const ModelConfig& base, const BenchData& d,
                     const BenchOptions& o, const torch::Device& dev, Distributed* dist, double roof) {
  const ModelConfig m = row_model(name, att, base, o);
  Seq2Seq model(m, o.vocab, o.vocab);
  model->to(dev);
  // The training loop's own Trainer: the timed step is the one users run (Adam 1e-3, clipping at 1, no label
  // smoothing, teacher forcing).
  TrainConfig tc;
  tc.lr = 1e-3;
  tc.clip_norm = 1.0;
  tc.label_smoothing = 0.0;
  tc.teacher_forcing = 1.0;
  TrainOptions topt;
  topt.dist = dist;
  Trainer trainer(model, tc, dev, topt);
  BenchRow r;
  r.name = name + (m.input_feeding ? "+feeding" : "");
  RoofSampler sampler(dev);
  r.params = model->parameter_count();
  const CommStats before = time_training(r, trainer, m, d, o, dev, dist, sampler);
  if (dist) {
    time_allreduce(r, *dist, before, roof, name);
    return r;  // decoding is not data-parallel
  }
  model->eval();
  const std::vector<int64_t> first(d.all.begin(), d.all.begin() + std::min(16, o.batch));
  const Decoding c{model, m, d, o, dev, sampler, make_src_batch(d.srcs, d.all), make_src_batch(d.srcs, first), first};
  double greedy_seconds = 0, greedy_flops = 0;
  const SearchOptions gs = time_greedy(r, c, &greedy_seconds, &greedy_flops);
  const SearchOptions bs = time_beam(r, c);
  count_decoder_steps(r, c, gs, bs);
  r.train_mfu = r.train_gflops / r.roof;
  r.greedy_mfu = greedy_flops / greedy_seconds / 1e9 / r.roof;
  spdlog::info("{}: {:.0f} target tok/s, {:.1f} GFLOP/s ({:.0f}% of matmul), greedy {:.1f} sent/s, beam5 {:.2f} vs {:.2f} sent/s",
               r.name, r.train_tok_s, r.train_gflops, 100 * r.train_mfu, r.greedy_sent_s, r.beam_sent_s, r.beam_single_sent_s);
  return r;
}

}  // namespace attnmt::cli
