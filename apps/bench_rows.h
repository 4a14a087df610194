// attnmt bench's measurements (apps/cmd_bench.cpp wires the options and prints): the machine's matmul rate, the
// synthetic batch, and one row per model: training and decoding throughput, MFU, dispatched operations, host reads.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/config.h"
#include "common/dispatch_count.h"
#include "data/batcher.h"
#include "train/distributed.h"

namespace attnmt::cli {

struct BenchOptions {
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
  // On a CUDA device, the kernels it ran (count_cuda_kernels): a training step, and per greedy step; -1 elsewhere.
  int64_t cuda_kernels_per_training_step = -1;
  double cuda_kernels_per_greedy_step = -1;
  // Where greedy search records its decoder step as a CUDA graph (SearchOptions::cuda_graph): the same search with
  // every operation launched on its own, for comparison; -1 where the graph is not used.
  bool greedy_cuda_graph = false;
  double greedy_eager_sent_s = -1, ops_per_greedy_step_eager = -1, cuda_kernels_per_greedy_step_eager = -1;
};

// The machine's float32 matmul rate (best of 20 1024^3 products; summed over the ranks of a data-parallel run) and the
// output layer's product at 5 and 80 rows, through the BLAS and through the packed weights decoding uses.
struct Roofline {
  double blas = 0, packed = 0, best = 0;
  double out5 = 0, out80 = 0, packed5 = 0, packed80 = 0;
};

// The synthetic batch every row trains and decodes: lengths spread over [min_len, max_len], random ids. A data-parallel
// rank trains on its slice (dbatch); FLOPs and tokens stay those of the whole batch.
struct BenchData {
  std::vector<EncodedPair> data;
  std::vector<std::vector<int64_t>> srcs;
  std::vector<int64_t> all;  // 0 .. batch-1
  Batch batch, dbatch;
  int64_t S = 0, T = 0;      // padded source and target lengths
};

// The benchmark's rows: the attention types over the RNN encoder-decoder, then the self-attention encoder-decoder
// ("self_attention": 3 layers a side, 8 heads, scaled dot-product cross-attention with 8 heads). UsageError for an
// unknown name.
std::vector<std::pair<std::string, AttentionConfig>> variants(const std::string& which);
// The benchmark model (GRU, embeddings 256, width 512, bidirectional, no dropout) or --config's model section.
ModelConfig bench_base_model(const BenchOptions& o);
Roofline measure_roofline(const torch::Device& dev, const ModelConfig& base, const BenchOptions& o, Distributed* dist);
BenchData bench_data(const BenchOptions& o, Distributed* dist, const torch::Device& dev);
// One row: the variant's model trained o.steps timed steps with the training loop's own Trainer, then (unless
// data-parallel) batched greedy, batched and one-at-a-time beam 5, and the dispatch counts of each.
BenchRow measure_row(const std::string& name, const AttentionConfig& att, const ModelConfig& base, const BenchData& d,
                     const BenchOptions& o, const torch::Device& dev, Distributed* dist, double roof);

}  // namespace attnmt::cli
