// Small file helpers with the project's durability rules: every write goes
// to a temporary name, is fsync'ed, then renamed over the target, so readers
// see the old or the new file, never half of one.
#pragma once

#include <cstdint>
#include <string>

namespace mantissa::io {

// Writes bytes to path.tmp, fsyncs, renames to path, fsyncs the directory.
// Throws std::runtime_error naming the path and the system error.
void write_file_atomic(const std::string& path, const std::string& bytes);
// Whole file; throws std::invalid_argument naming the path if unreadable.
std::string read_file(const std::string& path);
// CRC-32 (IEEE 802.3, zlib's crc32) of the bytes.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace mantissa::io
