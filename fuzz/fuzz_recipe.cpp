// Recipe settings from outside: `--set key=value` strings (one per line,
// unit.* keys included) applied to a named recipe and validated, and a
// recipe's JSON (the part after a separator line) as a checkpoint stores it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "mantissa/recipe/recipe.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/train/session.hpp"
#include "mantissa/unit/settings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mantissa;
  const auto parts = fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size));
  train::TrainConfig c;
  std::string_view lines = parts[0];
  // The first line names the recipe; every further line is one --set.
  const size_t nl = lines.find('\n');
  c.recipe = std::string(lines.substr(0, nl));
  lines = nl == std::string_view::npos ? std::string_view() : lines.substr(nl + 1);
  while (!lines.empty()) {
    const size_t end = lines.find('\n');
    c.set.emplace_back(lines.substr(0, end));
    lines = end == std::string_view::npos ? std::string_view() : lines.substr(end + 1);
  }
  FUZZ_EXPECT_REFUSAL({
    const recipe::Recipe r = train::resolve_recipe(c);
    unit::UnitConfig u;
    (void)unit::take_settings(c.set, u);
    (void)recipe::recipe_from_json(recipe::recipe_to_json(r));
  });
  if (parts.size() > 1) FUZZ_EXPECT_REFUSAL((void)recipe::recipe_from_json(std::string(parts[1])));
  return 0;
}
