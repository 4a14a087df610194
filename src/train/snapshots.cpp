#include "train/snapshots.h"

#include "common/host.h"

#include <algorithm>
#include <numeric>

#include "common/fs.h"

namespace attnmt {

namespace {
// Sentence k's map of a self-attention layer, w [B, L, L], over its first tokens.size() positions (queries and keys).
AttentionMap self_map(const HostTensor& w, size_t k, const std::vector<std::string>& tokens, const std::string& label) {
  AttentionMap m;
  m.self_attention = label;
  m.src_tokens = m.tgt_tokens = tokens;
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t q = 0; q < n; ++q) {
    const int64_t at = (static_cast<int64_t>(k) * w.size(1) + q) * w.size(2);
    m.weights.push_back(w.values<float>(at, at + n));
  }
  return m;
}
}  // namespace

AttentionSnapshots::AttentionSnapshots(const RunData& data, int n) : data_(data) {
  if (n <= 0 || data.valid.empty()) return;
  std::vector<int64_t> by_length(data.valid.size());
  std::iota(by_length.begin(), by_length.end(), 0);
  std::stable_sort(by_length.begin(), by_length.end(), [&](int64_t a, int64_t b) {
    return data.valid[static_cast<size_t>(a)].src.size() < data.valid[static_cast<size_t>(b)].src.size();
  });
  const size_t count = std::min(static_cast<size_t>(n), by_length.size());
  for (size_t k = 1; k <= count; ++k) {  // quantiles k/count: for two sentences the median and the longest
    const size_t pos = (by_length.size() * k) / count - 1;
    rows_.push_back(by_length[pos]);
  }
  rows_.erase(std::unique(rows_.begin(), rows_.end()), rows_.end());
}

void AttentionSnapshots::write(Seq2Seq& model, const RunDir& dir, int64_t step, int64_t epoch, double valid_bleu,
                               const torch::Device& device) {
  if (rows_.empty()) return;
  make_dirs(dir.progress_dir());
  const std::string title = "attnmt: attention during training, " + dir.path();
  if (!model->decoder->has_attention()) {
    write_file_atomic(dir.progress_index(), progress_html_without_attention(title));
    return;
  }
  ProgressSnapshot snap;
  snap.step = step;
  snap.epoch = epoch;
  snap.valid_bleu = valid_bleu;
  {
    torch::NoGradGuard ng;
    model->eval();
    const Batch b = make_batch(data_.valid, rows_).to(device);
    const Seq2SeqOutput out = model->forward(b.src, b.src_len, b.src_mask, b.tgt_in);
    const HostTensor w = to_host(out.weights, torch::kFloat);  // [B, T, S]
    // A self-attention stack's last layer, the mean of its heads: [B, L, L]
    auto last_layer = [](const std::vector<torch::Tensor>& layers) {
      return layers.empty() ? HostTensor() : to_host(layers.back().mean(1), torch::kFloat);
    };
    const HostTensor enc_self = last_layer(out.encoder_self_weights), dec_self = last_layer(out.decoder_self_weights);
    const std::string layers_e = std::to_string(out.encoder_self_weights.size()), layers_d = std::to_string(out.decoder_self_weights.size());
    model->train();
    for (size_t k = 0; k < rows_.size(); ++k) {
      const EncodedPair& e = data_.valid[static_cast<size_t>(rows_[k])];
      AttentionMap m;
      m.src_tokens = data_.src_vocab.decode(e.src);
      m.tgt_tokens = data_.tgt_vocab.decode(e.tgt);
      for (size_t i = 0; i < m.src_tokens.size(); ++i) m.source_text += (i ? " " : "") + m.src_tokens[i];
      m.target_text = data_.valid_refs[static_cast<size_t>(rows_[k])];
      for (size_t j = 0; j < e.tgt.size(); ++j) {  // target tokens (the <eos> step left out) x real source positions
        const int64_t at = (static_cast<int64_t>(k) * w.size(1) + static_cast<int64_t>(j)) * w.size(2);
        m.weights.push_back(w.values<float>(at, at + static_cast<int64_t>(e.src.size())));
      }
      if (enc_self.defined())
        snap.encoder_self.push_back(self_map(enc_self, k, m.src_tokens, "encoder layer " + layers_e + " of " + layers_e));
      if (dec_self.defined()) {
        std::vector<std::string> inputs = {"<bos>"};  // what each decoder position reads: <bos>, then the reference
        inputs.insert(inputs.end(), m.tgt_tokens.begin(), m.tgt_tokens.end() - (m.tgt_tokens.empty() ? 0 : 1));
        snap.decoder_self.push_back(self_map(dec_self, k, inputs, "decoder layer " + layers_d + " of " + layers_d));
      }
      snap.maps.push_back(std::move(m));
    }
  }
  if (!loaded_) {  // earlier snapshots of a resumed run (those past the checkpoint were dropped)
    for (const auto& path : dir.progress_snapshots()) {
      try {
        history_.push_back(progress_snapshot_from_json(read_json_file(path)));
      } catch (const std::exception&) {
        // a snapshot that cannot be read (written by something else) is left out of the page
      }
    }
    loaded_ = true;
  }
  write_file_atomic(dir.progress_snapshot(step), progress_snapshot_json(snap).dump() + "\n");
  history_.push_back(std::move(snap));
  write_file_atomic(dir.progress_index(), progress_html(history_, title));
}

}  // namespace attnmt
