// The 16-point RHT (quant/hadamard.hpp): the signs here, the transform in
// formats/hadamard16.hpp (the FP4 casts apply it in the same pass).
#include "mantissa/quant/hadamard.hpp"

#include "mantissa/formats/hadamard16.hpp"

namespace mantissa::quant {

RhtSigns rht_signs(uint64_t seed, bool random) {
  RhtSigns s;
  uint64_t z = seed;
  for (int i = 0; i < 16; ++i) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t w = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    w = (w ^ (w >> 27)) * 0x94D049BB133111EBull;
    w ^= w >> 31;
    s[i] = !random || (w >> 63) == 0 ? 1.0f : -1.0f;
  }
  return s;
}

void rht_rows(const float* in, float* out, int64_t rows, int64_t cols, const RhtSigns& signs) {
  formats::hadamard16(in, out, rows, cols, 1, signs.data());
}

void rht_rows(float* x, int64_t rows, int64_t cols, const RhtSigns& signs) { rht_rows(x, x, rows, cols, signs); }

void rht_cols(const float* in, float* out, int64_t rows, int64_t cols, const RhtSigns& signs) {
  formats::hadamard16(in, out, rows, cols, 2, signs.data());
}

}  // namespace mantissa::quant
