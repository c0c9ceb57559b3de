#pragma once
// Status: the value type for expected failures (Horovod/gloo style). Exceptions are used only at the
// torch/Python boundary; broken invariants use RINGGUARD_ENFORCE.
#include <string>
#include <utility>

namespace ringguard {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,      // bad input from the caller (null buffer, bad count, bad option value)
  kFingerprintMismatch,  // ranks called different collectives (op, dtype, count or sequence)
  kCorruption,           // a slice failed verification more often than the retry bound allows
  kTimeout,              // a peer did not answer within the configured timeout
  kPeerError,            // another rank reported a fatal error on the control channel
  kTransportError,       // the transport (MPI, NCCL, ...) returned an error
  kAborted,              // the communicator was shut down or aborted
  kInternal,             // anything else
};

const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<CodeName>: <message>", or "OK".
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define RINGGUARD_RETURN_IF_ERROR(expr)        \
  do {                                         \
    ::ringguard::Status _rg_status = (expr);   \
    if (!_rg_status.isOk()) return _rg_status; \
  } while (0)

// Invariants that only a bug can break: log file:line and the message, then abort.
[[noreturn]] void enforceFailed(const char* file, int line, const char* cond, const std::string& msg);
#define RINGGUARD_ENFORCE(cond, msg)                                           \
  do {                                                                         \
    if (!(cond)) ::ringguard::enforceFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

}  // namespace ringguard
