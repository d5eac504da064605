// Test cases for a test of the multi-rank runner itself (tests/support/mpi_main.cpp): a case
// that fails on the last rank only must fail the job on every rank, each rank exiting with
// the failing status after a clean MPI shutdown. Hidden ([.]): only that test runs them.
#include <catch2/catch.hpp>

#include "mgpu/dist/runtime.h"

TEST_CASE("this case fails on the last rank only", "[.][runner_probe]") {
  const bool last = mgpu::dist::rank() == mgpu::dist::world_size() - 1;
  CHECK_FALSE(last);
}

TEST_CASE("this case passes everywhere", "[.][runner_probe]") { CHECK(mgpu::dist::world_size() >= 1); }
