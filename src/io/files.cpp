#include "mantissa/io/files.hpp"

#include "mantissa/io/fault.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
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

// Writes all of bytes to fd; false (errno set) on failure.
bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const int injected = injected_write_error();
    if (injected != 0) errno = injected;
    ssize_t n = injected != 0 ? -1 : ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string unique_sibling(const std::string& path, const std::string& tag) {
  static std::atomic<uint64_t> counter{0};
  return path + "." + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp;
  int fd = -1;
  // O_EXCL: a name someone else holds (a file or a planted link) is never
  // opened; try the next one.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = unique_sibling(path, "tmp");
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw std::runtime_error(sys_error("cannot create", tmp));
  if (!write_all(fd, bytes)) {
    std::string msg = sys_error("cannot write", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(msg);
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

void check_replaceable_file(const std::string& path, const std::string& signature, const std::string& flag) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw std::invalid_argument(flag + " " + sys_error("cannot inspect", path));
  }
  const std::string refuse = flag + " '" + path + "' ";
  const std::string advice = "; mantissa replaces only files it wrote: choose another path, or remove it yourself";
  if (S_ISLNK(st.st_mode)) throw std::invalid_argument(refuse + "is a symbolic link" + advice);
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument(refuse + "exists and is not a regular file" + advice);
  std::string head(signature.size(), '\0');
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : ::read(fd, head.data(), head.size());
  if (fd >= 0) ::close(fd);
  if (n != static_cast<ssize_t>(signature.size()) || head != signature)
    throw std::invalid_argument(refuse + "exists and was not written by mantissa" + advice);
}

void refuse_output_over_input(const std::string& output, const std::string& flag,
                              const std::vector<std::pair<std::string, std::string>>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(output, ec);
  if (ec) return;
  for (const auto& [in_flag, in] : inputs) {
    if (in.empty()) continue;
    const fs::path p = fs::weakly_canonical(in, ec);
    if (ec || !fs::exists(p, ec)) continue;
    bool inside = false;
    for (fs::path a = p; !a.empty() && a != a.root_path(); a = a.parent_path()) inside = inside || a == out;
    if (inside)
      throw std::invalid_argument(flag + " '" + output + "' would overwrite the input " + in_flag + " '" + in +
                                  "': choose another output path");
  }
}

void check_writable_directory(const std::string& dir, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path d = dir.empty() ? fs::path(".") : fs::path(dir);
  while (!fs::exists(d, ec) && d.has_parent_path() && d.parent_path() != d) d = d.parent_path();
  if (!fs::exists(d, ec)) d = ".";
  if (!fs::is_directory(d, ec))
    throw std::invalid_argument(flag + ": '" + d.string() + "' is not a directory, so '" + dir + "' cannot be created");
  // A real probe (not access()): read-only mounts and ACLs answer too.
  const std::string probe = unique_sibling((d / ".mantissa-write-test").string(), "probe");
  if (::mkdir(probe.c_str(), 0700) != 0)
    throw std::invalid_argument(flag + ": " + sys_error("cannot create files in", d.string()));
  ::rmdir(probe.c_str());
}

void claim_output_dir(const std::string& dir, const std::string& flag, const std::string& marker,
                      const std::string& marker_text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path d(dir);
  const auto st = fs::symlink_status(d, ec);
  const std::string refuse = flag + " '" + dir + "' ";
  const std::string advice = "; mantissa writes only into a new or empty directory, or one it made";
  if (fs::is_symlink(st)) throw std::invalid_argument(refuse + "is a symbolic link" + advice);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) throw std::invalid_argument(refuse + "exists and is not a directory" + advice);
    if (!fs::is_empty(d, ec) && !fs::is_regular_file(fs::symlink_status(d / marker, ec)))
      throw std::invalid_argument(refuse + "is a directory mantissa did not create (no " + marker + " file)" + advice);
  } else {
    fs::create_directories(d, ec);
    if (ec) throw std::invalid_argument(refuse + "cannot be created (" + ec.message() + ")");
  }
  try {
    write_file_atomic((d / marker).string(), marker_text);
  } catch (const std::exception& e) {
    throw std::invalid_argument(refuse + "is not writable (" + e.what() + ")");
  }
}

AppendFile::AppendFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) throw std::invalid_argument(sys_error("cannot open for appending", path));
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::invalid_argument("'" + path + "' is not a regular file");
  }
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::write(const std::string& bytes) {
  if (fd_ < 0) return;
  if (!write_all(fd_, bytes)) throw std::runtime_error(sys_error("cannot write", path_) + " (disk full?)");
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
