#pragma once
// Host memory over MPI point-to-point. The data plane and the control channel each use their own
// duplicate of the user's communicator (MPI_ERRORS_RETURN), so our traffic never matches the user's.
#include <mpi.h>

#include <deque>
#include <mutex>
#include <vector>

#include "ringguard/transport/transport.h"

namespace ringguard {

class MpiTransport final : public Transport {
 public:
  // Duplicates `comm` twice. Fails if MPI is not initialised.
  static Status create(MPI_Comm comm, std::unique_ptr<Transport>* out);
  ~MpiTransport() override;
  const char* name() const override { return "mpi"; }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doSendControl(int peer, ControlTag tag, const void* data, size_t bytes) override;
  Status doProbeControl(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from,
                        bool* got) override;

 private:
  MpiTransport(int rank, int size, MPI_Comm data, MPI_Comm control);
  void reapControlSends();

  MPI_Comm data_;
  MPI_Comm control_;
  struct PendingControl {
    MPI_Request request;
    std::vector<uint8_t> buffer;
  };
  std::deque<PendingControl> controlSends_;
};

}  // namespace ringguard
