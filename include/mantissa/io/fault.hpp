// Injected I/O failures, for the fault-injection tests: with the environment
// variable MANTISSA_FAULT_WRITE=ENOSPC:N (or EIO:N) the N-th write
// (1-based, counted over the process) of io::write_file_atomic fails with
// that error, as a full or failing disk would make it.
#pragma once

namespace mantissa::io {

// The errno the current write must fail with, or 0 (no fault injected).
int injected_write_error();

}  // namespace mantissa::io
