// torch.distributed.monitored_barrier over the c10d Store (ProcessGroupRingguard::monitoredBarrier): no
// communicator involved, so a rank that never arrives is named by every rank instead of hanging them.
#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "ringguard/torch/process_group.h"

namespace ringguard {

// Every rank sets its key; rank 0 waits for each in turn (then only checks, once the time is up) and
// publishes a verdict that the others wait for (twice the timeout: rank 0 may itself arrive late).
void ProcessGroupRingguard::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  releaseHeldP2p();
  c10::intrusive_ptr<c10d::Store> store;
  uint64_t number = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: monitored_barrier after ", stoppedBy_);
    store = store_;
    number = monitoredBarriers_++;
  }
  using std::chrono::milliseconds;
  const milliseconds timeout = opts.timeout.count() > 0 ? opts.timeout : options_.timeout;
  const std::string base = "ringguard/monitored_barrier/" + std::to_string(number) + "/";
  const std::string verdictKey = base + "verdict";
  const std::string within = " within " + std::to_string(timeout.count()) + " ms";
  if (rank_ != 0) {
    store->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
    std::vector<uint8_t> verdict;
    try {
      store->wait({verdictKey}, 2 * timeout);
      verdict = store->get(verdictKey);
    } catch (const std::exception& e) {
      C10_THROW_ERROR(DistBackendError, "ringguard: monitored_barrier on rank " + std::to_string(rank_) +
                                            ": no verdict from rank 0" + within + " (x2): " + e.what());
    }
    const std::string text(verdict.begin(), verdict.end());
    if (text != "ok") C10_THROW_ERROR(DistBackendError, text);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_ && (waitAllRanks || missing.empty()); ++r) {
    const std::string key = base + std::to_string(r);
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    bool arrived = false;
    if (left.count() > 0) {
      try {
        store->wait({key}, left);
        arrived = true;
      } catch (const std::exception&) {
        arrived = store->check({key});  // a Store error, not a timeout, is raised from here
      }
    } else {
      arrived = store->check({key});
    }
    if (arrived) {
      store->deleteKey(key);
    } else {
      missing.push_back(r);
    }
  }
  std::string verdict = "ok";
  if (!missing.empty()) {
    std::ostringstream m;
    m << "ringguard: monitored_barrier: rank" << (missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < missing.size(); ++i) m << (i ? ", " : "") << missing[i];
    m << " of " << size_ << " did not arrive" << within << " (seen by rank 0"
      << (waitAllRanks ? "" : "; the first one missing, wait_all_ranks=True names all") << ")";
    verdict = m.str();
  }
  store->set(verdictKey, std::vector<uint8_t>(verdict.begin(), verdict.end()));
  if (!missing.empty()) C10_THROW_ERROR(DistBackendError, verdict);
}

}  // namespace ringguard
