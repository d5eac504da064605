// The Catch2 listener every test runner registers (main.cpp, mpi_main.cpp), after
// grade_record.h: where results are recorded, it records each equality a case checks
// (`CHECK(a == b)`) under "== #k": the left side only, as Catch2 printed it ("3"), which a
// case's tests write as the value the code under test produced. The expected side is never
// written, so the record file holds nothing a forgery could copy into the other side; the
// grader compares the left side with the reference build's on the same inputs. Each case
// also records its outcome as the case ends ("outcome": "passed" or "failed"), so a case
// whose code computes nothing to record still has a verdict in the file, written before
// the process reaches its exit. Included only where Catch2's runner is compiled.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "grade_record.h"

namespace mgpu::testing {

/// Catch2 listener: records the left side of each checked equality (`CHECK(a == b)` checking
/// 3 == 3 records "3") with the tolerance "text" (matched exactly), or "approx" where the
/// other side is Catch2's `Approx(y)` (compared as a number), where results are recorded.
/// Catch2 reports every check to its listeners, passed ones too (not to the report, unless
/// -s). An expansion without exactly one " == " (`CHECK((a == b || c))`: "true") records
/// nothing.
class GradeRecordListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  /// Records one assertion's left side when it checks an equality.
  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const Catch::AssertionResult& r = stats.assertionResult;
    if (r.hasExpression() && r.getExpression().find("==") != std::string::npos &&
        !grade_record_path().empty()) {
      std::string text = r.getExpandedExpression().substr(0, 8192);
      for (char& c : text)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
      const std::size_t eq = text.find(" == ");
      if (eq != std::string::npos && text.find(" == ", eq + 4) == std::string::npos) {
        const std::string left = text.substr(0, eq), right = text.substr(eq + 4);
        const bool approx_left = left.rfind("Approx( ", 0) == 0;
        const bool approx = approx_left || right.rfind("Approx( ", 0) == 0;
        record_text(numbered_key("=="), approx_left ? right : left, approx ? "approx" : "text");
      }
    }
    return TestEventListenerBase::assertionEnded(stats);
  }

  /// Records the case's outcome as it ends: "passed" when none of its checks failed.
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (!grade_record_path().empty())
      record_text("outcome", stats.totals.assertions.allOk() ? "passed" : "failed", "text");
    TestEventListenerBase::testCaseEnded(stats);
  }

 private:
  static void record_text(const std::string& key, const std::string& text, const char* kind) {
    std::FILE* f = std::fopen(grade_record_path().c_str(), "a");
    if (f == nullptr) return;
    std::fprintf(f, "%s\t%s\t%s\t1\t%s\n",
                 Catch::getResultCapture().getCurrentTestName().c_str(), key.c_str(), kind,
                 text.c_str());
    std::fclose(f);
  }
};

}  // namespace mgpu::testing
