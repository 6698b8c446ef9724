// Ordered gradient reduction over dist::Group (see reduce.hpp): encode per
// destination chunk, alltoall, decode and add in rank order, encode the sum,
// allgather, decode. Casts go through the formats kernels (formats::quantize).
#include "mantissa/dist/reduce.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mantissa/formats/convert.hpp"
#include "mantissa/formats/scaled_copy.hpp"
#include "mantissa/cpu/profile.hpp"

namespace mantissa::dist {

namespace {
constexpr int8_t kNonFiniteBlock = -128;  // the block held inf or NaN: it decodes to NaN
bool is_fp8(WireFormat f) { return f == WireFormat::e4m3 || f == WireFormat::e5m2; }
}  // namespace

WireFormat parse_wire_format(const std::string& name) {
  if (name == "fp32") return WireFormat::fp32;
  if (name == "bf16") return WireFormat::bf16;
  if (name == "fp8" || name == "fp8-e4m3") return WireFormat::e4m3;
  if (name == "fp8-e5m2") return WireFormat::e5m2;
  throw std::invalid_argument("--comm-format '" + name + "' is not one of fp32, bf16, fp8, fp8-e4m3, fp8-e5m2");
}

void validate(const CommOptions& o) {
  parse_wire_format(o.format);
  if (o.block < 1 || o.block > (int64_t{1} << 20))
    throw std::invalid_argument("--comm-block must be between 1 and 1048576 values (got " + std::to_string(o.block) + ")");
}

WireCodec::WireCodec(WireFormat f, int64_t block)
    : format_(f),
      block_(block),
      fp8_(formats::parse_format(f == WireFormat::e5m2 ? "e5m2" : "e4m3fn")),
      bf16_(formats::parse_format("bf16")) {
  if (block_ < 1) throw std::invalid_argument("--comm-block must be positive");
}

size_t WireCodec::encoded_bytes(int64_t n) const {
  switch (format_) {
    case WireFormat::fp32: return static_cast<size_t>(n) * 4;
    case WireFormat::bf16: return static_cast<size_t>(n) * 2;
    default: return static_cast<size_t>(n + n / block_);  // codes + one scale byte per block
  }
}

// fp8 layout: [n / block signed exponents][n codes]; value = decode(code) x 2^-e.
void WireCodec::encode(const float* in, uint8_t* out, int64_t n) const {
  if (format_ == WireFormat::fp32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  if (format_ == WireFormat::bf16) {
    formats::quantize(bf16_, in, out, static_cast<size_t>(n));
    return;
  }
  if (n % block_ != 0) throw std::logic_error("fp8 wire encoding needs whole blocks");
  const int64_t blocks = n / block_;
  auto* exps = reinterpret_cast<int8_t*>(out);
  uint8_t* codes = out + blocks;
  const double maxv = fp8_.max();
  const int top = std::ilogb(maxv);
  std::vector<float>& scaled = scratch_;
  if (scaled.size() < static_cast<size_t>(n)) scaled.resize(static_cast<size_t>(n));
  const float inf = std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = in + b * block_;
    float* y = scaled.data() + b * block_;
    const auto len = static_cast<size_t>(block_);
    const formats::ScanTotals t = formats::scaled_copy(x, nullptr, len, 1.0f, inf);
    int e = 0;
    if (t.nonfinite) e = kNonFiniteBlock;
    else if (t.amax > 0) {
      e = top - std::ilogb(t.amax);
      if (std::ldexp(static_cast<double>(t.amax), e) > maxv) --e;
      e = std::clamp(e, -126, 127);
    }
    exps[b] = static_cast<int8_t>(e);
    if (e == kNonFiniteBlock) std::fill(y, y + block_, 0.0f);
    else formats::scaled_copy(x, y, len, std::ldexp(1.0f, e), inf);
  }
  formats::RoundOptions ro;
  ro.saturate = true;
  formats::quantize(fp8_, scaled.data(), codes, static_cast<size_t>(n), ro);
}

void WireCodec::decode(const uint8_t* in, float* out, int64_t n) const {
  if (format_ == WireFormat::fp32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  if (format_ == WireFormat::bf16) {
    formats::dequantize(bf16_, in, out, static_cast<size_t>(n));
    return;
  }
  const int64_t blocks = n / block_;
  const auto* exps = reinterpret_cast<const int8_t*>(in);
  formats::dequantize(fp8_, in + blocks, out, static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    float* y = out + b * block_;
    if (exps[b] == kNonFiniteBlock) {
      for (int64_t i = 0; i < block_; ++i) y[i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float s = std::ldexp(1.0f, -exps[b]);
    for (int64_t i = 0; i < block_; ++i) y[i] *= s;
  }
}

namespace {
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) {
  Shape shape = t.shape();
  const size_t row_bytes = t.bytes() / static_cast<size_t>(shape[0]);
  shape[0] = count;
  Tensor out = Tensor::empty(shape, t.dtype());
  std::memcpy(out.data<uint8_t>(), t.data<uint8_t>() + static_cast<size_t>(first) * row_bytes,
              static_cast<size_t>(count) * row_bytes);
  return out;
}
}  // namespace

nn::Batch rank_rows(const nn::Batch& b, int rank, int ranks) {
  const int64_t rows = b.targets.dim(0);
  if (rows % ranks != 0)
    throw std::invalid_argument("--batch-size " + std::to_string(rows) + " does not split evenly across " +
                                std::to_string(ranks) + " ranks");
  const int64_t per = rows / ranks;
  return nn::Batch{rows_of(b.inputs, rank * per, per), rows_of(b.targets, rank * per, per)};
}

GradReducer::GradReducer(Group& group, std::vector<nn::Parameter*> params, const CommOptions& o)
    : group_(group),
      params_(std::move(params)),
      options_(o),
      codec_(parse_wire_format(o.format), o.block) {
  validate(o);
  for (const nn::Parameter* p : params_) total_ += p->grad.numel();
  // Chunks are whole fp8 blocks (and 16-value multiples for the vector casts).
  const int64_t unit = is_fp8(codec_.format()) ? o.block * 16 : 16;
  const int64_t per_rank = (total_ + group_.size() - 1) / group_.size();
  chunk_ = (per_rank + unit - 1) / unit * unit;
  chunk_bytes_ = codec_.encoded_bytes(chunk_);
  flat_.assign(static_cast<size_t>(padded_size()), 0.0f);
  work_.resize(static_cast<size_t>(2 * chunk_));
  send_.resize(chunk_bytes_ * static_cast<size_t>(group_.size()));
  recv_.resize(send_.size());
  if (options_.error_feedback) reset_feedback();
}

void GradReducer::reset_feedback() {
  if (!options_.error_feedback) return;
  residual_.assign(static_cast<size_t>(padded_size()), 0.0f);
  owner_residual_.assign(static_cast<size_t>(chunk_), 0.0f);
  residual_scale_ = 0;
}

void GradReducer::encode_with_feedback(const float* in, float* residual, uint8_t* out, int64_t n) {
  if (!residual) {
    codec_.encode(in, out, n);
    return;
  }
  float* v = work_.data();
  float* back = work_.data() + chunk_;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) v[i] = in[i] + residual[i];
  codec_.encode(v, out, n);
  codec_.decode(out, back, n);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) residual[i] = v[i] - back[i];
}

CommStats GradReducer::reduce(double loss_scale) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::communication);
  const auto t0 = std::chrono::steady_clock::now();
  const int ranks = group_.size();
  const bool ef = options_.error_feedback;
  if (ef && residual_scale_ != 0 && residual_scale_ != loss_scale) {
    // The residuals are in units of the gradients' loss scale: follow it.
    const auto ratio = static_cast<float>(loss_scale / residual_scale_);
    for (float& r : residual_) r *= ratio;
    for (float& r : owner_residual_) r *= ratio;
  }
  residual_scale_ = loss_scale;

  int64_t off = 0;
  for (const nn::Parameter* p : params_) {
    std::memcpy(flat_.data() + off, p->grad.f32(), p->grad.bytes());
    off += p->grad.numel();
  }
  for (int j = 0; j < ranks; ++j)
    encode_with_feedback(flat_.data() + j * chunk_, ef ? residual_.data() + j * chunk_ : nullptr,
                         send_.data() + j * chunk_bytes_, chunk_);
  group_.alltoall(send_.data(), recv_.data(), chunk_bytes_, "the gradient reduce-scatter");

  // Rank order, fp32: s = d_0; s += d_1; ... as gradient accumulation adds.
  float* sum = flat_.data();  // the owned chunk's sum; flat_ is rewritten below
  std::vector<float> part(static_cast<size_t>(chunk_));
  codec_.decode(recv_.data(), sum, chunk_);
  for (int j = 1; j < ranks; ++j) {
    codec_.decode(recv_.data() + j * chunk_bytes_, part.data(), chunk_);
#pragma omp parallel for schedule(static) if (chunk_ > 65536)
    for (int64_t i = 0; i < chunk_; ++i) sum[i] += part[i];
  }
  encode_with_feedback(sum, ef ? owner_residual_.data() : nullptr, send_.data(), chunk_);
  group_.allgather(send_.data(), recv_.data(), chunk_bytes_, "the gradient all-gather");
  for (int j = 0; j < ranks; ++j) codec_.decode(recv_.data() + j * chunk_bytes_, flat_.data() + j * chunk_, chunk_);

  off = 0;
  for (nn::Parameter* p : params_) {
    std::memcpy(p->grad.f32(), flat_.data() + off, p->grad.bytes());
    off += p->grad.numel();
  }
  CommStats s;
  s.bytes_sent = 2 * static_cast<int64_t>(ranks - 1) * static_cast<int64_t>(chunk_bytes_);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace mantissa::dist
