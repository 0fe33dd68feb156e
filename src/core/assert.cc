#include "tessera/assert.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace tessera::internal {

void AssertFailed(const char* file, int line, const char* condition, const char* reason) noexcept {
  char buffer[512];
  const int n =
      std::snprintf(buffer, sizeof(buffer), "tessera: assertion failed at %s:%d: %s (%s)\n", file,
                    line, condition, reason);
  if (n > 0) {
    const auto size = static_cast<std::size_t>(n) < sizeof(buffer) ? static_cast<std::size_t>(n)
                                                                   : sizeof(buffer) - 1;
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, buffer, size);
  }
  std::abort();
}

}  // namespace tessera::internal
