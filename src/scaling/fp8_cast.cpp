// FP8 casts with power-of-two scales (per tensor or per tile) and the exact
// bf16 decode the matrix products run on. See scaling/fp8.hpp.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/scaling/fp8.hpp"

namespace mantissa::scaling {
namespace {

using autograd::BlockScales;
using autograd::QuantisedOperand;

// Elements per formats::quantize call inside a parallel loop: small enough
// for the scaled copy to stay in L1/L2, large enough to amortise the call.
constexpr int64_t kChunk = 4096;

// Largest k with amax x 2^k <= max (amax > 0, finite), by exact comparisons.
int largest_fitting_shift(double format_max, double amax) {
  int k = std::ilogb(format_max) - std::ilogb(amax);
  while (std::ldexp(amax, k) > format_max) --k;
  while (std::ldexp(amax, k + 1) <= format_max) ++k;
  return k;
}

bool same_layout(const formats::Format& a, const formats::Format& b) {
  return a.kind == b.kind && a.exponent_bits == b.exponent_bits && a.mantissa_bits == b.mantissa_bits &&
         a.bias == b.bias && a.has_inf == b.has_inf && a.nan == b.nan && a.negative_zero == b.negative_zero &&
         a.subnormals == b.subnormals && a.is_signed == b.is_signed;
}

// code -> bf16 bits and code -> float of one 1-byte dtype, built once.
struct DecodeTable {
  std::array<uint16_t, 256> bf16{};
  std::array<float, 256> value{};
};
const DecodeTable& decode_table(DType t) {
  static const auto tables = [] {
    std::array<DecodeTable, 4> all{};
    const DType types[] = {DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz};
    for (int i = 0; i < 4; ++i) {
      const formats::Format& f = formats::preset(dtype_format_name(types[i]));
      for (uint32_t c = 0; c < 256; ++c) {
        const float v = formats::decode_f32(f, c);
        all[static_cast<size_t>(i)].value[c] = v;
        // Exact: FP8 values have <= 4 significant bits and bf16's exponent range.
        all[static_cast<size_t>(i)].bf16[c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
      }
    }
    return all;
  }();
  switch (t) {
    case DType::e4m3fn: return tables[0];
    case DType::e5m2: return tables[1];
    case DType::e4m3fnuz: return tables[2];
    case DType::e5m2fnuz: return tables[3];
    default: throw std::invalid_argument(std::string("no FP8 decode table for dtype ") + dtype_name(t));
  }
}

void require_f32(const Tensor& x, const char* what) {
  if (x.dtype() != DType::f32) throw std::invalid_argument(std::string(what) + ": input must be f32, got " + dtype_name(x.dtype()));
}

// codes[i] = encode(x[i] x mult) in parallel chunks; returns the number of
// finite values whose scaled magnitude exceeds the format's max.
int64_t scaled_quantize(const formats::Format& f, const float* x, uint8_t* codes, int64_t n, float mult,
                        const formats::RoundOptions& opt) {
  const float fmax = static_cast<float>(f.max());
  int64_t saturated = 0;
#pragma omp parallel for reduction(+ : saturated) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    float tmp[kChunk];
    for (int64_t i = 0; i < len; ++i) {
      tmp[i] = x[c0 + i] * mult;
      saturated += std::fabs(tmp[i]) > fmax && std::isfinite(x[c0 + i]);
    }
    formats::quantize(f, tmp, codes + c0, static_cast<size_t>(len), opt);
  }
  return saturated;
}

}  // namespace

// ---- scale rules --------------------------------------------------------------------------
int per_tensor_exponent(double format_max, double amax, int margin) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  return std::clamp(margin - largest_fitting_shift(format_max, amax), -126, 126);
}

int mx_exponent(const formats::Format& element, double amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return amax > 0 ? 0 : -127;
  return std::clamp(std::ilogb(amax) - element.max_exponent(), -127, 127);
}

int blockwise_exponent(double format_max, double amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 0;
  return std::clamp(-largest_fitting_shift(format_max, amax), -127, 127);
}

Amax amax_of(const float* x, int64_t n) {
  float m = 0;
  bool bad = false;
#pragma omp parallel for reduction(max : m) reduction(|| : bad) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m = a > m ? a : m;
    bad = bad || !(a <= std::numeric_limits<float>::max());
  }
  return {m, bad};
}

DType cast_dtype(const formats::Format& f) {
  for (DType t : {DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz})
    if (same_layout(f, formats::preset(dtype_format_name(t)))) return t;
  throw std::invalid_argument("cast format '" + f.name +
                              "' has no 1-byte tensor dtype (valid: e4m3fn, e5m2, e4m3fnuz, e5m2fnuz)");
}

// ---- casts --------------------------------------------------------------------------------
QuantisedOperand cast_per_tensor(const formats::Format& f, const Tensor& x, int exponent, bool saturate,
                                 int64_t* saturated, MemoryKind kind) {
  require_f32(x, "cast_per_tensor");
  QuantisedOperand q;
  q.codes = Tensor::empty(x.shape(), cast_dtype(f), kind);
  q.codes.set_scale(std::ldexp(1.0f, exponent));
  formats::RoundOptions opt;
  opt.saturate = saturate;
  const int64_t s = scaled_quantize(f, x.f32(), q.codes.data<uint8_t>(), x.numel(), std::ldexp(1.0f, -exponent), opt);
  if (saturated) *saturated = s;
  return q;
}

QuantisedOperand cast_blocks(const formats::Format& f, const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                             int64_t tile_rows, int64_t tile_cols, Fp8Scaling rule, CastReport* report,
                             MemoryKind kind) {
  require_f32(x, "cast_blocks");
  if (batch * rows * cols != x.numel() || tile_rows < 1 || tile_cols < 1)
    throw std::invalid_argument("cast_blocks: view [" + std::to_string(batch) + ", " + std::to_string(rows) + ", " +
                                std::to_string(cols) + "] with tiles " + std::to_string(tile_rows) + "x" +
                                std::to_string(tile_cols) + " does not fit " + shape_str(x.shape()));
  if (rule != Fp8Scaling::mx && rule != Fp8Scaling::blockwise)
    throw std::invalid_argument("cast_blocks: the rule must be mx or blockwise");
  auto blocks = std::make_shared<BlockScales>();
  blocks->batch = batch;
  blocks->rows = rows;
  blocks->cols = cols;
  blocks->tile_rows = tile_rows;
  blocks->tile_cols = tile_cols;
  const int64_t down = blocks->tiles_down(), across = blocks->tiles_across();
  const int64_t tiles = batch * down * across;
  blocks->exponents.assign(static_cast<size_t>(tiles), 0);
  const float* src = x.f32();
  const double fmax = f.max();
  float total = 0;
  bool bad = false;
  // 1. one exponent per tile from the tile's amax.
#pragma omp parallel for reduction(max : total) reduction(|| : bad) schedule(static) if (tiles > 64)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t / (down * across), i = (t / across) % down, j = t % across;
    const int64_t r0 = i * tile_rows, r1 = std::min(rows, r0 + tile_rows);
    const int64_t c0 = j * tile_cols, c1 = std::min(cols, c0 + tile_cols);
    float m = 0;
    bool nonfinite = false;
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = src + (b * rows + r) * cols;
      for (int64_t c = c0; c < c1; ++c) {
        const float a = std::fabs(row[c]);
        m = a > m ? a : m;
        nonfinite = nonfinite || !(a <= std::numeric_limits<float>::max());
      }
    }
    const int e = nonfinite ? 0 : rule == Fp8Scaling::mx ? mx_exponent(f, m) : blockwise_exponent(fmax, m);
    blocks->exponents[static_cast<size_t>(t)] = static_cast<int8_t>(e);
    total = m > total ? m : total;
    bad = bad || nonfinite;
  }
  // 2. scale each row's pieces by their tile's 2^-E and quantise the row.
  QuantisedOperand q;
  q.codes = Tensor::empty(x.shape(), cast_dtype(f), kind);
  uint8_t* codes = q.codes.data<uint8_t>();
  formats::RoundOptions opt;
  opt.saturate = !bad;
  const float fmaxf = static_cast<float>(fmax);
  int64_t saturated = 0;
#pragma omp parallel reduction(+ : saturated) if (batch * rows > 16)
  {
    std::vector<float> tmp(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t br = 0; br < batch * rows; ++br) {
      const int64_t b = br / rows, i = (br % rows) / tile_rows;
      const int8_t* e = blocks->exponents.data() + (b * down + i) * across;
      const float* row = src + br * cols;
      for (int64_t j = 0; j < across; ++j) {
        const float mult = std::ldexp(1.0f, -e[j]);
        const int64_t c1 = std::min(cols, (j + 1) * tile_cols);
        for (int64_t c = j * tile_cols; c < c1; ++c) {
          tmp[static_cast<size_t>(c)] = row[c] * mult;
          saturated += std::fabs(tmp[static_cast<size_t>(c)]) > fmaxf && std::isfinite(row[c]);
        }
      }
      formats::quantize(f, tmp.data(), codes + br * cols, static_cast<size_t>(cols), opt);
    }
  }
  q.blocks = std::move(blocks);
  if (report) {
    report->saturated = saturated;
    report->amax = {total, bad};
  }
  return q;
}

Tensor decode_to_bf16(const QuantisedOperand& q, MemoryKind kind) {
  const DecodeTable& table = decode_table(q.codes.dtype());
  Tensor out = Tensor::empty(q.codes.shape(), DType::bf16, kind);
  const uint8_t* c = q.codes.data<uint8_t>();
  uint16_t* o = out.data<uint16_t>();
  const int64_t n = q.codes.numel();
  if (!q.blocks) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) o[i] = table.bf16[c[i]];
    return out;
  }
  const BlockScales& bs = *q.blocks;
  if (bs.batch * bs.rows * bs.cols != n) throw std::logic_error("decode_to_bf16: block view does not match the codes");
  const int64_t down = bs.tiles_down(), across = bs.tiles_across();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t br = 0; br < bs.batch * bs.rows; ++br) {
    const int64_t b = br / bs.rows, i = (br % bs.rows) / bs.tile_rows;
    const int8_t* e = bs.exponents.data() + (b * down + i) * across;
    const uint8_t* cr = c + br * bs.cols;
    uint16_t* orow = o + br * bs.cols;
    for (int64_t j = 0; j < across; ++j) {
      const float mult = std::ldexp(1.0f, e[j]);
      const int64_t c1 = std::min(bs.cols, (j + 1) * bs.tile_cols);
      // value x 2^e is a normal float with <= 4 significant bits: its top
      // 16 bits are the exact bf16.
      for (int64_t k = j * bs.tile_cols; k < c1; ++k)
        orow[k] = static_cast<uint16_t>(std::bit_cast<uint32_t>(table.value[cr[k]] * mult) >> 16);
    }
  }
  return out;
}

std::vector<float> dequantised_values(const QuantisedOperand& q) {
  const Tensor b = decode_to_bf16(q);
  const uint16_t* p = b.data<uint16_t>();
  std::vector<float> out(static_cast<size_t>(b.numel()));
  const float s = q.codes.scale();
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(p[i]) << 16) * s;
  return out;
}

}  // namespace mantissa::scaling
