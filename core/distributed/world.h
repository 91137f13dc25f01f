// The world: the group of every process of this job. One process on its own, or every rank of
// an mpirun / srun launch (then MPI's group, mpi.h).
#pragma once
#include <memory>
#include <string>

#include "core/distributed/process_group.h"

namespace ember::distributed {

// What the launcher told this process through its environment (Open MPI's OMPI_COMM_WORLD_*,
// PMIx's PMIX_RANK, Slurm's SLURM_PROCID / SLURM_STEP_NUM_TASKS, MPICH's PMI_*).
struct LaunchInfo {
  bool launched = false;  // started by an MPI launcher (even as a job of one process)
  int rank = 0, size = 1;  // size 0: the launcher did not say
  int local_rank = 0;     // among the processes on this machine (picks the GPU)
  int local_size = 1;     // processes of the job on this machine (share its cores)
  std::string launcher;   // "mpirun", "srun", "pmi" or "" when not launched
};
LaunchInfo launch_info();

double default_timeout_seconds();  // EMBER_DIST_TIMEOUT, else 300

// The group of every process of the job: MPI's when this process was launched by an MPI
// launcher, else a group of one (collectives that change nothing), so that the same training
// code runs in both. A launched process in a build without MPI is an ember::Error saying how to
// get the distributed build. timeout_seconds: see make_mpi_world (0 = none).
std::unique_ptr<ProcessGroup> init_world(double timeout_seconds = default_timeout_seconds());

// A group of one process: rank 0 of 1, on `device`.
std::unique_ptr<ProcessGroup> make_single_process_group(Device device = Device::cpu());

}  // namespace ember::distributed
