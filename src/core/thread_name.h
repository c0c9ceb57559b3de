#pragma once
// Names the calling thread (Linux: at most 15 characters, shown in /proc/self/task/*/comm, top, gdb).
// Every thread ringguard starts is named "rg-...", so tests and users can tell ours from the rest.
#include <pthread.h>

namespace ringguard {

inline void nameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace ringguard
