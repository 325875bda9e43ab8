// splitmix64 (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators";
// constants as in Vigna's reference splitmix64.c): the one generator behind every random choice
// the project makes (synthetic tokens and sample order, weight initialisation, the run
// simulation's seeds). Never std::*_distribution, so every platform gets the same numbers.
#pragma once

#include <cstdint>

namespace capplan {

// Advances *state and returns the next output.
inline uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace capplan
