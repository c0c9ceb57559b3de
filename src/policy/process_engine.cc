#include "ringguard/policy/process_engine.h"

#include <mutex>

namespace ringguard {

namespace {
std::mutex gMutex;
std::weak_ptr<const PolicyEngine> gEngine;  // guarded by gMutex
}  // namespace

void setProcessPolicyEngine(std::weak_ptr<const PolicyEngine> engine) {
  std::lock_guard<std::mutex> lock(gMutex);
  gEngine = std::move(engine);
}

std::string processPolicyVariant(const std::string& family) {
  std::shared_ptr<const PolicyEngine> e;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    e = gEngine.lock();
  }
  return e ? e->current(family) : std::string();
}

}  // namespace ringguard
