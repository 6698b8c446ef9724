// The words of the recipe settings that take one of a few names: the names in
// enum order (the parsers, recipe JSON and `mantissa recipes --fields` read them)
// and the one parser with the message every such setting gives.
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mantissa::recipe {

inline constexpr const char* kParametrisationNames[] = {"standard", "unit", "umup"};
inline constexpr const char* kLossScalingNames[] = {"none", "static", "dynamic"};
inline constexpr const char* kWeightRoundingNames[] = {"nearest", "stochastic"};
inline constexpr const char* kCastScalingNames[] = {"unit", "current", "delayed", "mx", "blockwise", "propagate"};
inline constexpr const char* kMxScaleRoundingNames[] = {"floor", "ceil"};  // formats::ScaleRounding order
inline constexpr const char* kFp4FormatNames[] = {"none", "nvfp4", "mxfp4"};
inline constexpr const char* kRhtNames[] = {"none", "random", "deterministic"};  // quant::RhtMode order
inline constexpr const char* kFp4RoundingNames[] = {"none", "gradients", "backward"};

// "a, b, c".
inline std::string name_list(std::span<const char* const> names) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// The index of `value` in `names`; else throws "invalid KEY 'value' (valid: ...)".
inline size_t index_of(std::string_view key, std::string_view value, std::span<const char* const> names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (value == names[i]) return i;
  throw std::invalid_argument("invalid " + std::string(key) + " '" + std::string(value) + "' (valid: " +
                              name_list(names) + ")");
}

}  // namespace mantissa::recipe
