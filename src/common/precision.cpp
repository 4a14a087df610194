#include "common/precision.h"

#include <atomic>

#include <ATen/autocast_mode.h>
#include <ATen/Context.h>
#include <torch/version.h>

namespace attnmt {

namespace {
std::atomic<int> g_precision{static_cast<int>(Precision::kFp32)};

bool autocast_type(c10::DeviceType t) { return t == c10::DeviceType::CPU || t == c10::DeviceType::CUDA; }

// LibTorch 2.4 keyed its autocast state by device type; 1.13 to 2.3 had one set of functions per device.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void set_enabled(c10::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
c10::ScalarType dtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void set_dtype(c10::DeviceType t, c10::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool enabled(c10::DeviceType t) { return t == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled(); }
void set_enabled(c10::DeviceType t, bool on) {
  if (t == c10::DeviceType::CPU) at::autocast::set_cpu_enabled(on);
  else at::autocast::set_enabled(on);
}
c10::ScalarType dtype(c10::DeviceType t) {
  return t == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
void set_dtype(c10::DeviceType t, c10::ScalarType d) {
  if (t == c10::DeviceType::CPU) at::autocast::set_autocast_cpu_dtype(d);
  else at::autocast::set_autocast_gpu_dtype(d);
}
#endif
}  // namespace

bool parse_precision(const std::string& s, Precision* p) {
  if (s == "fp32") *p = Precision::kFp32;
  else if (s == "tf32") *p = Precision::kTf32;
  else if (s == "bf16") *p = Precision::kBf16;
  else return false;
  return true;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp32: break;
  }
  return "fp32";
}

void set_precision(Precision p) {
  g_precision.store(static_cast<int>(p));
  // fp32 means float32 everywhere, cuDNN's recurrences included (LibTorch lets cuDNN use TF32 unless told not to);
  // under bf16, what autocast leaves in float32 may use TF32.
  const bool tf32 = p != Precision::kFp32;
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
}

Precision precision() { return static_cast<Precision>(g_precision.load()); }

Autocast::Autocast(const torch::Device& device, Switch s) : type_(device.type()) {
  if (s == kLeave || !autocast_type(type_)) return;
  was_enabled_ = enabled(type_);
  if (s == kOff && !was_enabled_) return;  // already off (every fp32 call of an RNN): nothing to change or restore
  was_dtype_ = dtype(type_);
  const bool enable = s == kOn;
  if (enable) {
    set_dtype(type_, c10::ScalarType::BFloat16);
    set_enabled(type_, true);
    at::autocast::increment_nesting();
  } else {
    set_enabled(type_, false);
  }
  switched_on_ = enable;
  active_ = true;
}

Autocast::~Autocast() {
  if (!active_) return;
  // As Python's torch.autocast leaves a region: the weights' bfloat16 copies live as long as the outermost region.
  if (switched_on_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_dtype(type_, was_dtype_);
  set_enabled(type_, was_enabled_);
}

bool autocast_on(const torch::Device& device) { return autocast_type(device.type()) && enabled(device.type()); }

torch::Tensor float_if_reduced(const torch::Tensor& t) {
  if (!t.defined()) return t;
  const auto s = t.scalar_type();
  return s == c10::ScalarType::BFloat16 || s == c10::ScalarType::Half ? t.to(torch::kFloat) : t;
}

PrecisionState precision_state() {
  PrecisionState s;
  s.precision = precision_name(precision());
  s.cuda_tf32 = at::globalContext().allowTF32CuBLAS();
  s.cudnn_tf32 = at::globalContext().allowTF32CuDNN();
  return s;
}

}  // namespace attnmt
