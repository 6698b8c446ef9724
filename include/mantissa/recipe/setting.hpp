// A recipe setting that names a typed value: the name as written ("bf16",
// "e4m3fn/fp16", ...) and the value it names, parsed once when the setting is
// assigned. A name that names nothing is kept with the parser's message, so
// that assigning never throws; validate_recipe (run by register_recipe,
// recipe_from_json and `--set`) refuses it, naming the field, and asking the
// value of it throws that message. Some fields also take a word that names no
// value ("" for no cast, "none" for no master copy): the recipe's rules say which.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "mantissa/formats/format.hpp"
#include "mantissa/optim/state_format.hpp"

namespace mantissa::recipe {

template <class T, T (*Parse)(std::string_view)>
class Setting {
 public:
  Setting(std::string name) { assign(std::move(name)); }  // NOLINT: a name converts implicitly
  Setting(const char* name) : Setting(std::string(name)) {}
  Setting& operator=(std::string name) {
    assign(std::move(name));
    return *this;
  }
  Setting& operator=(const char* name) { return *this = std::string(name); }

  const std::string& name() const { return name_; }
  operator const std::string&() const { return name_; }
  const char* c_str() const { return name_.c_str(); }
  bool empty() const { return name_.empty(); }
  // The parser's message when the name names no value, else empty.
  const std::string& error() const { return error_; }
  // The value named; throws std::invalid_argument with error() when there is none.
  const T& value() const {
    if (!value_) throw std::invalid_argument(error_);
    return *value_;
  }

  friend bool operator==(const Setting& a, const Setting& b) { return a.name_ == b.name_; }
  friend bool operator==(const Setting& a, const std::string& b) { return a.name_ == b; }
  friend bool operator==(const Setting& a, std::string_view b) { return a.name_ == b; }
  friend bool operator==(const Setting& a, const char* b) { return a.name_ == b; }

 private:
  void assign(std::string name) {
    name_ = std::move(name);
    value_.reset();
    error_.clear();
    try {
      value_ = Parse(name_);
    } catch (const std::invalid_argument& e) {
      error_ = e.what();
    }
  }
  std::string name_;
  std::optional<T> value_;
  std::string error_;
};

// A number format by preset name (formats/format.hpp).
using FormatSetting = Setting<formats::Format, formats::parse_format>;
// Adam's moment formats, "F" or "M/V" (optim/state_format.hpp).
using StateFormatSetting = Setting<optim::StateFormat, optim::parse_state_format>;

}  // namespace mantissa::recipe
