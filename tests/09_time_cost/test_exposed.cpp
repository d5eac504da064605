// Lesson 09, task 1: exposed communication from hand-made timelines.
#include <catch2/catch.hpp>

#include "mgpu/perf/time_cost.h"

using namespace mgpu;
using namespace mgpu::perf;

namespace {

void check_split(const CommSplit& s, double busy, double hidden, double exposed) {
  CHECK(s.busy_s == Approx(busy).margin(1e-12));
  CHECK(s.hidden_s == Approx(hidden).margin(1e-12));
  CHECK(s.exposed_s == Approx(exposed).margin(1e-12));
}

}  // namespace

TEST_CASE("task1: no buckets, nothing to hide", "[09_time_cost][task1][points:1]") {
  check_split(split_communication({}, {0, 10}), 0, 0, 0);
}

TEST_CASE("task1: buckets inside backward are fully hidden", "[09_time_cost][task1][points:1]") {
  //  compute [0 ............ 10]
  //  comm       [2 4]  [5  8]
  check_split(split_communication({{2, 4}, {5, 8}}, {0, 10}), 5, 5, 0);
}

TEST_CASE("task1: buckets after backward are all exposed", "[09_time_cost][task1][points:1]") {
  //  compute [0 .. 10]
  //  comm               [10 13] [14 15]
  check_split(split_communication({{10, 13}, {14, 15}}, {0, 10}), 4, 0, 4);
}

TEST_CASE("task1: a bucket that outlasts backward is partly hidden", "[09_time_cost][task1][points:1]") {
  //  compute [0 ....... 10]
  //  comm          [6 ........ 15]   hidden 4, exposed 5
  check_split(split_communication({{6, 15}}, {0, 10}), 9, 4, 5);
  // The typical DDP step: early buckets hidden, the last one (ready when backward ends) not.
  check_split(split_communication({{3, 5}, {6, 9}, {10, 12.5}}, {0, 10}), 7.5, 5, 2.5);
}

TEST_CASE("task1: overlapping buckets count once, in any order", "[09_time_cost][task1][points:3]") {
  // The contract's example: union [1,5] [7,8] -> busy 5, hidden [1,4] = 3, exposed 2.
  check_split(split_communication({{1, 3}, {2, 5}, {7, 8}}, {0, 4}), 5, 3, 2);
  check_split(split_communication({{7, 8}, {2, 5}, {1, 3}}, {0, 4}), 5, 3, 2);
  // One bucket inside another, and two that touch: [0, 6] and [6, 9] make one [0, 9].
  check_split(split_communication({{0, 6}, {1, 2}, {6, 9}}, {2, 7}), 9, 5, 4);
  // Several buckets in flight at once, all over the end of backward.
  check_split(split_communication({{8, 12}, {9, 11}, {9.5, 13}}, {0, 10}), 5, 2, 3);
  // Communication before the window counts as exposed too.
  check_split(split_communication({{-3, -1}, {1, 2}}, {0, 10}), 3, 1, 2);
  // Empty intervals (a bucket launched and finished at once) add nothing.
  check_split(split_communication({{4, 4}, {12, 12}}, {0, 10}), 0, 0, 0);
  // Intervals that end before they begin are refused, naming the bucket.
  CHECK_THROWS_AS(split_communication({{1, 2}, {5, 3}}, {0, 10}), Error);
  CHECK_THROWS_WITH(split_communication({{1, 2}, {5, 3}}, {0, 10}), Catch::Contains("bucket 1"));
  CHECK_THROWS_AS(split_communication({{1, 2}}, {10, 0}), Error);
}
