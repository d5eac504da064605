// Lesson 15, task 3 in one process: intersect_slices, the slice a rank reads from a stored
// chunk of another layout, against the definition (an element is in the overlap exactly
// when it is in both slices), on hand-made cases and on every pair of slices of small shapes.
#include "reshard_test_util.h"

using namespace reshard_test;

TEST_CASE("task3: intersect_slices: the overlap in the tensor and inside each slice",
          "[15_3d_parallel][task3][points:2]") {
  io::SliceOverlap ov;
  // Rows 2-5 of a chunk, rows 4-9 and columns 1-2 wanted: rows 4-5, columns 1-2.
  REQUIRE(io::intersect_slices(io::Slice{{2, 0}, {4, 4}}, io::Slice{{4, 1}, {6, 2}}, ov));
  CHECK(ov.global == io::Slice{{4, 1}, {2, 2}});
  CHECK(ov.in_stored == std::vector<std::int64_t>{2, 1});
  CHECK(ov.in_wanted == std::vector<std::int64_t>{0, 0});
  // The wanted slice inside the chunk: all of it.
  REQUIRE(io::intersect_slices(io::Slice{{0, 0}, {8, 6}}, io::Slice{{3, 2}, {2, 3}}, ov));
  CHECK(ov.global == io::Slice{{3, 2}, {2, 3}});
  CHECK(ov.in_stored == std::vector<std::int64_t>{3, 2});
  CHECK(ov.in_wanted == std::vector<std::int64_t>{0, 0});
  // A 0-d tensor: its one element is in both.
  io::SliceOverlap scalar;
  scalar.in_stored = {7};
  REQUIRE(io::intersect_slices(io::Slice{}, io::Slice{}, scalar));
  CHECK(scalar.global.offsets.empty());
  CHECK(scalar.in_stored.empty());
}

TEST_CASE("task3: slices that only touch, or miss along one dimension, share nothing; out is "
          "left as it was", "[15_3d_parallel][task3][points:2]") {
  io::SliceOverlap ov;
  ov.global = io::Slice{{9}, {9}};
  CHECK_FALSE(io::intersect_slices(io::Slice{{0}, {3}}, io::Slice{{3}, {2}}, ov));  // [0,3) and [3,5)
  CHECK(ov.global == io::Slice{{9}, {9}});
  CHECK_FALSE(io::intersect_slices(io::Slice{{0, 0}, {4, 4}}, io::Slice{{1, 5}, {2, 2}}, ov));
  CHECK(ov.global == io::Slice{{9}, {9}});
  CHECK_FALSE(io::intersect_slices(io::Slice{{2, 0}, {0, 4}}, io::Slice{{0, 0}, {4, 4}}, ov));  // empty
  CHECK(io::intersect_slices(io::Slice{{0, 0}, {4, 4}}, io::Slice{{3, 3}, {2, 2}}, ov));       // one corner
  CHECK(ov.global == io::Slice{{3, 3}, {1, 1}});
  CHECK(ov.in_stored == std::vector<std::int64_t>{3, 3});
  CHECK(ov.in_wanted == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("task3: every pair of slices of a 3x4x2 tensor: the overlap holds exactly the "
          "elements of both", "[15_3d_parallel][task3][points:2]") {
  const Shape shape{3, 4, 2};
  // Every box of the shape (begin and length along each dimension).
  std::vector<io::Slice> boxes;
  for (std::int64_t a = 0; a < 3; ++a)
    for (std::int64_t la = 1; a + la <= 3; ++la)
      for (std::int64_t b = 0; b < 4; b += 1)
        for (std::int64_t lb = 1; b + lb <= 4; lb += 2)
          for (std::int64_t c = 0; c < 2; ++c)
            for (std::int64_t lc = 1; c + lc <= 2; ++lc) boxes.push_back(io::Slice{{a, b, c}, {la, lb, lc}});
  const auto indices = all_indices(shape);
  std::int64_t wrong = 0, pairs = 0;
  for (const io::Slice& s : boxes)
    for (const io::Slice& w : boxes) {
      io::SliceOverlap ov;
      const bool any = io::intersect_slices(s, w, ov);
      ++pairs;
      std::int64_t both = 0;
      for (const auto& i : indices) {
        const bool in = holds(s, i) && holds(w, i);
        both += in ? 1 : 0;
        if (any && in != holds(ov.global, i)) ++wrong;
      }
      if (any != (both > 0)) ++wrong;
      if (!any) continue;
      for (std::size_t d = 0; d < 3; ++d)
        if (ov.in_stored[d] != ov.global.offsets[d] - s.offsets[d] ||
            ov.in_wanted[d] != ov.global.offsets[d] - w.offsets[d])
          ++wrong;
    }
  INFO(wrong << " wrong answers over " << pairs << " pairs of slices");
  CHECK(wrong == 0);
}
