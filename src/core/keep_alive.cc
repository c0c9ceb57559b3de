#include "core/keep_alive.h"

#include <mutex>
#include <vector>

namespace ringguard {

namespace {

struct Kept {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> objects;
};

// Never destroyed: what it holds must outlive every static destructor and exit handler that may still run
// transport code (the MPI exit handler among them).
Kept& kept() {
  static Kept* instance = new Kept;
  return *instance;
}

}  // namespace

void keepUntilExit(std::shared_ptr<void> memory) {
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  k.objects.push_back(std::move(memory));
}

size_t keptUntilExitCount() {
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  return k.objects.size();
}

}  // namespace ringguard
