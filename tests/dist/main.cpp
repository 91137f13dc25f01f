// The distributed tests' entry point. Started by mpirun (ctest: dist_np2, dist_np3), every rank
// runs every test case, in the same order: a test case is a collective. Started on its own it is
// a job of one process, and the same cases run on a group of one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <exception>
#include <memory>

#include "core/distributed/world.h"
#include "core/parallel.h"

namespace {
std::unique_ptr<ember::distributed::ProcessGroup> the_world;
}

namespace ember::testing {
distributed::ProcessGroup& world() { return *the_world; }
}  // namespace ember::testing

int main(int argc, char** argv) {
  try {
    the_world = ember::distributed::init_world();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  ember::set_num_threads(1);  // ranks share the machine's cores
  doctest::Context context(argc, argv);
  if (the_world->rank() != 0) context.setOption("no-intro", true);
  if (the_world->size() > 1) context.setOption("no-colors", true);  // mpirun merges the ranks' output
  const int result = context.run();
  the_world.reset();  // MPI_Finalize
  return result;
}
