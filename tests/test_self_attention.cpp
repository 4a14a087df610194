// Self-attention encoder and decoder (model/self_attention.h): the masks, the positions, incremental decoding,
// training, checkpoints and the config keys.
#include <gtest/gtest.h>

#include <cmath>

#include "common/config.h"
#include "common/errors.h"
#include "data/vocab.h"
#include "run/loaded_run.h"
#include "run/run_dir.h"
#include "translate/search.h"
#include "kernels/mode.h"
#include "model/checkpoint.h"
#include "model/flops.h"
#include "model/seq2seq.h"
#include "support.h"
#include "train/trainer.h"

using namespace attnmt;

namespace {

// A tiny self-attention model: E=8, H=12 (a projection between them), two layers each side.
ModelConfig tiny_sa(LayerType enc = LayerType::kSelfAttention, LayerType dec = LayerType::kSelfAttention) {
  ModelConfig m;
  m.embed_dim = 8;
  m.hidden_dim = 12;
  m.dropout = 0.0;
  m.encoder_layers = 2;
  m.decoder_layers = 2;
  m.encoder.type = enc;
  m.decoder.type = dec;
  if (enc == LayerType::kSelfAttention) m.encoder.heads = 2;
  if (dec == LayerType::kSelfAttention) m.decoder.heads = 3;
  m.attention.type = AttentionType::kScaledDot;
  m.attention.heads = 2;
  return m;
}

struct Sentences {
  torch::Tensor src, len, mask, tgt_in;
};

// Three sentences of lengths 5, 3, 4 (plus extra padding columns) and targets of 6 tokens, vocabulary 20.
Sentences sentences(int64_t extra_pad = 0) {
  torch::manual_seed(3);
  const std::vector<int64_t> lens = {5, 3, 4};
  auto src = torch::full({3, 5 + extra_pad}, Vocab::kPad, torch::kLong);
  for (int b = 0; b < 3; ++b) src[b].slice(0, 0, lens[static_cast<size_t>(b)]) = torch::randint(4, 20, {lens[static_cast<size_t>(b)]}, torch::kLong);
  auto tgt = torch::randint(4, 20, {3, 5}, torch::kLong);
  return {src, torch::tensor(lens, torch::kLong), src.ne(Vocab::kPad),
          torch::cat({torch::full({3, 1}, Vocab::kBos, torch::kLong), tgt}, 1)};
}

}  // namespace

TEST(SelfAttention, SinusoidalPositionsFollowTheFormula) {
  const torch::Tensor pe = sinusoidal_positions(0, 7, 8, torch::TensorOptions().dtype(torch::kDouble));
  ASSERT_EQ(pe.sizes(), (std::vector<int64_t>{7, 8}));
  for (int64_t p = 0; p < 7; ++p)
    for (int64_t i = 0; i < 4; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(i) / 8.0);
      EXPECT_NEAR(pe[p][2 * i].item<double>(), std::sin(angle), 1e-12);
      EXPECT_NEAR(pe[p][2 * i + 1].item<double>(), std::cos(angle), 1e-12);
    }
  // An offset is the same table further down: what incremental decoding relies on.
  EXPECT_TRUE(torch::equal(sinusoidal_positions(4, 3, 8, pe.options()), pe.slice(0, 4, 7)));
  const torch::Tensor c = causal_mask(2, 4, 1, torch::kCPU);  // queries at positions 1, 2 over keys 0..3
  EXPECT_TRUE(torch::equal(c, torch::tensor({1, 1, 0, 0, 1, 1, 1, 0}, torch::kBool).view({2, 4})));
}

// Row-stochastic weights with exactly 0 on padded source keys (encoder, cross-attention) and above the diagonal
// (decoder self-attention).
TEST(SelfAttention, WeightsAreRowStochasticZeroOnPaddingAndAboveTheDiagonal) {
  const Sentences s = sentences(2);
  torch::manual_seed(0);
  Seq2Seq model(tiny_sa(), 20, 20);
  model->eval();
  torch::NoGradGuard ng;
  EncoderOutput enc = model->encode(s.src, s.len, s.mask);
  ASSERT_EQ(enc.self_weights.size(), 2u);
  for (const torch::Tensor& w : enc.self_weights) {
    ASSERT_EQ(w.sizes(), (std::vector<int64_t>{3, 2, 7, 7}));
    EXPECT_TRUE(torch::allclose(w.sum(-1), torch::ones({3, 2, 7}), 1e-5, 1e-5));
    EXPECT_EQ(w[1].slice(-1, 3, 7).abs().max().item<float>(), 0.0f);  // sentence 2: 3 tokens, then padding
    EXPECT_GT(w[1].slice(-1, 0, 3).min().item<float>(), 0.0f);
  }
  const DecoderOutput d = model->decoder->forward(s.tgt_in, model->decoder->init_state(enc), model->decoder->prepare(enc));
  ASSERT_EQ(d.self_weights.size(), 2u);
  const torch::Tensor above = torch::ones({6, 6}, torch::kBool).triu(1);
  for (const torch::Tensor& w : d.self_weights) {
    ASSERT_EQ(w.sizes(), (std::vector<int64_t>{3, 3, 6, 6}));
    EXPECT_TRUE(torch::allclose(w.sum(-1), torch::ones({3, 3, 6}), 1e-5, 1e-5));
    EXPECT_EQ(w.masked_select(above).abs().max().item<float>(), 0.0f);
    EXPECT_GT(w.masked_select(above.logical_not()).min().item<float>(), 0.0f);
  }
  ASSERT_EQ(d.weights.sizes(), (std::vector<int64_t>{3, 6, 7}));  // cross-attention, last layer
  EXPECT_TRUE(torch::allclose(d.weights.sum(-1), torch::ones({3, 6}), 1e-5, 1e-5));
  EXPECT_EQ(d.weights[1].slice(-1, 3, 7).abs().max().item<float>(), 0.0f);
}

// Without positions the encoder cannot tell word order: permuting the input permutes the output (the lesson's
// "dog bites man" = "man bites dog"). With positions it can.
TEST(SelfAttention, PositionFreeEncoderIsPermutationEquivariant) {
  torch::manual_seed(1);
  const torch::Tensor src = torch::randint(4, 20, {1, 6}, torch::kLong), len = torch::tensor({6L}), mask = src.ne(Vocab::kPad);
  const torch::Tensor perm = torch::tensor({3L, 0L, 5L, 1L, 4L, 2L});
  for (Positions p : {Positions::kNone, Positions::kSinusoidal, Positions::kLearned}) {
    ModelConfig m = tiny_sa();
    m.encoder.positions = p;
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    torch::NoGradGuard ng;
    const torch::Tensor a = model->encode(src, len, mask).states;
    const torch::Tensor b = model->encode(src.index_select(1, perm), len, mask).states;
    const double diff = (a.index_select(1, perm) - b).abs().max().item<double>();
    if (p == Positions::kNone)
      EXPECT_LT(diff, 1e-5) << to_string(p);
    else
      EXPECT_GT(diff, 1e-2) << to_string(p);
  }
}

// Incremental decoding (each layer's keys and values of the prefix kept) equals recomputing the whole prefix at
// every step, also after the beams are reordered (the cache's rows selected as beam search does): with the cache's
// first buffers large enough and with buffers that must grow twice on the way, on the CPU kernels' path and on the
// device path without maps (the fused attention where LibTorch has it).
TEST(SelfAttention, IncrementalDecodingEqualsFullRecomputation) {
  const Sentences s = sentences();
  for (KernelMode mode : {KernelMode::kAuto, KernelMode::kReference})
    for (int64_t reserved : {int64_t{0}, int64_t{2}})
      for (Positions p : {Positions::kSinusoidal, Positions::kLearned}) {
        const ScopedKernelMode km(mode);
        const ScopedAttentionMaps maps(mode == KernelMode::kAuto);
        const std::string what = std::string(kernel_mode_name(mode)) + " reserved " + std::to_string(reserved) + " positions " + to_string(p);
        ModelConfig m = tiny_sa(LayerType::kRnn, LayerType::kSelfAttention);  // an RNN encoder with a self-attention decoder
        m.decoder.positions = p;
        torch::manual_seed(0);
        Seq2Seq model(m, 20, 20);
        model->eval();
        torch::NoGradGuard ng;
        EncoderOutput enc = model->encode(s.src, s.len, s.mask);
        AttentionMemory mem = model->decoder->prepare(enc);
        DecoderState state = model->decoder->init_state(enc);
        state.cache.reserved = reserved;
        const torch::Tensor reorder = torch::tensor({2L, 0L, 0L});
        torch::Tensor prefix = s.tgt_in;  // rows follow the reordering below
        const int64_t T = prefix.size(1);
        for (int64_t t = 0; t < T; ++t) {
          if (t == 3) {  // beams reordered halfway: rows 2, 0, 0
            state = state.index_select(reorder);
            mem = mem.index_select(reorder);
            prefix = prefix.index_select(0, reorder);
            enc.states = enc.states.index_select(0, reorder);
            enc.mask = enc.mask.index_select(0, reorder);
          }
          const torch::Tensor step = model->decoder->logits(model->decoder->step(prefix.select(1, t), state, mem).readout);
          const torch::Tensor full = model->decode(enc, prefix.slice(1, 0, t + 1)).logits.select(1, t);
          ASSERT_EQ(step.sizes(), full.sizes());
          EXPECT_LT((step - full).abs().max().item<double>(), 1e-5) << "step " << t << ", " << what;
        }
        EXPECT_EQ(state.cache.length, T);
        ASSERT_EQ(state.cache.keys.size(), 2u);
        // Buffers: 16 positions when nothing was reserved; 2, then 4, then 8 when 2 were.
        EXPECT_EQ(state.cache.keys[1].size(2), reserved == 0 ? 16 : 8) << what;
        EXPECT_EQ(state.cache.values[1].size(2), state.cache.keys[1].size(2)) << what;
      }
}

// The fused attention (at::scaled_dot_product_attention, where nobody reads the weights on the device path) computes
// what the explicit one computes, forward and backward, for scaled dot-product (with and without the scale) and Luong's
// dot and general scores, with padding masked; it leaves the weights undefined, which says it ran. On the CPU kernels'
// path the explicit one stays.
TEST(SelfAttention, FusedAttentionEqualsTheExplicitOne) {
  if (!fused_attention_available()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no at::scaled_dot_product_attention (2.1+)";
  const Sentences s = sentences(1);  // lengths 5, 3, 4 in 6 columns: every row has padding
  torch::manual_seed(5);
  const torch::Tensor enc0 = torch::randn({3, 6, 12}), query0 = torch::randn({3, 4, 12}), g = torch::randn({3, 4, 12});
  struct Case {
    std::string name;
    std::shared_ptr<AttentionImpl> attention;
  };
  torch::manual_seed(6);
  const std::vector<Case> cases = {{"scaled_dot, 3 heads", std::make_shared<MultiHeadAttention>(12, 12, 12, 3)},
                                   {"scaled_dot unscaled", std::make_shared<MultiHeadAttention>(12, 12, 12, 3, false)},
                                   {"luong dot", std::make_shared<MultiplicativeAttention>(12, 12, false)},
                                   {"luong general", std::make_shared<MultiplicativeAttention>(12, 12, true)}};
  for (const Case& c : cases) {
    struct Run {
      AttentionOutput out;
      std::vector<torch::Tensor> grads;  // query, encoder states, then the parameters
    };
    auto run = [&](KernelMode mode, bool maps) {
      const ScopedKernelMode km(mode);
      const ScopedAttentionMaps wanted(maps);
      torch::Tensor enc = enc0.clone().requires_grad_(true), query = query0.clone().requires_grad_(true);
      c.attention->zero_grad();
      Run r;
      r.out = c.attention->attend(query, c.attention->prepare(enc, s.mask));
      (r.out.context * g).sum().backward();
      r.grads = {query.grad(), enc.grad()};
      for (const auto& p : c.attention->parameters()) r.grads.push_back(p.grad().clone());
      return r;
    };
    const Run explicit_one = run(KernelMode::kReference, true), fused = run(KernelMode::kReference, false);
    EXPECT_TRUE(explicit_one.out.weights.defined()) << c.name;
    EXPECT_FALSE(fused.out.weights.defined()) << c.name << ": the fused operation did not run";
    EXPECT_TRUE(run(KernelMode::kAuto, false).out.weights.defined() || c.name.rfind("scaled_dot", 0) == 0)
        << c.name << ": the CPU kernels' path keeps the explicit attention";
    ASSERT_EQ(fused.out.context.sizes(), explicit_one.out.context.sizes()) << c.name;
    EXPECT_LT((fused.out.context - explicit_one.out.context).abs().max().item<double>(), 1e-5) << c.name;
    ASSERT_EQ(fused.grads.size(), explicit_one.grads.size()) << c.name;
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      ASSERT_TRUE(fused.grads[i].defined() && explicit_one.grads[i].defined()) << c.name << " gradient " << i;
      EXPECT_LT((fused.grads[i] - explicit_one.grads[i]).abs().max().item<double>(), 1e-5) << c.name << " gradient " << i;
    }
    // Padding takes no part: changing the padded encoder states changes nothing.
    torch::Tensor enc2 = enc0.clone();
    enc2.masked_fill_(s.mask.logical_not().unsqueeze(2), 7.0);
    const ScopedKernelMode km(KernelMode::kReference);
    const ScopedAttentionMaps wanted(false);
    torch::NoGradGuard ng;
    const torch::Tensor a = c.attention->attend(query0, c.attention->prepare(enc0, s.mask)).context;
    const torch::Tensor b = c.attention->attend(query0, c.attention->prepare(enc2, s.mask)).context;
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-6) << c.name;
  }
}

// model.decoder.causal_mask false lets a position see the words after it (the pitfall); with the mask it cannot.
TEST(SelfAttention, WithoutTheCausalMaskAPositionSeesTheFuture) {
  const Sentences s = sentences();
  torch::Tensor changed = s.tgt_in.clone();
  changed.select(1, 4).fill_(7);  // position 4 only
  for (bool causal : {true, false}) {
    ModelConfig m = tiny_sa();
    m.decoder.causal_mask = causal;
    torch::manual_seed(0);
    Seq2Seq model(m, 20, 20);
    model->eval();
    torch::NoGradGuard ng;
    const torch::Tensor a = model->forward(s.src, s.len, s.mask, s.tgt_in).logits, b = model->forward(s.src, s.len, s.mask, changed).logits;
    const double before = (a.slice(1, 0, 4) - b.slice(1, 0, 4)).abs().max().item<double>();
    if (causal)
      EXPECT_EQ(before, 0.0);
    else
      EXPECT_GT(before, 1e-4);
    // Either way, target padding is no key: padded columns change nothing at the real positions.
    const torch::Tensor padded = torch::cat({s.tgt_in, torch::full({3, 3}, Vocab::kPad, torch::kLong)}, 1);
    const torch::Tensor p = model->forward(s.src, s.len, s.mask, padded).logits;
    EXPECT_LT((p.slice(1, 0, 6) - a).abs().max().item<double>(), 1e-5) << "causal " << causal;
  }
}

// Padding columns change nothing, and greedy search equals beam search of width 1, for each pairing of encoder and
// decoder types.
TEST(SelfAttention, EveryPairingIsPaddingInvariantAndSearches) {
  const Sentences a = sentences(0), b = sentences(3);
  for (LayerType enc : {LayerType::kRnn, LayerType::kSelfAttention})
    for (LayerType dec : {LayerType::kRnn, LayerType::kSelfAttention}) {
      ModelConfig m = tiny_sa(enc, dec);
      if (dec == LayerType::kRnn) m.attention.type = AttentionType::kBahdanau, m.attention.heads = 1;
      Config c;
      c.model = m;
      validate(c);
      torch::manual_seed(0);
      Seq2Seq model(m, 20, 20);
      model->eval();
      torch::NoGradGuard ng;
      const std::string name = to_string(enc) + "/" + to_string(dec);
      const torch::Tensor la = model->forward(a.src, a.len, a.mask, a.tgt_in).logits, lb = model->forward(b.src, b.len, b.mask, b.tgt_in).logits;
      EXPECT_TRUE(torch::allclose(la, lb, 1e-5, 1e-5)) << name;
      Batch batch;
      batch.src = a.src;
      batch.src_len = a.len;
      batch.src_mask = a.mask;
      SearchOptions so;
      so.beam_size = 1;
      so.max_len_ratio = 1.0;
      const auto greedy = greedy_search(model, batch, so, torch::kCPU);
      const auto beam = beam_search(model, batch, so, torch::kCPU);
      ASSERT_EQ(greedy.size(), 3u) << name;
      ASSERT_EQ(beam.size(), 3u) << name;
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_FALSE(beam[i].empty()) << name;
        EXPECT_EQ(greedy[i].tokens, beam[i][0].tokens) << name << " sentence " << i;
      }
    }
}

// A tiny self-attention encoder-decoder learns 64 reversed sequences, as the RNN models learn theirs.
TEST(SelfAttention, TinyModelOverfitsSixtyFourPairs) {
  torch::manual_seed(5);
  const int64_t B = 64, S = 6, V = 16;
  auto src = torch::randint(4, V, {B, S}, torch::kLong);
  auto tgt = src.flip({1});
  auto len = torch::full({B}, S, torch::kLong);
  auto tgt_in = torch::cat({torch::full({B, 1}, Vocab::kBos, torch::kLong), tgt.slice(1, 0, S - 1)}, 1);
  ModelConfig m = tiny_sa();
  m.embed_dim = m.hidden_dim = 32;
  m.encoder.heads = m.decoder.heads = 4;
  torch::manual_seed(0);
  Seq2Seq model(m, V, V);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-3));
  double first = 0, loss_v = 0;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    auto logits = model->forward(src, len, src.ne(Vocab::kPad), tgt_in).logits;
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, V}), tgt.reshape(-1));
    loss.backward();
    opt.step();
    loss_v = loss.item<double>();
    if (step == 0) first = loss_v;
  }
  EXPECT_GT(first, 2.0);
  EXPECT_LT(loss_v, 0.05);
}

namespace {
const std::string& sa_corpus() {
  static std::string dir = test::tiny_toy_corpus("sa_corpus", 96, 12, 12, 20);
  return dir;
}
Config sa_config(const std::string& run_dir) {
  Config c = test::tiny_config_for(sa_corpus(), run_dir, "scaled_dot");
  c.model.encoder.type = c.model.decoder.type = LayerType::kSelfAttention;
  c.model.encoder.heads = c.model.decoder.heads = 2;
  c.model.encoder_layers = c.model.decoder_layers = 2;
  c.model.dropout = 0.2;  // dropout draws random numbers: resume must restore the generator
  c.train.batch_size = 16;
  c.train.epochs = 3;
  c.train.valid_every = 4;
  c.train.seed = 7;
  c.eval.batch_size = 16;
  validate(c);
  return c;
}
}  // namespace

// Checkpoints of a self-attention model: resuming gives the straight run's trajectory, the config round-trips with
// its keys, the checkpoint loads only into its own type, and averaging two checkpoints gives their mean.
TEST(SelfAttention, CheckpointsResumeLoadAndAverage) {
  // Resumed at step 6 of 12: the straight run's trajectory.
  const auto t = test::train_straight_and_resumed("sa", [](const std::string& dir) { return sa_config(dir); }, 6, 12);
  test::expect_same_trajectory(t, 3);
  const std::string &straight = t.straight_dir, &split = t.resumed_dir;
  const Config c1 = sa_config(straight);
  // config.json keeps the keys; an RNN config stays as it was written before they existed.
  const nlohmann::json saved = nlohmann::json::parse(test::read_file(straight + "/config.json"));
  EXPECT_EQ(saved["model"]["encoder"]["type"], "self_attention");
  EXPECT_EQ(saved["model"]["decoder"]["type"], "self_attention");
  EXPECT_FALSE(config_to_json(test::tiny_config_for(sa_corpus(), "x", "bahdanau"))["model"].contains("encoder"));
  // Loads into its own type only; averaging two checkpoints gives the mean of their parameters.
  LoadedRun run = load_run(straight, "last");
  EXPECT_NE(run.model->parameter_count(), 0);
  Config other = c1;
  other.model.decoder = StackConfig{};
  Seq2Seq rnn_decoder(other.model, run.model->src_vocab(), run.model->tgt_vocab());
  try {
    load_checkpoint(straight + "/last.pt", rnn_decoder, nullptr);
    ADD_FAILURE() << "a self-attention checkpoint loaded into an RNN decoder";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("self_attention decoder"), std::string::npos) << e.what();
  }
  Seq2Seq a(c1.model, run.model->src_vocab(), run.model->tgt_vocab()), b(c1.model, run.model->src_vocab(), run.model->tgt_vocab()),
      mean(c1.model, run.model->src_vocab(), run.model->tgt_vocab());
  load_checkpoint(straight + "/last.pt", a, nullptr);
  load_checkpoint(split + "/best.pt", b, nullptr);
  average_checkpoints({straight + "/last.pt", split + "/best.pt"}, mean);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pm = mean->named_parameters();
  ASSERT_EQ(pa.size(), pm.size());
  ASSERT_EQ(pb.size(), pm.size());
  ASSERT_GT(pm.size(), 40u);  // two layers each side: attention, norms, feed-forward
  for (const auto& p : pm) EXPECT_TRUE(torch::allclose(p.value(), (pa[p.key()] + pb[p.key()]) / 2, 1e-6, 1e-7)) << p.key();
}

// `attention` draws each self-attention layer (source x source, and target x target with the causal triangle
// empty) beside the cross-attention map, and the gallery offers a choice among them; `evaluate` names the model.
TEST(SelfAttention, AttentionMapsPerLayerAndHead) {
  const std::string run = test::temp_dir("sa_maps_run");
  Config c = sa_config(run);
  c.train.max_steps = 4;
  c.model.decoder.causal_mask = false;  // the pitfall's run: evaluate must say so
  train(c, {}, torch::kCPU);
  const std::string out = test::temp_dir("sa_maps");
  test::CliResult r = test::run_cli("attention --run " + run + " --src " + c.data.test.src + " --ref " + c.data.test.tgt +
                                    " --out " + out + " --limit 2");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* f : {"0001.json", "0001.encoder1.json", "0001.encoder2.svg", "0001.decoder1.json", "0002.decoder2.svg"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(out + "/0001.encoder3.json"));
  const auto cross = nlohmann::json::parse(test::read_file(out + "/0001.json"));
  const auto enc = nlohmann::json::parse(test::read_file(out + "/0001.encoder1.json"));
  ASSERT_EQ(enc["src_tokens"], cross["src_tokens"]);
  ASSERT_EQ(enc["tgt_tokens"], cross["src_tokens"]);
  ASSERT_EQ(enc["heads"].size(), 2u);
  EXPECT_EQ(enc["self_attention"], "encoder layer 1");
  // The decoder's map over its inputs: <bos> and the reference (the last row predicts <eos>). This run has no causal
  // mask, so the upper triangle holds weight; the masked model's test (WeightsAreRowStochastic...) shows it empty.
  const auto dec = nlohmann::json::parse(test::read_file(out + "/0001.decoder1.json"));
  const size_t T = cross["tgt_tokens"].size() + 1;
  ASSERT_EQ(dec["tgt_tokens"].size(), T);
  EXPECT_EQ(dec["tgt_tokens"][0], "<bos>");
  ASSERT_EQ(dec["weights"].size(), T);
  double above = 0;
  for (size_t q = 0; q < T; ++q) {
    ASSERT_EQ(dec["weights"][q].size(), T);
    double sum = 0;
    for (size_t k = 0; k < T; ++k) {
      sum += dec["weights"][q][k].get<double>();
      if (k > q) above += dec["weights"][q][k].get<double>();
    }
    EXPECT_NEAR(sum, 1.0, 1e-4) << "query " << q << " of " << T;  // in a batch with a longer target
  }
  EXPECT_GT(above, 0.0);
  const std::string html = test::read_file(out + "/index.html");
  EXPECT_NE(html.find("<option value=\"decoder layer 2\">"), std::string::npos);
  EXPECT_NE(html.find("2 map(s) of cross-attention"), std::string::npos);
  r = test::run_cli("evaluate --run " + run + " --beam 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("model: self_attention encoder (2 layers, 2 heads, sinusoidal positions), self_attention decoder"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("causal mask OFF"), std::string::npos) << r.output;
  EXPECT_NE(test::read_file(run + "/train.log").find("causal mask OFF"), std::string::npos);
}

// The FLOP count behind the self-attention rows' MFU in `bench`, by hand for a tiny model: E = H = A = 8, F = 16, one
// layer a side, B = 2 sentences of S = 3 source and T = 5 target tokens, V = 10 (1 multiply-add = 2 FLOPs).
TEST(SelfAttention, FlopsCountedByHand) {
  ModelConfig m = tiny_sa();
  m.embed_dim = m.hidden_dim = 8;
  m.encoder_layers = m.decoder_layers = 1;
  m.encoder.ff_dim = m.decoder.ff_dim = 16;
  m.encoder.heads = m.decoder.heads = 2;
  const FlopCount f = count_flops(m, 10, 2, 3, 5);
  // encoder, per source token: Q K V O 4*8*8, scores and context 2*3*8, feed-forward 2*8*16 = 560
  EXPECT_DOUBLE_EQ(f.encoder, 2.0 * 560 * 6);
  EXPECT_DOUBLE_EQ(f.bridge, 0.0);
  EXPECT_DOUBLE_EQ(f.keys, 2.0 * 6 * 2 * 8 * 8);  // cross-attention K and V of the 6 source tokens
  // decoder, per target token: self 4*64 + 2*5*8, cross Q and O 2*8*8 + scores and context 2*3*8, feed-forward 2*8*16
  EXPECT_DOUBLE_EQ(f.decoder, 2.0 * (256 + 80 + 128 + 48 + 256) * 10);
  EXPECT_DOUBLE_EQ(f.output, 2.0 * 8 * 10 * 10);
  // A projection when the embeddings are narrower: E*H per token more on each side.
  m.embed_dim = 4;
  const FlopCount g = count_flops(m, 10, 2, 3, 5);
  EXPECT_DOUBLE_EQ(g.encoder - f.encoder, 2.0 * 4 * 8 * 6);
  EXPECT_DOUBLE_EQ(g.decoder - f.decoder, 2.0 * 4 * 8 * 10);
}

// The stacks are made of EncoderLayer/DecoderLayer modules but keep the parameter names (and their order) that
// checkpoints have carried: an older run's checkpoint loads, and the optimiser's saved state, which follows the order,
// lands on the same parameters.
TEST(SelfAttention, LayersKeepTheCheckpointsParameterNamesAndOrder) {
  ModelConfig m = tiny_sa();
  m.encoder_layers = m.decoder_layers = 1;
  torch::manual_seed(0);
  SelfAttentionEncoder encoder(m);
  SelfAttentionDecoder decoder(m);
  std::vector<std::string> enc, dec;
  for (const auto& p : encoder->named_parameters()) enc.push_back(p.key());
  for (const auto& p : decoder->named_parameters()) dec.push_back(p.key());
  const std::vector<std::string> want_enc = {
      "input.weight", "input.bias", "norms1.0.weight", "norms1.0.bias", "norms2.0.weight", "norms2.0.bias", "ff1.0.weight",
      "ff1.0.bias", "ff2.0.weight", "ff2.0.bias", "self_attn0.wq.weight", "self_attn0.wk.weight", "self_attn0.wv.weight",
      "self_attn0.wo.weight", "final_norm.weight", "final_norm.bias"};
  ASSERT_EQ(enc.size(), want_enc.size());
  EXPECT_EQ(enc, want_enc);
  ASSERT_EQ(dec.size(), 22u);  // input 2, three norms 6, feed-forward 4, self 4, cross 4, final norm 2
  EXPECT_EQ(dec[2], "norms1.0.weight");
  EXPECT_EQ(dec[6], "norms3.0.weight");
  EXPECT_EQ(dec[12], "self_attn0.wq.weight");
  EXPECT_EQ(dec[16], "cross_attn0.wq.weight");
  EXPECT_EQ(dec[20], "final_norm.weight");
  // Each name is the layer's own tensor: a layer module and the stack share one set of parameters.
  const auto& layer = encoder->layers().at(0);
  EXPECT_TRUE(layer->ff1->weight.is_same(encoder->named_parameters()["ff1.0.weight"]));
  EXPECT_TRUE(layer->self_attn->named_parameters()["wq.weight"].is_same(encoder->named_parameters()["self_attn0.wq.weight"]));
  EXPECT_TRUE(decoder->layers().at(0)->cross_attn->named_parameters()["wo.weight"].is_same(
      decoder->named_parameters()["cross_attn0.wo.weight"]));
  // eval() on a stack reaches its layers' dropout (shared with the stack).
  ASSERT_TRUE(layer->drop->is_training());
  encoder->eval();
  decoder->eval();
  EXPECT_FALSE(layer->drop->is_training());
  EXPECT_FALSE(decoder->layers().at(0)->drop->is_training());
}

// Training snapshots of a self-attention model: beside the cross-attention, each stack's last layer (the mean of its
// heads), square, rows summing to one; the decoder's exactly zero above the diagonal (the causal triangle); the page
// shows both.
TEST(SelfAttention, SnapshotsShowTheStacksLastLayers) {
  Config c = sa_config(test::temp_dir("sa_snapshots"));
  c.train.max_steps = 8;
  c.train.snapshot_sentences = 2;
  validate(c);
  train(c, {}, torch::kCPU);
  const RunDir dir(c.run_dir);
  const auto files = dir.progress_snapshots();
  ASSERT_GE(files.size(), 1u);
  const nlohmann::json j = read_json_file(files.back());
  ASSERT_EQ(j.at("sentences").size(), 2u);
  for (const auto& s : j.at("sentences")) {
    const size_t S = s.at("src_tokens").size(), T = s.at("tgt_tokens").size();
    for (const char* side : {"encoder_self", "decoder_self"}) {
      ASSERT_TRUE(s.contains(side)) << side;
      const auto& m = s.at(side);
      const size_t n = std::string(side) == "encoder_self" ? S : T;
      ASSERT_EQ(m.at("tokens").size(), n) << side;
      const auto w = m.at("weights").get<std::vector<std::vector<double>>>();
      ASSERT_EQ(w.size(), n) << side;
      for (size_t q = 0; q < n; ++q) {
        ASSERT_EQ(w[q].size(), n) << side;
        double sum = 0;
        for (size_t k = 0; k < n; ++k) {
          sum += w[q][k];
          if (std::string(side) == "decoder_self" && k > q) {
            EXPECT_EQ(w[q][k], 0.0) << side << " " << q << "," << k;
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-4) << side << " row " << q;
      }
    }
    EXPECT_EQ(s.at("decoder_self").at("tokens")[0], "<bos>");
    EXPECT_EQ(s.at("decoder_self").at("layer"), "decoder layer 2 of 2");
  }
  const std::string page = test::read_file(dir.progress_index());
  EXPECT_NE(page.find("self-attention, encoder layer 2 of 2"), std::string::npos);
  EXPECT_NE(page.find("self-attention, decoder layer 2 of 2"), std::string::npos);
}
