// A private directory under /tmp for one test, removed with everything in it
// when the test ends.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

struct TempDir {
  std::filesystem::path path;
  // prefix: names the test in the directory's name (/tmp/mantissa_<prefix>_XXXXXX).
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/mantissa_" + prefix + "_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // Writes bytes to name (parent folders made as needed); returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};
