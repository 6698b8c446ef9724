// `mantissa analyse` as a library: build the model the way `train` would,
// hook an observer into its passes, run one micro-batch forward and backward,
// and collect scale statistics (unit/stats.hpp) per op and per parameter.
#include "mantissa/analyse/analyse.hpp"

#include <filesystem>
#include <stdexcept>

#include "mantissa/amp/amp.hpp"
#include "mantissa/data/idx.hpp"
#include "mantissa/data/text.hpp"
#include "mantissa/data/tokens.hpp"
#include "mantissa/formats/format.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/report/scales.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::analyse {

namespace {

std::string checkpoint_kind(const std::string& config_json) {
  const std::string kind = nn::detect_model_kind(config_json);
  return kind.empty() ? "unknown" : kind;
}

// The first training batch of the run `train` would make (analyse reads byte
// text or a classification set).
nn::Batch one_batch(const train::TrainConfig& c, const std::string& path) {
  train::RunData d;
  d.evaluation = false;
  if (train::text_model(c.model)) {
    if (data::is_token_data(path))
      throw std::invalid_argument("--data " + path + ": analyse reads byte text; token data is not supported here yet");
    const data::TextCorpus corpus = data::TextCorpus::load(path);
    corpus.check_seq_len(c.seq_len);
    d.corpus = &corpus;
    return train::data_sources(c, d).train->next();
  }
  const data::ClassificationSet set = data::load_fashion_mnist(path, "train");
  d.train_set = &set;
  return train::data_sources(c, d).train->next();
}

}  // namespace

Analysis analyse(const AnalyseOptions& options) {
  train::TrainConfig c = options.config;
  train::validate(c);
  const recipe::Recipe recipe = train::resolve_recipe(c);
  const unit::UnitConfig unit = train::unit_config(c, recipe);
  std::unique_ptr<nn::Model> model;
  if (!options.checkpoint.empty()) {
    std::string cfg;
    try {
      cfg = train::read_model_config(options.checkpoint);
    } catch (const std::exception& e) {
      throw std::invalid_argument("--checkpoint " + options.checkpoint + ": " + e.what());
    }
    if (checkpoint_kind(cfg) != c.model)
      throw std::invalid_argument("--checkpoint " + options.checkpoint + " holds a " + checkpoint_kind(cfg) +
                                  " model, not --model " + c.model);
    model = train::model_from_config(c.model, cfg);
    train::load_model_weights(options.checkpoint, *model);
  } else {
    model = train::make_model(c, unit);
  }
  train::apply_precision(*model, recipe);
  if (const int64_t context = model->context_length(); context > 0 && c.seq_len > context)
    throw std::invalid_argument("--seq-len " + std::to_string(c.seq_len) + " exceeds the model's context " +
                                std::to_string(context));

  Analysis a;
  a.recipe = recipe.name;
  a.parametrisation = model->unit().umup ? "umup" : model->unit().enabled ? "unit" : "standard";
  if (model->unit().enabled) a.rule_set = model->unit().rule_set;
  const formats::Format* fwd_cast = recipe::cast_target(recipe.cast_forward);
  const formats::Format* bwd_cast = recipe::cast_target(recipe.cast_backward);
  const formats::Format& ff = fwd_cast ? *fwd_cast : recipe.matmul_format.value();
  const formats::Format& bf = bwd_cast ? *bwd_cast : recipe.matmul_format.value();
  a.forward_format = (fwd_cast ? recipe.cast_forward : recipe.matmul_format).name();
  a.backward_format = (bwd_cast ? recipe.cast_backward : recipe.matmul_format).name();
  a.ops = unit::ScaleRecorder(ff, bf);
  a.params = unit::ScaleRecorder(ff, bf);

  const nn::Batch batch = one_batch(c, c.data.empty() ? train::default_data_path(c.model) : c.data);
  unit::ScaleRecorder* ops = &a.ops;
  model->set_observer([ops](const std::string& name, bool backward, const Tensor& v) {
    if (v.dtype() != DType::f32) return;
    ops->record(name, backward ? unit::Pass::backward : unit::Pass::forward, v.f32(), static_cast<size_t>(v.numel()));
  });
  model->zero_grad();
  const int64_t count = amp::count_targets(batch);
  if (count == 0) throw std::invalid_argument("the analysed batch has no targets");
  const double loss_scale = recipe.loss_scale.method == recipe::ScalingMethod::none ? 1.0 : recipe.loss_scale.init_scale;
  const nn::LossSum loss = model->forward_backward(batch, static_cast<float>(loss_scale / static_cast<double>(count)));
  model->set_observer({});
  a.loss = loss.sum / static_cast<double>(loss.count);
  for (autograd::Parameter* p : model->parameters()) {
    a.params.record(p->name, unit::Pass::forward, p->value.f32(), static_cast<size_t>(p->value.numel()));
    a.params.record(p->name, unit::Pass::backward, p->grad.f32(), static_cast<size_t>(p->grad.numel()));
  }
  return a;
}

std::vector<UnitExclusion> unit_exclusions(const Analysis& a) {
  std::vector<UnitExclusion> out;
  if (a.parametrisation == "standard") return out;
  if (a.rule_set == "library")
    out.push_back({"logits", unit::Pass::forward,
                   "the library's u-muP readout scales by 1/fan_in, not fan_in^-1/2, on purpose (muP's readout "
                   "multiplier): RMS ~ d_model^-1/2"});
  return out;
}

std::string analysis_notes(const Analysis& a) {
  if (a.parametrisation == "standard") return "";
  std::string s = "unit-scale check: every op output (forward) and the gradient arriving at it (backward) aims at RMS 1";
  const std::vector<UnitExclusion> ex = unit_exclusions(a);
  s += ex.empty() ? ", with no exclusion under the " + a.rule_set + " rules.\n" : "; excluded:\n";
  for (const UnitExclusion& e : ex) s += "  " + e.op + " " + unit::pass_name(e.pass) + ": " + e.reason + "\n";
  s += "  parameter rows (weights and their gradients) are not op outputs: neither rule set scales weight gradients to "
       "unit RMS (their batch^-1/2 rules leave them at the scale the optimizer's per-parameter rates absorb).\n";
  return s;
}

std::string analysis_table(const Analysis& a) { return a.ops.table() + a.params.table(); }

std::string analysis_csv(const Analysis& a) {
  std::string params = a.params.csv();
  params.erase(0, params.find('\n') + 1);  // one header
  return a.ops.csv() + params;
}

void write_analysis(const std::string& dir, const std::vector<std::pair<std::string, const Analysis*>>& models,
                    const std::string& title) {
  if (models.empty()) throw std::invalid_argument("write_analysis: no models");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::invalid_argument("--out " + dir + ": cannot create the directory: " + ec.message());
  // The pair is replaced only where it is mantissa's own: scales.csv starts
  // with the header this writes, and scales.svg is replaced only beside it.
  const std::string csv_path = (std::filesystem::path(dir) / "scales.csv").string();
  const std::string svg_path = (std::filesystem::path(dir) / "scales.svg").string();
  const std::string csv = analysis_csv(*models.front().second);
  io::check_replaceable_file(csv_path, csv.substr(0, csv.find('\n') + 1), "--out");
  if (std::filesystem::exists(svg_path, ec) && !std::filesystem::exists(csv_path, ec))
    throw std::invalid_argument("--out '" + svg_path + "' exists and was not written by mantissa (no scales.csv of "
                                "mantissa's beside it); choose another directory, or remove it yourself");
  io::check_replaceable_file(svg_path, "<svg xmlns=", "--out");
  io::write_file_atomic(csv_path, csv);
  std::vector<report::RecordedModel> rec;
  for (const auto& [name, an] : models) rec.push_back({name, &an->ops});
  report::write_svg(svg_path, report::render(report::scale_plot(rec, title)));
}

}  // namespace mantissa::analyse
