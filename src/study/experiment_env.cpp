// What the report says about the software and the machine, so a reader can
// rerun the study on the same footing.
#include <oneapi/dnnl/dnnl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "mantissa/formats/parse_number.hpp"
#include "mantissa/cpu/isa.hpp"
#include "mantissa/kernels/kernels.hpp"
#include "mantissa/kernels/matmul_route.hpp"
#include "mantissa/study/experiment.hpp"

namespace mantissa::study {

namespace {

// First line of a small file, trimmed; empty if unreadable.
std::string first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return std::string(formats::trim_blanks(line));
}

bool is_hash(const std::string& s) {
  if (s.size() != 40 && s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The repository the binary was built in: <repo>/<build dir>/mantissa.
std::string repo_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path().parent_path().string();
}

std::string first_field(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return std::string(formats::trim_blanks(std::string_view(line).substr(colon + 1)));
    }
  return {};
}

}  // namespace

// No git process: nothing the checkout's config, hooks or attributes name
// is ever run.
std::string git_head(const std::string& checkout) {
  const std::filesystem::path repo(checkout);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path git = repo / ".git";
  if (fs::is_regular_file(git, ec)) {  // a worktree: "gitdir: <path>"
    const std::string line = first_line(git);
    if (line.rfind("gitdir: ", 0) != 0) return {};
    const fs::path target = line.substr(8);
    git = target.is_absolute() ? target : repo / target;
  }
  const std::string head = first_line(git / "HEAD");
  if (is_hash(head)) return head;
  if (head.rfind("ref: refs/", 0) != 0 || head.find("..") != std::string::npos) return {};
  const std::string ref = head.substr(5);
  const std::string branch = ref.rfind("refs/heads/", 0) == 0 ? ref.substr(11) : ref;
  fs::path common = git;
  if (const std::string c = first_line(git / "commondir"); !c.empty())
    common = fs::path(c).is_absolute() ? fs::path(c) : git / c;
  for (const fs::path& d : {git, common})
    if (const std::string h = first_line(d / ref); is_hash(h)) return h + " (" + branch + ")";
  std::ifstream packed(common / "packed-refs");
  for (std::string line; std::getline(packed, line);)
    if (line.size() > 41 && line.compare(41, std::string::npos, ref) == 0 && is_hash(line.substr(0, 40)))
      return line.substr(0, 40) + " (" + branch + ")";
  return {};
}

std::map<std::string, std::string> version_info() {
  std::map<std::string, std::string> v;
  const std::string repo = repo_dir();
  const std::string head = repo.empty() ? std::string() : git_head(repo);
  v["mantissa"] = head.empty() ? "0.1.0 (no git checkout)" : "0.1.0, git " + head;
#if defined(__clang__)
  v["compiler"] = "clang " __clang_version__;
#elif defined(__GNUC__)
  v["compiler"] = "GCC " __VERSION__;
#endif
  const dnnl_version_t* d = dnnl_version();
  v["oneDNN"] = std::to_string(d->major) + "." + std::to_string(d->minor) + "." + std::to_string(d->patch);
  if (d->hash && std::string(d->hash) != "N/A") v["oneDNN"] += std::string(" (") + d->hash + ")";
  return v;
}

std::map<std::string, std::string> machine_info() {
  std::map<std::string, std::string> m;
  m["cpu"] = first_field("/proc/cpuinfo", "model name");
  m["logical CPUs"] = std::to_string(std::thread::hardware_concurrency());
  m["threads used"] = std::to_string(kernels::num_threads());
  const std::string mem = first_field("/proc/meminfo", "MemTotal");
  if (!mem.empty()) m["memory"] = mem;
  const std::string flags = " " + first_field("/proc/cpuinfo", "flags") + " ";
  const auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  std::string isa;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"})
    if (has(f)) isa += (isa.empty() ? "" : ", ") + std::string(f);
  m["ISA"] = isa.empty() ? "none of AVX2, AVX-512, AMX" : isa;
  // The class the README's speed table is laid out by; step times compare
  // only within one class.
  m["CPU class"] = has("amx_bf16")      ? "AMX"
                   : has("avx512_bf16") ? "AVX-512 BF16"
                   : has("avx512f")     ? "AVX-512"
                   : has("avx2") && has("fma") && has("f16c") ? "AVX2"
                                                              : "scalar";
  m["kernels"] = std::string(cpu::isa_name(cpu::active_isa())) + " (host " + cpu::isa_name(cpu::detected_isa()) +
                 "), " + kernels::matmul_route_summary();
  // Step times are only comparable on a quiet machine: say how busy it was.
  if (std::ifstream la("/proc/loadavg"); la) {
    std::string one, five;
    la >> one >> five;
    m["load average at start (1 min, 5 min)"] = one + ", " + five;
  }
  struct utsname u {};
  if (::uname(&u) == 0) m["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  return m;
}

}  // namespace mantissa::study
