// Fuzzes the admission webhooks with arbitrary request bodies: no body may crash them or throw
// out of them, every answer is an AdmissionReview with a response that says allowed or not, and
// an allowed mutation's patch is valid JSON Patch for the pod it came with.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "testutil/fake_clock.h"
#include "webhook/webhook.h"

namespace {

tessera::webhook::Admission& Instance() {
  static auto* policy = new tessera::policy::Policy(tessera::policy::DefaultPolicy());
  static auto* clock = new tessera::testutil::FakeClock();  // time stands still
  static auto* quotas = new tessera::webhook::QuotaBook(policy, *clock);
  static auto* admission = [] {
    tessera::webhook::ClusterView view;
    view.largest_gpu_memory = [] { return std::uint64_t{16} << 30; };
    view.priority_class_value = [](const std::string& name) -> std::optional<std::int32_t> {
      if (name == "tessera-normal") return 1000;
      return std::nullopt;
    };
    tessera::webhook::WebhookOptions options;
    options.scheduler_users = {"scheduler"};
    return new tessera::webhook::Admission(policy, options, view, quotas);
  }();
  return *admission;
}

void Check(const nlohmann::json& answer) {
  const auto response = answer.find("response");
  if (response == answer.end() || !response->is_object()) std::abort();
  const auto allowed = response->find("allowed");
  if (allowed == response->end() || !allowed->is_boolean()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json review = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) return 0;
  try {
    Check(Instance().Validate(review));
    Check(Instance().Mutate(review));
    if (review.is_object() && review.contains("request") && review["request"].is_object() &&
        review["request"].contains("object")) {
      const nlohmann::json& pod = review["request"]["object"];
      const nlohmann::json patch = Instance().MutationsFor(pod);
      (void)pod.patch(patch);  // must apply to the pod it was made for
    }
  } catch (const std::exception&) {
    std::abort();  // nothing may throw out of the webhooks
  }
  return 0;
}
