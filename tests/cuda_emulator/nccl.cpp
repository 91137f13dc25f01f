// The emulator's NCCL: ranks are processes that meet in a POSIX shared-memory segment named by the
// unique id. Each collective goes in chunks: every rank copies its chunk into its slot, all wait
// at a barrier, every rank reads the slots it needs (adding in rank order), all wait again.
#include "nccl.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "state.h"

namespace {

constexpr size_t kSlotBytes = size_t(1) << 20;

struct Header {
  std::atomic<uint64_t> arrived;     // ranks at the current barrier
  std::atomic<uint64_t> generation;  // barriers passed so far
};

}  // namespace

struct ncclComm {
  int rank = 0, nranks = 1;
  void* map = nullptr;
  size_t map_bytes = 0;
  Header* header = nullptr;
  char* slots = nullptr;
  bool aborted = false;
  char* slot(int r) const { return slots + size_t(r) * kSlotBytes; }
};

namespace {

double timeout_seconds() {
  const char* env = std::getenv("EMBER_NCCL_EMULATOR_TIMEOUT");
  return env != nullptr ? std::atof(env) : 60.0;
}

// Sense by generation: the last rank to arrive resets the count and opens the next generation.
ncclResult_t barrier(ncclComm* comm) {
  if (comm->aborted) return ncclInvalidUsage;
  Header* h = comm->header;
  const uint64_t generation = h->generation.load();
  if (h->arrived.fetch_add(1) + 1 == uint64_t(comm->nranks)) {
    h->arrived.store(0);
    h->generation.fetch_add(1);
    return ncclSuccess;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
  for (int spins = 0; h->generation.load() == generation; ++spins) {
    if (spins > 1000) sched_yield();
    if ((spins & 1023) == 0 && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "emulated NCCL: rank %d waited %.0f s for the other ranks\n", comm->rank, timeout_seconds());
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

template <typename T>
void reduce_chunk(ncclComm* comm, ncclRedOp_t op, size_t slot_offset, size_t count, T* out) {
  for (size_t i = 0; i < count; ++i) {
    T value = reinterpret_cast<const T*>(comm->slot(0) + slot_offset)[i];
    for (int r = 1; r < comm->nranks; ++r) {
      const T x = reinterpret_cast<const T*>(comm->slot(r) + slot_offset)[i];
      switch (op) {
        case ncclSum: case ncclAvg: value = T(value + x); break;
        case ncclProd: value = T(value * x); break;
        case ncclMax: value = x > value ? x : value; break;
        case ncclMin: value = x < value ? x : value; break;
      }
    }
    if (op == ncclAvg) value = T(value / T(comm->nranks));
    out[i] = value;
  }
}

// out[0, count) = the reduction over ranks of each rank's slot bytes [slot_offset, ...).
ncclResult_t reduce_slots(ncclComm* comm, ncclDataType_t type, ncclRedOp_t op, size_t slot_offset, size_t count,
                          void* out) {
  switch (type) {
    case ncclInt8: reduce_chunk(comm, op, slot_offset, count, static_cast<int8_t*>(out)); return ncclSuccess;
    case ncclUint8: reduce_chunk(comm, op, slot_offset, count, static_cast<uint8_t*>(out)); return ncclSuccess;
    case ncclInt32: reduce_chunk(comm, op, slot_offset, count, static_cast<int32_t*>(out)); return ncclSuccess;
    case ncclUint32: reduce_chunk(comm, op, slot_offset, count, static_cast<uint32_t*>(out)); return ncclSuccess;
    case ncclInt64: reduce_chunk(comm, op, slot_offset, count, static_cast<int64_t*>(out)); return ncclSuccess;
    case ncclUint64: reduce_chunk(comm, op, slot_offset, count, static_cast<uint64_t*>(out)); return ncclSuccess;
    case ncclFloat32: reduce_chunk(comm, op, slot_offset, count, static_cast<float*>(out)); return ncclSuccess;
    case ncclFloat64: reduce_chunk(comm, op, slot_offset, count, static_cast<double*>(out)); return ncclSuccess;
    case ncclFloat16: return ncclInvalidArgument;
  }
  return ncclInvalidArgument;
}

// The checks NCCL makes on its arguments: a live communicator, known type and op, buffers in
// device memory of this rank's device, a valid stream.
ncclResult_t check(ncclComm* comm, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                   ncclDataType_t type, cudaStream_t stream) {
  if (comm == nullptr || comm->aborted || type_size(type) == 0) return ncclInvalidArgument;
  if (!ember_emu::stream_is_valid(stream)) return ncclInvalidArgument;
  int device = -1;
  if (send_bytes > 0 && (!ember_emu::in_device_memory(send, send_bytes, &device) || device != ember_emu::current_device()))
    return ncclInvalidArgument;
  if (recv_bytes > 0 && (!ember_emu::in_device_memory(recv, recv_bytes, &device) || device != ember_emu::current_device()))
    return ncclInvalidArgument;
  return ncclSuccess;
}

#define EMU_NCCL_TRY(call)                      \
  do {                                          \
    ncclResult_t emu_result_ = (call);          \
    if (emu_result_ != ncclSuccess) return emu_result_; \
  } while (0)

// A collective runs at its call (the ranks meet there), after the work queued on its stream so far
// (streams.cpp), so it reads what that work wrote. Not in a capture: not emulated.
ncclResult_t in_stream_order(cudaStream_t stream) {
  if (ember_emu::stream_capturing(stream)) return ncclInvalidUsage;
  return ember_emu::catch_up(stream) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id->internal, 0, sizeof id->internal);
  std::random_device random;
  std::snprintf(id->internal, sizeof id->internal, "/ember-nccl-emulator-%d-%08x%08x", int(getpid()), random(),
                random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks || id.internal[0] != '/') return ncclInvalidArgument;
  auto* comm = new ncclComm;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->map_bytes = 4096 + size_t(nranks) * kSlotBytes;
  const int fd = shm_open(id.internal, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, off_t(comm->map_bytes)) != 0) {
    if (fd >= 0) close(fd);
    delete comm;
    return ncclSystemError;
  }
  comm->map = mmap(nullptr, comm->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (comm->map == MAP_FAILED) {
    delete comm;
    return ncclSystemError;
  }
  comm->header = static_cast<Header*>(comm->map);  // zeros from ftruncate: no one has arrived
  comm->slots = static_cast<char*>(comm->map) + 4096;
  const ncclResult_t joined = barrier(comm);  // every rank has the segment mapped...
  if (rank == 0) shm_unlink(id.internal);      // ... so its name can go
  if (joined != ncclSuccess) {
    munmap(comm->map, comm->map_bytes);
    delete comm;
    return joined;
  }
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  munmap(comm->map, comm->map_bytes);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  *error = ncclSuccess;  // everything ran at its call: errors were returned there
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t item = type_size(type), bytes = count * item;
  EMU_NCCL_TRY(check(comm, send, bytes, recv, bytes, type, stream));
  EMU_NCCL_TRY(in_stream_order(stream));
  ember_emu::DeviceAccess access;
  ember_emu::count_launch("ncclAllReduce", stream);
  const size_t per_chunk = kSlotBytes / item;
  for (size_t done = 0; done < count; done += per_chunk) {
    const size_t n = count - done < per_chunk ? count - done : per_chunk;
    std::memcpy(comm->slot(comm->rank), static_cast<const char*>(send) + done * item, n * item);
    EMU_NCCL_TRY(barrier(comm));
    EMU_NCCL_TRY(reduce_slots(comm, type, op, 0, n, static_cast<char*>(recv) + done * item));
    EMU_NCCL_TRY(barrier(comm));
  }
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t item = type_size(type), bytes = count * item;
  if (comm == nullptr || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  EMU_NCCL_TRY(check(comm, comm->rank == root ? send : nullptr, comm->rank == root ? bytes : 0, recv, bytes, type,
                     stream));
  EMU_NCCL_TRY(in_stream_order(stream));
  ember_emu::DeviceAccess access;
  ember_emu::count_launch("ncclBroadcast", stream);
  for (size_t done = 0; done < bytes; done += kSlotBytes) {
    const size_t n = bytes - done < kSlotBytes ? bytes - done : kSlotBytes;
    if (comm->rank == root) std::memcpy(comm->slot(root), static_cast<const char*>(send) + done, n);
    EMU_NCCL_TRY(barrier(comm));
    std::memmove(static_cast<char*>(recv) + done, comm->slot(root), n);
    EMU_NCCL_TRY(barrier(comm));
  }
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t item = type_size(type), bytes = count * item;
  EMU_NCCL_TRY(check(comm, send, bytes, recv, bytes * size_t(comm != nullptr ? comm->nranks : 0), type, stream));
  EMU_NCCL_TRY(in_stream_order(stream));
  ember_emu::DeviceAccess access;
  ember_emu::count_launch("ncclAllGather", stream);
  for (size_t done = 0; done < bytes; done += kSlotBytes) {
    const size_t n = bytes - done < kSlotBytes ? bytes - done : kSlotBytes;
    std::memcpy(comm->slot(comm->rank), static_cast<const char*>(send) + done, n);
    EMU_NCCL_TRY(barrier(comm));
    for (int r = 0; r < comm->nranks; ++r)
      std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes + done, comm->slot(r), n);
    EMU_NCCL_TRY(barrier(comm));
  }
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  const size_t item = type_size(type), bytes = count * item;
  EMU_NCCL_TRY(check(comm, send, bytes * size_t(comm != nullptr ? comm->nranks : 0), recv, bytes, type, stream));
  EMU_NCCL_TRY(in_stream_order(stream));
  ember_emu::DeviceAccess access;
  ember_emu::count_launch("ncclReduceScatter", stream);
  // Chunk `part` of rank r's result: every rank puts that chunk of its segment r in its slot.
  const size_t per_chunk = kSlotBytes / item;
  for (int r = 0; r < comm->nranks; ++r)
    for (size_t done = 0; done < count; done += per_chunk) {
      const size_t n = count - done < per_chunk ? count - done : per_chunk;
      std::memcpy(comm->slot(comm->rank), static_cast<const char*>(send) + (size_t(r) * count + done) * item, n * item);
      EMU_NCCL_TRY(barrier(comm));
      if (r == comm->rank) EMU_NCCL_TRY(reduce_slots(comm, type, op, 0, n, static_cast<char*>(recv) + done * item));
      EMU_NCCL_TRY(barrier(comm));
    }
  return ncclSuccess;
}
