// The attention lab's measurements as plain functions: power-law fits, rank correlation, attributions
// (gradient x input, leave-one-out), statistics of attention rows. Each is tested on a case with a closed form.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace attnmt {

// y = c x^k fitted by least squares on (log x, log y): the exponent k, the factor c and R^2 of the fit.
// Needs at least two points with x, y > 0 (others are skipped).
struct PowerLaw {
  double exponent = 0, factor = 0, r2 = 0;
  int64_t points = 0;
};
PowerLaw fit_power_law(const std::vector<double>& x, const std::vector<double>& y);

// Kendall's tau-b between two equally long vectors (ties counted as neither concordant nor discordant);
// 0 when either is constant or they have fewer than two entries.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

// Gradient x input: for f(x) with x [N, D] (N positions of D features), the attribution of position n is
// sum_d x[n, d] * df/dx[n, d]. f must return a scalar tensor that depends on x through autograd.
std::vector<double> gradient_times_input(const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& x);

// Leave-one-out for several outputs at once: f scores token sequences, one value per output (per target token),
// f(variants)[v][t], all variants in one call (a model scores them as one batch). For tokens t_1..t_N the
// attribution of position n to output t is f(tokens)[t] - f(tokens with t_n replaced by `replacement`)[t]: [T][N].
using SequenceScorer = std::function<std::vector<std::vector<double>>(const std::vector<std::vector<int64_t>>&)>;
std::vector<std::vector<double>> leave_one_out(const SequenceScorer& f, const std::vector<int64_t>& tokens, int64_t replacement);

// Index of the largest entry (the first of equal ones); -1 for an empty row.
int64_t argmax(const std::vector<double>& row);

// Statistics of attention rows (each row: the weights of one query over its source positions, summing to 1).
struct RowStats {
  double mean_max = 0;      // mean over rows of the largest weight
  double mean_entropy = 0;  // mean over rows of -sum w log w (nats)
  int64_t rows = 0;
};
RowStats row_stats(const std::vector<std::vector<float>>& rows);

// Mean distance from the diagonal: for each row j of a [T][S] map, the expected |i - j (S-1)/(T-1)| under the
// row's weights, in source positions; the mean over rows. 0 for a map that puts all weight on the diagonal.
double diagonal_distance(const std::vector<std::vector<float>>& map);

// Counterfactual attention weights for AttentionImpl::edit_weights, w [B, T, S] and mask [B, S] (true at real source
// positions): uniform over the real positions, or the model's own weights permuted among them (seeded, a new
// permutation at every call). Padding keeps weight 0 in both.
torch::Tensor uniform_weights(const torch::Tensor& w, const torch::Tensor& mask);
class PermutedWeights {
 public:
  explicit PermutedWeights(uint64_t seed);
  torch::Tensor operator()(const torch::Tensor& w, const torch::Tensor& mask);

 private:
  at::Generator gen_;
};

}  // namespace attnmt
