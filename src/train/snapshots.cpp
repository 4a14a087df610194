#include "train/snapshots.h"

#include "common/host.h"

#include <algorithm>
#include <numeric>

#include "common/fs.h"

namespace attnmt {

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
    const HostTensor w = to_host(model->forward(b.src, b.src_len, b.src_mask, b.tgt_in).weights, torch::kFloat);  // [B, T, S]
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
