// FP8 casts with power-of-two scales (per tensor or per tile) and the exact
// bf16 decode the matrix products run on. See quant/fp8.hpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "mantissa/autograd/tape.hpp"
#include "mantissa/formats/lookup.hpp"
#include "mantissa/formats/round.hpp"
#include "mantissa/formats/scaled_cast.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/cpu/profile.hpp"
#include "mantissa/quant/fp8.hpp"

namespace mantissa::quant {
namespace {

using autograd::BlockScales;
using autograd::QuantisedOperand;

// Elements per cast call inside a parallel loop: small enough for a chunk's
// input and outputs to stay in L1/L2, large enough to amortise the call.
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

// code -> bf16 bits of one 1-byte dtype (the saved activations' table).
const formats::Table16& decode_table(DType t) { return autograd::Tape::decode_table(t); }

void require_f32(const Tensor& x, const char* what) {
  if (x.dtype() != DType::f32) throw std::invalid_argument(std::string(what) + ": input must be f32, got " + dtype_name(x.dtype()));
}

// What one pass learns of an fp32 array besides the codes.
struct PassTotals {
  float amax = 0;         // inf if any value is inf; NaNs are skipped
  int nonfinite = 0;      // 1 if any value is inf or NaN
  int64_t saturated = 0;  // finite values whose scaled magnitude exceeds the format's max
};

// The tile exponent rule in the integer form the cast kernels use; equal to
// mx_exponent / blockwise_exponent of the tile's amax (tests compare them at
// the binade edges). Tiles holding inf/NaN get 0.
formats::BlockRule tile_rule(const formats::Format& f, CastScaling rule) {
  formats::BlockRule r;
  if (rule == CastScaling::mx) {  // floor(log2 amax) - emax; zero tiles -127
    r.offset = f.max_exponent();
    r.zero = -127;
    return r;
  }
  // Blockwise: the smallest E with amax x 2^-E <= max = 1.m x 2^offset.
  const auto max_bits = std::bit_cast<uint32_t>(static_cast<float>(f.max()));  // exact for FP8 formats
  r.offset = static_cast<int>(max_bits >> 23) - 127;
  r.max_fraction = max_bits & 0x7FFFFFu;
  r.round_up = true;
  r.zero = 0;
  return r;
}

// One pass: codes[i] = encode(x[i] x mult) and, with `bf16`, their decode,
// in one read of x (formats::ScaledCast), split in chunks across threads.
PassTotals per_tensor_pass(const formats::Format& f, const float* x, int64_t n, float mult, bool saturate,
                           uint8_t* codes, uint16_t* bf16, const formats::Table16& table) {
  const formats::ScaledCast cast(f, saturate, table);
  float amax = 0;
  int bad = 0;
  int64_t saturated = 0;
#pragma omp parallel for reduction(max : amax) reduction(| : bad) reduction(+ : saturated) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const auto len = static_cast<size_t>(std::min(kChunk, n - c0));
    const formats::ScanTotals t =
        cast.run(x + c0, len, &mult, len, codes ? codes + c0 : nullptr, bf16 ? bf16 + c0 : nullptr);
    amax = t.amax > amax ? t.amax : amax;
    bad |= static_cast<int>(t.nonfinite);
    saturated += t.beyond;
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
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  float m = 0;
  int bad = 0;
#pragma omp parallel for reduction(max : m) reduction(| : bad) schedule(static) if (n > 4 * kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const formats::ScanTotals t = formats::scaled_copy(x + c0, nullptr, static_cast<size_t>(std::min(kChunk, n - c0)),
                                                       1.0f, std::numeric_limits<float>::infinity());
    m = t.amax > m ? t.amax : m;
    bad |= static_cast<int>(t.nonfinite);
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
                                 int64_t* saturated, MemoryKind kind, Tensor* decoded, Amax* amax, bool keep_codes) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  require_f32(x, "cast_per_tensor");
  if (!keep_codes && !decoded) throw std::invalid_argument("cast_per_tensor: neither codes nor decode wanted");
  QuantisedOperand q;
  q.codes = Tensor::empty(keep_codes ? x.shape() : Shape{0}, cast_dtype(f), kind);
  q.codes.set_scale(std::ldexp(1.0f, exponent));
  uint16_t* bf16 = nullptr;
  if (decoded) {
    *decoded = Tensor::empty(x.shape(), DType::bf16, MemoryKind::workspace);
    bf16 = decoded->data<uint16_t>();
  }
  const formats::Table16& table = decode_table(q.codes.dtype());
  const float mult = std::ldexp(1.0f, -exponent);
  uint8_t* codes = keep_codes ? q.codes.data<uint8_t>() : nullptr;
  PassTotals t = per_tensor_pass(f, x.f32(), x.numel(), mult, saturate, codes, bf16, table);
  if (t.nonfinite && saturate)  // again without saturation, so inf/NaN stay non-finite
    t = per_tensor_pass(f, x.f32(), x.numel(), mult, false, codes, bf16, table);
  if (saturated) *saturated = t.saturated;
  if (amax) *amax = {t.amax, t.nonfinite != 0};
  return q;
}

QuantisedOperand cast_blocks(const formats::Format& f, const Tensor& x, int64_t batch, int64_t rows, int64_t cols,
                             int64_t tile_rows, int64_t tile_cols, CastScaling rule, CastReport* report,
                             MemoryKind kind, Tensor* decoded, bool keep_codes) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
  require_f32(x, "cast_blocks");
  if (!keep_codes && !decoded) throw std::invalid_argument("cast_blocks: neither codes nor decode wanted");
  if (batch * rows * cols != x.numel() || tile_rows < 1 || tile_cols < 1)
    throw std::invalid_argument("cast_blocks: view [" + std::to_string(batch) + ", " + std::to_string(rows) + ", " +
                                std::to_string(cols) + "] with tiles " + std::to_string(tile_rows) + "x" +
                                std::to_string(tile_cols) + " does not fit " + shape_str(x.shape()));
  if (rule != CastScaling::mx && rule != CastScaling::blockwise)
    throw std::invalid_argument("cast_blocks: the rule must be mx or blockwise");
  auto blocks = std::make_shared<BlockScales>();
  blocks->batch = batch;
  blocks->rows = rows;
  blocks->cols = cols;
  blocks->tile_rows = tile_rows;
  blocks->tile_cols = tile_cols;
  const int64_t down = blocks->tiles_down(), across = blocks->tiles_across();
  const int64_t bands = batch * down;  // rows of tiles
  blocks->exponents.assign(static_cast<size_t>(bands * across), 0);
  int8_t* exps = blocks->exponents.data();
  const float* src = x.f32();
  const formats::BlockRule tiles = tile_rule(f, rule);
  QuantisedOperand q;
  q.codes = Tensor::empty(keep_codes ? x.shape() : Shape{0}, cast_dtype(f), kind);
  uint8_t* const codes = keep_codes ? q.codes.data<uint8_t>() : nullptr;
  const auto codes_at = [codes](int64_t at) { return codes ? codes + at : nullptr; };
  uint16_t* bf16 = nullptr;
  if (decoded) {
    *decoded = Tensor::empty(x.shape(), DType::bf16, MemoryKind::workspace);
    bf16 = decoded->data<uint16_t>();
  }
  const formats::Table16& table = decode_table(q.codes.dtype());
  const auto ucols = static_cast<size_t>(cols), tc = static_cast<size_t>(tile_cols);
  // Tiles along a row take their amax as the row is cast (x read once);
  // when rows hold whole tiles, x goes as one flat array of tiles in chunks.
  // Taller tiles go one band of tile_rows rows at a time: column maxima, the
  // tiles' exponents, then the band's rows with per-tile (or per-column)
  // factors, while the band is still in cache.
  const bool row_tiles = tile_rows == 1 && tile_cols > 1;
  const int64_t flat = row_tiles && cols % tile_cols == 0 ? std::max<int64_t>(1, kChunk / tile_cols) * tile_cols : 0;
  const int64_t items = flat ? (x.numel() + flat - 1) / flat : bands;
  auto pass = [&](bool saturate) {
    const formats::ScaledCast cast(f, saturate, table);
    float amax = 0;
    int bad = 0;
    int64_t saturated = 0;
#pragma omp parallel reduction(max : amax) reduction(| : bad) reduction(+ : saturated) if (items > 1 && x.numel() > 4 * kChunk)
    {
      std::vector<uint32_t> colmax(tile_rows > 1 ? ucols : 0);
      std::vector<float> mult(static_cast<size_t>(across)), fold(static_cast<size_t>(across));
      auto add = [&](const formats::ScanTotals& s) {
        amax = s.amax > amax ? s.amax : amax;
        bad |= static_cast<int>(s.nonfinite);
        saturated += s.beyond;
      };
#pragma omp for schedule(static)
      for (int64_t item = 0; item < items; ++item) {
        if (flat) {
          const int64_t c0 = item * flat, len = std::min(flat, x.numel() - c0);
          add(cast.run_blocks(src + c0, static_cast<size_t>(len), tc, tiles, exps + c0 / tile_cols, codes_at(c0),
                              bf16 ? bf16 + c0 : nullptr));
          continue;
        }
        const int64_t band = item;
        const int64_t r0 = (band % down) * tile_rows, r1 = std::min(rows, r0 + tile_rows);
        const int64_t first = (band / down) * rows + r0;  // the band's first row in x
        int8_t* e = exps + band * across;
        if (row_tiles) {
          add(cast.run_blocks(src + first * cols, ucols, tc, tiles, e, codes_at(first * cols),
                              bf16 ? bf16 + first * cols : nullptr));
          continue;
        }
        std::fill(colmax.begin(), colmax.end(), 0u);
        for (int64_t r = first; r < first + (r1 - r0); ++r) formats::column_amax_bits(src + r * cols, ucols, colmax.data());
        for (size_t j = 0; j < mult.size(); ++j) {
          e[j] = static_cast<int8_t>(tiles.exponent(*std::max_element(
              colmax.begin() + static_cast<int64_t>(j * tc), colmax.begin() + static_cast<int64_t>(std::min(ucols, (j + 1) * tc)))));
          mult[j] = formats::exp2_block(-e[j]);
          fold[j] = formats::exp2_block(e[j]);
        }
        for (int64_t r = first; r < first + (r1 - r0); ++r)
          add(cast.run(src + r * cols, ucols, mult.data(), tc, codes_at(r * cols), bf16 ? bf16 + r * cols : nullptr,
                       fold.data()));
      }
    }
    return PassTotals{amax, bad, saturated};
  };
  PassTotals t = pass(true);
  if (t.nonfinite) t = pass(false);  // keep inf/NaN non-finite
  q.blocks = std::move(blocks);
  if (report) {
    report->saturated = t.saturated;
    report->amax = {t.amax, t.nonfinite != 0};
  }
  return q;
}

Tensor decode_to_bf16(const QuantisedOperand& q, MemoryKind kind) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::conversion);
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
  if (bs.tile_rows == 1 && bs.cols % bs.tile_cols == 0) {
    // Row tiles that rows hold whole: the tiles lie in order along the flat
    // codes, so they go in long chunks with one fold per tile.
    std::vector<float> fold(bs.exponents.size());
    for (size_t j = 0; j < fold.size(); ++j) fold[j] = formats::exp2_block(bs.exponents[j]);
    const int64_t chunk = std::max<int64_t>(1, kChunk / bs.tile_cols) * bs.tile_cols;
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
    for (int64_t c0 = 0; c0 < n; c0 += chunk)
      formats::lookup16(table, c + c0, o + c0, static_cast<size_t>(std::min(chunk, n - c0)),
                        fold.data() + c0 / bs.tile_cols, static_cast<size_t>(bs.tile_cols));
    return out;
  }
  const int64_t down = bs.tiles_down(), across = bs.tiles_across(), bands = bs.batch * down;
#pragma omp parallel if (bands > 1 && n > 4 * kChunk)
  {
    std::vector<float> fold(static_cast<size_t>(across));
#pragma omp for schedule(static)
    for (int64_t band = 0; band < bands; ++band) {
      for (int64_t j = 0; j < across; ++j)
        fold[static_cast<size_t>(j)] = formats::exp2_block(bs.exponents[static_cast<size_t>(band * across + j)]);
      const int64_t r0 = (band % down) * bs.tile_rows, r1 = std::min(bs.rows, r0 + bs.tile_rows);
      for (int64_t r = (band / down) * bs.rows + r0, end = r + (r1 - r0); r < end; ++r)
        formats::lookup16(table, c + r * bs.cols, o + r * bs.cols, static_cast<size_t>(bs.cols), fold.data(),
                          static_cast<size_t>(bs.tile_cols));
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

}  // namespace mantissa::quant
