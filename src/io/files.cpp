#include "mantissa/io/files.hpp"

#include "mantissa/io/fault.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace mantissa::io {

namespace {

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

void fsync_directory_of(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // durability of the rename is best effort here
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(sys_error("cannot create", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    const int injected = injected_write_error();
    if (injected != 0) errno = injected;
    ssize_t n = injected != 0 ? -1 : ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string msg = sys_error("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(msg);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string msg = sys_error("cannot flush", tmp);
    ::unlink(tmp.c_str());
    throw std::runtime_error(msg);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string msg = sys_error("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    throw std::runtime_error(msg);
  }
  fsync_directory_of(path);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument("'" + path + "' is a directory, not a file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::invalid_argument(sys_error("cannot open", path));
  std::string out;
  std::array<char, 1 << 16> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw std::invalid_argument("cannot read '" + path + "'");
  return out;
}

namespace {
// Slicing-by-1 table for the reflected polynomial 0xEDB88320.
std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

}  // namespace mantissa::io
