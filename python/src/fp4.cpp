// mantissa._core: NVFP4 and MXFP4 block casts on [rows, cols] float32 arrays
// (formats/fp4.hpp); mantissa/__init__.py moves the block axis last and
// reshapes. Codes come back one per byte or packed two per byte within each
// row (the low nibble first), as `encode(..., packed=True)` packs.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.hpp"
#include "mantissa/formats/fp4.hpp"
#include "mantissa/quant/hadamard.hpp"

namespace mantissa::py {
namespace {

namespace mf = mantissa::formats;

// "nvfp4" (tiles 1x16, 16x16) or "mxfp4" (1x32, 32x32).
mf::Fp4Spec fp4_spec(const std::string& scale, int64_t tile_rows, int64_t tile_cols) {
  mf::Fp4Spec s;
  const bool nv = scale == "nvfp4";
  if (!nv && scale != "mxfp4") throw nb::value_error(("scale: expected nvfp4 or mxfp4, got '" + scale + "'").c_str());
  s.scale = nv ? mf::Fp4Scale::nvfp4 : mf::Fp4Scale::mxfp4;
  const int64_t b = nv ? 16 : 32;
  if (!((tile_rows == 1 || tile_rows == b) && tile_cols == b))
    throw nb::value_error(("block: " + std::string(nv ? "NVFP4 blocks are 1x16 or 16x16" : "MXFP4 blocks are 1x32 or 32x32") +
                           ", got " + std::to_string(tile_rows) + "x" + std::to_string(tile_cols))
                              .c_str());
  s.tile_rows = tile_rows;
  s.tile_cols = tile_cols;
  return s;
}

void check_2d(size_t ndim, const char* name) {
  if (ndim != 2) throw nb::value_error((std::string(name) + ": expected a 2-D [rows, cols] array").c_str());
}

std::tuple<nb::object, nb::object, float> fp4_quantize(const In& x, const std::string& scale, int64_t tile_rows,
                                                       int64_t tile_cols, const std::string& round, nb::handle seed,
                                                       bool packed, bool headroom) {
  const float* in = f32_input(x);
  check_2d(x.ndim(), "x");
  mf::Fp4Spec s = fp4_spec(scale, tile_rows, tile_cols);
  if (round == "stochastic") s.rounding = mf::Fp4Rounding::stochastic;
  else if (round != "nearest-even" && round != "nearest")
    throw nb::value_error(("round: FP4 casts round nearest-even or stochastic, got '" + round + "'").c_str());
  if (headroom && s.scale != mf::Fp4Scale::mxfp4) throw nb::value_error("headroom: an MXFP4 option");
  s.seed = u64_arg(seed, "seed");
  s.headroom = headroom;
  const size_t rows = x.shape(0), cols = x.shape(1), kp = (cols + 1) / 2;
  auto codes = new_array<uint8_t>({rows, packed ? kp : cols});
  const auto r64 = static_cast<int64_t>(rows), c64 = static_cast<int64_t>(cols);
  auto scales = new_array<uint8_t>({static_cast<size_t>((r64 + tile_rows - 1) / tile_rows),
                                    static_cast<size_t>((c64 + tile_cols - 1) / tile_cols)});
  mf::Fp4Result r;
  {
    KernelScope release(x.size());
    std::vector<uint8_t> bytes(packed ? x.size() : 0);
    r = mf::fp4_cast(s, in, r64, c64, packed ? bytes.data() : codes.data(), scales.data(), nullptr);
    if (packed)
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < kp; ++j) {
          const uint8_t hi = 2 * j + 1 < cols ? bytes[i * cols + 2 * j + 1] : 0;
          codes.data()[i * kp + j] = static_cast<uint8_t>(bytes[i * cols + 2 * j] | (hi << 4));
        }
  }
  if (r.nonfinite) throw nb::value_error("x: holds inf or NaN, which FP4 has no code for");
  return {nb::cast(codes), nb::cast(scales), r.tensor_scale};
}

nb::object fp4_dequantize(const In& codes, const In& scales, float tensor_scale, const std::string& scale,
                          int64_t tile_rows, int64_t tile_cols, bool packed, size_t cols) {
  check_layout(codes, "codes");
  check_layout(scales, "scales");
  check_codes(codes, "codes", 1);
  check_codes(scales, "scales", 1);
  check_2d(codes.ndim(), "codes");
  check_2d(scales.ndim(), "scales");
  const mf::Fp4Spec s = fp4_spec(scale, tile_rows, tile_cols);
  const size_t rows = codes.shape(0), width = codes.shape(1);
  // ceil(cols / 2) without overflow: cols <= 2 x width, a real array's
  if (packed ? cols / 2 + cols % 2 != width : cols != width)
    throw nb::value_error(("count: " + std::to_string(cols) + " values per row do not match the codes' " +
                           std::to_string(width) + (packed ? " bytes" : " columns"))
                              .c_str());
  const auto r64 = static_cast<int64_t>(rows), c64 = static_cast<int64_t>(cols);
  if (scales.shape(0) != static_cast<size_t>((r64 + tile_rows - 1) / tile_rows) ||
      scales.shape(1) != static_cast<size_t>((c64 + tile_cols - 1) / tile_cols))
    throw nb::value_error("scales: shape must be [ceil(rows / block rows), ceil(cols / block cols)]");
  const auto* c = static_cast<const uint8_t*>(codes.data());
  if (!packed)
    for (size_t i = 0; i < codes.size(); ++i)
      if (c[i] > 15) throw nb::value_error(("codes: " + std::to_string(c[i]) + " is not an E2M1 code (0..15)").c_str());
  auto out = new_array<float>({rows, cols});
  {
    KernelScope release(rows * cols);
    std::vector<uint8_t> bytes;
    if (packed && cols % 2) {  // rows packed apart: one code a byte for the decoder
      bytes.resize(rows * cols);
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j) bytes[i * cols + j] = (c[i * width + j / 2] >> (4 * (j & 1))) & 0xF;
    }
    mf::Fp4Spec ds = s;
    ds.packed = packed && cols % 2 == 0;  // even rows: the per-row packing is the flat one
    std::vector<uint16_t> dec(rows * cols);
    mf::fp4_decode(ds, bytes.empty() ? c : bytes.data(), static_cast<const uint8_t*>(scales.data()), r64, c64,
                   dec.data());
    float* o = out.data();
    for (size_t k = 0; k < rows * cols; ++k) {
      uint32_t bits = static_cast<uint32_t>(dec[k]) << 16;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      o[k] = v * tensor_scale;  // q x s is exact; one fp32 rounding for the tensor scale (mxfp4: 1 or 4/3)
    }
  }
  return nb::cast(out);
}

// The 16-point random Hadamard transform of the FP4 recipes along rows (axis
// 0: groups of 16 rows) or columns (axis 1) of a 2-D array, signs from `seed`.
nb::object rht(const In& x, int axis, nb::handle seed, bool random) {
  const float* in = f32_input(x);
  check_2d(x.ndim(), "x");
  if (axis != 0 && axis != 1) throw nb::value_error(("axis: expected 0 or 1, got " + std::to_string(axis)).c_str());
  const size_t rows = x.shape(0), cols = x.shape(1);
  auto out = new_array<float>({rows, cols});
  const quant::RhtSigns s = quant::rht_signs(u64_arg(seed, "seed"), random);
  KernelScope release(x.size());
  if (axis == 0) quant::rht_rows(in, out.data(), static_cast<int64_t>(rows), static_cast<int64_t>(cols), s);
  else quant::rht_cols(in, out.data(), static_cast<int64_t>(rows), static_cast<int64_t>(cols), s);
  return nb::cast(out);
}

}  // namespace

void bind_fp4(nb::module_& m) {
  using namespace nb::literals;
  m.def("fp4_quantize", &fp4_quantize, "x"_a, "scale"_a, "tile_rows"_a, "tile_cols"_a, "round"_a = "nearest-even",
        "seed"_a = 0, "packed"_a = false, "headroom"_a = false,
        "NVFP4 / MXFP4 cast of a 2-D float32 array: (E2M1 codes, E4M3 / E8M0 block-scale codes, fp32 tensor scale).");
  m.def("fp4_dequantize", &fp4_dequantize, "codes"_a, "scales"_a, "tensor_scale"_a, "scale"_a, "tile_rows"_a,
        "tile_cols"_a, "packed"_a, "cols"_a, "E2M1 codes x block scales x tensor scale, float32.");
  m.def("rht", &rht, "x"_a, "axis"_a, "seed"_a = 0, "random"_a = true,
        "The FP4 recipes' 16-point (random) Hadamard transform of a 2-D float32 array along an axis.");
}

}  // namespace mantissa::py
