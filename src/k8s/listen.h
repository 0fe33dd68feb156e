// Listen addresses of tessera's HTTP endpoints (flags like --listen, --metrics-listen).
#pragma once

#include <string>
#include <utility>

#include "tessera/status.h"

namespace tessera::k8s {

// "host:port" or "[v6]:port" -> (host, port), port 0-65535. The error names the text and the
// accepted form; callers add the flag (WithContext).
StatusOr<std::pair<std::string, int>> ParseListenAddress(const std::string& text);

// A loopback TCP port free right now, or -1 (for a process that must be named in another's
// configuration before either starts: tessera-scheduler in kube-scheduler's, by the demo and the
// end-to-end tests).
// Chosen at random from 20,000 up to the machine's ephemeral range (EphemeralPortFloor) or
// 30,000, where the kernel never picks a connection's source port and no Kubernetes component
// listens, so it stays free until its listener binds it.
int FreeLoopbackPort();

// The lowest port of the kernel's ephemeral range (ip_local_port_range; 32768 if unreadable).
int EphemeralPortFloor();

}  // namespace tessera::k8s
