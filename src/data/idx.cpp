#include "mantissa/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/rng_util.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/io/untrusted.hpp"
#include "mantissa/tensor/checked.hpp"

namespace mantissa::data {

namespace {

std::string gunzip(const std::string& gz, const std::string& path, size_t max_bytes) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip wrapper (and check its CRC and length).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw DataError(path + ": cannot initialise zlib");
  std::string out;
  out.resize(std::min(max_bytes, gz.size() * 4 + (1 << 16)));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.total_out == out.size()) {
      if (out.size() >= max_bytes) {
        inflateEnd(&zs);
        throw DataError(path + ": gzip data decompresses to more than " + std::to_string(max_bytes) +
                        " bytes (not an IDX file mantissa reads)");
      }
      out.resize(std::min(max_bytes, out.size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - zs.total_out, 1u << 30));
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw DataError(path + ": gzip stream is truncated");
    }
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      throw DataError(path + ": corrupt gzip data (" + msg + ")");
    }
  }
  out.resize(zs.total_out);
  inflateEnd(&zs);
  return out;
}

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {"", ".gz"}) {
    std::string p = (std::filesystem::path(dir) / (stem + suffix)).string();
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  throw DataError("Fashion-MNIST directory '" + dir + "' has no " + stem + " or " + stem +
                  ".gz (run scripts/data.sh to fetch it)");
}

}  // namespace

IdxArray read_idx(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataError("IDX file '" + path + "' does not exist");
  std::string bytes;
  try {
    bytes = io::read_file(path);
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b)
    bytes = gunzip(bytes, path, max_bytes);
  if (bytes.size() < 4) throw DataError(path + ": too short for an IDX header (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0) throw DataError(path + ": not an IDX file (bad magic number)");
  if (static_cast<unsigned char>(bytes[2]) != 0x08)
    throw DataError(path + ": IDX element type 0x" + std::to_string(static_cast<unsigned char>(bytes[2])) +
                    " is not unsigned byte (0x08)");
  const auto ndims = static_cast<size_t>(static_cast<unsigned char>(bytes[3]));
  if (ndims == 0) throw DataError(path + ": IDX file with zero dimensions");
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) throw DataError(path + ": truncated IDX header");
  IdxArray a;
  int64_t count = 1;
  for (size_t d = 0; d < ndims; ++d) {
    const uint32_t n = be32(bytes, 4 + 4 * d);
    a.dims.push_back(n);
    try {
      count = checked_mul(count, n, "IDX dimensions");
    } catch (const std::invalid_argument& e) {
      throw DataError(path + ": " + e.what());
    }
  }
  if (static_cast<int64_t>(bytes.size() - header) != count)
    throw DataError(path + ": IDX dims promise " + std::to_string(count) + " values but " +
                    std::to_string(bytes.size() - header) + " bytes follow the header" +
                    (static_cast<int64_t>(bytes.size() - header) < count ? " (truncated)" : ""));
  a.values.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

ClassificationSet load_idx_classification(const std::string& images_path, const std::string& labels_path,
                                          int64_t num_classes, Normalization norm) {
  if (!(norm.std > 0)) throw DataError("normalisation std must be positive");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3) throw DataError(images_path + ": expected images [N, rows, cols], got " +
                                               std::to_string(images.dims.size()) + " dimensions");
  if (labels.dims.size() != 1) throw DataError(labels_path + ": expected labels [N], got " +
                                               std::to_string(labels.dims.size()) + " dimensions");
  if (images.dims[0] != labels.dims[0])
    throw DataError(images_path + " holds " + std::to_string(images.dims[0]) + " images but " + labels_path +
                    " holds " + std::to_string(labels.dims[0]) + " labels");
  ClassificationSet s;
  try {
    s.feature_count = checked_mul(images.dims[1], images.dims[2], "IDX image rows x columns");
  } catch (const std::invalid_argument& e) {
    throw DataError(images_path + ": " + e.what());
  }
  s.num_classes = num_classes;
  s.norm = norm;
  s.pixels = std::move(images.values);
  s.labels.reserve(labels.values.size());
  for (size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= num_classes)
      throw DataError(labels_path + ": label " + std::to_string(labels.values[i]) + " of item " + std::to_string(i) +
                      " is not below " + std::to_string(num_classes) + " classes");
    s.labels.push_back(labels.values[i]);
  }
  return s;
}

ClassificationSet load_fashion_mnist(const std::string& dir, const std::string& split, Normalization norm) {
  std::string prefix;
  if (split == "train") prefix = "train";
  else if (split == "test" || split == "t10k") prefix = "t10k";
  else throw DataError("Fashion-MNIST split '" + split + "' is neither 'train' nor 'test'");
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw DataError("'" + dir + "' is a file; the mlp model reads a Fashion-MNIST directory (with " + prefix +
                    "-images-idx3-ubyte[.gz] and " + prefix + "-labels-idx1-ubyte[.gz])");
  if (!std::filesystem::is_directory(dir, ec)) throw DataError("Fashion-MNIST directory '" + dir + "' does not exist");
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  return load_idx_classification(images, labels, 10, norm);
}

nn::Batch ClassificationSet::gather(const int64_t* indices, int64_t n) const {
  nn::Batch b;
  b.inputs = Tensor::empty({n, feature_count}, DType::f32);
  b.targets = Tensor::empty({n}, DType::i32);
  float* x = b.inputs.f32();
  auto* y = b.targets.data<int32_t>();
  // (p / 255 - mean) / std as one multiply-add per pixel.
  const float a = 1.0f / (255.0f * norm.std), c = -norm.mean / norm.std;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = indices[r];
    if (i < 0 || i >= size()) throw std::out_of_range("example " + std::to_string(i) + " of " + std::to_string(size()));
    const uint8_t* px = pixels.data() + i * feature_count;
    for (int64_t f = 0; f < feature_count; ++f) x[r * feature_count + f] = static_cast<float>(px[f]) * a + c;
    y[r] = labels[static_cast<size_t>(i)];
  }
  return b;
}

ShuffledBatches::ShuffledBatches(const ClassificationSet& set, int64_t batch, uint64_t seed)
    : set_(&set), batch_(batch), seed_(seed), rng_(seed) {
  if (batch <= 0) throw DataError("batch size must be positive, got " + std::to_string(batch));
  if (batch > set.size())
    throw DataError("batch size " + std::to_string(batch) + " exceeds the " + std::to_string(set.size()) + " examples");
  reshuffle();
}

void ShuffledBatches::reshuffle() {
  rng_at_epoch_start_ = detail::engine_state(rng_);
  order_.resize(static_cast<size_t>(set_->size()));
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[detail::uniform_below(rng_, i)]);
  cursor_ = 0;
}

nn::Batch ShuffledBatches::next() {
  if (cursor_ + batch_ > set_->size()) {
    ++epoch_;
    reshuffle();
  }
  nn::Batch b = set_->gather(order_.data() + cursor_, batch_);
  cursor_ += batch_;
  return b;
}

std::string ShuffledBatches::state_json() const {
  // The permutation is not stored: the engine state before this epoch's
  // shuffle regenerates it.
  return nlohmann::json{{"kind", "shuffled_batches"}, {"seed", seed_}, {"epoch", epoch_}, {"cursor", cursor_},
                        {"rng", rng_at_epoch_start_}}
      .dump();
}

void ShuffledBatches::load_state(const std::string& json) {
  nlohmann::json j;
  try {
    j = io::parse_json(json, "data state");
  } catch (const std::invalid_argument& e) {
    throw DataError(e.what());
  }
  if (io::string_or_empty(j, "kind") != "shuffled_batches" || !j.contains("rng") || !j["rng"].is_string() ||
      !j.contains("epoch") || !j["epoch"].is_number_integer() || !j.contains("cursor") ||
      !j["cursor"].is_number_integer())
    throw DataError("data state is not a complete 'shuffled_batches' state");
  const auto cursor = j["cursor"].get<int64_t>();
  if (cursor < 0 || cursor > set_->size()) throw DataError("shuffled_batches state: cursor out of range");
  detail::set_engine_state(rng_, j["rng"].get<std::string>(), "shuffled_batches state");
  reshuffle();
  epoch_ = j["epoch"].get<int64_t>();
  if (epoch_ < 0) throw DataError("shuffled_batches state: negative epoch " + std::to_string(epoch_));
  cursor_ = cursor;
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) throw DataError("shuffled_batches state: 'seed' must be an unsigned integer");
    seed_ = j["seed"].get<uint64_t>();
  }
}

SequentialBatches::SequentialBatches(const ClassificationSet& set, int64_t batch) : set_(&set), batch_(batch) {
  if (batch <= 0) throw DataError("batch size must be positive, got " + std::to_string(batch));
}

int64_t SequentialBatches::num_batches() const { return set_->size() / batch_ + (set_->size() % batch_ != 0); }

nn::Batch SequentialBatches::batch(int64_t index) const {
  if (index < 0 || index >= num_batches())
    throw std::out_of_range("batch " + std::to_string(index) + " of " + std::to_string(num_batches()));
  const int64_t first = index * batch_;
  const int64_t n = std::min(batch_, set_->size() - first);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = first + i;
  return set_->gather(idx.data(), n);
}

}  // namespace mantissa::data
