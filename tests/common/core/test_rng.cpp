// Philox against the published known-answer vectors, and the uniform mapping.
#include <catch2/catch.hpp>

#include <cstdint>

#include "mgpu/rng.h"

using namespace mgpu;

TEST_CASE("Philox4x32-10 matches the known-answer vectors", "[core][rng]") {
  // Vectors from the Random123 distribution's kat_vectors (Salmon et al. 2011).
  struct Vector {
    std::uint32_t counter[4], key[2], want[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Vector& t : vectors) {
    const Philox4 r = philox4x32_10(t.counter[0], t.counter[1], t.counter[2], t.counter[3],
                                    t.key[0], t.key[1]);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(t.counter[0], i);
      CHECK(r.v[i] == t.want[i]);
    }
  }
}

TEST_CASE("uniform values lie in [0, 1) and look uniform", "[core][rng]") {
  const int n = 100000;
  double sum = 0;
  int low = 0;
  for (int i = 0; i < n; ++i) {
    const float u = random_uniform(42, i);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    low += u < 0.25f;
  }
  CHECK(sum / n == Approx(0.5).margin(0.01));
  CHECK(low / double(n) == Approx(0.25).margin(0.01));
  CHECK(random_uniform(1, 7) != random_uniform(2, 7));
  CHECK(mix_seed(1, 0) != mix_seed(1, 1));
}
