#include "model/checkpoint.h"

#include "common/host.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/version.h>

#include "common/config.h"
#include "common/runtime.h"
#include "common/errors.h"
#include "common/fs.h"
#include "kernels/adam.h"
#include "model/attention.h"

namespace attnmt {

namespace fs = std::filesystem;

std::string model_type(const ModelConfig& m) {
  std::string t = to_string(m.rnn) + "/" + attention_traits(m.attention).label;
  if (m.encoder.type == LayerType::kSelfAttention) t += "+self_attention encoder";
  if (m.decoder.type == LayerType::kSelfAttention) t += "+self_attention decoder";
  return t;
}

void save_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, const TrainerState& st,
                     const SaveOptions& opt) {
  write_atomic_with(path, [&](const std::string& tmp) {
    torch::serialize::OutputArchive ar;
    auto i64 = [](int64_t v) { return torch::tensor({v}, torch::kLong); };
    auto f64 = [](double v) { return torch::tensor({v}, torch::kDouble); };
    ar.write("format_version", i64(kCheckpointFormat));
    ar.write("model_type", c10::IValue(model_type(model->config())));
    ar.write("libtorch_version", c10::IValue(std::string(libtorch_version())));
    torch::serialize::OutputArchive m;
    model->save(m);
    ar.write("model", m);
    if (optim) {
      torch::serialize::OutputArchive o;
      optim->save(o);
      ar.write("optimizer", o);
    }
    ar.write("step", i64(st.step));
    ar.write("epoch", i64(st.epoch));
    ar.write("batch_in_epoch", i64(st.batch_in_epoch));
    ar.write("best_metric", f64(st.best_metric));
    ar.write("has_best", i64(st.has_best));
    ar.write("bad_validations", i64(st.bad_validations));
    ar.write("plateau_bad", i64(st.plateau_bad));
    ar.write("lr", f64(st.lr));
    ar.write("elapsed_s", f64(st.elapsed_s));
    ar.write("target_tokens", i64(st.target_tokens));
    ar.write("valid_s", f64(st.valid_s));
    ar.write("peak_rss_mb", f64(st.peak_rss_mb));
    ar.write("finished", i64(st.finished));
    ar.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
    for (size_t r = 1; r < opt.rank_rng.size(); ++r) ar.write("rng_cpu_rank" + std::to_string(r), opt.rank_rng[r]);
    // The run's CUDA generator (dropout masks on the GPU come from it), and every rank's in a data-parallel run.
    const torch::Device dev = model_device(model);
    if (dev.is_cuda()) {
      ar.write("rng_cuda", at::globalContext().defaultGenerator(dev).get_state());
      for (size_t r = 1; r < opt.rank_rng_cuda.size(); ++r) ar.write("rng_cuda_rank" + std::to_string(r), opt.rank_rng_cuda[r]);
    }
    // save_to(path) lets LibTorch's zip writer hit the write error in its destructor, which terminates the
    // process. Here the bytes go through our own writer: a failed write is remembered, the archive is
    // completed into the void, and the error is reported once it returns.
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw Error(path + ": cannot write checkpoint: " + std::strerror(errno));
    int write_errno = 0;
    bool paused = false;
    auto writer = [&](const void* data, size_t n) -> size_t {
      if (write_errno == 0 && std::fwrite(data, 1, n, f) != n) write_errno = errno ? errno : EIO;
      if (opt.pause_ms > 0 && !paused) {
        paused = true;
        std::fflush(f);
        std::this_thread::sleep_for(std::chrono::milliseconds(opt.pause_ms));
      }
      return n;
    };
    try {
      ar.save_to(writer);
    } catch (const c10::Error& e) {
      std::fclose(f);
      throw Error(path + ": cannot write checkpoint: " + e.what_without_backtrace());
    }
    if (std::fflush(f) != 0 && write_errno == 0) write_errno = errno ? errno : EIO;
    if (std::fclose(f) != 0 && write_errno == 0) write_errno = errno ? errno : EIO;
    if (write_errno != 0)
      throw Error(path + ": cannot write checkpoint: " + std::strerror(write_errno) + " (disk full or file size limit?)");
  });
}

torch::Device model_device(Seq2Seq& model) {
  const auto params = model->parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

namespace {
// The version of LibTorch that wrote the checkpoint at path, for messages ("" when it did not say: attnmt before
// it recorded it, which was built with Debian 12's 1.13).
std::string writer_version(torch::serialize::InputArchive& ar) {
  c10::IValue v;
  if (ar.try_read("libtorch_version", v) && v.isString()) return v.toStringRef();
  return "";
}

// Adam's state in the layout LibTorch's Optimizer::save writes, read without LibTorch's own reader: "state/<key>"
// holds each parameter's moments and "param_groups/param_groups/i/params/j" names the key of parameter j. LibTorch
// 1.x writes those keys as hexadecimal addresses ("0x55d0..."), 2.x as decimal ones, and 2.x's reader parses them as
// decimal (so it cannot read 1.x's). Matching the key strings within the file, as here, reads both.
void load_adam(torch::serialize::InputArchive& o, torch::optim::Optimizer& optim) {
  torch::serialize::InputArchive state_ar, groups_ar;
  o.read("state", state_ar);
  o.read("param_groups", groups_ar);
  torch::Tensor n;
  groups_ar.read("param_groups/size", n);
  auto& groups = optim.param_groups();
  TORCH_CHECK(host_scalar<int64_t>(n) == static_cast<int64_t>(groups.size()), "optimizer state has ", host_scalar<int64_t>(n),
              " parameter group(s), the model ", groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::serialize::InputArchive g;
    groups_ar.read("param_groups/" + std::to_string(i), g);
    torch::Tensor size;
    g.read("params/size", size);
    const auto& params = groups[i].params();
    TORCH_CHECK(host_scalar<int64_t>(size) == static_cast<int64_t>(params.size()), "optimizer state holds ", host_scalar<int64_t>(size),
                " parameters, the model ", params.size());
    for (size_t j = 0; j < params.size(); ++j) {
      c10::IValue key;
      g.read("params/" + std::to_string(j), key);
      torch::serialize::InputArchive ps;
      if (!key.isString() || !state_ar.try_read(key.toStringRef(), ps)) continue;  // no update yet for this parameter
      auto st = std::make_unique<torch::optim::AdamParamState>();
      st->serialize(ps);
      optim.state()[optimizer_state_key(optim.state(), params[j])] = std::move(st);
    }
    torch::serialize::InputArchive opts;
    g.read("options", opts);
    static_cast<torch::optim::AdamOptions&>(groups[i].options()).serialize(opts);
  }
}

// cuDNN wants each recurrent layer's weights in one contiguous block; loading replaced them one by one.
void flatten_recurrent_weights(Seq2Seq& model) {
  for (const auto& m : model->modules(/*include_self=*/false)) {
    if (auto* gru = dynamic_cast<torch::nn::GRUImpl*>(m.get())) gru->flatten_parameters();
    if (auto* lstm = dynamic_cast<torch::nn::LSTMImpl*>(m.get())) lstm->flatten_parameters();
  }
}

// Format and model type, checked before the parameters are read so that the message names what differs.
void check_header(const std::string& path, torch::serialize::InputArchive& ar, const ModelConfig& cfg) {
  torch::Tensor version;
  const int64_t v = ar.try_read("format_version", version) ? host_scalar<int64_t>(version) : 1;
  if (v < 1 || v > kCheckpointFormat)
    throw UsageError(path + ": checkpoint format " + std::to_string(v) + " is not readable by this attnmt (it reads formats 1 to " +
                     std::to_string(kCheckpointFormat) + "; a newer attnmt wrote it?)");
  c10::IValue type;
  if (v >= 2 && ar.try_read("model_type", type)) {
    const std::string want = model_type(cfg);
    if (!type.isString() || type.toStringRef() != want)
      throw UsageError(path + ": checkpoint holds a " + (type.isString() ? type.toStringRef() : std::string("?")) +
                       " model, the config gives " + want);
  }
}

std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_of(Seq2Seq& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& p : model->named_parameters()) shapes.emplace_back(p.key(), p.value().sizes().vec());
  for (const auto& b : model->named_buffers()) shapes.emplace_back(b.key(), b.value().sizes().vec());
  return shapes;
}
}  // namespace

TrainerState load_checkpoint(const std::string& path, Seq2Seq& model, torch::optim::Optimizer* optim, int rank,
                             bool* rank_rng_found) {
  if (!fs::is_regular_file(path)) throw UsageError(path + ": checkpoint not found");
  TrainerState st;
  // Every tensor goes straight to the model's device (a checkpoint written on a GPU loads on a CPU, and the
  // other way round); the random states are brought back to the CPU where their generators want them.
  const torch::Device device = model_device(model);
  std::string wrote = "?";
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path, device);
    wrote = writer_version(ar);
    check_header(path, ar, model->config());
    torch::serialize::InputArchive m;
    ar.read("model", m);
    // Module::load replaces each tensor with the stored one whatever its shape, so a checkpoint of another
    // model config would load "fine" and fail later inside a matmul: compare every shape here instead.
    const auto want = shapes_of(model);
    model->load(m);
    std::map<std::string, std::vector<int64_t>> loaded;
    for (auto& [name, shape] : shapes_of(model)) loaded[name] = std::move(shape);
    for (const auto& [name, expected] : want) {
      const auto& got = loaded[name];
      if (got != expected)
        throw UsageError(path + ": checkpoint is from a different model config: " + name + " has shape " +
                         c10::str(c10::IntArrayRef(got)) + ", the config gives " + c10::str(c10::IntArrayRef(expected)));
    }
    if (device.is_cuda()) flatten_recurrent_weights(model);
    if (optim) {
      torch::serialize::InputArchive o;
      ar.read("optimizer", o);
      load_adam(o, *optim);
    }
    auto i64 = [&](const char* k) {
      torch::Tensor t;
      ar.read(k, t);
      return host_scalar<int64_t>(t);
    };
    auto f64 = [&](const char* k) {
      torch::Tensor t;
      ar.read(k, t);
      return host_scalar<double>(t);
    };
    st.step = i64("step");
    st.epoch = i64("epoch");
    st.batch_in_epoch = i64("batch_in_epoch");
    st.best_metric = f64("best_metric");
    st.has_best = i64("has_best") != 0;
    st.bad_validations = i64("bad_validations");
    st.plateau_bad = i64("plateau_bad");
    st.lr = f64("lr");
    st.elapsed_s = f64("elapsed_s");
    // Whole-run figures (absent from checkpoints of earlier versions: they count from this resume on).
    auto f64_or_0 = [&](const char* k) {
      torch::Tensor t;
      return ar.try_read(k, t) ? host_scalar<double>(t) : 0.0;
    };
    torch::Tensor tokens;
    st.target_tokens = ar.try_read("target_tokens", tokens) ? host_scalar<int64_t>(tokens) : 0;
    st.valid_s = f64_or_0("valid_s");
    st.peak_rss_mb = f64_or_0("peak_rss_mb");
    st.finished = i64("finished") != 0;
    torch::Tensor rng;
    ar.read("rng_cpu", rng);
    if (rank > 0) {
      torch::Tensor own;
      bool found = ar.try_read("rng_cpu_rank" + std::to_string(rank), own);
      if (found) rng = own;
      if (rank_rng_found) *rank_rng_found = found;
    }
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(to_host(rng, torch::kByte).tensor());
    if (device.is_cuda()) {
      torch::Tensor cuda_rng;
      bool found = ar.try_read("rng_cuda", cuda_rng);
      if (rank > 0) found = ar.try_read("rng_cuda_rank" + std::to_string(rank), cuda_rng);
      if (found) {
        at::Generator g = at::globalContext().defaultGenerator(device);  // a handle on the device's generator
        g.set_state(to_host(cuda_rng, torch::kByte).tensor());
      }
      else if (rank_rng_found) *rank_rng_found = false;  // written on a CPU: the GPU's dropout masks start afresh
    }
  } catch (const c10::Error& e) {
    const std::string msg = first_line(e.what_without_backtrace());
    const std::string versions = wrote.empty() ? "written by LibTorch 1.13 or older, read by " + std::string(libtorch_version())
                                 : "written by LibTorch " + wrote + ", read by " + libtorch_version();
    throw UsageError(path + ": cannot load checkpoint (truncated, corrupt, or from a different model config; " + versions +
                     "): " + msg);
  }
  return st;
}

TrainerState average_checkpoints(const std::vector<std::string>& paths, Seq2Seq& model) {
  if (paths.empty()) throw UsageError("average: no checkpoints given");
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> sums;
  TrainerState st;
  for (const auto& p : paths) {
    st = load_checkpoint(p, model, nullptr);
    size_t k = 0;
    for (const auto& t : model->parameters()) {
      if (sums.size() <= k) sums.push_back(torch::zeros_like(t, torch::kDouble));
      sums[k++].add_(t.to(torch::kDouble));
    }
    for (const auto& t : model->buffers()) {
      if (!t.is_floating_point()) continue;
      if (sums.size() <= k) sums.push_back(torch::zeros_like(t, torch::kDouble));
      sums[k++].add_(t.to(torch::kDouble));
    }
  }
  const double n = static_cast<double>(paths.size());
  size_t k = 0;
  for (auto& t : model->parameters()) t.copy_(sums[k++] / n);
  for (auto& t : model->buffers())
    if (t.is_floating_point()) t.copy_(sums[k++] / n);
  return st;
}

}  // namespace attnmt
