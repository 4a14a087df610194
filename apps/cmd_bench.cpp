// attnmt bench [--config FILE] [--attention TYPE|all] [--steps N] [--json] [--nproc N]
// Measures, in one process: the float32 matmul rate (the roofline), training throughput and MFU,
// decoding throughput (batched greedy, batched beam 5, beam 5 one sentence at a time), peak memory.
// With --nproc N (or WORLD_SIZE): data-parallel training throughput only, each rank on its slice of the
// batch, with the time spent in the gradient all-reduce (inside the step, and alone). The measurements are
// apps/bench_rows.cpp; this file wires the options and prints.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "bench_rows.h"
#include "commands.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "kernels/mode.h"
#include "kernels/packed_product.h"
#include "train/distributed.h"
#include "train/launcher.h"

namespace attnmt::cli {

namespace {

// The CPU's theoretical peak with its factors, and how much of it the measured roofline reaches.
nlohmann::json cpu_peak_json(const CpuPeak& peak, double roof) {
  return {{"gflops", peak.gflops}, {"cores", peak.cores}, {"lanes", peak.lanes}, {"fma_units", peak.fma_units},
          {"clock_ghz", peak.clock_ghz}, {"derivation", peak.derivation},
          {"roofline_share", peak.gflops > 0 ? roof / peak.gflops : 0.0}};
}

void print_distributed(const std::vector<BenchRow>& rows, const Roofline& roof, double rss, const BenchOptions& o,
                       Distributed& dist) {
  const nlohmann::json peak_json = cpu_peak_json(cpu_peak(), roof.best);
  nlohmann::json j = {{"matmul_gflops", roof.best}, {"cpu_peak", peak_json}, {"blas", blas_info()}, {"world_size", dist.world()},
                      {"backend", dist.backend()}, {"batch", o.batch}, {"steps", o.steps},
                      {"peak_rss_mb_rank0", rss}, {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["rows"].push_back({{"attention", r.name}, {"train_tokens_per_s", r.train_tok_s}, {"train_mfu", r.train_mfu},
                         {"allreduce_ms_in_step", r.allreduce_step_ms}, {"allreduce_ms_alone", r.allreduce_alone_ms},
                         {"gradient_mb", r.gradient_mb}});
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("data-parallel: %d ranks (%s), batch %d in all\n", dist.world(), dist.backend().c_str(), o.batch);
    std::printf("%-18s %11s %6s %14s %14s %9s\n", "attention", "train tok/s", "MFU", "allreduce/step", "allreduce alone", "grad MB");
    for (const auto& r : rows)
      std::printf("%-18s %11.0f %5.0f%% %11.1f ms %12.1f ms %9.1f\n", r.name.c_str(), r.train_tok_s, 100 * r.train_mfu,
                  r.allreduce_step_ms, r.allreduce_alone_ms, r.gradient_mb);
  }
}

void print_single(const std::vector<BenchRow>& rows, const Roofline& roof, double rss, const BenchOptions& o,
                  const BenchData& d, const torch::Device& dev) {
  const CpuPeak peak = cpu_peak();
  const nlohmann::json peak_json = cpu_peak_json(peak, roof.best);
  if (o.json) {
    nlohmann::json j = {{"matmul_gflops", roof.best}, {"matmul_gflops_blas", roof.blas}, {"matmul_gflops_packed", roof.packed},
                        {"kernels", kernel_mode_name(kernel_mode())}, {"kernel_choice", kernel_choice()}, {"training_products", product_kernel_choice()}, {"cpu_peak", peak_json}, {"output_layer_gflops_5_rows", roof.out5}, {"output_layer_gflops_80_rows", roof.out80},
                       {"output_layer_packed_gflops_5_rows", roof.packed5}, {"output_layer_packed_gflops_80_rows", roof.packed80},
                        {"blas", blas_info()}, {"blas_kernel", blas_kernel()}, {"blas_kernel_choice", blas_kernel_choice()}, {"peak_rss_mb", rss}, {"batch", o.batch}, {"vocab", o.vocab},
                        {"src_len", d.S}, {"tgt_len", d.T}, {"steps", o.steps}, {"rows", nlohmann::json::array()},
                        {"device", dev.str()}, {"libtorch", build_description()}};
    // --precision, and whether float32 products and cuDNN may run as TF32 on CUDA (common/precision.h).
    const PrecisionState ps = precision_state();
    j["precision"] = ps.precision;
    j["cuda_tf32"] = ps.cuda_tf32;
    j["cudnn_tf32"] = ps.cudnn_tf32;
    for (const auto& r : rows) {
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
      if (r.cuda_kernels_per_training_step >= 0)  // on a CUDA device only
        j["rows"].back()["cuda_kernels"] = {
            {"per_training_step", r.cuda_kernels_per_training_step},
            {"per_target_position", static_cast<double>(r.cuda_kernels_per_training_step) / static_cast<double>(d.T)},
            {"per_greedy_step", r.cuda_kernels_per_greedy_step}};
      if (r.greedy_cuda_graph) {  // greedy's decoder step as a CUDA graph, beside the same search without it
        nlohmann::json& row = j["rows"].back();
        row["greedy_cuda_graph"] = true;
        row["greedy_eager_sentences_per_s"] = r.greedy_eager_sent_s;
        row["dispatched_ops"]["per_greedy_step_eager"] = r.ops_per_greedy_step_eager;
        if (row.contains("cuda_kernels")) row["cuda_kernels"]["per_greedy_step_eager"] = r.cuda_kernels_per_greedy_step_eager;
      }
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("BLAS: %s\n", blas_info().c_str());
    std::printf("BLAS kernel: %s\n", blas_kernel_choice().c_str());
    std::printf("kernels: %s\n", kernel_choice().c_str());
    std::printf("precision: %s\n", precision_state().precision.c_str());
    std::printf("CPU peak: %s\n", peak.derivation.c_str());
    std::printf("matmul 1024^3 float32: %.1f GFLOP/s; peak RSS %.0f MB; batch %d, vocab %d, src %lld / tgt %lld tokens (padded)\n",
                roof.best, rss, o.batch, o.vocab, static_cast<long long>(d.S), static_cast<long long>(d.T));
    std::printf("%-18s %10s %6s %10s %8s %6s %10s %6s %10s %6s %10s %6s %6s\n", "attention", "params", "roof", "train tok/s", "GFLOP/s",
                "MFU", "greedy s/s", "MFU", "beam5 s/s", "MFU", "beam5x1", "MFU", "ratio");
    for (const auto& r : rows)
      std::printf("%-18s %10lld %6.1f %10.0f %8.1f %5.0f%% %10.1f %5.0f%% %10.2f %5.0f%% %10.2f %5.0f%% %6.1f\n", r.name.c_str(),
                  static_cast<long long>(r.params), r.roof, r.train_tok_s, r.train_gflops, 100 * r.train_mfu, r.greedy_sent_s,
                  100 * r.greedy_mfu, r.beam_sent_s, 100 * r.beam_mfu, r.beam_single_sent_s, 100 * r.beam_single_mfu,
                  r.beam_single_sent_s > 0 ? r.beam_sent_s / r.beam_single_sent_s : 0.0);
  }
}

int run_bench(const BenchOptions& o, const GlobalOptions& g) {
  const ModelConfig base = bench_base_model(o);
  DistSpec spec = dist_spec_from_env();
  torch::Device dev = resolve_device(g.device.empty() ? "cpu" : g.device);
  if (wants_local_launch(o.nproc, spec)) {
    variants(o.attention);  // bad input fails here, once
    return launch_local_workers(o.nproc, dev);
  }
  std::unique_ptr<Distributed> dist;
  if (spec.world > 1) {
    dev = rank_device(spec, dev);  // one device per rank
    dist = std::make_unique<Distributed>(spec, dev, std::chrono::minutes(10));
  }
  const Roofline roof = measure_roofline(dev, base, o, dist.get());
  const BenchData d = bench_data(o, dist.get(), dev);
  std::vector<BenchRow> rows;
  for (const auto& [name, att] : variants(o.attention))
    rows.push_back(measure_row(name, att, base, d, o, dev, dist.get(), roof.best));
  const double rss = peak_rss_mb();
  if (dist && !dist->is_main()) return 0;
  if (dist) print_distributed(rows, roof, rss, o, *dist);
  else print_single(rows, roof, rss, o, d, dev);
  return 0;
}

}  // namespace

Command setup_bench(CLI::App& parent, const GlobalOptions& g) {
  auto opt = std::make_shared<BenchOptions>();
  BenchOptions& o = *opt;
  auto* app = parent.add_subcommand("bench", "Measure training/decoding throughput against this machine's matmul rate");
  app->add_option("--config,-c", o.config, "Config whose model section is benchmarked (default: the benchmark model)");
  app->add_option("--attention", o.attention,
                  "all | none | bahdanau | luong_dot | luong_general | luong_concat | scaled_dot | self_attention")
      ->capture_default_str();
  app->add_option("--steps", o.steps, "Timed training steps per attention type")->capture_default_str()->check(CLI::Range(1, 100000));
  app->add_option("--batch", o.batch, "Sentences per batch")->capture_default_str()->check(CLI::Range(1, 4096));
  app->add_option("--vocab", o.vocab, "Source/target vocabulary size")->capture_default_str()->check(CLI::Range(8, 1000000));
  app->add_flag("--input-feeding", o.input_feeding, "Benchmark luong/scaled_dot with input feeding");
  app->add_flag("--json", o.json, "Print JSON");
  app->add_flag("--op-names", o.op_names, "With --json: the operations one training step and one greedy step dispatch, by name");
  app->add_option("--nproc", o.nproc, "Measure data-parallel training in N local processes (training only)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  return {app, [opt, &g]() -> int { return run_bench(*opt, g); }};
}

}  // namespace attnmt::cli
