// PeerLiveness (transport/peer/peer_liveness.h): the watchdog's view of which peers' processes exited, which
// ends a device wait on a dead rank at once instead of at its deadline. Real processes: forked children,
// killed or exiting on their own, and this process's own pid (never watched).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "transport/peer/peer_liveness.h"

namespace ringguard {
namespace peer {
namespace {

pid_t sleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

// The mask once it has `bits` set, or whatever it is after 10 s (a process's exit is seen within
// milliseconds; the bound only keeps a broken check from hanging the suite).
uint32_t waitForMask(const PeerLiveness& live, uint32_t bits) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint32_t mask = live.exited();
  while ((mask & bits) != bits && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    mask = live.exited();
  }
  return mask;
}

TEST(PeerLiveness, SeesAKilledAndAnExitedPeerAndNothingElse) {
  const pid_t a = sleeper(), b = sleeper();
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  // Ranks: 0 this process, 1 and 2 the children, 3 unknown (pid 0).
  PeerLiveness live({int(getpid()), int(a), int(b), 0});
  EXPECT_EQ(live.watched(), 2);
  EXPECT_EQ(live.exited(), 0u);

  ASSERT_EQ(kill(a, SIGKILL), 0);
  EXPECT_EQ(waitForMask(live, 1u << 1), 1u << 1);  // not reaped yet: a zombie counts as gone
  ASSERT_EQ(waitpid(a, nullptr, 0), a);
  EXPECT_EQ(live.exited(), 1u << 1);  // reaped: still gone, and rank 2 still alive

  ASSERT_EQ(kill(b, SIGTERM), 0);
  EXPECT_EQ(waitForMask(live, 0b110u), 0b110u);
  ASSERT_EQ(waitpid(b, nullptr, 0), b);
}

TEST(PeerLiveness, APidThatIsGoneAtStartIsNotWatched) {
  const pid_t a = fork();
  if (a == 0) _exit(0);
  ASSERT_GT(a, 0);
  ASSERT_EQ(waitpid(a, nullptr, 0), a);  // reaped: its pid names no process (or, reused, another one)
  PeerLiveness live({int(getpid()), int(a)});
  // pidfd_open refused it (ESRCH): not watched, so never reported gone (a wait on it still has its deadline);
  // or the pid was reused by a live process, which has not exited either.
  EXPECT_EQ(live.exited(), 0u);
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
