// Storage: a reference-counted block of device memory that one or more tensors view.
#include <cstddef>
#include <cstdint>

#include "core/storage.h"

#include "core/allocator.h"

namespace ember {

Storage::Storage(int64_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device).allocate(size_t(nbytes));
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, size_t(nbytes_)); }

}  // namespace ember
