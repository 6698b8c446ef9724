// MPI_COMM_WORLD behind dist::Group: non-blocking collectives of bytes,
// polled against a deadline (a dead or hung rank ends the job with a message
// instead of a hang). Without MPI, or outside a launcher, one process.
#include "mantissa/dist/group.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#if MANTISSA_HAVE_MPI
#include <mpi.h>
#endif

namespace mantissa::dist {

bool Group::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* e = std::getenv(v); e && *e) return true;
  return false;
}

bool Group::mpi_built() {
#if MANTISSA_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void Group::set_timeout(double seconds) {
  if (!(seconds > 0)) throw std::invalid_argument("--comm-timeout must be a positive number of seconds");
  timeout_ = seconds;
}

[[noreturn]] void Group::abort(const std::string& message) {
  std::fprintf(stderr, "mantissa rank %d/%d: %s\n", rank_, size_, message.c_str());
  std::fflush(stderr);
#if MANTISSA_HAVE_MPI
  int up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Abort(MPI_COMM_WORLD, 3);
#endif
  std::_Exit(3);
}

std::string Group::from_root(const std::string& text, const char* what) {
  if (size_ == 1) return text;
  // Two all-gathers of bytes: every rank's length, then texts padded to the longest.
  const auto ranks = static_cast<size_t>(size_);
  const uint64_t length = text.size();
  std::vector<uint64_t> lengths(ranks);
  allgather(&length, lengths.data(), sizeof length, what);
  uint64_t longest = 0;
  for (uint64_t n : lengths) longest = std::max(longest, n);
  if (longest == 0) return {};
  std::string mine = text;
  mine.resize(longest, '\0');
  std::string all(longest * ranks, '\0');
  allgather(mine.data(), all.data(), longest, what);
  return all.substr(0, lengths[0]);
}

#if MANTISSA_HAVE_MPI

namespace {

void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int byte_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument(std::string(what) + ": a piece of " + std::to_string(bytes) +
                                " bytes exceeds MPI's int count");
  return static_cast<int>(bytes);
}

// Polls until the request completes; past the deadline, aborts the job.
void wait(Group& g, MPI_Request& req, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  for (;;) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      g.abort(std::string(what) + ": MPI reported an error (another rank has probably died)");
    if (done) return;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > g.timeout()) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s did not complete within %g s: another rank has died or hangs; stopping the job "
                    "(the last checkpoint written stays valid; relaunch with --resume)",
                    what, g.timeout());
      g.abort(buf);
    }
    // Open MPI advances a collective only inside MPI calls: poll without
    // sleeping (yielding the core to any runnable process) for 2 s, then
    // sleep between polls so a long wait does not burn the core.
    if (waited < 2.0) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Group& Group::world() {
  static Group g = [] {
    Group w;
    if (!launched_by_mpi()) return w;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw std::runtime_error("MPI_Init_thread failed");
    std::atexit(finalize_at_exit);
    // Errors come back as codes so a dead peer gives our message, not MPI's.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
    return w;
  }();
  return g;
}

// Starts a non-blocking collective and waits for it against the deadline.
template <class Start>
void run(Group& g, const char* what, const char* call, Start start) {
  MPI_Request req;
  if (start(&req) != MPI_SUCCESS) g.abort(std::string(what) + ": " + call + " failed");
  wait(g, req, what);
}

void Group::alltoall(const void* send, void* recv, size_t bytes, const char* what) {
  if (size_ == 1) return void(std::memcpy(recv, send, bytes));
  const int n = byte_count(bytes, what);
  run(*this, what, "MPI_Ialltoall", [&](MPI_Request* r) {
    return MPI_Ialltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD, r);
  });
}

void Group::allgather(const void* send, void* recv, size_t bytes, const char* what) {
  if (size_ == 1) return void(std::memcpy(recv, send, bytes));
  const int n = byte_count(bytes, what);
  run(*this, what, "MPI_Iallgather", [&](MPI_Request* r) {
    return MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD, r);
  });
}

void Group::barrier(const char* what) {
  if (size_ == 1) return;
  run(*this, what, "MPI_Ibarrier", [](MPI_Request* r) { return MPI_Ibarrier(MPI_COMM_WORLD, r); });
}

#else  // one process

Group& Group::world() {
  static Group g;
  static const bool warned = [] {
    if (launched_by_mpi())
      std::fprintf(stderr, "mantissa: launched by mpirun, but built without MPI: every process trains alone "
                           "(install libopenmpi-dev and rebuild)\n");
    return true;
  }();
  (void)warned;
  return g;
}

void Group::alltoall(const void* send, void* recv, size_t bytes, const char*) { std::memcpy(recv, send, bytes); }
void Group::allgather(const void* send, void* recv, size_t bytes, const char*) { std::memcpy(recv, send, bytes); }
void Group::barrier(const char*) {}

#endif

}  // namespace mantissa::dist
