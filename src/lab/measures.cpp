#include "lab/measures.h"

#include "common/host.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>

namespace attnmt {

PowerLaw fit_power_law(const std::vector<double>& x, const std::vector<double>& y) {
  TORCH_CHECK(x.size() == y.size(), "fit_power_law: ", x.size(), " x values vs ", y.size(), " y values");
  std::vector<double> lx, ly;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] > 0 && y[i] > 0) {
      lx.push_back(std::log(x[i]));
      ly.push_back(std::log(y[i]));
    }
  PowerLaw p;
  p.points = static_cast<int64_t>(lx.size());
  if (lx.size() < 2) return p;
  const double n = static_cast<double>(lx.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < lx.size(); ++i) {
    mx += lx[i] / n;
    my += ly[i] / n;
  }
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < lx.size(); ++i) {
    sxx += (lx[i] - mx) * (lx[i] - mx);
    sxy += (lx[i] - mx) * (ly[i] - my);
    syy += (ly[i] - my) * (ly[i] - my);
  }
  if (sxx == 0) return p;
  p.exponent = sxy / sxx;
  p.factor = std::exp(my - p.exponent * mx);
  p.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return p;
}

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  TORCH_CHECK(a.size() == b.size(), "kendall_tau: lengths ", a.size(), " and ", b.size());
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da == 0 && db == 0) continue;
      if (da == 0) {
        ++ties_a;
      } else if (db == 0) {
        ++ties_b;
      } else if ((da > 0) == (db > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  const double denom = std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denom > 0 ? (concordant - discordant) / denom : 0.0;
}

std::vector<double> gradient_times_input(const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "gradient_times_input: x must be [N, D], got ", x.sizes());
  torch::Tensor leaf = x.detach().clone().requires_grad_(true);
  torch::Tensor y;
  {
    torch::AutoGradMode on(true);
    y = f(leaf);
    TORCH_CHECK(y.numel() == 1, "gradient_times_input: f must return a scalar, got ", y.sizes());
    y.backward();
  }
  torch::Tensor g = leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
  return host_vector<double>((leaf.detach() * g).sum(1));  // [N], one read from the lab's device
}

std::vector<std::vector<double>> leave_one_out(const SequenceScorer& f, const std::vector<int64_t>& tokens, int64_t replacement) {
  std::vector<std::vector<int64_t>> variants = {tokens};
  for (size_t n = 0; n < tokens.size(); ++n) {
    variants.push_back(tokens);
    variants.back()[n] = replacement;
  }
  const auto scores = f(variants);
  TORCH_CHECK(scores.size() == variants.size(), "leave_one_out: ", scores.size(), " scores for ", variants.size(), " variants");
  const size_t T = scores[0].size();
  std::vector<std::vector<double>> out(T, std::vector<double>(tokens.size()));
  for (size_t n = 0; n < tokens.size(); ++n) {
    TORCH_CHECK(scores[n + 1].size() == T, "leave_one_out: variant ", n + 1, " has ", scores[n + 1].size(), " outputs, not ", T);
    for (size_t t = 0; t < T; ++t) out[t][n] = scores[0][t] - scores[n + 1][t];
  }
  return out;
}

int64_t argmax(const std::vector<double>& row) {
  if (row.empty()) return -1;
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int64_t>(best);
}

RowStats row_stats(const std::vector<std::vector<float>>& rows) {
  RowStats s;
  for (const auto& r : rows) {
    if (r.empty()) continue;
    double mx = 0, h = 0;
    for (float w : r) {
      mx = std::max(mx, static_cast<double>(w));
      if (w > 0) h -= static_cast<double>(w) * std::log(static_cast<double>(w));
    }
    s.mean_max += mx;
    s.mean_entropy += h;
    ++s.rows;
  }
  if (s.rows > 0) {
    s.mean_max /= static_cast<double>(s.rows);
    s.mean_entropy /= static_cast<double>(s.rows);
  }
  return s;
}

double diagonal_distance(const std::vector<std::vector<float>>& map) {
  const size_t T = map.size();
  if (T == 0) return 0;
  double total = 0;
  int64_t rows = 0;
  for (size_t j = 0; j < T; ++j) {
    const size_t S = map[j].size();
    if (S == 0) continue;
    const double diag = T > 1 ? static_cast<double>(j) * static_cast<double>(S - 1) / static_cast<double>(T - 1) : 0.0;
    double d = 0;
    for (size_t i = 0; i < S; ++i) d += static_cast<double>(map[j][i]) * std::fabs(static_cast<double>(i) - diag);
    total += d;
    ++rows;
  }
  return rows ? total / static_cast<double>(rows) : 0.0;
}

torch::Tensor uniform_weights(const torch::Tensor& w, const torch::Tensor& mask) {
  torch::Tensor u = mask.unsqueeze(1).expand_as(w).to(w.scalar_type());
  return u / u.sum(-1, true);
}

PermutedWeights::PermutedWeights(uint64_t seed) : gen_(at::detail::createCPUGenerator(seed)) {}

// Sorting random keys (padding last) gives a random order of the real positions; the position order with padding last
// says where each goes, so that padding keeps its zero.
torch::Tensor PermutedWeights::operator()(const torch::Tensor& w, const torch::Tensor& mask) {
  const torch::Tensor m = mask.unsqueeze(1).expand_as(w);  // [B, T, S]
  const int64_t S = w.size(-1);
  torch::Tensor keys = torch::rand(w.sizes(), gen_, torch::TensorOptions().dtype(torch::kFloat)).to(w.device());
  torch::Tensor random_order = std::get<1>(keys.masked_fill(m.logical_not(), 2.0).sort(-1));
  torch::Tensor position = torch::arange(S, torch::TensorOptions().dtype(torch::kFloat).device(w.device())).expand_as(w);
  torch::Tensor plain_order = std::get<1>(position.masked_fill(m.logical_not(), static_cast<double>(2 * S)).sort(-1));
  return torch::zeros_like(w).scatter(-1, plain_order, w.gather(-1, random_order));
}

}  // namespace attnmt
