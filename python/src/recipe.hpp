// What the bindings share of recipes (recipe.cpp): a recipe resolved as
// `mantissa train --recipe NAME --set key=value ...` resolves it.
#pragma once

#include <string>
#include <vector>

#include "mantissa/recipe/recipe.hpp"

namespace mantissa::py {

// The named recipe with the key=value overrides applied, validated; ValueError
// (std::invalid_argument) naming the recipe, the key or the bad value.
recipe::Recipe resolved_recipe(const std::string& name, const std::vector<std::string>& set);

}  // namespace mantissa::py
