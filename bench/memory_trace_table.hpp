// What a training step holds at its activation peak (bench_train
// --memory-trace): the live activation tensors of a mantissa::MemoryTrace
// grouped by label (the model op that allocated them, "/saved" for copies
// kept for backward, "/backward" for gradients and backward temporaries) and
// by dtype and shape, printed as a table and returned as JSON rows.
#pragma once

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/tensor/memory_trace.hpp"

namespace bench_memory {

inline nlohmann::ordered_json trace_table(const mantissa::MemoryTrace& trace, const std::string& recipe) {
  struct Row {
    std::string label, note;
    size_t count = 0, bytes = 0;
  };
  std::vector<Row> rows;  // first-allocation order
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const auto& b : trace.live) {
    auto key = std::make_pair(b.label.empty() ? std::string("(unlabelled)") : b.label, b.note);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, rows.size()).first;
      rows.push_back({key.first, key.second, 0, 0});
    }
    rows[it->second].count += 1;
    rows[it->second].bytes += b.bytes;
  }
  const double mib = 1.0 / 1048576.0;
  std::fprintf(stderr, "memory trace %s: activation peak %.2f MiB while in '%s'\n", recipe.c_str(),
               static_cast<double>(trace.activation_peak) * mib, trace.at.c_str());
  std::fprintf(stderr, "  %8s %3s  %-32s %s\n", "MiB", "n", "dtype shape", "label");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    std::fprintf(stderr, "  %8.3f %3zu  %-32s %s\n", static_cast<double>(r.bytes) * mib, r.count, r.note.c_str(),
                 r.label.c_str());
    out.push_back({{"label", r.label}, {"tensor", r.note}, {"count", r.count}, {"bytes", r.bytes}});
  }
  return {{"activation_peak_bytes", trace.activation_peak}, {"at", trace.at}, {"live", out}};
}

}  // namespace bench_memory
