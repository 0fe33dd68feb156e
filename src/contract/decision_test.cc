#include "contract/decision.h"

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera::contract {
namespace {

Decision Sample() {
  Decision d;
  d.pod_uid = "6b1f";
  d.pod_namespace = "ml";
  d.pod_name = "train-0";
  d.node = "gpu-node-3";
  d.tier = TrustTier::kDepartment;
  d.priority = PriorityClass::kNormal;
  d.issued_at = Rfc3339(1796000523);
  d.key_id = "2026-11";
  d.containers.push_back({"train", SharingMode::kShared, {{"GPU-8c5e", 8ULL << 30, 50}}});
  return d;
}

TEST(Decision, EncodesOneLineInTheContractOrder) {
  const std::string text = EncodeDecision(Sample());
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_EQ(text.rfind("{\"apiVersion\":\"tessera.dev/decision/v1\",\"pod\":{\"uid\":\"6b1f\"", 0),
            0U)
      << text;
  EXPECT_NE(text.find("\"devices\":[{\"uuid\":\"GPU-8c5e\",\"memoryBytes\":8589934592,"
                      "\"coresPercent\":50}]"),
            std::string::npos);
  auto back = ParseDecision(text);
  ASSERT_OK(back);
  EXPECT_EQ(*back, Sample());
}

TEST(Decision, TheComputeModeAndPeriodTravelWhenNotTheDefault) {
  Decision d = Sample();
  EXPECT_EQ(EncodeDecision(d).find("compute"), std::string::npos);  // hard, no period: as before
  d.containers[0].compute_window_ms = 1000;
  std::string text = EncodeDecision(d);
  EXPECT_NE(text.find("\"computeWindowMs\":1000"), std::string::npos) << text;
  auto back = ParseDecision(text);
  ASSERT_OK(back);
  EXPECT_EQ(*back, d);
  d.containers[0].compute_window_ms = 0;
  d.containers[0].compute = ComputeMode::kWorkConserving;
  text = EncodeDecision(d);
  EXPECT_NE(text.find("\"compute\":\"work-conserving\""), std::string::npos) << text;
  back = ParseDecision(text);
  ASSERT_OK(back);
  EXPECT_EQ(back->containers[0].compute, ComputeMode::kWorkConserving);
  const std::pair<std::string, std::string> edits[] = {
      {"\"compute\":\"work-conserving\"", "\"compute\":\"soft\""},
      {"\"compute\":\"work-conserving\"", "\"compute\":3"},
      {"\"compute\":\"work-conserving\"",
       "\"compute\":\"work-conserving\",\"computeWindowMs\":1000"},
      {"\"compute\":\"work-conserving\"", "\"computeWindowMs\":5"},
  };
  for (const auto& [from, to] : edits) {
    std::string bad = text;
    bad.replace(bad.find(from), from.size(), to);
    auto parsed = ParseDecision(bad);
    ASSERT_FALSE(parsed.ok()) << to;
    EXPECT_NE(parsed.status().message().find("containers[0].compute"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(Decision, Rfc3339IsUtc) { EXPECT_EQ(Rfc3339(0), "1970-01-01T00:00:00Z"); }

TEST(Decision, RefusesOtherVersionsAndBadFields) {
  std::string text = EncodeDecision(Sample());
  const std::pair<std::string, std::string> edits[] = {
      {"tessera.dev/decision/v1", "tessera.dev/decision/v2"},
      {"\"tier\":\"department\"", "\"tier\":\"vip\""},
      {"\"mode\":\"shared\"", "\"mode\":\"turbo\""},
      {"\"coresPercent\":50", "\"coresPercent\":500"},
      {"\"uid\":\"6b1f\"", "\"uid\":\"\""},
  };
  for (const auto& [from, to] : edits) {
    std::string bad = text;
    bad.replace(bad.find(from), from.size(), to);
    EXPECT_FALSE(ParseDecision(bad).ok()) << to;
  }
  EXPECT_FALSE(ParseDecision("").ok());
  EXPECT_FALSE(ParseDecision("[1]").ok());
}

TEST(Decision, SignaturesVerifyAndTamperingIsCaught) {
  auto pem = GenerateSigningKeyPem();
  ASSERT_OK(pem);
  auto signer = Signer::FromPem(*pem);
  ASSERT_OK(signer);
  auto verifier = Verifier::FromPem(signer->PublicKeyPem());
  ASSERT_OK(verifier);
  const std::string text = EncodeDecision(Sample());
  auto sig = signer->Sign(text);
  ASSERT_OK(sig);
  EXPECT_OK(verifier->Verify(text, *sig));
  std::string tampered = text;
  tampered.replace(tampered.find("8589934592"), 10, "9589934592");
  EXPECT_EQ(verifier->Verify(tampered, *sig).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(verifier->Verify(text, "AAAA").code(), StatusCode::kPermissionDenied);
  // Another key's signature does not verify.
  auto other = Signer::FromPem(*GenerateSigningKeyPem());
  ASSERT_OK(other);
  EXPECT_FALSE(verifier->Verify(text, *other->Sign(text)).ok());
}

TEST(Decision, KeysMustBeEd25519Pem) {
  EXPECT_FALSE(Signer::FromPem("not a key").ok());
  EXPECT_FALSE(Verifier::FromPem("").ok());
}

}  // namespace
}  // namespace tessera::contract
