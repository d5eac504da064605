// Catch2's implementation and session, compiled once for both runners (see catch_session.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.h"

namespace mgpu::testing {

int run_catch_session(int argc, char** argv, const std::string& report_path) {
  Catch::Session session;
  const int rc = session.applyCommandLine(argc, argv);
  if (rc != 0) return rc;
  if (!report_path.empty()) {
    session.configData().outputFilename = report_path;
    session.configData().useColour = Catch::UseColour::No;  // it is read as text later
  }
  return session.run();
}  // the session (and its report file) is closed here

}  // namespace mgpu::testing
