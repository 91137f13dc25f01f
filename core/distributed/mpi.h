// The MPI backend (Open MPI from Debian's libopenmpi-dev): the group of every process of an
// mpirun / srun job, for CPU tensors. Built when CMake finds MPI; otherwise mpi_stub.cpp says how
// to get it.
#pragma once
#include <memory>

#include "core/distributed/process_group.h"

namespace ember::distributed {

// Whether this Ember was built with MPI.
bool built_with_mpi();

// Initialises MPI (MPI_THREAD_MULTIPLE: the communication thread calls it too) and returns the
// group of every process of the job (a duplicate of MPI_COMM_WORLD); destroying it finalises MPI.
// A collective still running after timeout_seconds ends the whole job with an error that names
// it (0: no timeout). Once per process.
std::unique_ptr<ProcessGroup> make_mpi_world(double timeout_seconds);

}  // namespace ember::distributed
