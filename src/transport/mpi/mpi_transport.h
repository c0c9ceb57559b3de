#pragma once
// Host memory over MPI point-to-point. The data plane and the control channel each use their own
// duplicate of the user's communicator (MPI_ERRORS_RETURN), so our traffic never matches the user's.
#include <mpi.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ringguard {

// Whether this process left an MPI request of ours in flight: a send released before it completed, or a
// receive that could not be cancelled (a failed collective, a stopped or departed peer). MPI_Finalize is
// then unsafe (it may wait for that peer forever, or crash: docs/RELIABILITY.md, defect 2); `why` gets the
// first such request's description. Process-wide, never reset.
bool mpiRequestsLeftInFlight(std::string* why = nullptr);
void noteMpiRequestLeftInFlight(const std::string& what);
// Whether a collective over MPI timed out in this process: a rank stopped making progress, and
// MPI_Finalize would wait for it (for as long as it is stopped) even with nothing of ours in flight.
// Process-wide, never reset; `why` gets the first timeout.
bool mpiPeerStalled(std::string* why = nullptr);

// The control channel on its own duplicated communicator: one MPI message per sealed frame, the frame's
// tag as the MPI tag (MPI keeps messages of one (source, tag) in order).
class MpiControlChannel final : public ControlChannel {
 public:
  // A control frame has no receive posted for it, and a message past MPI's eager limit (4 KiB in Open MPI's
  // shared-memory transport) waits for a rendezvous the receiver answers only when it next probes. So a
  // frame travels as pieces of kPieceBytes (each inside that limit with MPI's headers) and a last, shorter
  // piece (empty when the frame is a multiple of kPieceBytes): pieces of one (peer, tag) arrive in order.
  static constexpr size_t kPieceBytes = 3840;

  MpiControlChannel(int rank, int size, MPI_Comm comm) : ControlChannel(rank, size), comm_(comm) {}
  // Gives sends in flight a moment to leave; never blocks on a dead peer.
  ~MpiControlChannel() override;

 protected:
  Status doSend(int peer, ControlTag tag, const void* frame, size_t bytes) override;
  Status doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) override;

 private:
  void reapSends();
  // One MPI message (a piece) from `peer` (any: -1) with `tag`, as doProbe used to take whole frames.
  Status probePiece(int peer, ControlTag tag, std::vector<uint8_t>* piece, int* from, bool* got);

  MPI_Comm comm_;
  struct PendingSend {
    MPI_Request request;
    std::vector<uint8_t> buffer;
  };
  std::deque<PendingSend> sends_;
  // Frames matched by MPI_Improbe whose MPI_Imrecv has not completed (a message larger than the eager
  // limit needs its sender's progress, which a stopped peer never makes): doProbe reports nothing from
  // that (peer, tag) until the frame is in, so the caller's wait (pollUntil: its deadline, peers' errors,
  // abort) bounds it instead of a blocking MPI_Mrecv. Touched under the channel's probe lock only.
  struct PendingRecv {
    MPI_Request request;
    std::vector<uint8_t> buffer;
    int source;
    int tag;
  };
  std::deque<PendingRecv> recvs_;
  // Pieces of frames not complete yet, by (source, tag). Under the probe lock.
  std::map<std::pair<int, int>, std::vector<uint8_t>> partial_;
};

class MpiTransport final : public Transport {
 public:
  // Up to this payload size a frame is copied into one message: two small copies cost less than the
  // second message's latency (bench_collectives, docs/PERFORMANCE.md).
  static constexpr size_t kPackedFrameBytes = size_t(16) << 10;

  // Duplicates `comm` twice. Fails if MPI is not initialised.
  static Status create(MPI_Comm comm, std::unique_ptr<Transport>* out);
  ~MpiTransport() override;
  const char* name() const override { return "mpi"; }
  // One piece (MpiControlChannel::kPieceBytes: payload + 184 bytes of frame). Frames of several pieces need
  // no rendezvous, and an 8 KiB limit gained on the 2-core machine, but on 16 cores it lost to the
  // pipeline (docs/PERFORMANCE.md, "Every collective on host memory", eighteenth session).
  size_t eagerBytes() const override { return 3584; }
  ControlChannel* control() override { return control_.get(); }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override;
  // Frames of up to kPackedFrameBytes of payload travel as one message: payload then trailer.
  Status doPostFrameSend(int peer, const void* payload, size_t bytes, const Trailer* trailer,
                         FrameRequest* out) override;
  Status doPostFrameRecv(int peer, void* payload, size_t bytes, Trailer* trailer, FrameRequest* out) override;
  void doNotePeerStalled(const std::string& why) override;

 private:
  MpiTransport(int rank, int size, MPI_Comm data, MPI_Comm control);

  MPI_Comm data_;
  MPI_Comm controlComm_;
  std::unique_ptr<MpiControlChannel> control_;  // reset before the communicators are freed
  // Set once a cancelled receive did not complete in time: later cancels do not wait (mpi_transport.cc).
  std::shared_ptr<std::atomic<bool>> cancelStuck_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace ringguard
