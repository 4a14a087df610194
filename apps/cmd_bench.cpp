// attnmt bench [--config FILE] [--attention TYPE|all] [--steps N] [--json] [--nproc N]
// Measures, in one process: the float32 matmul rate (the roofline), training throughput and MFU,
// decoding throughput (batched greedy, batched beam 5, beam 5 one sentence at a time), peak memory.
// With --nproc N (or WORLD_SIZE): data-parallel training throughput only, each rank on its slice of the
// batch, with the time spent in the gradient all-reduce (inside the step, and alone).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"

#include <ATen/Context.h>
#include <torch/cuda.h>
#include "common/progress.h"
#include "common/config.h"
#include "common/dispatch_count.h"
#include "common/errors.h"
#include "common/host.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "data/batcher.h"
#include "data/vocab.h"
#include "eval/search.h"
#include "model/attention.h"
#include "model/flops.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "model/seq2seq.h"
#include "train/distributed.h"
#include "train/launcher.h"
#include "train/trainer.h"

namespace attnmt::cli {

namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

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

struct BenchRow {
  std::string name;
  int64_t params = 0;
  double train_tok_s = 0, train_gflops = 0, train_mfu = 0, train_flops_step = 0;
  double greedy_sent_s = 0, greedy_mfu = 0, beam_sent_s = 0, beam_single_sent_s = 0;
  int64_t greedy_steps = 0;  // decoder steps each greedy search ran
  double roof = 0, roof_mean = 0;  // matmul GFLOP/s sampled during this row: best (the MFU denominator), mean
  double beam_mfu = 0, beam_single_mfu = 0;  // FLOPs of the rows each search advanced, over time and roofline
  double rss_after_train_mb = 0;  // process peak RSS once this type's training steps are done
  // data-parallel runs
  double allreduce_step_ms = 0;   // inside the training step (includes waiting for the slowest rank)
  double allreduce_alone_ms = 0;  // back-to-back all-reduces of the same buckets, ranks in step
  double gradient_mb = 0;
  // What a GPU would be asked to do (common/dispatch_count.h): ATen operations dispatched and host reads, per
  // training step (and per target position of it), per greedy and per beam decoder step.
  DispatchCount train_step_count;
  std::map<std::string, int64_t> train_step_ops;  // by name, with --op-names
  std::map<std::string, double> greedy_step_ops;  // by name per greedy step, with --op-names
  double ops_per_target_position = 0, ops_per_greedy_step = 0, ops_per_beam_step = 0;
  double reads_per_greedy_step = 0, reads_per_beam_step = 0;
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

// The benchmark's rows: the attention types over the RNN encoder-decoder, then the self-attention encoder-decoder
// ("self_attention": 3 layers a side, 8 heads, scaled dot-product cross-attention with 8 heads).
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
}  // namespace

Command setup_bench(CLI::App& parent, const GlobalOptions& g) {
  struct Options {
    std::string config;            // optional JSON config for the model section
    std::string attention = "all"; // which attention types
    int steps = 20;                // timed training steps per type
    int batch = 64;                // sentences per batch
    int vocab = 8000;              // source and target vocabulary
    int min_len = 20, max_len = 30;  // synthetic sentence lengths
    bool input_feeding = false;    // luong/scaled_dot with input feeding
    bool json = false;             // JSON output
    int nproc = 1;                 // data-parallel workers (training only)
    bool op_names = false;         // --json: which operations one training step and one greedy step dispatch
  };
  auto opt = std::make_shared<Options>();
  auto* app = parent.add_subcommand("bench", "Measure training/decoding throughput against this machine's matmul rate");
  app->add_option("--config,-c", opt->config, "Config whose model section is benchmarked (default: the benchmark model)");
  app->add_option("--attention", opt->attention,
                  "all | none | bahdanau | luong_dot | luong_general | luong_concat | scaled_dot | self_attention")
      ->capture_default_str();
  app->add_option("--steps", opt->steps, "Timed training steps per attention type")->capture_default_str()->check(CLI::Range(1, 100000));
  app->add_option("--batch", opt->batch, "Sentences per batch")->capture_default_str()->check(CLI::Range(1, 4096));
  app->add_option("--vocab", opt->vocab, "Source/target vocabulary size")->capture_default_str()->check(CLI::Range(8, 1000000));
  app->add_flag("--input-feeding", opt->input_feeding, "Benchmark luong/scaled_dot with input feeding");
  app->add_flag("--json", opt->json, "Print JSON");
  app->add_flag("--op-names", opt->op_names, "With --json: the operations one training step and one greedy step dispatch, by name");
  app->add_option("--nproc", opt->nproc, "Measure data-parallel training in N local processes (training only)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  return {app, [opt, &g]() -> int {
            ModelConfig base;
            base.rnn = RnnCell::kGru;
            base.embed_dim = 256;
            base.hidden_dim = 512;
            base.bidirectional = true;
            base.dropout = 0.0;
            if (!opt->config.empty()) base = load_config(opt->config, {}).model;
            DistSpec spec = dist_spec_from_env();
            torch::Device dev = resolve_device(g.device.empty() ? "cpu" : g.device);
            if (wants_local_launch(opt->nproc, spec)) {
              variants(opt->attention);  // bad input fails here, once
              return launch_local_workers(opt->nproc, dev);
            }
            std::unique_ptr<Distributed> dist;
            if (spec.world > 1) {
              dev = rank_device(spec, dev);  // one device per rank
              dist = std::make_unique<Distributed>(spec, dev, std::chrono::minutes(10));
            }
            const bool main_rank = !dist || dist->is_main();
            const double roof_blas = matmul_gflops(dev), roof_packed = packed_matmul_gflops(dev);
            double roof = std::max(roof_blas, roof_packed);
            if (dist) {  // the ranks measure at the same time; the machine's roofline is their sum
              torch::Tensor t = torch::tensor({roof}, torch::kDouble);
              dist->allreduce_sum_(t);
              roof = host_scalar<double>(t);
            }
            spdlog::info("matmul 1024^3 float32: {:.1f} GFLOP/s (best of 20{}; BLAS {:.1f}, packed kernel {:.1f})", roof,
                         dist ? ", summed over the ranks" : "", roof_blas, roof_packed);
            // The output layer's product for the rows of one beam-5 sentence and of 16 such sentences, next to
            // each other: how much of the machine five rows already use bounds what batching beams can gain.
            const double out5 = gemm_gflops(dev, 5, base.hidden_dim, opt->vocab, 50);
            const double out80 = gemm_gflops(dev, 80, base.hidden_dim, opt->vocab, 20);
            spdlog::info("output layer [rows x {}] . [{} x {}]: 5 rows {:.1f} GFLOP/s, 80 rows {:.1f} GFLOP/s", base.hidden_dim,
                         base.hidden_dim, opt->vocab, out5, out80);
            // The same products through the packed weights that decoding uses.
            const double packed5 = packed_gflops(dev, 5, base.hidden_dim, opt->vocab, 50);
            const double packed80 = packed_gflops(dev, 80, base.hidden_dim, opt->vocab, 20);
            if (packed5 > 0)
              spdlog::info("the same with packed weights, as decoding runs it: 5 rows {:.1f} GFLOP/s, 80 rows {:.1f} GFLOP/s", packed5,
                           packed80);
            // Synthetic batch: lengths spread over [min_len, max_len], random ids.
            torch::manual_seed(1);
            std::vector<EncodedPair> data;
            for (int i = 0; i < opt->batch; ++i) {
              int64_t s = opt->min_len + i % (opt->max_len - opt->min_len + 1);
              int64_t t = opt->min_len + (i * 7) % (opt->max_len - opt->min_len + 1);
              auto rs = torch::randint(4, opt->vocab, {s}, torch::kLong), rt = torch::randint(4, opt->vocab, {t}, torch::kLong);
              data.push_back({cpu_vector<int64_t>(rs), cpu_vector<int64_t>(rt)});
            }
            std::vector<std::vector<int64_t>> srcs;
            for (const auto& d : data) srcs.push_back(d.src);
            std::vector<int64_t> all(data.size());
            std::iota(all.begin(), all.end(), 0);
            Batch batch = make_batch(data, all);
            // A data-parallel rank trains on its slice; FLOPs and tokens stay those of the whole batch.
            Batch dbatch = (dist ? make_batch(data, shard_rows(all, dist->rank(), dist->world())) : batch).to(dev);
            const int64_t S = batch.src.size(1), T = batch.tgt_out.size(1);
            std::vector<BenchRow> rows;
            for (auto& [name, att] : variants(opt->attention)) {
              ModelConfig m = base;
              m.attention = att;
              if (name == "self_attention") {
                m.encoder.type = m.decoder.type = LayerType::kSelfAttention;
                m.encoder.heads = m.decoder.heads = 8;
                m.encoder_layers = m.decoder_layers = 3;
              }
              {
                Config check;  // a --config model that the row's heads do not divide: one line, not an abort
                check.model = m;
                validate(check);
              }
              const bool rnn_decoder = m.decoder.type == LayerType::kRnn;
              m.input_feeding = opt->input_feeding && rnn_decoder &&
                                attention_traits(att).after_rnn;
              Seq2Seq model(m, opt->vocab, opt->vocab);
              model->to(dev);
              // The training loop's own Trainer: the timed step is the one users run (Adam 1e-3, clipping at 1,
              // no label smoothing, teacher forcing).
              TrainConfig tc;
              tc.lr = 1e-3;
              tc.clip_norm = 1.0;
              tc.label_smoothing = 0.0;
              tc.teacher_forcing = 1.0;
              TrainOptions topt;
              topt.dist = dist.get();
              Trainer trainer(model, tc, dev, topt);
              BenchRow r;
              r.name = name + (m.input_feeding ? "+feeding" : "");
              RoofSampler sampler(dev);
              r.params = model->parameter_count();
              // FLOPs from the padded batch shape, as configured (padding included, same for every type).
              FlopCount fc = count_flops(m, opt->vocab, batch.src.size(0), S, T);
              r.train_flops_step = fc.train_step();
              // On a GPU a step returns before its work is done (the loss stays there): wait for it, so that the
              // time is the step's.
              auto train_step = [&]() {
                trainer.step(&dbatch, batch.tgt_tokens);
                if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
              };
              // Warm-up: a process's first steps run slower than the rest, the fourth among them here (by 40-70 ms
              // with training's products on the packed kernel, the third with OpenBLAS's), so five steps before timing.
              for (int i = 0; i < 5; ++i) train_step();
              const CommStats before = dist ? dist->stats() : CommStats{};
              double dt = 0;
              for (int i = 0; i < opt->steps; ++i) {
                double t0 = monotonic_s();
                train_step();
                dt += monotonic_s() - t0;
                if (!dist) sampler.sample();
              }
              r.train_step_count = counted(train_step);
              if (opt->op_names) {
                DispatchCounter by_name(/*by_name=*/true);
                train_step();
                r.train_step_ops = by_name.by_name();
              }
              r.ops_per_target_position = static_cast<double>(r.train_step_count.dispatched_ops) / static_cast<double>(T);
              r.train_tok_s = static_cast<double>(batch.tgt_tokens) * opt->steps / dt;
              r.train_gflops = r.train_flops_step * opt->steps / dt / 1e9;
              r.rss_after_train_mb = peak_rss_mb();
              if (dist) {
                r.roof = roof;
                r.train_mfu = r.train_gflops / r.roof;
                const CommStats& after = dist->stats();
                r.allreduce_step_ms = 1e3 * (after.gradient_seconds - before.gradient_seconds) /
                                      static_cast<double>(after.gradient_allreduces - before.gradient_allreduces);
                r.gradient_mb = static_cast<double>(after.gradient_bytes) / 1e6;
                dist->barrier();
                const CommStats alone = dist->stats();
                const int reps = 10;
                for (int i = 0; i < reps; ++i) dist->allreduce_gradients();
                r.allreduce_alone_ms = 1e3 * (dist->stats().gradient_seconds - alone.gradient_seconds) / reps;
                spdlog::info("{}: {:.0f} target tok/s over {} ranks, gradient all-reduce {:.1f} ms in the step, {:.1f} ms alone ({:.1f} MB)",
                             name, r.train_tok_s, dist->world(), r.allreduce_step_ms, r.allreduce_alone_ms, r.gradient_mb);
                rows.push_back(r);
                continue;  // decoding is not data-parallel
              }
              // Decoding: 30 steps of batched greedy (a fixed length so that every type does the same work).
              model->eval();
              {
                Batch src_only = make_src_batch(srcs, all);
                SearchOptions gs;
                // The batch runs max over rows of (ratio * src_len + 10) steps: 20 + 10 = 30 for the longest (S)
                // source, as many as the Python peer's greedy runs (its per-sentence rate compares directly).
                gs.max_len_ratio = 20.5 / static_cast<double>(std::max<int64_t>(1, S));
                gs.stop_at_eos = false;  // every row runs to the limit: the work is known exactly
                greedy_search(model, src_only, gs, dev);  // warm-up
                const int reps = 3;
                double gdt = 0;
                for (int i = 0; i < reps; ++i) {
                  double g0 = monotonic_s();
                  greedy_search(model, src_only, gs, dev);
                  gdt += monotonic_s() - g0;
                  sampler.sample();
                }
                gdt /= reps;
                r.greedy_sent_s = static_cast<double>(opt->batch) / gdt;
                // FLOPs of the steps run: the batch advances max over rows of (ratio * src_len + 10) steps.
                int64_t steps = 0;
                for (const auto& sv : srcs)
                  steps = std::max<int64_t>(steps, static_cast<int64_t>(std::floor(gs.max_len_ratio * static_cast<double>(sv.size()))) + 10);
                r.greedy_steps = steps;
                const double greedy_flops = count_flops(m, opt->vocab, opt->batch, S, steps).forward();
                SearchOptions bs;
                bs.beam_size = 5;
                bs.max_len_ratio = 20.0 / static_cast<double>(std::max<int64_t>(1, opt->min_len));  // >= 30 steps per sentence
                const int nb = std::min(16, opt->batch);
                std::vector<int64_t> first(all.begin(), all.begin() + nb);
                Batch sub = make_src_batch(srcs, first);
                // Beam FLOPs: encoder and keys once per sentence, then decoder step and output layer per row
                // advanced (finished sentences leave the batch, so the rows are counted as the search ran them).
                auto beam_flops = [&](const Batch& b, const SearchStats& st) {
                  const int64_t Sb = b.src.size(1);
                  FlopCount per_row = count_flops(m, opt->vocab, 1, Sb, 1);
                  return count_flops(m, opt->vocab, b.src.size(0), Sb, 0).forward() +
                         static_cast<double>(st.row_steps) * (per_row.decoder + per_row.output);
                };
                // Batched and one-at-a-time beam alternate (two rounds), so that both see the same machine.
                const int single = std::min(4, nb), rounds = 2;
                double bdt = 0, sdt = 0, batched_flops = 0, single_flops = 0;
                auto timed_beam = [&](const Batch& b, double& seconds, double& flops) {
                  SearchStats st;
                  double t0 = monotonic_s();
                  beam_search(model, b, bs, dev, &st);
                  seconds += monotonic_s() - t0;
                  flops += beam_flops(b, st);
                };
                for (int round = 0; round < rounds; ++round) {
                  timed_beam(sub, bdt, batched_flops);
                  sampler.sample();
                  for (int i = 0; i < single; ++i) timed_beam(make_src_batch(srcs, {first[static_cast<size_t>(i)]}), sdt, single_flops);
                  sampler.sample();
                }
                // Dispatch counts per decoder step: greedy over 30 and 10 steps, beam over two length limits.
                {
                  SearchOptions g = gs;
                  const PerStep greedy = per_decoder_step([&](bool longer) {
                    g.max_len_ratio = longer ? gs.max_len_ratio : 0.0;  // every row to its limit: r.greedy_steps or 10 steps
                    greedy_search(model, src_only, g, dev);
                    return longer ? r.greedy_steps : int64_t{10};
                  });
                  r.ops_per_greedy_step = greedy.ops;
                  r.reads_per_greedy_step = greedy.reads;
                  if (opt->op_names) {  // the same difference of two searches, by operation
                    auto names = [&](bool longer) {
                      DispatchCounter by_name(/*by_name=*/true);
                      g.max_len_ratio = longer ? gs.max_len_ratio : 0.0;
                      greedy_search(model, src_only, g, dev);
                      return by_name.by_name();
                    };
                    const auto longer = names(true), shorter = names(false);
                    const double n = static_cast<double>(r.greedy_steps - 10);
                    for (const auto& [op, count] : longer) {
                      const auto it = shorter.find(op);
                      const double d = static_cast<double>(count - (it == shorter.end() ? 0 : it->second)) / n;
                      if (n > 0 && d != 0) r.greedy_step_ops[op] = d;
                    }
                  }
                  SearchOptions b = bs;
                  const PerStep beam = per_decoder_step([&](bool longer) {
                    b.max_len_ratio = longer ? 1.0 : 0.0;  // len + 10 or 10 steps at most
                    SearchStats st;
                    beam_search(model, sub, b, dev, &st);
                    return st.steps;
                  });
                  r.ops_per_beam_step = beam.ops;
                  r.reads_per_beam_step = beam.reads;
                }
                r.beam_sent_s = nb * rounds / bdt;
                r.beam_single_sent_s = single * rounds / sdt;
                r.roof = sampler.best_gflops();
                r.roof_mean = sampler.mean_gflops();
                r.train_mfu = r.train_gflops / r.roof;
                r.greedy_mfu = greedy_flops / gdt / 1e9 / r.roof;
                r.beam_mfu = batched_flops / bdt / 1e9 / r.roof;
                r.beam_single_mfu = single_flops / sdt / 1e9 / r.roof;
              }
              spdlog::info("{}: {:.0f} target tok/s, {:.1f} GFLOP/s ({:.0f}% of matmul), greedy {:.1f} sent/s, beam5 {:.2f} vs {:.2f} sent/s",
                           r.name, r.train_tok_s, r.train_gflops, 100 * r.train_mfu, r.greedy_sent_s, r.beam_sent_s,
                           r.beam_single_sent_s);
              rows.push_back(r);
            }
            const double rss = peak_rss_mb();
            if (!main_rank) return 0;
            // The CPU's theoretical peak with its factors, and how much of it the measured roofline reaches.
            const CpuPeak peak = cpu_peak();
            const nlohmann::json peak_json = {{"gflops", peak.gflops}, {"cores", peak.cores}, {"lanes", peak.lanes},
                                              {"fma_units", peak.fma_units}, {"clock_ghz", peak.clock_ghz},
                                              {"derivation", peak.derivation},
                                              {"roofline_share", peak.gflops > 0 ? roof / peak.gflops : 0.0}};
            if (dist) {
              nlohmann::json j = {{"matmul_gflops", roof}, {"cpu_peak", peak_json}, {"blas", blas_info()}, {"world_size", dist->world()},
                                  {"backend", dist->backend()}, {"batch", opt->batch}, {"steps", opt->steps},
                                  {"peak_rss_mb_rank0", rss}, {"rows", nlohmann::json::array()}};
              for (const auto& r : rows)
                j["rows"].push_back({{"attention", r.name}, {"train_tokens_per_s", r.train_tok_s}, {"train_mfu", r.train_mfu},
                                     {"allreduce_ms_in_step", r.allreduce_step_ms}, {"allreduce_ms_alone", r.allreduce_alone_ms},
                                     {"gradient_mb", r.gradient_mb}});
              if (opt->json) {
                std::cout << j.dump(2) << "\n";
              } else {
                std::printf("data-parallel: %d ranks (%s), batch %d in all\n", dist->world(), dist->backend().c_str(), opt->batch);
                std::printf("%-18s %11s %6s %14s %14s %9s\n", "attention", "train tok/s", "MFU", "allreduce/step", "allreduce alone", "grad MB");
                for (const auto& r : rows)
                  std::printf("%-18s %11.0f %5.0f%% %11.1f ms %12.1f ms %9.1f\n", r.name.c_str(), r.train_tok_s, 100 * r.train_mfu,
                              r.allreduce_step_ms, r.allreduce_alone_ms, r.gradient_mb);
              }
              return 0;
            }
            if (opt->json) {
              nlohmann::json j = {{"matmul_gflops", roof}, {"matmul_gflops_blas", roof_blas}, {"matmul_gflops_packed", roof_packed},
                                  {"kernels", kernel_mode_name(kernel_mode())}, {"kernel_choice", kernel_choice()}, {"training_products", product_kernel_choice()}, {"cpu_peak", peak_json}, {"output_layer_gflops_5_rows", out5}, {"output_layer_gflops_80_rows", out80},
                                 {"output_layer_packed_gflops_5_rows", packed5}, {"output_layer_packed_gflops_80_rows", packed80},
                                  {"blas", blas_info()}, {"blas_kernel", blas_kernel()}, {"blas_kernel_choice", blas_kernel_choice()}, {"peak_rss_mb", rss}, {"batch", opt->batch}, {"vocab", opt->vocab},
                                  {"src_len", S}, {"tgt_len", T}, {"steps", opt->steps}, {"rows", nlohmann::json::array()},
                                  {"device", dev.str()}, {"libtorch", build_description()}};
              // --precision, and whether float32 products and cuDNN may run as TF32 on CUDA (common/precision.h).
              const PrecisionState ps = precision_state();
              j["precision"] = ps.precision;
              j["cuda_tf32"] = ps.cuda_tf32;
              j["cudnn_tf32"] = ps.cudnn_tf32;
              for (const auto& r : rows)
                j["rows"].push_back({{"attention", r.name}, {"parameters", r.params}, {"train_tokens_per_s", r.train_tok_s},
                                     {"train_flops_per_step", r.train_flops_step}, {"train_gflops", r.train_gflops},
                                     {"train_mfu", r.train_mfu}, {"greedy_sentences_per_s", r.greedy_sent_s},
                                     {"greedy_steps", r.greedy_steps},
                                     {"greedy_mfu", r.greedy_mfu}, {"beam5_batched_sentences_per_s", r.beam_sent_s},
                                     {"beam5_single_sentences_per_s", r.beam_single_sent_s},
                                     {"matmul_gflops", r.roof}, {"matmul_gflops_mean", r.roof_mean}, {"beam5_batched_mfu", r.beam_mfu}, {"beam5_single_mfu", r.beam_single_mfu},
                                     {"beam5_batched_speedup", r.beam_single_sent_s > 0 ? r.beam_sent_s / r.beam_single_sent_s : 0.0},
                                     {"peak_rss_mb_after_training", r.rss_after_train_mb},
                                     {"dispatched_ops", {{"per_training_step", r.train_step_count.dispatched_ops},
                                                         {"per_target_position", r.ops_per_target_position},
                                                         {"per_greedy_step", r.ops_per_greedy_step},
                                                         {"per_beam_step", r.ops_per_beam_step}}},
                                     {"training_step_ops_by_name", r.train_step_ops},
                                     {"greedy_step_ops_by_name", r.greedy_step_ops},
                                     {"host_reads", {{"per_training_step", r.train_step_count.host_reads},
                                                     {"per_greedy_step", r.reads_per_greedy_step},
                                                     {"per_beam_step", r.reads_per_beam_step}}}});
              std::cout << j.dump(2) << "\n";
            } else {
              std::printf("BLAS: %s\n", blas_info().c_str());
              std::printf("BLAS kernel: %s\n", blas_kernel_choice().c_str());
              std::printf("kernels: %s\n", kernel_choice().c_str());
              std::printf("precision: %s\n", precision_state().precision.c_str());
              std::printf("CPU peak: %s\n", peak.derivation.c_str());
              std::printf("matmul 1024^3 float32: %.1f GFLOP/s; peak RSS %.0f MB; batch %d, vocab %d, src %lld / tgt %lld tokens (padded)\n",
                          roof, rss, opt->batch, opt->vocab, static_cast<long long>(S), static_cast<long long>(T));
              std::printf("%-18s %10s %6s %10s %8s %6s %10s %6s %10s %6s %10s %6s %6s\n", "attention", "params", "roof", "train tok/s", "GFLOP/s",
                          "MFU", "greedy s/s", "MFU", "beam5 s/s", "MFU", "beam5x1", "MFU", "ratio");
              for (const auto& r : rows)
                std::printf("%-18s %10lld %6.1f %10.0f %8.1f %5.0f%% %10.1f %5.0f%% %10.2f %5.0f%% %10.2f %5.0f%% %6.1f\n", r.name.c_str(),
                            static_cast<long long>(r.params), r.roof, r.train_tok_s, r.train_gflops, 100 * r.train_mfu, r.greedy_sent_s,
                            100 * r.greedy_mfu, r.beam_sent_s, 100 * r.beam_mfu, r.beam_single_sent_s, 100 * r.beam_single_mfu,
                            r.beam_single_sent_s > 0 ? r.beam_sent_s / r.beam_single_sent_s : 0.0);
            }
            return 0;
          }};
}

}  // namespace attnmt::cli
