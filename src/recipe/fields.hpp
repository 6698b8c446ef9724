// The table of recipe fields: for each setting its key, the values it takes,
// what it means, how `--set` parses it, how recipe JSON writes it and how
// validate_recipe checks it on its own. set_recipe_field, recipe_to_json,
// recipe_from_json, validate_recipe and recipe_fields() all read this table,
// so a new setting is one row here plus its member in Recipe (whose default
// initialiser is the setting's default).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/recipe/recipe.hpp"

namespace mantissa::recipe {

// amax_history's bound: a history of a million steps per tensor.
inline constexpr int64_t kMaxAmaxHistory = 1 << 20;

struct Field {
  std::string key;          // a dot nests it in recipe JSON: "loss_scale.init_scale"
  std::string type;         // the values it takes, in words
  std::string description;  // what it sets
  bool setting = true;      // false: the recipe's name and description (settable, not listed)
  std::function<void(Recipe&, std::string_view)> set;  // parses a value; throws naming the key
  std::function<nlohmann::json(const Recipe&)> write;  // the value as recipe JSON holds it
  std::function<void(const Recipe&)> check;            // this field's own check (may be empty)
};

// Every field, in the order error messages and `mantissa recipes --fields` list them.
const std::vector<Field>& fields();

// A JSON value as `set` reads it: strings as they are, anything else as JSON text.
inline std::string field_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace mantissa::recipe
