#include "doctor/report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "doctor/doctor.h"
#include "doctor/worker.h"

namespace tessera::doctor {
namespace {

using enum Property;

Report MeasuredReport() {
  Report r;
  r.gpu_name = "NVIDIA H200";
  r.gpu_uuid = "GPU-1";
  r.gpu_memory_bytes = 1ULL << 40;
  r.driver = "580.159.04";
  r.date = "2026-11-30";
  r.modes = {SharingMode::kNative, SharingMode::kShared, SharingMode::kMps};
  for (SharingMode mode : r.modes) {
    for (const auto& row : kProperties) {
      r.findings.push_back({row.property, mode, Outcome::kHolds, "fine", {{"x", 1}}});
    }
  }
  return r;
}

void Set(Report& r, Property p, SharingMode mode, Outcome outcome, std::string measured) {
  for (Finding& f : r.findings) {
    if (f.property == p && f.mode == mode) {
      f.outcome = outcome;
      f.measured = std::move(measured);
    }
  }
}

const Verdict& VerdictFor(const std::vector<Verdict>& verdicts, TrustTier tier, SharingMode mode) {
  for (const Verdict& v : verdicts) {
    if (v.tier == tier && v.mode == mode) return v;
  }
  static const Verdict kNone;
  ADD_FAILURE() << "no verdict for " << Name(tier) << " on " << Name(mode);
  return kNone;
}

TEST(Judge, EveryTierAndSharingModeGetsAVerdictNativeIsOnlyTheBaseline) {
  const auto verdicts = Judge(MeasuredReport(), policy::DefaultPolicy());
  EXPECT_EQ(verdicts.size(), TierRequirements().size() * 2);  // shared and mps
  for (const Verdict& v : verdicts) EXPECT_NE(v.mode, SharingMode::kNative);
}

TEST(Judge, AFailedNeededPropertyMakesTheTierUnsafeAndSaysWhy) {
  Report r = MeasuredReport();
  Set(r, kFaultIsolation, SharingMode::kMps, Outcome::kFails, "a fault ended 3 of 3 neighbours");
  const auto verdicts = Judge(r, policy::DefaultPolicy());
  // Team does not need fault isolation; department and customer do.
  EXPECT_EQ(VerdictFor(verdicts, TrustTier::kTeam, SharingMode::kMps).safety,
            Verdict::Safety::kSafe);
  const Verdict& customer = VerdictFor(verdicts, TrustTier::kCustomer, SharingMode::kMps);
  EXPECT_EQ(customer.safety, Verdict::Safety::kNotSafe);
  EXPECT_EQ(customer.reason, "fault-isolation: a fault ended 3 of 3 neighbours");
  EXPECT_FALSE(customer.allowed_by_policy);  // the default policy gives customers no MPS
  EXPECT_EQ(VerdictFor(verdicts, TrustTier::kDepartment, SharingMode::kMps).safety,
            Verdict::Safety::kNotSafe);
  EXPECT_EQ(VerdictFor(verdicts, TrustTier::kCustomer, SharingMode::kShared).safety,
            Verdict::Safety::kSafe);
}

TEST(Judge, UnmeasuredNeedsLeaveTheVerdictUnknownNotSafe) {
  Report r = MeasuredReport();
  Set(r, kResidualKill, SharingMode::kShared, Outcome::kNotMeasured, "scanner: no answer in time");
  const auto verdicts = Judge(r, policy::DefaultPolicy());
  const Verdict& customer = VerdictFor(verdicts, TrustTier::kCustomer, SharingMode::kShared);
  EXPECT_EQ(customer.safety, Verdict::Safety::kUnknown);
  EXPECT_EQ(customer.reason, "not measured: residual-kill");
  EXPECT_EQ(VerdictFor(verdicts, TrustTier::kTeam, SharingMode::kShared).safety,
            Verdict::Safety::kSafe);
}

TEST(Judge, RegulatedNeverSharesWhateverWasMeasured) {
  const auto verdicts = Judge(MeasuredReport(), policy::DefaultPolicy());
  for (SharingMode mode : {SharingMode::kShared, SharingMode::kMps}) {
    EXPECT_EQ(VerdictFor(verdicts, TrustTier::kRegulated, mode).safety, Verdict::Safety::kNotSafe);
  }
}

TEST(Judge, PropertiesNoTierNeedsDoNotChangeAVerdict) {
  Report r = MeasuredReport();
  Set(r, kComputeShare, SharingMode::kShared, Outcome::kFails, "not enforced");
  Set(r, kMpsUsers, SharingMode::kMps, Outcome::kFails, "serialized");
  for (const Verdict& v : Judge(r, policy::DefaultPolicy())) {
    if (v.tier != TrustTier::kRegulated) {
      EXPECT_EQ(v.safety, Verdict::Safety::kSafe) << v.reason;
    }
  }
}

TEST(Format, TextHasATablePerModeAndTheVerdicts) {
  Report r = MeasuredReport();
  r.unavailable = {"mps: nvidia-cuda-mps-control not found"};
  Set(r, kMemoryHog, SharingMode::kNative, Outcome::kFails, "the neighbour's next 1 GiB: refused");
  r.scrub_ms_per_gib = 0.25;
  const std::string text = FormatText(r, Judge(r, policy::DefaultPolicy()), "built-in default");
  EXPECT_NE(text.find("mode native (no tessera; the baseline)"), std::string::npos) << text;
  EXPECT_NE(text.find("mode mps"), std::string::npos);
  EXPECT_NE(text.find("not measured: mps: nvidia-cuda-mps-control not found"), std::string::npos);
  EXPECT_NE(text.find("a neighbour survives a memory hog"), std::string::npos);
  EXPECT_NE(text.find("NO     the neighbour's next 1 GiB: refused"), std::string::npos) << text;
  EXPECT_NE(text.find("0.250 ms per GiB"), std::string::npos);
  EXPECT_NE(text.find("regulated tier on shared: NOT safe"), std::string::npos);
  EXPECT_NE(text.find("verdicts against the policy (built-in default)"), std::string::npos);
}

TEST(Format, JsonCarriesEveryFindingAndVerdict) {
  Report r = MeasuredReport();
  r.gpu_name = "quote \" and \\ backslash";
  const auto verdicts = Judge(r, policy::DefaultPolicy());
  const auto json = nlohmann::json::parse(FormatJson(r, verdicts, "p.yaml"));
  EXPECT_EQ(json["gpu"]["name"], "quote \" and \\ backslash");
  EXPECT_EQ(json["findings"].size(), r.findings.size());
  EXPECT_EQ(json["verdicts"].size(), verdicts.size());
  EXPECT_EQ(json["findings"][0]["property"], "memory-hog");
  EXPECT_EQ(json["findings"][0]["values"]["x"], 1);
  EXPECT_EQ(json["policy"], "p.yaml");
}

TEST(Modes, OnlyTheModesDoctorMeasuresAreAccepted) {
  auto ok = ParseDoctorModes("mps,native");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<SharingMode>{SharingMode::kMps, SharingMode::kNative}));
  for (const char* bad : {"mig", "exclusive", "timeslice", "", "shared,shared", "native,"}) {
    auto r = ParseDoctorModes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--modes"), std::string::npos);
  }
  EXPECT_NE(ParseDoctorModes("mig").status().message().find("accepted: native, shared, mps"),
            std::string::npos);
}

TEST(Worker, PatternWordsAreCountedWholeWordsOnly) {
  std::vector<std::uint8_t> data(64, 0);
  for (std::size_t i = 8; i < 16; ++i) data[i] = kPatternByte;  // two whole words
  data[20] = data[21] = data[22] = kPatternByte;                // three bytes: not a word
  data[62] = data[63] = kPatternByte;                           // tail
  EXPECT_EQ(CountPatternWords(data.data(), data.size(), kPatternByte), 2u);
  EXPECT_EQ(CountPatternWords(data.data(), 3, kPatternByte), 0u);
}

}  // namespace
}  // namespace tessera::doctor
