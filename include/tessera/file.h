// The one file reader: a whole regular file, bounded. Every part reads its inputs (policy files,
// kubeconfigs, keys, traces, /proc entries, limits files) through it, so that a directory, a
// device, a FIFO or an endless file gets the same clear error everywhere instead of an empty
// read, a hang or unbounded memory. (The preload library keeps its own allocation-free reader in
// src/hook/: it runs inside every GPU process and may not allocate while it reads.)
#pragma once

#include <cstddef>
#include <string>

#include "tessera/status.h"

namespace tessera {

// The default bound: above any input tessera reads (the largest is a 12,000-node trace).
inline constexpr std::size_t kMaxFileBytes = std::size_t{256} << 20;

// Reads `path` whole. Errors say "cannot read PATH: why":
//   kNotFound         it does not exist or cannot be opened (the reason from the OS)
//   kInvalidInput     it is not a regular file (a directory, a device, a FIFO, a socket), or it
//                     holds more than `max_bytes` (the message names the limit)
//   kDataLoss         a read failed part-way
// Never blocks on a FIFO and never reads past max_bytes + 1.
StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes = kMaxFileBytes);

}  // namespace tessera
