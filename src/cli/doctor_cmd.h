// `tessera doctor [--gpu N|UUID] [--modes native,shared,mps] [--json] [--json-file F] [--policy
// FILE]`: measure on this node what each sharing mode really isolates (src/doctor).
// Dependency-free; reading a policy file needs the control-plane build, which passes its loader in.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/status.h"

#include "policy/policy.h"

namespace tessera::cli {

using PolicyLoader = std::function<StatusOr<policy::Policy>(const std::string& path)>;

int DoctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  const PolicyLoader& load_policy);

// `tessera doctor-worker ROLE ...`: one tenant of an experiment (doctor/worker.h).
int DoctorWorkerCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace tessera::cli
