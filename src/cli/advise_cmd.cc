#include "cli/advise_cmd.h"

#include <memory>
#include <optional>
#include <string>

#include "advise/advise.h"
#include "cli/cli.h"
#include "policy/policy.h"

namespace tessera::cli {
namespace {

struct AdviseOptions {
  std::string trust;
  std::string gpu;
  std::string workloads;
  std::string policy_file;
  bool vgpu_licensed = false;
  bool json = false;
};

Status RunAdvise(const AdviseOptions& o, std::ostream& out) {
  std::optional<policy::Policy> policy;
  if (!o.policy_file.empty()) {
    auto loaded = policy::LoadPolicyFile(o.policy_file);
    if (!loaded.ok()) return loaded.status().WithContext("--policy");
    policy = std::move(loaded).value();
    if (o.trust.empty()) {  // validate and explain only
      out << (o.json ? policy::PolicyToJson(*policy) + "\n" : policy::ExplainPolicy(*policy));
      return Status::Ok();
    }
  }
  if (o.trust.empty()) {
    return InvalidArgumentError("--trust is required (accepted: " + AcceptedTrustTiers() +
                                "), unless --policy is given alone to validate a policy file");
  }
  advise::Request request;
  auto tier = ParseTrustTier(o.trust);
  if (!tier.ok()) return tier.status().WithContext("--trust");
  request.tier = *tier;
  if (!o.gpu.empty()) {
    auto gpu = advise::FindGpuModel(o.gpu);
    if (!gpu.ok()) return gpu.status();
    request.gpu = *gpu;
  }
  if (!o.workloads.empty()) {
    auto workloads = advise::ParseWorkloads(o.workloads);
    if (!workloads.ok()) return workloads.status();
    request.workloads = std::move(workloads).value();
  }
  request.vgpu_licensed = o.vgpu_licensed;
  if (policy) request.policy = &*policy;
  const advise::Advice advice = advise::Advise(request);
  out << (o.json ? advise::RenderJson(advice) + "\n" : advise::RenderText(advice));
  return Status::Ok();
}

}  // namespace

void AddAdviseCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code) {
  auto options = std::make_shared<AdviseOptions>();
  CLI::App* cmd = app.add_subcommand(
      "advise",
      "Recommend GPU sharing modes for a trust tier (the seeds' decision framework); "
      "with --policy, validate and explain a policy file");
  cmd->add_option("--trust", options->trust, "trust tier: " + AcceptedTrustTiers());
  cmd->add_option("--gpu", options->gpu, "GPU model: " + advise::AcceptedGpuModels());
  cmd->add_option("--workloads", options->workloads,
                  "comma-separated workload mix: inference, training, batch");
  cmd->add_flag("--vgpu-licensed", options->vgpu_licensed, "NVIDIA vGPU licences are available");
  cmd->add_option("--policy", options->policy_file,
                  "policy file (version v1) to validate and apply");
  cmd->add_flag("--json", options->json, "machine-readable output");
  cmd->callback([options, &out, &err, exit_code] {
    const Status status = RunAdvise(*options, out);
    if (!status.ok()) err << "tessera advise: " << status.message() << "\n";
    *exit_code = ToExitCode(status);
  });
}

}  // namespace tessera::cli
