// The mount table of a process (/proc/PID/mountinfo), read for one question: whether a folder is
// a mount point there. Header-only and allocation-free: the preload library asks it of its own
// process (is this a slot's container?), tessera-node of a container's process (did the runtime
// apply the slot's CDI device?).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tessera {

// Whether `path` is the mount point (fifth field) of a line of `table`, whose lines read
// "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS ...". Paths with spaces (escaped \040 in the
// table) are not matched.
constexpr bool MountPointIn(std::string_view table, std::string_view path) {
  std::size_t line = 0;
  while (line < table.size()) {
    const std::size_t end = std::min(table.find('\n', line), table.size());
    std::size_t field = line;
    for (int i = 0; i < 4 && field < end; ++i) {
      const std::size_t space = table.find(' ', field);
      field = space == std::string_view::npos || space >= end ? end : space + 1;
    }
    const std::size_t space = table.find(' ', field);
    const std::size_t stop = space == std::string_view::npos || space > end ? end : space;
    if (table.substr(field, stop - field) == path) return true;
    line = end + 1;
  }
  return false;
}

}  // namespace tessera
