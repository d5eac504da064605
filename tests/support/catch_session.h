// Catch2's session, behind one function: its implementation (most of Catch2's 17,000-line
// header) is compiled once, in catch_session.cpp, for both runners (main.cpp,
// mpi_main.cpp), instead of once in each of them.
#pragma once

#include <string>

namespace mgpu::testing {

/// Runs the test cases argv selects, as `Catch::Session().run(argc, argv)` does, and returns
/// its status. With a non-empty `report_path`, the reporter writes there, without colour
/// (a rank other than 0 of a multi-rank test, whose report rank 0 reads as text later).
int run_catch_session(int argc, char** argv, const std::string& report_path = "");

}  // namespace mgpu::testing
