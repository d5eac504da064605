// Philox against the published known-answer vectors, and the uniform mapping.
#include <catch2/catch.hpp>

#include "mgpu/rng.h"

using namespace mgpu;

TEST_CASE("Philox4x32-10 matches the known-answer vectors", "[core][rng]") {
  // Vectors from the Random123 distribution's kat_vectors (Salmon et al. 2011).
  Philox4 z = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(z.v[0] == 0x6627e8d5u);
  CHECK(z.v[1] == 0xe169c58du);
  CHECK(z.v[2] == 0xbc57ac4cu);
  CHECK(z.v[3] == 0x9b00dbd8u);
  Philox4 f = philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                            0xffffffffu);
  CHECK(f.v[0] == 0x408f276du);
  CHECK(f.v[1] == 0x41c83b0eu);
  CHECK(f.v[2] == 0xa20bc7c6u);
  CHECK(f.v[3] == 0x6d5451fdu);
  Philox4 p = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u,
                            0x299f31d0u);
  CHECK(p.v[0] == 0xd16cfe09u);
  CHECK(p.v[1] == 0x94fdccebu);
  CHECK(p.v[2] == 0x5001e420u);
  CHECK(p.v[3] == 0x24126ea1u);
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
