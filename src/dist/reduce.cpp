// Ordered gradient reduction over dist::Group (see reduce.hpp): encode per
// destination chunk, alltoall, decode and add in rank order, encode the sum,
// allgather, decode. Casts go through the formats kernels (formats::quantize).
#include "mantissa/dist/reduce.hpp"

#include <algorithm>
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
// Chunks are whole fp8 blocks (and 16-value multiples for the vector casts).
int64_t chunk_unit(const CommOptions& o) { return is_fp8(parse_wire_format(o.format)) ? o.block * 16 : 16; }
}  // namespace

WireFormat parse_wire_format(const std::string& name) {
  if (name == "fp32") return WireFormat::fp32;
  if (name == "bf16") return WireFormat::bf16;
  if (name == "fp8" || name == "fp8-e4m3") return WireFormat::e4m3;
  if (name == "fp8-e5m2") return WireFormat::e5m2;
  throw std::invalid_argument("--comm-format '" + name + "' is not one of fp32, bf16, fp8, fp8-e4m3, fp8-e5m2");
}

const char* wire_format_name(WireFormat f) {
  switch (f) {
    case WireFormat::fp32: return "fp32";
    case WireFormat::bf16: return "bf16";
    case WireFormat::e4m3: return "fp8-e4m3";
    case WireFormat::e5m2: return "fp8-e5m2";
  }
  return "?";
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

GradReducer::GradReducer(Group& group, std::vector<autograd::Parameter*> params, const CommOptions& o, bool sharded)
    : group_(group),
      params_(std::move(params)),
      options_(o),
      sharded_(sharded),
      codec_(parse_wire_format(o.format), o.block) {
  validate(o);
  for (const autograd::Parameter* p : params_) total_ += p->grad.numel();
  Layout l = plan(params_, group_.size(), group_.rank(), chunk_unit(o), sharded_);
  pieces_ = std::move(l.pieces);
  chunk_ = l.chunk;
  owned_ = std::move(l.owned);
  chunk_bytes_ = codec_.encoded_bytes(chunk_);
  flat_.assign(static_cast<size_t>(padded_size()), 0.0f);
  work_.resize(static_cast<size_t>(2 * chunk_));
  sum_.resize(static_cast<size_t>(chunk_));
  part_.resize(static_cast<size_t>(chunk_));
  send_.resize(chunk_bytes_ * static_cast<size_t>(group_.size()));
  recv_.resize(send_.size());
  if (options_.error_feedback) reset_feedback();
}

// Unsharded: the parameters one after another, cut into `ranks` equal chunks.
// Sharded: pieces of at most kSpanElems elements starting on the optimizer's
// chunk boundaries, packed in order into the smallest chunk size (a multiple
// of unit) for which they fit in `ranks` chunks without a piece crossing a
// chunk's end.
GradReducer::Layout GradReducer::plan(const std::vector<autograd::Parameter*>& params, int ranks, int rank, int64_t unit,
                                      bool sharded) {
  Layout l;
  auto round_up = [unit](int64_t n) { return (n + unit - 1) / unit * unit; };
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i]->grad.numel();
    total += n;
    const int64_t step = sharded ? optim::kSpanElems : std::max<int64_t>(n, 1);
    for (int64_t b = 0; b < n; b += step) l.pieces.push_back({i, b, std::min(n, b + step), 0});
  }
  l.chunk = round_up((total + ranks - 1) / ranks);
  if (!sharded) {
    int64_t at = 0;
    for (Piece& pc : l.pieces) {
      pc.at = at;
      at += pc.end - pc.begin;
    }
  } else {
    for (const Piece& pc : l.pieces) l.chunk = std::max(l.chunk, round_up(pc.end - pc.begin));
    for (;; l.chunk += unit) {
      int64_t c = 0, used = 0;
      for (Piece& pc : l.pieces) {
        const int64_t len = pc.end - pc.begin;
        if (used + len > l.chunk) {
          ++c;
          used = 0;
        }
        pc.at = c * l.chunk + used;
        used += len;
      }
      if (c < ranks) break;
    }
  }
  // This rank's elements of each parameter: one run (pieces are in order).
  l.owned.assign(params.size(), optim::Owned{});
  const int64_t lo = rank * l.chunk, hi = lo + l.chunk;
  for (const Piece& pc : l.pieces) {
    const int64_t b = std::max(pc.at, lo), e = std::min(pc.at + (pc.end - pc.begin), hi);
    if (b >= e) continue;
    optim::Owned& o = l.owned[pc.param];
    const optim::Owned run{pc.begin + (b - pc.at), pc.begin + (e - pc.at)};
    if (o.size() == 0) o = run;
    else o.end = run.end;
  }
  return l;
}

optim::OwnedRanges shard_ranges(const Group& group, const std::vector<autograd::Parameter*>& params, const CommOptions& o) {
  validate(o);
  return GradReducer::plan(params, group.size(), group.rank(), chunk_unit(o), true).owned;
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

// The padding between and after the pieces is zeroed every step: the
// all-gather decodes into it, and after a non-finite step it holds NaN that
// would poison every later step's block it shares with real values.
void GradReducer::flatten_grads() {
  float* flat = flat_.data();
  int64_t end = 0;  // pieces lie in increasing `at`
  for (const Piece& pc : pieces_) {
    std::fill(flat + end, flat + pc.at, 0.0f);
    std::memcpy(flat + pc.at, params_[pc.param]->grad.f32() + pc.begin, static_cast<size_t>(pc.end - pc.begin) * sizeof(float));
    end = pc.at + (pc.end - pc.begin);
  }
  std::fill(flat + end, flat + padded_size(), 0.0f);
}

void GradReducer::sum_owned_chunk(double loss_scale) {
  const int ranks = group_.size();
  const bool ef = options_.error_feedback;
  if (ef && residual_scale_ != 0 && residual_scale_ != loss_scale) {
    // The residuals are in units of the gradients' loss scale: follow it.
    const auto ratio = static_cast<float>(loss_scale / residual_scale_);
    for (float& r : residual_) r *= ratio;
    for (float& r : owner_residual_) r *= ratio;
  }
  residual_scale_ = loss_scale;

  flatten_grads();
  for (int j = 0; j < ranks; ++j)
    encode_with_feedback(flat_.data() + j * chunk_, ef ? residual_.data() + j * chunk_ : nullptr,
                         send_.data() + j * chunk_bytes_, chunk_);
  group_.alltoall(send_.data(), recv_.data(), chunk_bytes_, "the gradient reduce-scatter");

  // Rank order, fp32: s = d_0; s += d_1; ... as gradient accumulation adds.
  float* sum = sum_.data();
  float* part = part_.data();
  codec_.decode(recv_.data(), sum, chunk_);
  for (int j = 1; j < ranks; ++j) {
    codec_.decode(recv_.data() + j * chunk_bytes_, part, chunk_);
#pragma omp parallel for schedule(static) if (chunk_ > 65536)
    for (int64_t i = 0; i < chunk_; ++i) sum[i] += part[i];
  }
  encode_with_feedback(sum, ef ? owner_residual_.data() : nullptr, send_.data(), chunk_);
}

CommStats GradReducer::reduce(double loss_scale) {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::communication);
  const auto t0 = std::chrono::steady_clock::now();
  const int ranks = group_.size();
  sum_owned_chunk(loss_scale);
  group_.allgather(send_.data(), recv_.data(), chunk_bytes_, "the gradient all-gather");
  for (int j = 0; j < ranks; ++j) codec_.decode(recv_.data() + j * chunk_bytes_, flat_.data() + j * chunk_, chunk_);
  for (const Piece& pc : pieces_)
    std::memcpy(params_[pc.param]->grad.f32() + pc.begin, flat_.data() + pc.at,
                static_cast<size_t>(pc.end - pc.begin) * sizeof(float));
  CommStats s;
  s.bytes_sent = 2 * static_cast<int64_t>(ranks - 1) * static_cast<int64_t>(chunk_bytes_);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

CommStats GradReducer::reduce_scatter(double loss_scale) {
  if (!sharded_) throw std::logic_error("GradReducer::reduce_scatter needs the sharded layout");
  const cpu::profile::Scope profile_scope(cpu::profile::Category::communication);
  const auto t0 = std::chrono::steady_clock::now();
  sum_owned_chunk(loss_scale);
  // What every rank would decode from the all-gather: the owner's encoded sum.
  codec_.decode(send_.data(), sum_.data(), chunk_);
  const int64_t lo = group_.rank() * chunk_;
  for (const Piece& pc : pieces_)
    if (pc.at >= lo && pc.at < lo + chunk_)
      std::memcpy(params_[pc.param]->grad.f32() + pc.begin, sum_.data() + (pc.at - lo),
                  static_cast<size_t>(pc.end - pc.begin) * sizeof(float));
  CommStats s;
  s.bytes_sent = static_cast<int64_t>(group_.size() - 1) * static_cast<int64_t>(chunk_bytes_);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

void GradReducer::gather(const std::vector<const float*>& mine, const std::vector<float*>& whole, const char* what) {
  if (!sharded_ || mine.size() != params_.size() || whole.size() != params_.size())
    throw std::logic_error("GradReducer::gather needs the sharded layout and one pointer per parameter");
  // Pack this rank's pieces at their chunk positions (padding stays zero),
  // gather every chunk into flat_, unpack every piece.
  float* out = work_.data();
  std::fill(out, out + chunk_, 0.0f);
  const int64_t lo = group_.rank() * chunk_;
  for (const Piece& pc : pieces_)
    if (mine[pc.param] && pc.at >= lo && pc.at < lo + chunk_)
      std::memcpy(out + (pc.at - lo), mine[pc.param] + (pc.begin - owned_[pc.param].begin),
                  static_cast<size_t>(pc.end - pc.begin) * sizeof(float));
  group_.allgather(out, flat_.data(), static_cast<size_t>(chunk_) * sizeof(float), what);
  for (const Piece& pc : pieces_)
    if (whole[pc.param])
      std::memcpy(whole[pc.param] + pc.begin, flat_.data() + pc.at, static_cast<size_t>(pc.end - pc.begin) * sizeof(float));
}

CommStats GradReducer::gather_values() {
  const cpu::profile::Scope profile_scope(cpu::profile::Category::communication);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const float*> mine;
  std::vector<float*> whole;
  for (size_t i = 0; i < params_.size(); ++i) {
    mine.push_back(params_[i]->value.f32() + owned_[i].begin);
    whole.push_back(params_[i]->value.f32());
  }
  gather(mine, whole, "the weight all-gather");
  for (autograd::Parameter* p : params_) ++p->version;  // cached casts must refresh
  CommStats s;
  s.bytes_sent = static_cast<int64_t>(group_.size() - 1) * chunk_ * static_cast<int64_t>(sizeof(float));
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

double ordered_sum(Group& group, const std::vector<double>& mine, const char* what) {
  const auto ranks = static_cast<size_t>(group.size());
  const auto count = static_cast<int64_t>(mine.size());
  std::vector<int64_t> counts(ranks);
  group.allgather(&count, counts.data(), sizeof count, what);
  int64_t most = 0;
  for (int64_t c : counts) most = std::max(most, c);
  std::vector<double> padded(static_cast<size_t>(most), 0.0), all(ranks * static_cast<size_t>(most));
  std::copy(mine.begin(), mine.end(), padded.begin());
  if (most > 0) group.allgather(padded.data(), all.data(), padded.size() * sizeof(double), what);
  double total = 0.0;
  for (size_t r = 0; r < ranks; ++r)
    for (int64_t k = 0; k < counts[r]; ++k) total += all[r * static_cast<size_t>(most) + static_cast<size_t>(k)];
  return total;
}

}  // namespace mantissa::dist
