// Function target attributes for the vector tiers of cpu::Isa. Kernels are
// compiled for any x86-64 target: each vector function carries its tier's
// attribute and runs only after the table in its family chose it.
#pragma once

// AVX2 + FMA + F16C: the avx2 tier (vcvtps2ph/vcvtph2ps on 8 lanes).
#define MANTISSA_AVX2 __attribute__((target("avx2,fma,f16c")))
