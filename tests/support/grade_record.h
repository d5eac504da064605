// Records what the code under test produced, for verdicts decided outside the tested
// process. Where MGPU_GRADE_RECORD names a file (tools/grade --submission sets it), each
// record() appends one line "case<TAB>key<TAB>tolerance<TAB>n<TAB>values..." to it (under
// mpirun each rank to its own file, the name followed by ".rankR"); elsewhere it does
// nothing. The grader runs the reference build on the same --rng-seed and fails a case
// whose records are missing or differ from the reference's by more than the reference's
// tolerance, whatever the tested process reports. The tolerance is absolute ("1e-05":
// |v - w| <= 1e-05) or relative ("rel:1e-12": |v - w| <= 1e-12 (|w| + 1)), w the
// reference's value, or "text" (the values are one text, matched exactly: see
// grade_listener.h). Long results keep 4096 evenly spread elements.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "mgpu/tensor.h"

namespace mgpu::testing {

/// The file this process records into ("" when results are not recorded).
inline std::string grade_record_path() {
  const char* path = std::getenv("MGPU_GRADE_RECORD");
  if (path == nullptr || *path == '\0') return "";
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMI_RANK");
  return rank != nullptr && *rank != '\0' ? std::string(path) + ".rank" + rank : std::string(path);
}

/// Appends values under `key` in the running test case with `tolerance` (see the file
/// comment: a number, or "rel:" and a number).
inline void record(const std::string& key, const std::vector<double>& values,
                   const std::string& tolerance) {
  const std::string path = grade_record_path();
  if (path.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return;
  const std::size_t n = values.size(), kept = n <= 4096 ? n : 4096;
  std::fprintf(f, "%s\t%s\t%s\t%zu\t", Catch::getResultCapture().getCurrentTestName().c_str(),
               key.c_str(), tolerance.c_str(), n);
  for (std::size_t k = 0; k < kept; ++k) std::fprintf(f, " %.17g", values[k * n / kept]);
  std::fputc('\n', f);
  std::fclose(f);
}

/// record() with an absolute tolerance.
inline void record(const std::string& key, const std::vector<double>& values, double atol) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", atol);
  record(key, values, std::string(text));
}

/// record() of a tensor's elements (any device, any dtype).
inline void record(const std::string& key, const Tensor& t, double atol) {
  record(key, t.to_vector<double>(), atol);
}

/// record() of one value.
inline void record(const std::string& key, double value, double atol) {
  record(key, std::vector<double>{value}, atol);
}

/// "NAME #k": the k-th key of that name in the running test case (counted from 1 in this
/// process), for records of one helper that a case calls several times.
inline std::string numbered_key(const std::string& name) {
  static std::map<std::string, int> counts;
  const std::string test = Catch::getResultCapture().getCurrentTestName();
  return name + " #" + std::to_string(++counts[test + "\t" + name]);
}

}  // namespace mgpu::testing
