// Sizes that come from outside (configs, files, flags) go through checked
// arithmetic: an overflowing product is a clear std::invalid_argument, never
// a wrapped small allocation written past. References: exact integer
// arithmetic (products written out, 2^63 boundaries).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/llama.hpp"
#include "mantissa/nn/mlp.hpp"
#include "mantissa/tensor/checked.hpp"
#include "mantissa/tensor/tensor.hpp"
#include "error_of.hpp"

using namespace mantissa;

namespace {

using test_util::error_of;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

}  // namespace

TEST(Checked, ProductsAndSumsAreExactOrRefused) {
  EXPECT_EQ(checked_mul(3037000499, 3037000499, "x"), int64_t{9223372030926249001});  // largest square below 2^63
  EXPECT_EQ(checked_mul(kMax, 1, "x"), kMax);
  EXPECT_EQ(checked_mul(0, kMax, "x"), 0);
  EXPECT_EQ(error_of([] { checked_mul(3037000500, 3037000500, "rows x cols"); }),
            "rows x cols: 3037000500 x 3037000500 overflows 64 bits");
  EXPECT_EQ(error_of([] { checked_mul(int64_t{1} << 32, int64_t{1} << 31, "n"); }),
            "n: 4294967296 x 2147483648 overflows 64 bits");
  EXPECT_NE(error_of([] { checked_mul(-1, 5, "n"); }).find("negative"), std::string::npos);
  EXPECT_EQ(checked_add(kMax - 1, 1, "s"), kMax);
  EXPECT_EQ(error_of([] { checked_add(kMax, 1, "total"); }), "total: 9223372036854775807 + 1 overflows 64 bits");
  EXPECT_EQ(checked_numel(Shape{2, 3, 7}, "s"), 42);
  EXPECT_EQ(checked_numel(Shape{}, "s"), 1);
  EXPECT_EQ(checked_numel(Shape{5, 0, kMax}, "s"), 0);
}

TEST(Checked, TensorSizesNeverWrap) {
  // 2^62 x 4 bytes would wrap to 0 bytes; 2^31 x 2^31 x 4 elements to 0.
  EXPECT_NE(error_of([] { Tensor::empty({int64_t{1} << 62}, DType::f32); }).find("byte size of a tensor"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tensor::empty({int64_t{1} << 31, int64_t{1} << 31, 4}, DType::bf16); })
                .find("element count of a tensor shape"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)shape_numel({int64_t{1} << 40, int64_t{1} << 40}); }).find("overflows"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tensor::empty({int64_t{1} << 61}, DType::f32); }).find("overflows"), std::string::npos);
  // Representable but beyond any machine: refused before the allocator's
  // rounding could wrap.
  EXPECT_NE(error_of([] { Tensor::empty({(int64_t{1} << 60) + 1}, DType::f32); }).find("beyond any machine"),
            std::string::npos);
  EXPECT_EQ(Tensor::empty({3, 5}, DType::bf16).bytes(), 30u);
}

TEST(ModelConfigs, OutOfRangeSizesAreRefusedBeforeAllocating) {
  nn::GPTConfig base;
  base.vocab = 256;
  base.context = 16;
  base.layers = 1;
  base.d_model = 16;
  base.heads = 2;
  auto gpt_json = [&](const char* key, int64_t v) {
    auto j = nlohmann::json::parse(base.to_json());
    j[key] = v;
    return j.dump();
  };
  EXPECT_NE(error_of([&] { nn::GPTConfig::from_json(gpt_json("vocab_size", int64_t{1} << 62)); })
                .find("GPT config: vocab must be in [1, 16777216], got 4611686018427387904"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::GPTConfig::from_json(gpt_json("n_positions", -3)); }).find("context must be in"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::GPTConfig::from_json(gpt_json("n_head", 32)); }).find("heads must be in [1, 16]"),
            std::string::npos);
  // Each size in range, the total not: 2^24 x (2^16) embedding = 2^40 parameters.
  nn::GPTConfig wide = base;
  wide.vocab = 1 << 24;
  wide.d_model = 1 << 16;
  wide.heads = 1;
  EXPECT_NE(error_of([&] { nn::GPT g(wide); }).find("parameters, more than the 8589934592"), std::string::npos);
  // The count is exact: V*C + T*C + L*(12 C^2 + 13 C) + 2C.
  nn::GPT g(base);
  EXPECT_EQ(g.parameter_count(), 256 * 16 + 16 * 16 + (12 * 16 * 16 + 13 * 16) + 2 * 16);
  EXPECT_NE(error_of([] { nn::GPTConfig::from_json(R"({"vocab_size":1,"n_positions":1,"n_embd":1,"n_layer":1,"n_head":1,"mantissa":{"seed":"x"}})"); })
                .find("GPT config:"),
            std::string::npos);

  nn::MLPConfig m;
  m.inputs = 1 << 24;
  m.hidden = {1 << 24};
  m.classes = 10;
  EXPECT_NE(error_of([&] { nn::MLP x(m); }).find("MLP config: 281475161260042 parameters"), std::string::npos);
  m.hidden = {-1};
  EXPECT_NE(error_of([&] { m.validate(); }).find("hidden[0] must be in"), std::string::npos);
  m.hidden = {4};
  m.inputs = int64_t{1} << 40;
  EXPECT_NE(error_of([&] { m.validate(); }).find("inputs must be in"), std::string::npos);
}

// The Llama config is bounded like the others, before anything is allocated:
// each dimension in [1, 2^24], the parameter total at most 2^33.
TEST(ModelConfigs, LlamaSizesAreRefusedBeforeAllocating) {
  nn::LlamaConfig base;
  base.vocab = 256;
  base.context = 16;
  base.layers = 1;
  base.d_model = 16;
  base.heads = 2;
  auto llama_json = [&](const char* key, int64_t v) {
    auto j = nlohmann::json::parse(base.to_json());
    j[key] = v;
    return j.dump();
  };
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(llama_json("num_hidden_layers", int64_t{1} << 40)); })
                .find("Llama config: layers must be in [1, 16777216], got 1099511627776"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(llama_json("vocab_size", int64_t{1} << 30)); })
                .find("Llama config: vocab must be in"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nn::LlamaConfig::from_json(llama_json("intermediate_size", int64_t{1} << 40)); })
                .find("Llama config: intermediate size must be in"),
            std::string::npos);
  // In range one by one, not in total: 2^24 layers of 3 x 16 x 2^12 gate/up/down
  // plus attention = more than 2^33 parameters.
  EXPECT_NE(error_of([&] {
              auto j = nlohmann::json::parse(base.to_json());
              j["num_hidden_layers"] = 1 << 24;
              j["intermediate_size"] = 1 << 12;
              nn::LlamaConfig::from_json(j.dump());
            }).find("parameters, more than the 8589934592"),
            std::string::npos);
  EXPECT_NO_THROW(nn::LlamaConfig::from_json(base.to_json()));
}
