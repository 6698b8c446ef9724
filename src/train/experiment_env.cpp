// What the report says about the software and the machine, so a reader can
// rerun the study on the same footing.
#include <oneapi/dnnl/dnnl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "mantissa/kernels/kernels.hpp"
#include "mantissa/train/experiment.hpp"

namespace mantissa::train {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  const size_t a = s.find_first_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a);
}

// stdout of a read-only command (git describe), empty on failure.
std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return {};
  std::string out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p.get())) out += buf.data();
  return trim(out);
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
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  return {};
}

}  // namespace

std::map<std::string, std::string> version_info() {
  std::map<std::string, std::string> v;
  std::string describe;
  if (const std::string repo = repo_dir(); !repo.empty() && std::filesystem::exists(repo + "/.git"))
    describe = command_output("git -C '" + repo + "' describe --always --dirty --tags 2>/dev/null");
  v["mantissa"] = describe.empty() ? "0.1.0 (no git checkout)" : "0.1.0, git " + describe;
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
  const std::string flags = first_field("/proc/cpuinfo", "flags");
  std::string isa;
  for (const char* f : {"avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"})
    if ((" " + flags + " ").find(std::string(" ") + f + " ") != std::string::npos) isa += (isa.empty() ? "" : ", ") + std::string(f);
  m["ISA"] = isa.empty() ? "no AVX-512" : isa;
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

}  // namespace mantissa::train
