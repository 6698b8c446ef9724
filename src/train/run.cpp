#include "mantissa/train/run.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mantissa/io/files.hpp"

namespace mantissa::train {

using nlohmann::json;

namespace {

// JSON has no inf/NaN: non-finite numbers become null, so a reader sees the
// divergence instead of a parse error.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", static_cast<long>(s / 3600), static_cast<long>(s % 3600 / 60));
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", static_cast<long>(s / 60), static_cast<long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lds", static_cast<long>(s));
  return buf;
}

class MetricsFile {
 public:
  // A fresh run replaces the file by a new one (never truncating it in
  // place); a resumed run appends to it.
  MetricsFile(const std::string& path, bool append, std::function<void(const std::string&)> hook)
      : hook_(std::move(hook)) {
    if (path.empty()) return;
    io::check_replaceable_file(path, kMetricsSignature, "--metrics");
    std::error_code ec;
    if (!append || !std::filesystem::exists(path, ec)) io::write_file_atomic(path, "");
    out_ = std::make_unique<io::AppendFile>(path);
  }
  // One line per record, handed to the kernel at once so a reader can follow the run.
  void write(const std::string& line) {
    if (out_) out_->write(line + "\n");
    if (hook_) hook_(line);
  }

 private:
  std::unique_ptr<io::AppendFile> out_;
  std::function<void(const std::string&)> hook_;
};

}  // namespace

std::string step_metrics_json(const StepMetrics& m) {
  json j = {{"step", m.step},
            {"loss", num(m.loss)},
            {"lr", m.lr},
            {"tokens_per_s", num(m.tokens_per_s)},
            {"tokens", m.tokens},
            {"targets", m.targets},
            {"step_ms", m.seconds * 1e3},
            {"loss_scale", m.loss_scale},
            {"skipped", m.skipped},
            {"grad_norm", num(m.grad_norm)}};
  if (m.ranks > 1) {
    j["ranks"] = m.ranks;
    j["comm_ms"] = m.comm_seconds * 1e3;
    j["comm_bytes"] = m.comm_bytes;
    j["state_bytes"] = m.state_bytes;
  }
  if (!m.grad_stats_json.empty()) j["grad_stats"] = json::parse(m.grad_stats_json);
  return j.dump();
}

namespace {

std::string eval_record(const EvalMetrics& e, bool per_token) {
  json j{{"step", e.step}, {"val_loss", num(e.val_loss)}, {"val_targets", e.targets}};
  if (per_token) {
    j["val_nats_per_token"] = num(e.val_loss);
    j["val_bits_per_token"] = num(e.val_bpc);
  } else {
    j["val_bpc"] = num(e.val_bpc);
  }
  if (e.masked_accuracy >= 0) j["val_masked_accuracy"] = num(e.masked_accuracy);
  return j.dump();
}

}  // namespace

std::string eval_metrics_json(const EvalMetrics& e) { return eval_record(e, false); }

RunSummary run(Trainer& trainer, const RunOptions& o) {
  RunSummary s;
  MetricsFile metrics(o.metrics_path, o.append_metrics, o.on_record);
  if (!o.run_info_json.empty()) metrics.write(json{{"run", json::parse(o.run_info_json)}}.dump());
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = trainer.step();
  const int64_t skipped_before = trainer.amp().scaler().skipped_steps();
  // A tensor that is not finite means the run has diverged.
  auto check_finite = [&](int64_t step) {
    if (const std::string bad = trainer.non_finite_state(); !bad.empty()) {
      s.diverged = true;
      s.diverged_at = step;
      s.diverged_reason = bad + " holds non-finite values";
    }
    return !s.diverged;
  };
  // Saves only a model whose every tensor is finite; otherwise the checkpoint
  // already on disk stays as it is.
  auto save = [&](int64_t step) {
    if (!check_finite(step)) return false;
    trainer.save(o.save_dir);
    return true;
  };
  double timed_seconds = 0;
  int64_t timed_steps = 0, timed_tokens = 0, bad_losses = 0;
  auto log_line = [&](const std::string& line) {
    if (!o.log) return;
    if (o.terminal) std::fprintf(o.log, "\r\033[K");
    std::fprintf(o.log, "%s\n", line.c_str());
    std::fflush(o.log);
  };
  auto do_eval = [&] {
    if (!trainer.has_validation()) return;
    s.final_eval = trainer.evaluate();
    s.evaluated = true;
    metrics.write(eval_record(s.final_eval, o.per_token));
    char buf[160];
    std::snprintf(buf, sizeof buf, o.per_token ? "eval step %ld: val_loss %.4f nats/token  val_bits_per_token %.4f"
                                             : "eval step %ld: val_loss %.4f  val_bpc %.4f",
                  static_cast<long>(s.final_eval.step), s.final_eval.val_loss, s.final_eval.val_bpc);
    std::string line(buf);
    if (s.final_eval.masked_accuracy >= 0) {
      std::snprintf(buf, sizeof buf, "  masked_accuracy %.4f", s.final_eval.masked_accuracy);
      line += buf;
    }
    log_line(line);
  };
  while (trainer.step() < o.steps) {
    if (o.before_step) o.before_step(trainer.step() + 1);
    const StepMetrics m = trainer.train_step();
    if (o.after_step) o.after_step(m);
    metrics.write(step_metrics_json(m));
    s.final_loss = m.loss;
    s.final_loss_scale = trainer.amp().scaler().scale();
    if (m.step > first + 1) {  // the first step pays one-off set-up costs
      timed_seconds += m.seconds;
      timed_tokens += m.tokens;
      ++timed_steps;
    }
    bad_losses = std::isfinite(m.loss) ? 0 : bad_losses + 1;
    const double mean = timed_steps ? timed_seconds / static_cast<double>(timed_steps) : m.seconds;
    const double eta = mean * static_cast<double>(o.steps - m.step);
    const double tps = timed_steps ? static_cast<double>(timed_tokens) / timed_seconds : m.tokens_per_s;
    if (o.log && o.terminal) {
      std::fprintf(o.log, "\r\033[Kstep %ld/%ld  loss %.4f  %.0f tok/s  scale %g%s  ETA %s", static_cast<long>(m.step),
                   static_cast<long>(o.steps), m.loss, tps, m.loss_scale, m.skipped ? "  (skipped)" : "",
                   format_eta(eta).c_str());
      std::fflush(o.log);
    } else if (o.log && (m.step % o.log_every == 0 || m.step == o.steps || m.step == first + 1)) {
      std::fprintf(o.log, "step %ld/%ld loss %.4f lr %.3e tokens/s %.0f loss_scale %g skipped %ld grad_norm %.3g ETA %s\n",
                   static_cast<long>(m.step), static_cast<long>(o.steps), m.loss, m.lr, tps, m.loss_scale,
                   static_cast<long>(trainer.amp().scaler().skipped_steps()), m.grad_norm, format_eta(eta).c_str());
      std::fflush(o.log);
    }
    const bool last = m.step == o.steps;
    if (bad_losses >= o.diverge_after) {
      s.diverged = true;
      s.diverged_at = m.step;
      s.diverged_reason = "the loss has not been finite for " + std::to_string(bad_losses) + " steps";
    }
    if (!s.diverged && o.eval_every > 0 && m.step % o.eval_every == 0 && !last) do_eval();
    if (!s.diverged && !o.save_dir.empty() && o.save_every > 0 && m.step % o.save_every == 0 && !last) save(m.step);
    if (s.diverged) break;
  }
  // Every run ends with a finiteness check, saved or not, so weights that
  // became NaN or inf before the loss did are never reported as trained; the
  // final save relies on it (evaluation changes no tensor).
  if (!s.diverged && (trainer.step() > first || !o.save_dir.empty())) check_finite(trainer.step());
  if (!s.diverged) do_eval();
  if (!s.diverged && !o.save_dir.empty()) {
    trainer.save(o.save_dir);
    log_line("saved checkpoint to " + o.save_dir);
  }
  if (s.diverged) {
    if (o.log && o.terminal) std::fprintf(o.log, "\n");
    log_line("diverged at step " + std::to_string(s.diverged_at) + ": " + s.diverged_reason +
             (o.save_dir.empty() ? "" : "; nothing saved (" + o.save_dir + " keeps its previous checkpoint, if any)"));
  }
  s.steps_done = trainer.step();
  s.state_bytes = trainer.state_bytes();
  s.steps_run = trainer.step() - first;
  s.skipped_steps = trainer.amp().scaler().skipped_steps();
  s.skipped_this_run = s.skipped_steps - skipped_before;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.mean_step_seconds = timed_steps ? timed_seconds / static_cast<double>(timed_steps) : 0;
  s.tokens_per_s = timed_steps ? static_cast<double>(timed_tokens) / timed_seconds : 0;
  return s;
}

}  // namespace mantissa::train
