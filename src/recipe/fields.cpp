// The rows of the recipe field table (recipe/fields.hpp) and the kinds of
// value they hold: text, one of a few names, true/false, numbers with a
// range, formats and the other typed settings (setting.hpp).
#include "recipe/fields.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <stdexcept>
#include <type_traits>

#include "recipe/names.hpp"
#include "recipe/plain_values.hpp"

namespace mantissa::recipe {
namespace {

using nlohmann::json;

// The member a field reads and writes: `get` is a generic lambda giving it
// from a Recipe, const or not.
template <class Get>
using Member = std::remove_cvref_t<decltype(std::declval<Get>()(std::declval<Recipe&>()))>;

// How a value is written in recipe JSON: as a JSON bool/number, or as the
// text `--set` takes (the FP4 settings are written as strings).
enum class Json : uint8_t { value, text };

// A typed setting's parse error, named by the field.
template <class S>
void check_setting(const std::string& key, const S& setting) {
  if (!setting.error().empty()) throw std::invalid_argument("recipe setting " + key + ": " + setting.error());
}

void check_format(const std::string& key, const FormatSetting& format, bool allow_none) {
  if (allow_none && format == "none") return;
  check_setting(key, format);
}

// A cast target: "" (no cast) or a format whose every value is exact in bf16
// (<= 8 exponent bits, <= 7 mantissa bits, 1 byte), so the cast operand can
// be multiplied exactly through the bf16 matrix path. Scale propagation may
// also cast to 16-bit formats (fp16, bf16): its quantiser decides. Scaled
// formats: the scale exponent can place any value of the format's range, so
// only the element format matters here.
void check_cast_format(const std::string& key, const FormatSetting& cast, quant::CastScaling scaling) {
  if (cast.empty()) return;
  check_format(key, cast, false);
  const formats::Format& f = cast.value();
  if (scaling == quant::CastScaling::propagate) return;
  if (f.kind != formats::Kind::floating || f.storage_bytes() != 1 || f.exponent_bits > 8 || f.mantissa_bits > 7)
    throw std::invalid_argument("recipe setting " + key + ": '" + cast.name() +
                                "' is not a 1-byte floating format exact in bf16 (e.g. e4m3fn, e4m3fnuz, e5m2, "
                                "e5m2fnuz); 16-bit casts need cast_scaling = propagate");
}

template <class Get>
Field text(const char* key, Get get, const char* description) {
  return {key, "text", description, false, [get](Recipe& r, std::string_view v) { get(r) = std::string(v); },
          [get](const Recipe& r) { return json(get(r)); }, {}};
}

template <class Get>
Field one_of(const char* key, Get get, std::span<const char* const> names, const char* description) {
  using E = Member<Get>;
  return {key, "one of " + name_list(names), description, true,
          [=](Recipe& r, std::string_view v) { get(r) = static_cast<E>(index_of(key, v, names)); },
          [=](const Recipe& r) { return json(names[static_cast<size_t>(get(r))]); }, {}};
}

template <class Get>
Field boolean(const char* key, Get get, Json style, const char* description) {
  return {key, "true or false", description, true, [=](Recipe& r, std::string_view v) { get(r) = parse_bool(key, v); },
          [=](const Recipe& r) {
            const bool b = get(r);
            return style == Json::text ? json(b ? "true" : "false") : json(b);
          },
          {}};
}

// The numbers a field takes: any finite number, or those in [lo, hi] ((lo, hi]
// when open_lo), integers only when `integer`; `says` completes
// "'V' is not ..." for the others.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool integer = false;
  bool open_lo = false;
  const char* says = nullptr;  // nullptr: every finite number
  bool excludes(double d) const {
    return (integer && d != std::floor(d)) || (open_lo ? !(d > lo) : d < lo) || d > hi;
  }
};

template <class Get>
Field number(const char* key, Get get, Range range, Json style, const char* description) {
  using T = Member<Get>;
  std::string type = range.says == nullptr ? "a number" : range.says;
  if (type.starts_with("in ")) type = "a number " + type;
  return {key, type, description, true,
          [=](Recipe& r, std::string_view v) {
            const double d = parse_number(key, v);
            if (range.says != nullptr && range.excludes(d))
              throw std::invalid_argument("recipe setting " + std::string(key) + ": '" + std::string(v) + "' is not " +
                                          range.says);
            get(r) = static_cast<T>(d);
          },
          [=](const Recipe& r) {
            const T value = get(r);
            if (style == Json::value) return json(value);
            if constexpr (std::is_integral_v<T>) {
              return json(std::to_string(value));
            } else {
              char s[32];
              std::snprintf(s, sizeof s, "%.17g", value);
              return json(s);
            }
          },
          {}};
}

// A number format by name; with allow_none, also "none".
template <class Get>
Field format(const char* key, Get get, bool allow_none, const char* description) {
  return {key, allow_none ? "a format, or none" : "a format", description, true,
          [=](Recipe& r, std::string_view v) { check_format(key, get(r) = std::string(v), allow_none); },
          [=](const Recipe& r) { return json(get(r).name()); },
          [=](const Recipe& r) { check_format(key, get(r), allow_none); }};
}

// A cast target: "" or "none" for no cast; 16-bit formats only with
// cast_scaling = propagate, which validate_recipe checks.
template <class Get>
Field cast(const char* key, Get get, const char* description) {
  return {key, "a 1-byte format, or none (16-bit: cast_scaling propagate)", description, true,
          [=](Recipe& r, std::string_view v) {
            // "none" is the empty cast, spelled as fp4_format spells its absence.
            const FormatSetting target = v == "none" ? std::string() : std::string(v);
            check_cast_format(key, target, quant::CastScaling::propagate);
            get(r) = target;
          },
          [=](const Recipe& r) { return json(get(r).name()); },
          [=](const Recipe& r) { check_cast_format(key, get(r), r.cast_scaling); }};
}

// Any other typed setting (setting.hpp): its parser's message as it is when
// set, named by the field when validated. An empty value reads as `empty`.
template <class Get>
Field typed(const char* key, Get get, std::string type, const char* empty, const char* description) {
  return {key, std::move(type), description, true,
          [=](Recipe& r, std::string_view v) {
            auto& setting = get(r);
            setting = std::string(v.empty() && empty != nullptr ? std::string_view(empty) : v);
            if (!setting.error().empty()) throw std::invalid_argument(setting.error());
          },
          [=](const Recipe& r) { return json(get(r).name()); },
          [=](const Recipe& r) { check_setting(key, get(r)); }};
}

// optimizer_state_format's own message names the field when set.
template <class Get>
Field state_format(const char* key, Get get, const char* description) {
  Field f = typed(key, get, "a format, or M/V (first / second moment)", nullptr, description);
  f.set = [=](Recipe& r, std::string_view v) { check_setting(key, get(r) = std::string(v)); };
  return f;
}

// The accessor of a Recipe member, for a const Recipe and a mutable one alike.
#define MEMBER(m) [](auto& r) -> auto& { return r.m; }

std::vector<Field> make_fields() {
  const Range positive_integer{1, 1e15, true, false, "a positive integer"};
  static const std::string history_says = "an integer in [1, " + std::to_string(kMaxAmaxHistory) + "]";
  const Range amax{1, static_cast<double>(kMaxAmaxHistory), true, false, history_says.c_str()};
  return {
      text("name", MEMBER(name), "the recipe's name"),
      text("description", MEMBER(description), "what the recipe is"),
      one_of("parametrisation", MEMBER(parametrisation), kParametrisationNames,
             "the model: standard, unit-scaled, or u-muP (non-parametric norms, depth-dependent residual taus)"),
      format("matmul_format", MEMBER(matmul_format), false, "inputs of matrix products (fp32 accumulation)"),
      format("saved_format", MEMBER(saved_format), false, "activations saved for the backward pass"),
      format("gradient_format", MEMBER(gradient_format), false, "parameter gradients as accumulated"),
      format("weight_format", MEMBER(weight_format), false, "working weights the model computes with"),
      format("master_format", MEMBER(master_format), true,
             "the copy the optimizer updates, rounded into weight_format after each step; none: the working "
             "weights are updated in place (apex O3)"),
      state_format("optimizer_state_format", MEMBER(optimizer_state_format), "Adam's moments"),
      boolean("norms_fp32", MEMBER(norms_fp32), Json::value,
              "with 16-bit weights, keep layer-norm gains and biases in fp32 (apex O2)"),
      one_of("weight_rounding", MEMBER(weight_rounding), kWeightRoundingNames,
             "how master weights round into weight_format"),
      cast("cast_forward", MEMBER(cast_forward), "the forward inputs (activation, weight) of every matrix product"),
      cast("cast_backward", MEMBER(cast_backward), "the output gradient of every matrix product"),
      one_of("cast_scaling", MEMBER(cast_scaling), kCastScalingNames, "how the casts choose their scales"),
      number("amax_history", MEMBER(amax_history), amax, Json::value, "delayed: steps of amax kept per tensor"),
      number("cast_margin", MEMBER(cast_margin), {0, 64, true, false, "an integer in [0, 64]"}, Json::value,
             "delayed/current: scale = 2^floor(log2(max/amax)) / 2^margin"),
      one_of("mx_scale_rounding", MEMBER(mx_scale_rounding), kMxScaleRoundingNames,
             "mx: the block exponent; floor (OCP) clips a block's largest values, ceil never clips"),
      boolean("cast_readout", MEMBER(cast_readout), Json::value,
              "whether the readout (LM head, the MLP's last layer) is cast; false: it runs in matmul_format"),
      one_of("loss_scale.method", MEMBER(loss_scale.method), kLossScalingNames, "loss scaling"),
      number("loss_scale.init_scale", MEMBER(loss_scale.init_scale), {}, Json::value,
             "dynamic: the starting scale; static: the scale"),
      number("loss_scale.growth_factor", MEMBER(loss_scale.growth_factor), {}, Json::value,
             "dynamic: the scale's factor after growth_interval clean steps"),
      number("loss_scale.backoff_factor", MEMBER(loss_scale.backoff_factor), {}, Json::value,
             "dynamic: the scale's factor on overflow"),
      number("loss_scale.growth_interval", MEMBER(loss_scale.growth_interval), positive_integer, Json::value,
             "dynamic: clean steps before the scale grows"),
      number("loss_scale.min_scale", MEMBER(loss_scale.min_scale), {}, Json::value, "lower bound (0: none)"),
      number("loss_scale.max_scale", MEMBER(loss_scale.max_scale), {}, Json::value, "upper bound (0: none)"),
      typed("fp4_format", MEMBER(fp4.format), "one of " + name_list(kFp4FormatNames), nullptr,
            "4-bit block format of the linear layers' products: nvfp4 (E4M3 scale / 16), mxfp4 (E8M0 scale / 32)"),
      boolean("fp4_forward", MEMBER(fp4.forward), Json::text, "the forward product's inputs in FP4 (else bf16)"),
      boolean("fp4_backward", MEMBER(fp4.backward), Json::text,
              "both backward products' inputs in FP4 (else bf16)"),
      boolean("fp4_weight_2d", MEMBER(fp4.weight_2d), Json::text,
              "square weight blocks (else 1-D along each contraction)"),
      typed("rht", MEMBER(fp4.rht), "one of " + name_list(kRhtNames), nullptr,
            "the random Hadamard transform on the Wgrad inputs"),
      boolean("rht_dgrad", MEMBER(fp4.rht_dgrad), Json::text, "the Hadamard transform on the dgrad inputs too"),
      typed("fp4_sr", MEMBER(fp4.sr), "one of " + name_list(kFp4RoundingNames), nullptr,
            "which inputs round stochastically: the output gradients, or every backward-product input"),
      typed("bf16_layers", MEMBER(fp4.bf16_layers), "block indices (negative from the end) and head, or none", "none",
            "the layers kept in bf16"),
      number("fp4_until", MEMBER(fp4.until), {0, 1, false, true, "in (0, 1]"}, Json::text,
             "fraction of the run's steps in FP4, then bf16"),
      number("rht_seed", MEMBER(fp4.seed), {0, 9.0e15, true, false, "a non-negative integer"}, Json::text,
             "seed of the Hadamard signs and stochastic-rounding draws"),
      boolean("fp4_pack_saved", MEMBER(fp4.pack_saved), Json::text,
              "saved Wgrad operands as 4-bit codes (the same values as bf16)"),
  };
}

#undef MEMBER

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

}  // namespace mantissa::recipe
