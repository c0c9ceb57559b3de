// The replica check's collectives over a ringguard Communicator: verified all-gather and broadcast.
#include "ringguard/replicas/communicator_exchange.h"

namespace ringguard {
namespace {

class CommunicatorExchange final : public ReplicaExchange {
 public:
  CommunicatorExchange(Communicator* host, Communicator* device) : comm_(host), device_(device) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

  Status allGather(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all) override {
    all->assign(mine.size() * static_cast<size_t>(size()), 0);
    return comm_->allgather(mine.data(), all->data(), mine.size(), DataType::kInt32);
  }

  Status broadcast(const ReplicaTensor& tensor, int root, void* stream) override {
    Communicator* comm = tensor.kind == MemoryKind::kHost ? comm_ : device_;
    if (comm == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    "replica repair: '" + tensor.name +
                        "' is device memory and the exchange has no device communicator");
    }
    return comm->broadcast(tensor.data, tensor.data, tensor.bytes, DataType::kUint8, root, stream);
  }

 private:
  Communicator* comm_;
  Communicator* device_;
};

}  // namespace

std::unique_ptr<ReplicaExchange> makeCommunicatorExchange(Communicator* host, Communicator* device) {
  return std::make_unique<CommunicatorExchange>(host, device);
}

}  // namespace ringguard
