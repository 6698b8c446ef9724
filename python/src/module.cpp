// mantissa._core: the module, threads and the training engine (formats on
// arrays: formats.cpp; recipes: recipe.cpp; the operand quantisers:
// quant.cpp). Long calls release the GIL; metric records reach Python
// through train::RunOptions::on_record.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "arrays.hpp"
#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/nn/gpt.hpp"
#include "mantissa/nn/models.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/study/experiment.hpp"
#include "mantissa/train/finite.hpp"
#include "mantissa/train/run.hpp"
#include "mantissa/train/session.hpp"

namespace mantissa::py {

void bind_data(nb::module_& m);
void bind_fast(nb::module_& m);
void bind_formats(nb::module_& m);
void bind_fp4(nb::module_& m);
void bind_quant(nb::module_& m);
void bind_recipe(nb::module_& m);

namespace {

// Settings by the keys of `mantissa train` ("batch-size" or "batch_size"),
// typed as the flags are; unknown keys and wrong types are errors naming the key.
train::TrainConfig train_config(const nb::dict& settings) {
  train::TrainConfig c;
  auto keys = train::config_keys(c);
  for (auto [k, v] : settings) {
    std::string key = nb::cast<std::string>(k);
    std::replace(key.begin(), key.end(), '_', '-');
    auto it = std::find_if(keys.begin(), keys.end(), [&](const train::ConfigKey& ck) { return ck.key == key; });
    if (it == keys.end()) throw nb::value_error(("unknown training setting '" + key + "'").c_str());
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if (nb::try_cast<T>(v, *target)) return;
          if constexpr (std::is_same_v<T, int64_t>)
            if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr()))
              throw nb::value_error(("training setting '" + key + "': " + nb::str(v).c_str() +
                                     " is out of range (a 64-bit signed integer)")
                                        .c_str());
          throw nb::type_error(("training setting '" + key + "': cannot use " +
                                  nb::cast<std::string>(nb::str(nb::handle(v.type()).attr("__name__"))))
                                     .c_str());
        },
        it->target);
  }
  return c;
}

// A built training session (train::build_session) run by train::run.
// run releases the GIL, so one call at a time: while a run trains, another
// thread's run, weights or step is refused (RuntimeError) rather than racing
// on the trainer's tensors. The GIL orders the checks; the record callback,
// on the running thread between steps, may read weights and step.
struct Session {
  std::unique_ptr<train::Session> s;
  bool running = false;
  std::thread::id runner;

  explicit Session(const nb::dict& settings) {
    train::TrainConfig c = train_config(settings);
    nb::gil_scoped_release release;
    s = train::build_session(c);
    if (auto* gpt = dynamic_cast<nn::GPT*>(s->model.get()))
      gpt->set_activation_checkpointing(static_cast<int>(s->config.checkpoint_activations));
  }

  void check_idle(const char* what) const {
    if (!running) return;
    if (runner != std::this_thread::get_id())
      throw std::runtime_error(std::string("Session.") + what + ": the session is running in another thread");
    if (std::string(what) == "run")
      throw std::runtime_error("Session.run: the session is already running (called from its record callback)");
  }

  std::string run_info() {
    check_idle("run_info");
    return train::run_options(*s).run_info_json;
  }

  // The run `mantissa train` does (`steps` > 0: to that step instead); `on_record`
  // gets every JSONL record.
  nb::dict run(int64_t steps, const std::function<void(const std::string&)>& on_record, bool log) {
    check_idle("run");
    train::RunOptions ro = train::run_options(*s);
    if (steps > 0) ro.steps = steps;
    ro.log = log ? stdout : nullptr;
    ro.on_record = [&on_record](const std::string& line) {
      nb::gil_scoped_acquire acquire;
      on_record(line);
    };
    train::RunSummary r;
    running = true;
    runner = std::this_thread::get_id();
    try {
      nb::gil_scoped_release release;
      r = train::run(*s->trainer, ro);
    } catch (...) {
      running = false;  // the GIL is held again here
      throw;
    }
    running = false;
    nb::dict d;
    d["steps"] = r.steps_done;
    d["skipped_steps"] = r.skipped_steps;
    d["final_loss"] = r.final_loss;
    d["final_loss_scale"] = r.final_loss_scale;
    d["val_loss"] = r.evaluated ? nb::cast(r.final_eval.val_loss) : nb::none();
    d["val_bpc"] = r.evaluated ? nb::cast(r.final_eval.val_bpc) : nb::none();
    d["diverged"] = r.diverged;
    d["seconds"] = r.seconds;
    d["tokens_per_s"] = r.tokens_per_s;
    return d;
  }
};

// fp32 copies of a tensor map (bf16/fp16/fp8 widened exactly).
nb::dict as_numpy(const std::map<std::string, Tensor>& tensors) {
  nb::dict d;
  for (const auto& [name, t] : tensors) {
    const Tensor f = t.to(DType::f32);
    std::vector<size_t> shape(f.shape().begin(), f.shape().end());
    auto a = new_array<float>(shape);
    std::memcpy(a.data(), f.f32(), f.bytes());
    d[name.c_str()] = a;
  }
  return d;
}

// What `mantissa eval` loads: DIR verified (manifest, sizes, CRC-32, finite
// values) or else DIR.prev, the model its config.json describes, every
// parameter present with its shape, none non-finite. Returns the parameters
// and the fallback's warning (empty when DIR itself was used).
std::pair<nb::dict, std::string> load_weights(const std::string& dir) {
  std::map<std::string, Tensor> tensors;
  train::CheckpointChoice chosen;
  std::unique_ptr<nn::Model> model;  // owns the tensors until they are copied
  {
    nb::gil_scoped_release release;
    chosen = train::choose_checkpoint(dir, true);
    const std::string cfg = train::read_model_config(chosen.dir);
    const std::string kind = nn::detect_model_kind(cfg);
    if (kind.empty())
      throw io::FormatError(chosen.dir + "/config.json describes none of the models (" + nn::model_kind_names() + ")");
    model = train::model_from_config(kind, cfg);
    train::load_model_weights(chosen.dir, *model);
    std::vector<std::pair<std::string, Tensor>> weights;
    for (const auto* p : model->parameters()) weights.emplace_back(p->name, p->value);
    if (const std::string bad = train::first_non_finite(weights); !bad.empty())
      throw io::FormatError(chosen.dir + ": weight " + bad + " holds non-finite values (NaN or infinity); refused");
    tensors = std::map<std::string, Tensor>(weights.begin(), weights.end());
  }
  return {as_numpy(tensors), chosen.warning};
}

nb::dict experiment(const nb::dict& settings, bool log) {
  study::ExperimentOptions o;
  for (auto [k, v] : settings) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "preset") o.preset = nb::cast<std::string>(v);
    else if (key == "recipes") o.recipes = nb::cast<std::vector<std::string>>(v);
    else if (key == "mlp_recipes") o.mlp_recipes = nb::cast<std::vector<std::string>>(v);
    else if (key == "out") o.out = nb::cast<std::string>(v);
    else if (key == "data") o.data = nb::cast<std::string>(v);
    else if (key == "mlp_data") o.mlp_data = nb::cast<std::string>(v);
    else if (key == "resume") o.resume = nb::cast<bool>(v);
    else if (key == "lr_standard") o.lr_standard = nb::cast<double>(v);
    else if (key == "lr_unit") o.lr_unit = nb::cast<double>(v);
    else {
      int64_t* field = key == "seeds" ? &o.seeds : key == "tokens" ? &o.tokens : key == "threads" ? &o.threads
                       : key == "layers" ? &o.layers : key == "d_model" ? &o.d_model : key == "heads" ? &o.heads
                       : key == "seq_len" ? &o.seq_len : key == "batch_size" ? &o.batch_size
                       : key == "mlp_steps" ? &o.mlp_steps : nullptr;
      if (!field) throw nb::value_error(("unknown experiment setting '" + key + "'").c_str());
      *field = nb::cast<int64_t>(v);
    }
  }
  o.command = "mantissa.experiment(...)";
  if (o.threads > 0) kernels::set_num_threads(static_cast<int>(o.threads));
  study::ExperimentOutcome r;
  {
    nb::gil_scoped_release release;
    r = study::run_experiment(o, log ? stdout : nullptr, false);
  }
  nb::dict d;
  d["markdown"] = r.report.markdown;
  d["html"] = r.report.html;
  d["ran"] = r.ran;
  d["resumed"] = r.resumed;
  nb::list runs;
  for (const auto& x : r.results) {
    nb::dict e;
    e["id"] = x.id;
    e["task"] = x.task;
    e["recipe"] = x.recipe;
    e["status"] = x.status;
    e["val_loss"] = x.val_loss;
    e["val_bpc"] = x.val_bpc;
    e["accuracy"] = x.accuracy;
    runs.append(e);
  }
  d["runs"] = runs;
  return d;
}

}  // namespace

NB_MODULE(_core, m) {
  using namespace nb::literals;
  bind_data(m);
  bind_fast(m);
  bind_formats(m);
  bind_fp4(m);
  bind_recipe(m);
  bind_quant(m);
  m.def("num_threads", &kernels::num_threads, "Threads the library's kernels use.");
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw nb::value_error(("threads must be >= 1, got " + std::to_string(n)).c_str());
    kernels::set_num_threads(n);
  }, "n"_a, "Threads for every kernel (OpenMP and oneDNN).");
  nb::class_<Session>(m, "Session")
      .def(nb::init<const nb::dict&>(), "settings"_a)
      .def("run_info", &Session::run_info)
      .def("run", &Session::run, "steps"_a, "on_record"_a, "log"_a = false)
      .def_prop_ro("step", [](const Session& s) {
        s.check_idle("step");
        return s.s->trainer->step();
      })
      .def("weights", [](Session& s) {
        s.check_idle("weights");
        std::map<std::string, Tensor> t;
        for (auto* p : s.s->model->parameters()) t.emplace(p->name, p->value);
        return as_numpy(t);
      }, "The model's parameters as fp32 numpy arrays (copies).");
  m.def("load_weights", &load_weights, "dir"_a,
        "A saved model's or checkpoint's verified parameters as fp32 arrays, and the DIR.prev fallback's warning.");
  m.def("experiment", &experiment, "settings"_a, "log"_a = false);
}

}  // namespace mantissa::py
