// `mantissa train --config FILE.json`: the file's keys applied, the result
// validated and the recipe it names resolved, as the CLI does.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/train/session.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const std::string path = fuzz::write("config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  FUZZ_EXPECT_REFUSAL({
    train::TrainConfig c;
    train::apply_config_file(c, path, {});
    train::validate(c);
    (void)train::resolve_recipe(c);
    (void)train::config_to_json(c);
  });
  return 0;
}
