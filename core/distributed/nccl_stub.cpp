// The NCCL backend of a build without it (no CUDA, or CUDA without NCCL): says so.
// NOTE: compiled into each library that lacks EMBER_WITH_NCCL (CMakeLists.txt: the variant sources).
#ifndef EMBER_WITH_NCCL
#include <memory>

#include "core/distributed/nccl.h"

#include "core/error.h"

namespace ember::distributed {

bool built_with_nccl() { return false; }

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup&, Device device, double) {
  fail("distributed training on {}: this Ember was built without NCCL (it needs the CUDA toolkit with NCCL, found "
       "by CMake in /usr/local/cuda)", device.str());
}

Device device_for_local_rank(int local_rank) {
  const int count = cuda_device_count();
  return count > 0 ? Device::cuda(local_rank % count) : Device::cpu();
}

}  // namespace ember::distributed
#endif
