// The MPI backend of a build without MPI: says so, and how to get the distributed build.
#include <memory>

#include "core/distributed/mpi.h"

#include "core/error.h"

namespace ember::distributed {

bool built_with_mpi() { return false; }

std::unique_ptr<ProcessGroup> make_mpi_world(double) {
  fail("this Ember was built without MPI, so it cannot run as one of several processes: install Open MPI "
       "(apt-get install libopenmpi-dev openmpi-bin, or scripts/setup.sh) and configure the build again "
       "(README, 'Training on several processes')");
}

}  // namespace ember::distributed
