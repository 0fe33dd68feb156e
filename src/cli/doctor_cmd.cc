#include "cli/doctor_cmd.h"

#include <climits>
#include <ctime>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "cli/commands.h"
#include "doctor/doctor.h"
#include "doctor/worker.h"

namespace tessera::cli {
namespace {

std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "";
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof(text), "%Y-%m-%d", &tm);
  return text;
}

}  // namespace

int DoctorCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  const PolicyLoader& load_policy) {
  doctor::DoctorOptions options;
  bool json = false;
  std::string policy_path, json_file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--json") {
      json = true;
    } else if (a == "--keep") {
      options.keep = true;
    } else if (a == "--gpu" && has_value) {
      options.gpu = args[++i];
    } else if (a == "--modes" && has_value) {
      auto modes = doctor::ParseDoctorModes(args[++i]);
      if (!modes.ok()) {
        err << "tessera doctor: " << modes.status().message() << "\n";
        return 2;
      }
      options.modes = *modes;
    } else if (a == "--json-file" && has_value) {
      json_file = args[++i];
    } else if (a == "--policy" && has_value) {
      policy_path = args[++i];
    } else {
      err << "tessera doctor: " << a << ": unknown flag or missing value\n"
          << UsageOf("doctor") << "\n";
      return 2;
    }
  }
  policy::Policy policy = policy::DefaultPolicy();
  std::string policy_source = "built-in default";
  if (!policy_path.empty()) {
    if (!load_policy) {
      err << "tessera doctor: --policy: this tessera was built without the policy file reader "
             "(the GPU-host build); the built-in default policy is the one available\n";
      return 2;
    }
    auto loaded = load_policy(policy_path);
    if (!loaded.ok()) {
      err << "tessera doctor: --policy " << policy_path << ": " << loaded.status().message()
          << "\n";
      return ToExitCode(loaded.status());
    }
    policy = std::move(*loaded);
    policy_source = policy_path;
  }
  options.self = SelfPath();
  options.date = Today();
  auto report = doctor::RunDoctor(options, err);
  if (!report.ok()) {
    err << "tessera doctor: " << report.status().message() << "\n";
    return ToExitCode(report.status());
  }
  const auto verdicts = doctor::Judge(*report, policy);
  const std::string as_json = doctor::FormatJson(*report, verdicts, policy_source);
  out << (json ? as_json : doctor::FormatText(*report, verdicts, policy_source));
  if (!json_file.empty()) {
    std::ofstream file(json_file);
    file << as_json;
    if (!file) {
      err << "tessera doctor: --json-file " << json_file << ": cannot write\n";
      return 1;
    }
  }
  return 0;
}

int DoctorWorkerCommand(const std::vector<std::string>& args, std::ostream& out) {
  return doctor::RunWorker(args, std::cin, out);
}

}  // namespace tessera::cli
