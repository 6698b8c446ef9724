// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed, and
// a classification dataset built from an images file and a labels file.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mantissa/data/source.hpp"
#include "mantissa/tensor/tensor.hpp"

namespace mantissa::data {

// Unsigned-byte IDX array (type code 0x08): big-endian dims, then the bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;
};

// Gzip is detected by its magic bytes, not by the name. Throws DataError
// naming the path for a missing file, a corrupt gzip stream, a bad magic
// number, an element type other than ubyte, or a size that disagrees with
// the dims (truncated or trailing bytes). Dimensions are multiplied with
// checked arithmetic; a gzip file may decompress to at most max_bytes (a
// small crafted stream can expand a thousandfold).
constexpr size_t kMaxIdxBytes = size_t{1} << 30;  // Fashion-MNIST's largest is 47 MB
IdxArray read_idx(const std::string& path, size_t max_bytes = kMaxIdxBytes);

struct Normalization {
  float mean = 0.0f;  // subtracted after dividing by 255
  float std = 1.0f;
};

// Images kept as their bytes (a quarter of the f32 size: Fashion-MNIST's
// training set is 47 MB, not 188 MB) and normalised when a batch is
// gathered: inputs f32 [n, features] = (pixel / 255 - mean) / std, targets
// i32 [n] in [0, num_classes).
struct ClassificationSet {
  std::vector<uint8_t> pixels;  // [N, features] row-major
  std::vector<int32_t> labels;  // [N]
  int64_t feature_count = 0;
  int64_t num_classes = 0;
  Normalization norm;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t features() const { return feature_count; }
  nn::Batch gather(const int64_t* indices, int64_t n) const;
};

// Throws DataError if the counts differ, a label is >= num_classes, or the
// images are not [N, rows, cols].
ClassificationSet load_idx_classification(const std::string& images_path,
                                          const std::string& labels_path, int64_t num_classes = 10,
                                          Normalization norm = {});

// Fashion-MNIST from a directory holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
// (what scripts/data.sh unpacks). split is "train" or "test".
ClassificationSet load_fashion_mnist(const std::string& dir, const std::string& split,
                                     Normalization norm = {});

// Epochs of a seeded permutation (Fisher-Yates with std::mt19937_64 and
// unbiased rejection sampling); each batch takes the next B indices, an
// epoch's last partial batch is dropped so every batch has B rows.
// inputs f32 [B, features], targets i32 [B].
class ShuffledBatches final : public TrainSource {
 public:
  // Throws DataError for a non-positive batch or one larger than the set.
  ShuffledBatches(const ClassificationSet& set, int64_t batch, uint64_t seed);
  nn::Batch next() override;
  // {"kind":"shuffled_batches","seed":S,"epoch":E,"cursor":C,"rng":"<engine state>"}
  std::string state_json() const override;
  void load_state(const std::string& json) override;
  int64_t epoch() const { return epoch_; }

 private:
  void reshuffle();
  const ClassificationSet* set_;
  int64_t batch_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::string rng_at_epoch_start_;  // engine state before this epoch's shuffle
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, cursor_ = 0;
};

// The whole set in order, in batches of up to B rows.
class SequentialBatches final : public EvalSource {
 public:
  SequentialBatches(const ClassificationSet& set, int64_t batch);
  int64_t num_batches() const override;
  nn::Batch batch(int64_t index) const override;

 private:
  const ClassificationSet* set_;
  int64_t batch_;
};

}  // namespace mantissa::data
