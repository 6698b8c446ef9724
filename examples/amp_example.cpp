// Mixed precision on a model of your own in three lines (marked 1-3), as
// apex's amp.initialize / scale_loss / step did. The model here is
// mantissa's MLP on a synthetic 4-class problem so that the example runs
// without data; any nn::Model works the same way.
//
//   ./amp_example [recipe]      e.g. fp32, bf16-amp, fp16-amp, bf16-master-sr
#include <cstdio>
#include <random>
#include <string>

#include <mantissa/amp/amp.hpp>
#include <mantissa/nn/mlp.hpp>
#include <mantissa/optim/optimizer.hpp>

using namespace mantissa;

// Gaussian blobs: class c is centred on 2 e_c in 32 dimensions.
nn::Batch synthetic_batch(std::mt19937_64& rng, int64_t rows) {
  constexpr int64_t features = 32, classes = 4;
  std::normal_distribution<float> noise(0.0f, 1.0f);
  nn::Batch b{Tensor::empty({rows, features}), Tensor::empty({rows}, DType::i32)};
  for (int64_t r = 0; r < rows; ++r) {
    const auto c = static_cast<int32_t>(rng() % classes);
    b.targets.data<int32_t>()[r] = c;
    for (int64_t f = 0; f < features; ++f) b.inputs.f32()[r * features + f] = noise(rng) + (f == c ? 2.0f : 0.0f);
  }
  return b;
}

int main(int argc, char** argv) {
  const std::string recipe = argc > 1 ? argv[1] : "bf16-amp";
  nn::MLPConfig config;
  config.inputs = 32;
  config.hidden = {64};
  config.classes = 4;
  config.seed = 1;
  nn::MLP model(config);
  auto optimizer = optim::make_optimizer(optim::OptimizerConfig{}, model.parameters());

  amp::Amp amp(model, *optimizer, recipe::find_recipe(recipe));  // 1: precision policy, scaler, master weights

  std::mt19937_64 rng(7);
  double loss = 0;
  for (int step = 1; step <= 300; ++step) {
    const nn::LossSum l = amp.backward(synthetic_batch(rng, 64));  // 2: scaled forward + backward
    const amp::AmpStepResult r = amp.step(1e-2);                   // 3: unscale, skip if inf/NaN, clip, update
    loss = l.sum / static_cast<double>(l.count);
    if (step % 50 == 0)
      std::printf("step %3d  loss %.4f  loss scale %g%s\n", step, loss, r.loss_scale, r.skipped ? "  (skipped)" : "");
  }
  std::printf("recipe %s: final loss %.4f, %ld skipped steps\n", recipe.c_str(), loss,
              static_cast<long>(amp.scaler().skipped_steps()));
  return loss < 1.0 ? 0 : 1;  // chance is ln 4 = 1.39; a working recipe gets well below it (about 0.63)
}
