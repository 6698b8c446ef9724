// Small file helpers with the project's durability and safety rules: every
// write goes to a fresh temporary name (created exclusively, never through a
// symbolic link), is fsync'ed, then renamed over the target, so readers see
// the old or the new file, never half of one, and no existing file is ever
// truncated in place.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mantissa::io {

// Writes bytes to a unique path.tmp-<pid>-<n> opened with O_CREAT|O_EXCL|
// O_NOFOLLOW, fsyncs, renames it to path (replacing path itself, never what a
// link there points to), fsyncs the directory. Throws std::runtime_error
// naming the path and the system error.
void write_file_atomic(const std::string& path, const std::string& bytes);
// Whole file; throws std::invalid_argument naming the path if unreadable.
std::string read_file(const std::string& path);
// CRC-32 (IEEE 802.3, zlib's crc32) of the bytes.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// A unique name beside path: "<path>.<tag>-<pid>-<n>" (n counts per process).
std::string unique_sibling(const std::string& path, const std::string& tag);

// For an output file mantissa may replace: returns if path does not exist, or
// is a regular file (not a link) whose contents start with signature (so
// mantissa wrote it); otherwise throws std::invalid_argument naming `flag`
// and path.
void check_replaceable_file(const std::string& path, const std::string& signature, const std::string& flag);
// Throws std::invalid_argument if output names the same file as (or, for a
// directory output, contains) one of inputs: {flag, path} pairs; missing
// paths never match.
void refuse_output_over_input(const std::string& output, const std::string& flag,
                              const std::vector<std::pair<std::string, std::string>>& inputs);
// Throws std::invalid_argument unless files can be created in dir (or, if
// dir does not exist yet, in its nearest existing ancestor).
void check_writable_directory(const std::string& dir, const std::string& flag);

// Claims dir for a command's output files: refuses a symbolic link, a
// non-directory and a non-empty directory without the regular file `marker`
// (one mantissa did not make); creates dir when missing and writes marker
// (holding marker_text) into it. Throws std::invalid_argument
// "<flag> '<dir>' ...".
void claim_output_dir(const std::string& dir, const std::string& flag, const std::string& marker,
                      const std::string& marker_text);

// An existing regular file opened for appending (O_APPEND|O_NOFOLLOW): each
// write goes to the end and is flushed to the kernel at once.
class AppendFile {
 public:
  AppendFile() = default;
  explicit AppendFile(const std::string& path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  bool is_open() const { return fd_ >= 0; }
  void write(const std::string& bytes);  // throws std::runtime_error (disk full, ...)

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace mantissa::io
