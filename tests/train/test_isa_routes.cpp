// Every recipe on every instruction-set tier: one training step of each
// registered recipe (and of each model) runs no oneDNN reference primitive,
// on the host's own ISA and capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 with
// MANTISSA_MAX_ISA=avx2, so an AVX-512 host checks the AVX2 routes too); and
// short runs capped to each of mantissa's tiers the host has train alike
// (oneDNN's own ISA is held fixed there: its products differ by tier). Where
// the build found qemu-user, the same runs go on an emulated AVX2-only CPU
// (MANTISSA_EMULATED_AVX2, qemu's Haswell model), where no AVX-512
// instruction exists to be reached by mistake.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mantissa/cpu/isa.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "temp_dir.hpp"
#include "train/cli_util.hpp"

namespace {

namespace cpu = mantissa::cpu;

struct Cap {
  const char* name;     // for messages
  std::string env;      // variables set in front of the command
  std::string runner;   // the emulator the program runs under, if any
  std::string tier;     // the kernel tier `train` must report ("" for any)
};

const std::string kEmulator = MANTISSA_EMULATED_AVX2;

// The host as it is, capped to AVX2 (where the host has it), and on an
// emulated AVX2-only CPU (where the build found qemu-user).
std::vector<Cap> matmul_caps() {
  std::vector<Cap> caps = {{"host", "", "", ""}};
  if (cpu::detected_isa() >= cpu::Isa::avx2)
    caps.push_back({"avx2", "ONEDNN_MAX_CPU_ISA=AVX2 MANTISSA_MAX_ISA=avx2 ", "", "kernels avx2"});
  if (!kEmulator.empty()) caps.push_back({"emulated avx2", "", kEmulator + " ", "kernels avx2 (host avx2)"});
  return caps;
}

std::string tiny_run(const std::string& model, const std::string& data) {
  return " train --model " + model + " --data " + data +
         " --layers 1 --d-model 32 --heads 2 --seq-len 16 --batch-size 2 --threads 2 --warmup 1 --eval-every 0"
         " --eval-batches 1";
}

// The oneDNN primitives a command created or ran whose implementation is a
// reference one ("ref:..."), one line each.
std::string reference_lines(const std::string& out) {
  std::string found;
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(at, end - at);
    if (line.rfind("onednn_verbose,", 0) == 0 && line.find(",ref:") != std::string::npos) found += line + "\n";
    at = end + 1;
  }
  return found;
}

TEST(IsaRoutesVerbose, ReferenceLinesAreFound) {
  const std::string out =
      "onednn_verbose,info,cpu,isa:Intel AVX2\n"
      "onednn_verbose,exec,cpu,matmul,gemm:jit,undef,src_f32::blocked:ab:f0,,,256x64:64x64:256x64,0.1\n"
      "mantissa train: gpt model\n"
      "onednn_verbose,exec,cpu,matmul,ref:any,undef,src_f32::blocked:ba:f0,,attr-post-ops:binary_mul:f32:0+sum,23.1\n";
  EXPECT_EQ(reference_lines(out),
            "onednn_verbose,exec,cpu,matmul,ref:any,undef,src_f32::blocked:ba:f0,,attr-post-ops:binary_mul:f32:0+sum,23.1\n");
}

class IsaRoutes : public ::testing::Test {
 protected:
  TempDir dir{"isa_routes"};
  std::string corpus = dir.write("corpus.txt", cli_test::word_corpus(20000, 5));
};

TEST_F(IsaRoutes, NoRecipeRunsAReferencePrimitive) {
  for (const Cap& cap : matmul_caps()) {
    for (const auto& recipe : mantissa::recipe::recipes()) {
      SCOPED_TRACE(std::string(cap.name) + " " + recipe.name);
      const auto r = cli_test::run_command(cap.env + "ONEDNN_VERBOSE=1 " + cap.runner + MANTISSA_CLI +
                                           tiny_run("gpt", corpus) + " --steps 1 --recipe " + recipe.name);
      ASSERT_EQ(r.code, 0) << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0);
      ASSERT_NE(r.out.find("onednn_verbose,exec"), std::string::npos) << "no oneDNN verbose output";
      EXPECT_NE(r.out.find("cpu: " + cap.tier), std::string::npos) << "not on the " << cap.name << " tier";
      EXPECT_EQ(reference_lines(r.out), "");
    }
    for (const char* model : {"llama", "bert"}) {
      for (const char* recipe : {"fp32", "bf16-amp", "fp8-delayed", "unit-fp8", "mxfp8"}) {
        SCOPED_TRACE(std::string(cap.name) + " " + model + " " + recipe);
        const auto r = cli_test::run_command(cap.env + "ONEDNN_VERBOSE=1 " + cap.runner + MANTISSA_CLI +
                                             tiny_run(model, corpus) + " --steps 1 --recipe " + recipe);
        ASSERT_EQ(r.code, 0) << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0);
        EXPECT_EQ(reference_lines(r.out), "");
      }
    }
  }
}

std::vector<double> losses_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> v;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) v.push_back(j["loss"].get<double>());
  }
  return v;
}

// One recipe of each family, three steps under every mantissa tier the host
// has, oneDNN fixed to AVX2 for all. The AVX-512 tiers differ only in their
// conversion kernels, which give the scalar reference's bits, so their losses
// agree bit for bit. The scalar and avx2 tiers also run other GELU, softmax
// exp and fused-attention kernels, which meet float64 within a tolerance
// rather than each other's bits (different reciprocal steps and summation
// orders): their losses agree to a relative 1e-5.
TEST_F(IsaRoutes, CappedTiersTrainAlike) {
  if (cpu::detected_isa() < cpu::Isa::avx2) GTEST_SKIP() << "the host has no vector tier";
  for (const char* recipe : {"fp32", "bf16-amp", "fp16-amp", "fp8-delayed", "fp8-current", "mxfp8", "fp8-blockwise",
                             "unit-fp8", "scalify-fp8", "nvfp4", "mxfp4"}) {
    std::vector<double> scalar, avx512;
    for (cpu::Isa isa : cpu::kAllIsas) {
      if (isa > cpu::detected_isa()) continue;
      const std::string name = cpu::isa_name(isa);
      SCOPED_TRACE(std::string(recipe) + " under " + name);
      const std::string metrics = dir / (std::string(recipe) + "_" + name + ".jsonl");
      const auto r = cli_test::run_command("ONEDNN_MAX_CPU_ISA=AVX2 MANTISSA_MAX_ISA=" + name + " " + MANTISSA_CLI +
                                           tiny_run("gpt", corpus) + " --steps 3 --recipe " + recipe +
                                           " --metrics " + metrics);
      ASSERT_EQ(r.code, 0) << r.out;
      const std::vector<double> losses = losses_of(metrics);
      ASSERT_EQ(losses.size(), 3u);
      if (isa == cpu::Isa::scalar) scalar = losses;
      for (size_t i = 0; i < losses.size(); ++i) {
        EXPECT_NEAR(losses[i], scalar[i], 1e-5 * scalar[i]) << "step " << i + 1;
        if (isa > cpu::Isa::avx512) {
          EXPECT_EQ(losses[i], avx512[i]) << "step " << i + 1 << " (bits)";
        }
      }
      if (isa == cpu::Isa::avx512) avx512 = losses;
    }
    // The avx2 tier on a CPU that has nothing above it. oneDNN blocks its
    // products by the cache sizes the CPU reports, which qemu reports
    // otherwise, so the fp32 sums may round apart: the tolerance, not bits.
    if (kEmulator.empty()) continue;
    SCOPED_TRACE(std::string(recipe) + " on the emulated AVX2-only CPU");
    const std::string metrics = dir / (std::string(recipe) + "_emulated.jsonl");
    const auto r = cli_test::run_command(kEmulator + " " + MANTISSA_CLI + tiny_run("gpt", corpus) + " --steps 3 --recipe " +
                                         recipe + " --metrics " + metrics);
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<double> losses = losses_of(metrics);
    ASSERT_EQ(losses.size(), scalar.size());
    for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], scalar[i], 1e-5 * scalar[i]) << "step " << i + 1;
  }
}

}  // namespace
