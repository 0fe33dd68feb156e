// tessera-node's command line (cmd/tessera-node/main.cc): the first step of the process, before
// NodeDaemon's (agent/daemon.h).
#pragma once

#include <optional>

#include "agent/daemon.h"

namespace tessera::agent {

// Parses the flags into `options` and sets the log level (--log-level). Returns nullopt when the
// process goes on, or the code it exits with: 0 after --help (the help on stdout), 2 for a
// malformed flag (the message on stderr).
std::optional<int> ParseNodeFlags(int argc, const char* const* argv, NodeOptions& options);

}  // namespace tessera::agent
