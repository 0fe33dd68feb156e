// tessera-node-host: tessera-node governing real processes on a host with no kubelet and no
// container runtime (test tooling; node_host.h).
#include "nodehost/node_host.h"

int main(int argc, char** argv) { return tessera::nodehost::NodeHostMain(argc, argv); }
