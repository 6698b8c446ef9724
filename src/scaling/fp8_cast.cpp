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
#include "mantissa/formats/lookup.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/kernels/profile.hpp"
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

// code -> bf16 bits of one 1-byte dtype, built once.
const formats::Table16& decode_table(DType t) {
  static const auto tables = [] {
    std::array<formats::Table16, 4> all{};
    const DType types[] = {DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz};
    for (int i = 0; i < 4; ++i) {
      const formats::Format& f = formats::preset(dtype_format_name(types[i]));
      for (uint32_t c = 0; c < 256; ++c) {
        const float v = formats::decode_f32(f, c);
        // Exact: FP8 values have <= 4 significant bits and bf16's exponent range.
        all[static_cast<size_t>(i)][c] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
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

// What one pass learns of an fp32 array besides the codes.
struct PassTotals {
  float amax = 0;         // inf if any value is inf; NaNs are skipped
  int nonfinite = 0;      // 1 if any value is inf or NaN
  int64_t saturated = 0;  // finite values whose scaled magnitude exceeds the format's max
};

// tmp[i] = x[i] x mult (tmp may be null), adding x's totals to t.
void scale_span(const float* x, float* tmp, int64_t n, float mult, float fmax, PassTotals& t) {
  const formats::ScanTotals s = formats::scaled_copy(x, tmp, static_cast<size_t>(n), mult, fmax);
  t.amax = s.amax > t.amax ? s.amax : t.amax;
  t.nonfinite |= static_cast<int>(s.nonfinite);
  t.saturated += s.beyond;
}

// bf16 bits of a row of decoded codes times 2^e per tile of `tile` columns,
// in place. value x 2^e is exact for every code and exponent produced here
// (see fp8.hpp); the float product's top 16 bits are its bf16 bits.
void fold_tile_scales(uint16_t* row, int64_t cols, int64_t tile, const int8_t* e) {
  for (int64_t j = 0; j * tile < cols; ++j) {
    const float mult = std::ldexp(1.0f, e[j]);
    const int64_t c1 = std::min(cols, (j + 1) * tile);
    for (int64_t k = j * tile; k < c1; ++k) {
      const float v = std::bit_cast<float>(static_cast<uint32_t>(row[k]) << 16) * mult;
      row[k] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
    }
  }
}

// One pass: codes[i] = encode(x[i] x mult) and, with `bf16`, their decode,
// one L1-sized chunk at a time so that x is read once.
PassTotals per_tensor_pass(const formats::Format& f, const float* x, int64_t n, float mult, bool saturate,
                           uint8_t* codes, uint16_t* bf16, const formats::Table16& table) {
  formats::RoundOptions opt;
  opt.saturate = saturate;
  const float fmax = static_cast<float>(f.max());
  float amax = 0;
  int bad = 0;
  int64_t saturated = 0;
#pragma omp parallel for reduction(max : amax) reduction(| : bad) reduction(+ : saturated) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    alignas(64) float tmp[kChunk];
    PassTotals t;
    scale_span(x + c0, tmp, len, mult, fmax, t);
    amax = t.amax > amax ? t.amax : amax;
    bad |= t.nonfinite;
    saturated += t.saturated;
    formats::quantize(f, tmp, codes + c0, static_cast<size_t>(len), opt);
    if (bf16) formats::lookup16(table, codes + c0, bf16 + c0, static_cast<size_t>(len));
  }
  return {amax, bad, saturated};
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
  const kernels::profile::Scope profile_scope(kernels::profile::Category::conversion);
  float m = 0;
  int bad = 0;
#pragma omp parallel for reduction(max : m) reduction(| : bad) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    PassTotals t;
    scale_span(x + c0, nullptr, std::min(kChunk, n - c0), 1.0f, std::numeric_limits<float>::infinity(), t);
    m = t.amax > m ? t.amax : m;
    bad |= t.nonfinite;
  }
  return {m, bad != 0};
}

DType cast_dtype(const formats::Format& f) {
  for (DType t : {DType::e4m3fn, DType::e5m2, DType::e4m3fnuz, DType::e5m2fnuz})
    if (same_layout(f, formats::preset(dtype_format_name(t)))) return t;
  throw std::invalid_argument("cast format '" + f.name +
                              "' has no 1-byte tensor dtype (valid: e4m3fn, e5m2, e4m3fnuz, e5m2fnuz)");
}

// ---- casts --------------------------------------------------------------------------------
QuantisedOperand cast_per_tensor(const formats::Format& f, const Tensor& x, int exponent, bool saturate,
                                 int64_t* saturated, MemoryKind kind, Tensor* decoded, Amax* amax) {
  const kernels::profile::Scope profile_scope(kernels::profile::Category::conversion);
  require_f32(x, "cast_per_tensor");
  QuantisedOperand q;
  q.codes = Tensor::empty(x.shape(), cast_dtype(f), kind);
  q.codes.set_scale(std::ldexp(1.0f, exponent));
  uint16_t* bf16 = nullptr;
  if (decoded) {
    *decoded = Tensor::empty(x.shape(), DType::bf16, MemoryKind::workspace);
    bf16 = decoded->data<uint16_t>();
  }
  const formats::Table16& table = decode_table(q.codes.dtype());
  const float mult = std::ldexp(1.0f, -exponent);
  uint8_t* codes = q.codes.data<uint8_t>();
  PassTotals t = per_tensor_pass(f, x.f32(), x.numel(), mult, saturate, codes, bf16, table);
  if (t.nonfinite && saturate)  // again without saturation, so inf/NaN stay non-finite
    t = per_tensor_pass(f, x.f32(), x.numel(), mult, false, codes, bf16, table);
  if (saturated) *saturated = t.saturated;
  if (amax) *amax = {t.amax, t.nonfinite != 0};
  return q;
}

QuantisedOperand cast_blocks(const formats::Format& f, const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                             int64_t tile_rows, int64_t tile_cols, Fp8Scaling rule, CastReport* report,
                             MemoryKind kind, Tensor* decoded) {
  const kernels::profile::Scope profile_scope(kernels::profile::Category::conversion);
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
  int8_t* exps = blocks->exponents.data();
  const float* src = x.f32();
  const double fmax = f.max();
  const float fmaxf = static_cast<float>(fmax);
  auto exponent_of_tile = [&](const PassTotals& t) {
    return t.nonfinite ? 0 : rule == Fp8Scaling::mx ? mx_exponent(f, t.amax) : blockwise_exponent(fmax, t.amax);
  };
  // Tiles of one row (1 x tile_cols) get their exponents in the row pass
  // below, so x is read once; taller tiles need theirs first.
  const bool row_tiles = tile_rows == 1;
  float tiles_amax = 0;
  int tiles_bad = 0;
  if (!row_tiles) {
#pragma omp parallel for reduction(max : tiles_amax) reduction(| : tiles_bad) schedule(static) if (tiles > 64)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t b = t / (down * across), i = (t / across) % down, j = t % across;
      const int64_t r0 = i * tile_rows, r1 = std::min(rows, r0 + tile_rows);
      const int64_t c0 = j * tile_cols, c1 = std::min(cols, c0 + tile_cols);
      PassTotals tile;
      for (int64_t r = r0; r < r1; ++r)
        scale_span(src + (b * rows + r) * cols + c0, nullptr, c1 - c0, 1.0f, std::numeric_limits<float>::infinity(), tile);
      const float m = tile.amax;
      const int bad = tile.nonfinite;
      exps[t] = static_cast<int8_t>(exponent_of_tile(tile));
      tiles_amax = m > tiles_amax ? m : tiles_amax;
      tiles_bad |= bad;
    }
  }
  QuantisedOperand q;
  q.codes = Tensor::empty(x.shape(), cast_dtype(f), kind);
  uint8_t* codes = q.codes.data<uint8_t>();
  uint16_t* bf16 = nullptr;
  if (decoded) {
    *decoded = Tensor::empty(x.shape(), DType::bf16, MemoryKind::workspace);
    bf16 = decoded->data<uint16_t>();
  }
  const formats::Table16& table = decode_table(q.codes.dtype());
  // Scale each row's pieces by their tile's 2^-E, quantise and decode the row.
  auto row_pass = [&](bool saturate) {
    formats::RoundOptions opt;
    opt.saturate = saturate;
    float amax = 0;
    int bad = 0;
    int64_t saturated = 0;
#pragma omp parallel reduction(max : amax) reduction(| : bad) reduction(+ : saturated) if (batch * rows > 16)
    {
      std::vector<float> tmp(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t br = 0; br < batch * rows; ++br) {
        const int64_t b = br / rows, i = (br % rows) / tile_rows;
        int8_t* e = exps + (b * down + i) * across;
        const float* row = src + br * cols;
        for (int64_t j = 0; j < across; ++j) {
          const int64_t c0 = j * tile_cols, len = std::min(cols, c0 + tile_cols) - c0;
          if (row_tiles) {
            PassTotals t;
            scale_span(row + c0, nullptr, len, 1.0f, std::numeric_limits<float>::infinity(), t);
            e[j] = static_cast<int8_t>(exponent_of_tile(t));
          }
          PassTotals t;
          scale_span(row + c0, tmp.data() + c0, len, std::ldexp(1.0f, -e[j]), fmaxf, t);
          amax = t.amax > amax ? t.amax : amax;
          bad |= t.nonfinite;
          saturated += t.saturated;
        }
        formats::quantize(f, tmp.data(), codes + br * cols, static_cast<size_t>(cols), opt);
        if (bf16) {
          formats::lookup16(table, codes + br * cols, bf16 + br * cols, static_cast<size_t>(cols));
          fold_tile_scales(bf16 + br * cols, cols, tile_cols, e);
        }
      }
    }
    return PassTotals{amax, bad, saturated};
  };
  PassTotals t = row_pass(tiles_bad == 0);
  if (t.nonfinite && tiles_bad == 0) t = row_pass(false);  // found in the row pass: keep inf/NaN non-finite
  q.blocks = std::move(blocks);
  if (report) {
    report->saturated = t.saturated;
    report->amax = {t.amax, t.nonfinite != 0};
  }
  return q;
}

Tensor decode_to_bf16(const QuantisedOperand& q, MemoryKind kind) {
  const kernels::profile::Scope profile_scope(kernels::profile::Category::conversion);
  const formats::Table16& table = decode_table(q.codes.dtype());
  Tensor out = Tensor::empty(q.codes.shape(), DType::bf16, kind);
  const uint8_t* c = q.codes.data<uint8_t>();
  uint16_t* o = out.data<uint16_t>();
  const int64_t n = q.codes.numel();
  if (!q.blocks) {
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += kChunk)
      formats::lookup16(table, c + c0, o + c0, static_cast<size_t>(std::min(kChunk, n - c0)));
    return out;
  }
  const BlockScales& bs = *q.blocks;
  if (bs.batch * bs.rows * bs.cols != n) throw std::logic_error("decode_to_bf16: block view does not match the codes");
  const int64_t down = bs.tiles_down(), across = bs.tiles_across();
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
  for (int64_t br = 0; br < bs.batch * bs.rows; ++br) {
    const int64_t b = br / bs.rows, i = (br % bs.rows) / bs.tile_rows;
    formats::lookup16(table, c + br * bs.cols, o + br * bs.cols, static_cast<size_t>(bs.cols));
    fold_tile_scales(o + br * bs.cols, bs.cols, bs.tile_cols, bs.exponents.data() + (b * down + i) * across);
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
