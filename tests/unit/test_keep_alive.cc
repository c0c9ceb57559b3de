// keepUntilExit: memory a transport may still touch after a failure is kept, never destroyed, and counted.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/keep_alive.h"

namespace ringguard {
namespace {

struct Witness {
  explicit Witness(bool* destroyed) : destroyed_(destroyed) {}
  ~Witness() { *destroyed_ = true; }
  bool* destroyed_;
};

TEST(KeepAlive, KeptObjectsAreNeverDestroyedAndAreCounted) {
  static bool destroyed = false;  // static: it must outlive the kept Witness, which outlives this test
  const size_t before = keptUntilExitCount();
  {
    auto w = std::make_unique<Witness>(&destroyed);
    keepUntilExit(std::move(w));
    EXPECT_EQ(w, nullptr);
  }
  EXPECT_FALSE(destroyed);
  keepUntilExit(std::make_unique<std::vector<uint8_t>>(64, uint8_t(7)));
  keepUntilExit(std::unique_ptr<int>());  // nothing to keep
  EXPECT_EQ(keptUntilExitCount(), before + 2);
  EXPECT_FALSE(destroyed);
}

}  // namespace
}  // namespace ringguard
