// The study's two clocks: wall time since a point, and the process's CPU time
// (both threads' work, so a run's CPU seconds show how busy the cores were).
#pragma once

#include <time.h>

#include <chrono>

namespace mantissa::study {

inline double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace mantissa::study
