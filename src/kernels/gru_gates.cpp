#include "kernels/gru_gates.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/share_threads.h"
#include "kernels/lanes.h"
#include "kernels/mode.h"

namespace attnmt {

namespace {
// Row pointers and pitches (elements between rows) of the cell's tensors; every row has unit stride.
struct GruArgs {
  const float *gi, *gh, *h, *dh, *rz_in, *n_in, *ghn;
  float *h_out, *rz_out, *n_out, *dgi, *dgh, *direct;
  int64_t gi_pitch, gh_pitch, h_pitch, dh_pitch, ghn_pitch, dgi_pitch, dgh_pitch, H;
};

template <int N>
__attribute__((always_inline)) inline typename Lanes<N>::type sigmoid_lanes(typename Lanes<N>::type x) {
  return 0.5f * tanh_lanes<N>(0.5f * x) + 0.5f;
}

template <int N>
__attribute__((always_inline)) inline void load(typename Lanes<N>::type& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <int N>
__attribute__((always_inline)) inline void store(float* p, const typename Lanes<N>::type& v) {
  std::memcpy(p, &v, sizeof v);
}

template <int N>
__attribute__((always_inline)) inline void gru_forward_rows(const GruArgs& a, int64_t b0, int64_t b1) {
  using F = typename Lanes<N>::type;
  const int64_t H = a.H;
  for (int64_t b = b0; b < b1; ++b) {
    const float *gi = a.gi + b * a.gi_pitch, *gh = a.gh + b * a.gh_pitch, *h = a.h + b * a.h_pitch;
    float *ho = a.h_out + b * H, *rz = a.rz_out + b * 2 * H, *no = a.n_out + b * H;
    int64_t j = 0;
    for (; j + N <= H; j += N) {
      F gr, hr, gz, hz, gn, hn, hv;
      load<N>(gr, gi + j), load<N>(hr, gh + j), load<N>(gz, gi + H + j), load<N>(hz, gh + H + j);
      load<N>(gn, gi + 2 * H + j), load<N>(hn, gh + 2 * H + j), load<N>(hv, h + j);
      const F r = sigmoid_lanes<N>(gr + hr), z = sigmoid_lanes<N>(gz + hz);
      const F nn = tanh_lanes<N>(gn + r * hn);
      store<N>(rz + j, r), store<N>(rz + H + j, z), store<N>(no + j, nn), store<N>(ho + j, nn + z * (hv - nn));
    }
    for (; j < H; ++j) {
      const float r = 1.0f / (1.0f + std::exp(-(gi[j] + gh[j]))), z = 1.0f / (1.0f + std::exp(-(gi[H + j] + gh[H + j])));
      const float nn = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
      rz[j] = r, rz[H + j] = z, no[j] = nn, ho[j] = nn + z * (h[j] - nn);
    }
  }
}

template <int N>
__attribute__((always_inline)) inline void gru_backward_rows(const GruArgs& a, int64_t b0, int64_t b1) {
  using F = typename Lanes<N>::type;
  const int64_t H = a.H;
  for (int64_t b = b0; b < b1; ++b) {
    const float *dh = a.dh + b * a.dh_pitch, *h = a.h + b * a.h_pitch, *rz = a.rz_in + b * 2 * H, *nn = a.n_in + b * H,
                *ghn = a.ghn + b * a.ghn_pitch;
    float *dgi = a.dgi + b * a.dgi_pitch, *dgh = a.dgh + b * a.dgh_pitch, *direct = a.direct + b * H;
    int64_t j = 0;
    for (; j + N <= H; j += N) {
      F d, hv, r, z, n, g;
      load<N>(d, dh + j), load<N>(hv, h + j), load<N>(r, rz + j), load<N>(z, rz + H + j), load<N>(n, nn + j), load<N>(g, ghn + j);
      const F d_pre_n = d * (1.0f - z) * (1.0f - n * n);  // through tanh
      const F d_r = d_pre_n * g * r * (1.0f - r), d_z = d * (hv - n) * z * (1.0f - z);
      store<N>(dgi + j, d_r), store<N>(dgi + H + j, d_z), store<N>(dgi + 2 * H + j, d_pre_n);
      store<N>(dgh + j, d_r), store<N>(dgh + H + j, d_z), store<N>(dgh + 2 * H + j, d_pre_n * r);
      store<N>(direct + j, d * z);
    }
    for (; j < H; ++j) {
      const float d = dh[j], r = rz[j], z = rz[H + j], n = nn[j];
      const float d_pre_n = d * (1.0f - z) * (1.0f - n * n);
      const float d_r = d_pre_n * ghn[j] * r * (1.0f - r), d_z = d * (h[j] - n) * z * (1.0f - z);
      dgi[j] = d_r, dgi[H + j] = d_z, dgi[2 * H + j] = d_pre_n;
      dgh[j] = d_r, dgh[H + j] = d_z, dgh[2 * H + j] = d_pre_n * r;
      direct[j] = d * z;
    }
  }
}

#ifdef ATTNMT_X86_LANES
__attribute__((target("avx2"))) void gru_forward_avx2(const GruArgs& a, int64_t b0, int64_t b1) { gru_forward_rows<8>(a, b0, b1); }
__attribute__((target("avx512f"))) void gru_forward_avx512(const GruArgs& a, int64_t b0, int64_t b1) { gru_forward_rows<16>(a, b0, b1); }
__attribute__((target("avx2"))) void gru_backward_avx2(const GruArgs& a, int64_t b0, int64_t b1) { gru_backward_rows<8>(a, b0, b1); }
__attribute__((target("avx512f"))) void gru_backward_avx512(const GruArgs& a, int64_t b0, int64_t b1) {
  gru_backward_rows<16>(a, b0, b1);
}
#endif

// Float CPU, two dimensions, unit stride along a row (rows may be further apart: views of a larger tensor).
bool rows_fit(const torch::Tensor& t, int64_t B, int64_t width) {
  return t.defined() && kernels_for(t) && t.dim() == 2 && t.size(0) == B && t.size(1) == width &&
         (t.stride(1) == 1 || width == 1) && t.stride(0) >= width;
}
}  // namespace

bool gru_cell_kernel(const torch::Tensor& gi, const torch::Tensor& gh, const torch::Tensor& h, int64_t H, torch::Tensor* h_new,
                     torch::Tensor* rz, torch::Tensor* n, int max_lanes) {
  const int64_t B = h.dim() == 2 ? h.size(0) : -1;
  if (!rows_fit(gi, B, 3 * H) || !rows_fit(gh, B, 3 * H) || !rows_fit(h, B, H)) return false;
  *h_new = torch::empty({B, H}, h.options());
  *rz = torch::empty({B, 2 * H}, h.options());
  *n = torch::empty({B, H}, h.options());
  GruArgs a{};
  a.gi = gi.data_ptr<float>(), a.gh = gh.data_ptr<float>(), a.h = h.data_ptr<float>();
  a.h_out = h_new->data_ptr<float>(), a.rz_out = rz->data_ptr<float>(), a.n_out = n->data_ptr<float>();
  a.gi_pitch = gi.stride(0), a.gh_pitch = gh.stride(0), a.h_pitch = h.stride(0), a.H = H;
  const int lanes = std::min(cpu_lanes(), max_lanes);
  share_rows(B, 16, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, gru_forward, gru_forward_rows<4>, a, b0, b1);
  });
  return true;
}

bool gru_cell_backward_kernel(const torch::Tensor& dh, const torch::Tensor& h, const torch::Tensor& rz, const torch::Tensor& n,
                              const torch::Tensor& gh_n, torch::Tensor& dgi, torch::Tensor& dgh, torch::Tensor* direct,
                              int max_lanes) {
  const int64_t B = h.dim() == 2 ? h.size(0) : -1, H = h.dim() == 2 ? h.size(1) : -1;
  if (!rows_fit(dh, B, H) || !rows_fit(h, B, H) || !rows_fit(gh_n, B, H) || !rows_fit(dgi, B, 3 * H) || !rows_fit(dgh, B, 3 * H) ||
      !rows_fit(rz, B, 2 * H) || !rz.is_contiguous() || !rows_fit(n, B, H) || !n.is_contiguous())
    return false;
  *direct = torch::empty({B, H}, h.options());
  GruArgs a{};
  a.dh = dh.data_ptr<float>(), a.h = h.data_ptr<float>(), a.rz_in = rz.data_ptr<float>(), a.n_in = n.data_ptr<float>();
  a.ghn = gh_n.data_ptr<float>(), a.dgi = dgi.data_ptr<float>(), a.dgh = dgh.data_ptr<float>(), a.direct = direct->data_ptr<float>();
  a.dh_pitch = dh.stride(0), a.h_pitch = h.stride(0), a.ghn_pitch = gh_n.stride(0), a.dgi_pitch = dgi.stride(0), a.dgh_pitch = dgh.stride(0);
  a.H = H;
  const int lanes = std::min(cpu_lanes(), max_lanes);
  share_rows(B, 16, [&](int64_t b0, int64_t b1) {
    ATTNMT_LANES_CALL(lanes, gru_backward, gru_backward_rows<4>, a, b0, b1);
  });
  return true;
}

}  // namespace attnmt
