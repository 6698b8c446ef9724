#include "mantissa/data/tokens.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace mantissa::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; ids are read in place");

namespace fs = std::filesystem;

namespace {

template <class T>
const T* ids(const TokenSpan& s) {
  return reinterpret_cast<const T*>(s.data);  // the mapping is page-aligned, the header 1024 bytes
}

template <class T>
uint32_t max_of(const TokenSpan& s) {
  const T* p = ids<T>(s);
  T m = 0;
#pragma omp parallel for simd reduction(max : m) if (s.size > (int64_t{1} << 22))
  for (int64_t i = 0; i < s.size; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

template <class T>
int64_t first_id_at_or_above(const TokenSpan& s, uint32_t vocab) {
  const T* p = ids<T>(s);
  for (int64_t i = 0; i < s.size; ++i)
    if (p[i] >= vocab) return i;
  return -1;
}

int32_t le32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return static_cast<int32_t>(v);
}

std::string errno_text(int err) { return std::strerror(err); }

// Opens path read-only without following a final symbolic link and without
// blocking on a FIFO; the caller owns the descriptor.
int open_regular(const std::string& path, int64_t& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP)
      throw DataError("token file '" + path +
                      "' is a symbolic link (refused: pass the file itself)");
    if (err == ENOENT) throw DataError("token file '" + path + "' does not exist");
    throw DataError("token file '" + path + "' cannot be opened: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError("token file '" + path + "' is not a regular file");
  }
  bytes = static_cast<int64_t>(st.st_size);
  return fd;
}

bool nanogpt_name(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  return name == "train.bin" || name == "val.bin";
}

}  // namespace

void TokenSpan::copy(int64_t first, int64_t n, int32_t* out) const {
  // Ids are below the checked vocabulary (< 2^24), so each fits an int32.
  switch (width) {
    case 1:
      for (int64_t k = 0; k < n; ++k) out[k] = data[first + k];
      break;
    case 2:
      for (int64_t k = 0; k < n; ++k) out[k] = ids<uint16_t>(*this)[first + k];
      break;
    default:
      for (int64_t k = 0; k < n; ++k)
        out[k] = static_cast<int32_t>(ids<uint32_t>(*this)[first + k]);
  }
}

TokenFile TokenFile::open(const std::string& path) {
  TokenFile f;
  f.path_ = path;
  int64_t bytes = 0;
  const int fd = open_regular(path, bytes);
  // The descriptor is closed on every path out; the mapping outlives it.
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const std::string where = "token file '" + path + "'";
  if (bytes == 0) throw DataError(where + " is empty");
  unsigned char head[kLlmcHeaderBytes] = {};
  const auto want = static_cast<size_t>(std::min<int64_t>(bytes, kLlmcHeaderBytes));
  if (::pread(fd, head, want, 0) != static_cast<ssize_t>(want))
    throw DataError(where + " cannot be read");
  const int32_t magic = bytes >= 4 ? le32(head) : 0;
  int64_t header = 0, count = 0;
  if (magic == kLlmcMagic16 || magic == kLlmcMagic32) {
    f.tokens_.width = magic == kLlmcMagic16 ? 2 : 4;
    const int32_t version_wanted = magic == kLlmcMagic16 ? 1 : 7;
    if (bytes < kLlmcHeaderBytes)
      throw DataError(where + ": llm.c header truncated (" + std::to_string(bytes) +
                      " of 1024 bytes)");
    const int32_t version = le32(head + 4);
    if (version != version_wanted)
      throw DataError(where + ": llm.c magic " + std::to_string(magic) + " needs version " +
                      std::to_string(version_wanted) + ", the header says " +
                      std::to_string(version));
    const int32_t n = le32(head + 8);
    if (n <= 0) throw DataError(where + ": llm.c header gives " + std::to_string(n) + " tokens");
    header = kLlmcHeaderBytes;
    count = n;
    // n < 2^31 and width <= 4: the product cannot overflow int64.
    const int64_t body = bytes - header;
    if (body != count * f.tokens_.width)
      throw DataError(where + ": the header gives " + std::to_string(count) + " tokens (" +
                      std::to_string(count * f.tokens_.width) + " bytes) but " +
                      std::to_string(body) + " bytes follow the header");
    f.format_ = f.tokens_.width == 2 ? "llm.c uint16" : "llm.c uint32";
  } else if (nanogpt_name(path)) {
    f.tokens_.width = 2;
    if (bytes % 2 != 0)
      throw DataError(where + ": " + std::to_string(bytes) +
                      " bytes is odd, not a whole number of uint16 tokens");
    count = bytes / 2;
    f.format_ = "nanoGPT uint16";
  } else {
    throw DataError(where + ": bad magic " + std::to_string(magic) + " (llm.c files start with " +
                    std::to_string(kLlmcMagic16) + " or " + std::to_string(kLlmcMagic32) +
                    "; headerless nanoGPT files are read only as train.bin and val.bin)");
  }
  if (static_cast<uint64_t>(bytes) > SIZE_MAX) throw DataError(where + " is too large to map");
  void* map = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) throw DataError(where + " cannot be mapped: " + errno_text(errno));
  f.map_ = map;
  f.map_bytes_ = static_cast<size_t>(bytes);
  f.tokens_.data = static_cast<const unsigned char*>(map) + header;
  f.tokens_.size = count;
  f.max_id_ = f.tokens_.width == 2 ? max_of<uint16_t>(f.tokens_) : max_of<uint32_t>(f.tokens_);
  return f;
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this == &o) return *this;
  if (map_) ::munmap(map_, map_bytes_);
  path_ = std::move(o.path_);
  format_ = std::move(o.format_);
  map_ = std::exchange(o.map_, nullptr);
  map_bytes_ = std::exchange(o.map_bytes_, 0);
  tokens_ = std::exchange(o.tokens_, TokenSpan{});
  max_id_ = o.max_id_;
  return *this;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

int64_t TokenFile::first_at_or_above(uint32_t vocab) const {
  return tokens_.width == 2 ? first_id_at_or_above<uint16_t>(tokens_, vocab)
                            : first_id_at_or_above<uint32_t>(tokens_, vocab);
}

int64_t model_vocab(nn::Model& model) {
  for (const autograd::Parameter* p : model.parameters())
    if (p->role == autograd::Role::token_embedding) return p->value.dim(0);
  return 0;
}

bool is_token_data(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".bin") return true;
    return false;
  }
  if (fs::path(path).extension() == ".bin") return true;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  unsigned char head[4] = {};
  const bool read4 = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, head, 4, 0) == 4;
  ::close(fd);
  return read4 && (le32(head) == kLlmcMagic16 || le32(head) == kLlmcMagic32);
}

}  // namespace mantissa::data
