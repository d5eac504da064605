// The Catch2 listener every test runner registers (main.cpp, mpi_main.cpp), after
// grade_record.h: where results are recorded, it records each equality a case checks
// (`CHECK(a == b)`) as Catch2 printed it ("3 == 3") under "== #k", matched as text. The
// grader leaves out texts with a fractional number, a path or an address, which may differ
// between two correct programs. Included only where Catch2's runner is compiled.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "grade_record.h"

namespace mgpu::testing {

/// Catch2 listener: records the expansion of each checked equality (`CHECK(a == b)`: the
/// text "3 == 3") under "== #k" with the tolerance "text" (matched exactly), where results
/// are recorded. Catch2 reports every check to its listeners, passed ones too (not to
/// the report, unless -s).
class GradeRecordListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  /// Records one assertion's expansion when it checks an equality.
  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const Catch::AssertionResult& r = stats.assertionResult;
    if (r.hasExpression() && r.getExpression().find("==") != std::string::npos &&
        !grade_record_path().empty()) {
      std::string text = r.getExpandedExpression().substr(0, 8192);
      for (char& c : text)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
      record_text(numbered_key("=="), text);
    }
    return TestEventListenerBase::assertionEnded(stats);
  }

 private:
  static void record_text(const std::string& key, const std::string& text) {
    std::FILE* f = std::fopen(grade_record_path().c_str(), "a");
    if (f == nullptr) return;
    std::fprintf(f, "%s\t%s\ttext\t1\t%s\n",
                 Catch::getResultCapture().getCurrentTestName().c_str(), key.c_str(), text.c_str());
    std::fclose(f);
  }
};

}  // namespace mgpu::testing
