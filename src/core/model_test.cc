#include "tessera/model.h"

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera {
namespace {

TEST(Model, NamesRoundTrip) {
  for (const auto& row : kTrustTiers) EXPECT_EQ(*ParseTrustTier(Name(row.value)), row.value);
  for (const auto& row : kSharingModes) EXPECT_EQ(*ParseSharingMode(Name(row.value)), row.value);
  for (const auto& row : kPriorityClasses) {
    EXPECT_EQ(*ParsePriorityClass(Name(row.value)), row.value);
  }
}

TEST(Model, TheContractsNames) {
  EXPECT_EQ(AcceptedTrustTiers(), "team, department, customer, regulated");
  EXPECT_EQ(AcceptedSharingModes(), "shared, mps, exclusive, mig, native");
  EXPECT_EQ(AcceptedPriorityClasses(), "latency-critical, normal, best-effort");
}

TEST(Model, UnknownNameListsAccepted) {
  auto got = ParseTrustTier("Team");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "\"Team\" is not a trust tier; accepted: team, department, customer, regulated");
  EXPECT_FALSE(ParseSharingMode("time-slicing").ok());
  EXPECT_FALSE(ParsePriorityClass("").ok());
}

}  // namespace
}  // namespace tessera
