// The FP4 recipes' casts at the reference GPT's shapes (batch 16 x T 128 =
// 2048 rows; d_model 256 and the MLP's 1024), each beside a reference in the
// same run:
//   wgrad_two_pass   the Hadamard transform into an fp32 copy, then the cast
//   wgrad_fused      the same cast with the rotation inside (Fp4Spec::rht_signs)
//                    counter `vs_two_pass` = its time / the two-pass time
//   saved_bf16       the Wgrad cast of a saved activation writing its bf16 decode
//   saved_packed     the same writing packed codes + scales; `decode` the
//                    decode of those in backward; counter `vs_bf16` = time / saved_bf16
//   recipe_<cast>    each cast the nvfp4 and mxfp4 recipes run on an activation or
//                    gradient, as the quantiser specifies it (CPU time: set
//                    OMP_NUM_THREADS=1 on a loaded host)
// Times are per call with the library's threads (OpenMP).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mantissa/formats/fp4.hpp"
#include "mantissa/formats/hadamard16.hpp"

namespace mf = mantissa::formats;

namespace {

constexpr float kSigns[16] = {1, -1, 1, 1, -1, -1, 1, -1, 1, 1, 1, -1, -1, 1, -1, 1};

const std::vector<float>& input(int64_t n) {
  static std::map<int64_t, std::vector<float>> cache;
  std::vector<float>& v = cache[n];
  if (v.empty()) {
    v.resize(static_cast<size_t>(n));
    std::mt19937 rng(1);
    std::student_t_distribution<float> t(3.0f);
    for (float& x : v) x = t(rng);
  }
  return v;
}

// Seconds per call of f, best of 3 rounds.
template <class F>
double seconds(F&& f, int reps) {
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

enum class Kind { two_pass, fused, saved_bf16, saved_packed, decode };

void bm_fp4(benchmark::State& state, Kind kind) {
  const int64_t rows = 2048, cols = state.range(0), n = rows * cols;
  const std::vector<float>& x = input(n);
  std::vector<float> rotated(static_cast<size_t>(n));
  std::vector<uint16_t> dec(static_cast<size_t>(n));
  std::vector<uint8_t> packed(static_cast<size_t>((n + 1) / 2)), scales(static_cast<size_t>(n / 16 + cols));
  mf::Fp4Spec wgrad{.tile_rows = 16, .tile_cols = 1, .rounding = mf::Fp4Rounding::stochastic, .seed = 3};
  mf::Fp4Spec fused = wgrad;
  fused.rht_signs = kSigns;
  mf::Fp4Spec pack = fused;
  pack.packed = true;
  auto two_pass = [&] {
    mf::hadamard16(x.data(), rotated.data(), rows, cols, 1, kSigns);
    mf::fp4_cast(wgrad, rotated.data(), rows, cols, nullptr, nullptr, dec.data());
  };
  auto one_pass = [&] { mf::fp4_cast(fused, x.data(), rows, cols, nullptr, nullptr, dec.data()); };
  auto packed_cast = [&] { mf::fp4_cast(pack, x.data(), rows, cols, packed.data(), scales.data(), nullptr); };
  auto decode = [&] { mf::fp4_decode(pack, packed.data(), scales.data(), rows, cols, dec.data()); };
  packed_cast();
  std::function<void()> f = kind == Kind::two_pass ? std::function<void()>(two_pass)
                            : kind == Kind::fused || kind == Kind::saved_bf16 ? std::function<void()>(one_pass)
                            : kind == Kind::saved_packed ? std::function<void()>(packed_cast)
                                                         : std::function<void()>(decode);
  for (auto _ : state) {
    f();
    benchmark::ClobberMemory();
  }
  const int reps = 20;
  if (kind == Kind::fused) state.counters["vs_two_pass"] = seconds(one_pass, reps) / seconds(two_pass, reps);
  if (kind == Kind::saved_packed || kind == Kind::decode)
    state.counters["vs_bf16"] = seconds(f, reps) / seconds(one_pass, reps);
  state.SetItemsProcessed(state.iterations() * n);
}

// The casts of quant/fp4.hpp's quantiser: forward x (1 x b), dgrad dy
// (1 x b), wgrad dy (b x 1, rotated) and the saved wgrad x (b x 1, rotated,
// packed); mxfp4 rounds every backward input stochastically with headroom and
// rotates dgrad's dy along its row too.
struct RecipeCast {
  mf::Fp4Spec spec;
  bool packed;
};
RecipeCast recipe_cast(mf::Fp4Scale scale, int kind) {
  const bool mx = scale == mf::Fp4Scale::mxfp4;
  const int64_t b = mx ? 32 : 16;
  mf::Fp4Spec s{.scale = scale, .tile_rows = 1, .tile_cols = b, .seed = 3};
  if (kind == 0) return {s, false};  // forward x
  s.rounding = mf::Fp4Rounding::stochastic;
  s.headroom = mx;
  if (kind == 1) {  // dgrad dy
    if (mx) {
      s.rht_signs = kSigns;
      s.rht_axis = 2;
    }
    return {s, false};
  }
  s.tile_rows = b;
  s.tile_cols = 1;
  s.rht_signs = kSigns;
  s.rht_axis = 1;
  if (kind == 2) return {s, false};  // wgrad dy
  if (!mx) s.rounding = mf::Fp4Rounding::nearest_even;
  s.packed = true;
  return {s, true};  // saved wgrad x
}

void bm_recipe(benchmark::State& state, mf::Fp4Scale scale, int kind) {
  const int64_t rows = 2048, cols = state.range(0), n = rows * cols;
  const std::vector<float>& x = input(n);
  std::vector<uint16_t> dec(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n)), scales(static_cast<size_t>(n / 16 + cols));
  const RecipeCast c = recipe_cast(scale, kind);
  for (auto _ : state) {
    if (c.packed) mf::fp4_cast(c.spec, x.data(), rows, cols, codes.data(), scales.data(), nullptr);
    else mf::fp4_cast(c.spec, x.data(), rows, cols, nullptr, nullptr, dec.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

}  // namespace

#define MANTISSA_RECIPE_CAST(name, scale, kind) \
  BENCHMARK_CAPTURE(bm_recipe, name, scale, kind)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)
MANTISSA_RECIPE_CAST(recipe_nvfp4_forward_x, mf::Fp4Scale::nvfp4, 0);
MANTISSA_RECIPE_CAST(recipe_nvfp4_dgrad_dy, mf::Fp4Scale::nvfp4, 1);
MANTISSA_RECIPE_CAST(recipe_nvfp4_wgrad_dy, mf::Fp4Scale::nvfp4, 2);
MANTISSA_RECIPE_CAST(recipe_nvfp4_saved_x, mf::Fp4Scale::nvfp4, 3);
MANTISSA_RECIPE_CAST(recipe_mxfp4_dgrad_dy, mf::Fp4Scale::mxfp4, 1);
MANTISSA_RECIPE_CAST(recipe_mxfp4_wgrad_dy, mf::Fp4Scale::mxfp4, 2);
MANTISSA_RECIPE_CAST(recipe_mxfp4_saved_x, mf::Fp4Scale::mxfp4, 3);

BENCHMARK_CAPTURE(bm_fp4, wgrad_two_pass, Kind::two_pass)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_fp4, wgrad_fused, Kind::fused)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_fp4, saved_bf16, Kind::saved_bf16)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_fp4, saved_packed, Kind::saved_packed)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_fp4, decode, Kind::decode)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
