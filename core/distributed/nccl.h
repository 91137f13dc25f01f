// The NCCL backend (NVIDIA's collectives, shipped with the CUDA toolkit): the group of every rank's
// GPU, for GPU tensors. Implemented in cuda/nccl_process_group.cpp beside the CUDA backend; its
// stub (nccl_stub.cpp) in a build without CUDA or NCCL. In CI it runs on the CUDA emulator, whose
// stand-in nccl.h (tests/cuda_emulator/) moves the data between processes through shared memory.
#pragma once
#include <memory>

#include "core/distributed/process_group.h"

namespace ember::distributed {

bool built_with_nccl();

// The NCCL group over the ranks of `bootstrap` (usually the MPI world: it carries NCCL's unique id
// from rank 0 to the others), each rank on its GPU `device`. Collectives are queued on the
// device's current stream; start_all_reduce() queues on a side stream that waits for the current
// one, so that backward's kernels and the all-reduce overlap. A collective not done after
// timeout_seconds (checked in wait_all() and barrier()) aborts the communicator and ends the job
// through bootstrap.abort_job(). Collective: every rank of bootstrap calls it.
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device, double timeout_seconds);

// The GPU a rank uses on its machine: cuda:(local rank % GPUs on the machine).
Device device_for_local_rank(int local_rank);

}  // namespace ember::distributed
