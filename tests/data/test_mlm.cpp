// Masked-LM batches (data/mlm.hpp): the row layout, BERT's masking statistics (15% of the
// text bytes chosen; of those 80% [MASK], 10% a random byte, 10% kept) counted over many
// rows against those rates, padding that really occurs, and determinism from the seed
// (resumable state; a held-out set independent of the training seed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "data/data_util.hpp"
#include "mantissa/data/mlm.hpp"

namespace mantissa::data {
namespace {

using data_test::ints;

TextCorpus corpus() {
  std::mt19937_64 rng(11);
  std::string text;
  while (text.size() < 40000) text += static_cast<char>(32 + rng() % 95);
  return TextCorpus::from_bytes(text, "generated");
}

TEST(Mlm, RowsAreLaidOutAndMaskedAsBert) {
  const TextCorpus c = corpus();
  const MlmTokens tok;
  const int64_t B = 50, T = 64;
  MlmBatches src(c, B, T, 7);
  int64_t text = 0, chosen = 0, masked = 0, random = 0, kept = 0, padded_rows = 0, two_segments = 0, rows = 0;
  for (int i = 0; i < 40; ++i) {
    const nn::Batch b = src.next();
    ASSERT_EQ(b.inputs.shape(), (Shape{B, T}));
    for (int64_t r = 0; r < B; ++r, ++rows) {
      const int32_t* in = b.inputs.data<int32_t>() + r * T;
      const int32_t* tg = b.targets.data<int32_t>() + r * T;
      ASSERT_EQ(in[0], tok.cls());
      int64_t seps = 0, len = T, row_chosen = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (in[t] == tok.pad()) {
          len = std::min(len, t);
          ASSERT_EQ(tg[t], -1);
          continue;
        }
        ASSERT_EQ(len, T) << "padding only at the end";
        if (in[t] == tok.cls() || in[t] == tok.sep()) {
          seps += in[t] == tok.sep();
          ASSERT_EQ(tg[t], -1) << "special tokens are never predicted";
          continue;
        }
        ++text;
        if (tg[t] < 0) {
          ASSERT_LT(in[t], 256) << "an unchosen position holds its byte";
          continue;
        }
        ++chosen, ++row_chosen;
        ASSERT_GE(tg[t], 32) << "the target is the original byte";
        ASSERT_LT(tg[t], 127);
        if (in[t] == tok.mask()) ++masked;
        else if (in[t] == tg[t]) ++kept;
        else ++random;
      }
      ASSERT_EQ(in[len - 1], tok.sep()) << "text ends with [SEP]";
      ASSERT_TRUE(seps == 1 || seps == 2);
      ASSERT_GE(row_chosen, 1);
      two_segments += seps == 2;
      padded_rows += len < T;
    }
  }
  const double n = static_cast<double>(chosen);
  std::printf("%ld text bytes, %ld chosen (%.4f): mask %.4f random %.4f kept %.4f; padded rows %.3f, two segments %.3f\n",
              static_cast<long>(text), static_cast<long>(chosen), n / static_cast<double>(text), masked / n, random / n,
              kept / n, static_cast<double>(padded_rows) / static_cast<double>(rows),
              static_cast<double>(two_segments) / static_cast<double>(rows));
  // Tolerances: about 5 standard deviations of the binomial counts; a random byte equal to the
  // original (1/256 of the 10%) counts as kept; the one forced choice of a row with none adds
  // well under 0.002 to the chosen rate at this length.
  EXPECT_NEAR(n / static_cast<double>(text), 0.15, 0.007);
  EXPECT_NEAR(masked / n, 0.80, 0.02);
  EXPECT_NEAR(random / n, 0.10 * 255.0 / 256.0, 0.015);
  EXPECT_NEAR(kept / n, 0.10 + 0.10 / 256.0, 0.015);
  EXPECT_GT(padded_rows, rows * 9 / 10) << "padding really occurs";
  EXPECT_NEAR(static_cast<double>(two_segments) / static_cast<double>(rows), 0.5, 0.05);
}

TEST(Mlm, DeterministicFromTheSeedAndResumable) {
  const TextCorpus c = corpus();
  MlmBatches a(c, 4, 32, 3), b(c, 4, 32, 3), other(c, 4, 32, 4);
  a.next();
  const std::string state = a.state_json();
  const nn::Batch want = a.next();
  b.load_state(state);
  const nn::Batch got = b.next();
  EXPECT_EQ(ints(got.inputs), ints(want.inputs));
  EXPECT_EQ(ints(got.targets), ints(want.targets));
  other.next();
  EXPECT_NE(ints(other.next().inputs), ints(want.inputs));
  EXPECT_THROW(b.load_state(R"({"kind":"text_windows","rng":"1","batches":0})"), DataError);
}

TEST(Mlm, HeldOutSetIsFixedAndFromTheValidationSplit) {
  const TextCorpus c = corpus();
  const MlmValidation v1(c, 8, 32), v2(c, 8, 32, 2);
  EXPECT_EQ(v1.num_batches(), (c.val_size() / 32 + 7) / 8);
  EXPECT_EQ(v2.num_batches(), 2);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ints(v1.batch(i).inputs), ints(v2.batch(i).inputs));
    EXPECT_EQ(ints(v1.batch(i).targets), ints(v2.batch(i).targets));
  }
  // Unchosen text bytes come from the held-out bytes: the first text run of row 0 is there.
  const nn::Batch b = v1.batch(0);
  std::string run;
  for (int64_t t = 1; t < 32 && b.targets.data<int32_t>()[t] < 0 && b.inputs.data<int32_t>()[t] < 256; ++t)
    run += static_cast<char>(b.inputs.data<int32_t>()[t]);
  ASSERT_FALSE(run.empty());
  const std::string val(reinterpret_cast<const char*>(c.val_bytes()), static_cast<size_t>(c.val_size()));
  EXPECT_NE(val.find(run), std::string::npos);
}

TEST(Mlm, ShortRowsAreRefused) {
  const TextCorpus c = corpus();
  EXPECT_THROW(MlmBatches(c, 4, kMinMlmSeqLen - 1, 1), DataError);
  EXPECT_THROW(MlmValidation(c, 0, 32), DataError);
}

}  // namespace
}  // namespace mantissa::data
