#pragma once
// Private: wraps every MPI call; a failure becomes a kTransportError Status naming the call and file:line.
#include <mpi.h>

#include <string>

#include "ringguard/core/status.h"

namespace ringguard {

inline Status mpiStatus(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status(StatusCode::kTransportError, std::string(call) + " failed at " + file + ":" +
                                                 std::to_string(line) + ": " + std::string(text, len));
}

#define RINGGUARD_MPI_CHECK(call) \
  RINGGUARD_RETURN_IF_ERROR(::ringguard::mpiStatus((call), #call, __FILE__, __LINE__))

}  // namespace ringguard
