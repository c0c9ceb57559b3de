#pragma once
// Reading a file a user names (a rules file, a telemetry trace). A directory would read as empty text, a
// FIFO or a device would block or never end: only a regular file is read, and only up to a size limit,
// each refusal naming the path and what it is.
#include <cstddef>
#include <string>

#include "ringguard/core/status.h"

namespace ringguard {

// `what` names the file in errors ("rules file"). kInvalidArgument when `path` is not a regular file (checked
// with stat before it is opened, and again on the open descriptor, which is opened without blocking), is
// larger than `maxBytes`, or cannot be read.
Status readRegularFile(const std::string& path, const std::string& what, size_t maxBytes, std::string* out);

}  // namespace ringguard
