// tessera-node: the node agent (docs/design/0014-node-agent-inventory.md).
#include "agent/daemon.h"
#include "agent/node_flags.h"

int main(int argc, char** argv) {
  tessera::agent::NodeOptions o;
  if (auto exit_code = tessera::agent::ParseNodeFlags(argc, argv, o)) return *exit_code;
  return tessera::agent::RunNode(o);
}
