// The arithmetic precision of a process (train.precision, --precision): fp32, tf32 or bf16.
//   fp32  products and cuDNN's recurrences in full float32 (LibTorch's cuDNN default, TF32, is turned off)
//   tf32  float32 tensors, products and cuDNN on CUDA's tensor cores in TF32 (10-bit mantissa); on a CPU, fp32
//   bf16  the models' forward computations under LibTorch's autocast to bfloat16 (products, attention); parameters,
//         gradients, optimizer state, the loss and the recurrences' state stay float32; what stays float32 on CUDA
//         may use TF32
// The TF32 switches are process-wide (LibTorch's global context). Autocast is per thread: model entry points open an
// Autocast region, which does nothing unless the precision is bf16. All of LibTorch's version-dependent autocast API
// is here.
#pragma once
#include <string>

#include <torch/types.h>

#include "common/scoped_setting.h"

namespace attnmt {

enum class Precision { kFp32, kTf32, kBf16 };

// "fp32" | "tf32" | "bf16"; false for anything else.
bool parse_precision(const std::string& s, Precision* p);
const char* precision_name(Precision p);

// Sets the process's precision and LibTorch's TF32 switches for cuBLAS and cuDNN with it.
void set_precision(Precision p);
Precision precision();

// Sets a precision for as long as it lives (train() for its config's; tests).
using ScopedPrecision = ScopedSetting<Precision, precision, set_precision>;

// bf16 autocast on the device's type while it lives, when the precision is bf16; nothing otherwise. Regions nest; the
// outermost one's end drops the bf16 copies of the weights that autocast keeps while a region is open (so a search
// opens one around all its steps, and each weight is cast once).
class Autocast {
 public:
  explicit Autocast(const torch::Device& device) : Autocast(device, precision() == Precision::kBf16 ? kOn : kLeave) {}
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 protected:
  enum Switch { kLeave, kOn, kOff };
  Autocast(const torch::Device& device, Switch s);

 private:
  c10::DeviceType type_;
  bool active_ = false;       // the region changed this thread's autocast state, and restores it
  bool switched_on_ = false;  // it turned bf16 autocast on (and counts in LibTorch's nesting)
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Undefined;
};

// Autocast off while it lives: code whose in-place buffers take one dtype (the one-node recurrences) runs in float32
// inside a bf16 region, with its bfloat16 inputs cast up (as a PyTorch custom function with cast_inputs=float32).
class NoAutocast : public Autocast {
 public:
  explicit NoAutocast(const torch::Device& device) : Autocast(device, kOff) {}
};

// Whether this thread autocasts on the device's type now.
bool autocast_on(const torch::Device& device);

// t in float32 when it is a bfloat16 or half tensor; t itself otherwise (no operation).
torch::Tensor float_if_reduced(const torch::Tensor& t);

// What bench and the training log report: the precision and LibTorch's TF32 switches.
struct PrecisionState {
  std::string precision;   // fp32 | tf32 | bf16
  bool cuda_tf32 = false;  // cuBLAS products of float32 tensors may run in TF32
  bool cudnn_tf32 = false; // cuDNN (recurrences, convolutions) may run in TF32
};
PrecisionState precision_state();

}  // namespace attnmt
