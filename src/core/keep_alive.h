#pragma once
// Memory a transport may still touch after a failure (a receive it could not withdraw, a send MPI may still
// be making, a staging buffer a stopped peer may still pull) must outlive its owner. It is handed here and
// kept to the end of the process: never freed under the transport, and still reachable, so it is kept
// memory, not a leak (LeakSanitizer agrees), and it is counted.
#include <cstddef>
#include <memory>

namespace ringguard {

void keepUntilExit(std::shared_ptr<void> memory);

template <typename T>
void keepUntilExit(std::unique_ptr<T> memory) {
  if (memory) keepUntilExit(std::shared_ptr<void>(std::move(memory)));
}

// How many objects were kept so far in this process.
size_t keptUntilExitCount();

}  // namespace ringguard
