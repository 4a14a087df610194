// The one switch between attnmt's hand-written CPU kernels and their references (--kernels auto|reference, or
// ATTNMT_KERNELS for a process). Under reference every computation runs as plain LibTorch operations: exactly the
// path a CUDA tensor takes, so that a test on this machine covers what a GPU run executes. Under auto a kernel runs
// where it applies (float tensors on the CPU; the products only where they beat the BLAS, packed_product.h).
// Every kernel's entry point asks here, and nowhere else, which path to take.
#pragma once
#include <string>

#include <torch/torch.h>

#include "common/scoped_setting.h"

namespace attnmt {

enum class KernelMode { kAuto, kReference };

void set_kernel_mode(KernelMode m);
KernelMode kernel_mode();
// "auto" | "reference"; false for anything else.
bool parse_kernel_mode(const std::string& s, KernelMode* m);
const char* kernel_mode_name(KernelMode m);

// Whether the hand-written kernels may run on tensors of this device: --kernels auto and the CPU. Model code uses it
// where it picks a path (a fused recurrence or the stepped one, a one-node GRU or ATen's).
bool kernels_on(const torch::Device& device);
// The same for one tensor, which must also be float (an undefined tensor fits): the kernels' own entry check.
bool kernels_for(const torch::Tensor& t);

// Sets a mode for as long as it lives (tests; bench's measurement of the machine's best product rate).
using ScopedKernelMode = ScopedSetting<KernelMode, kernel_mode, set_kernel_mode>;

// One line for the log and bench: the mode and, under auto, which kernels run and why.
std::string kernel_choice();

}  // namespace attnmt
