// Moving bytes between devices (host <-> GPU); implemented by the CUDA backend.
#pragma once
#include <cstdint>

#include "core/device.h"

namespace ember {
void copy_bytes_across_devices(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes);
}  // namespace ember
