// The processes of a data-parallel run. Under `mpirun` (or srun) the group is
// MPI_COMM_WORLD; otherwise, or when mantissa was built without MPI, it is
// one process and every collective is a copy.
//
// Every collective here moves bytes only (no arithmetic inside MPI), so the
// sums built on them (reduce.hpp) have an order fixed by rank, never by
// timing. Each one runs non-blocking and is polled against a deadline: if a
// rank dies or hangs, the others print which collective timed out and abort
// the job (MPI_Abort) instead of waiting forever.
#pragma once

#include <cstddef>
#include <string>

namespace mantissa::dist {

class Group {
 public:
  // The world: initialises MPI on first use when launched by mpirun/srun
  // (MPI is finalised at exit). Not thread-safe on first call.
  static Group& world();
  // True when this process was started by an MPI launcher.
  static bool launched_by_mpi();
  // True when mantissa was built with MPI (CMake found it).
  static bool mpi_built();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }

  // Seconds a collective may wait for the slowest rank (default 300).
  void set_timeout(double seconds);
  double timeout() const { return timeout_; }

  // recv[j * bytes ...] receives what rank j sent from its send[rank * bytes ...].
  void alltoall(const void* send, void* recv, size_t bytes, const char* what);
  // recv[j * bytes ...] receives rank j's send[0 .. bytes).
  void allgather(const void* send, void* recv, size_t bytes, const char* what);
  void barrier(const char* what);
  // Rank 0's text, on every rank (one process: the text itself).
  std::string from_root(const std::string& text, const char* what);
  // Prints the message (naming this rank) and ends every process of the job.
  [[noreturn]] void abort(const std::string& message);

 private:
  Group() = default;
  int rank_ = 0;
  int size_ = 1;
  double timeout_ = 300;
};

}  // namespace mantissa::dist
