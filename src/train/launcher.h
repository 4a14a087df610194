// The local process launcher of `attnmt train --nproc N` (and `bench --nproc`): starts the ranks of one
// data-parallel job on this machine and supervises them. The process group itself is train/distributed.h.
#pragma once
#include "train/distributed.h"

namespace attnmt {

// `attnmt train --nproc N`: runs N copies of this process (same command line, from /proc/self/cmdline) on this machine as ranks
// 0..N-1 of one job, on a free loopback port; forwards SIGINT/SIGTERM to them; when one fails, stops the
// others. Returns the most telling exit code of the workers that ended on their own (bad input 2, then a
// signal as 128+signal, then any other failure), else 0. `device` is the run's: on CUDA each rank takes the
// device of its LOCAL_RANK, so more ranks than visible devices are refused (UsageError, one line).
int launch_local_workers(int nproc, const torch::Device& device);

// Whether this process should launch `--nproc` local workers rather than train itself: nproc > 1 and it is not
// already one of them. Refuses (UsageError) when WORLD_SIZE says an outside launcher started it.
bool wants_local_launch(int nproc, const DistSpec& spec);

// Set in the workers started by launch_local_workers, so that they do not launch again.
constexpr const char* kLocalWorkerEnv = "ATTNMT_LOCAL_WORKER";

}  // namespace attnmt
