// tests/common/mpi_world.hpp — this process's place in MPI_COMM_WORLD, for the MPI tests.
#pragma once

#include <mpi.h>

namespace dtrain::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace dtrain::test
