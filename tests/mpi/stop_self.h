#pragma once
// Stops the calling process (SIGSTOP) `afterMs` from now and resumes it (SIGCONT) `forMs` later: a rank that
// goes quiet in the middle of a collective, as a preempted or hung peer does. A stopped process cannot
// resume itself, so a forked child wakes it; reap the child with waitpid after the resume.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ringguard {
namespace test {

inline void stopSelfFor(int afterMs, int forMs) {
  const pid_t self = getpid();
  const pid_t waker = fork();
  if (waker == 0) {
    usleep(useconds_t(afterMs + forMs) * 1000);
    kill(self, SIGCONT);
    _exit(0);
  }
  std::thread([self, afterMs] {
    std::this_thread::sleep_for(std::chrono::milliseconds(afterMs));
    kill(self, SIGSTOP);
  }).detach();
}

}  // namespace test
}  // namespace ringguard
