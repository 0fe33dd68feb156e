#include "tessera/quantity.h"

#include <cstdint>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera {
namespace {

struct GoodCase {
  const char* text;
  std::uint64_t want;
};

constexpr GoodCase kGoodQuantities[] = {
    {"0", 0},
    {"1", 1},
    {"4096", 4096},
    {"+12", 12},
    {"1Ki", 1024},
    {"4Gi", 4 * kGiB},
    {"2000Mi", 2000 * kMiB},
    {"1.5Gi", 1610612736},
    {"0.5Gi", 536870912},
    {"1Ti", 1ULL << 40},
    {"1Pi", 1ULL << 50},
    {"7Ei", 7ULL << 60},
    {"500M", 500'000'000},
    {"1k", 1000},
    {"1G", 1'000'000'000},
    {"16G", 16'000'000'000},
    {"1T", 1'000'000'000'000},
    {"1P", 1'000'000'000'000'000},
    {"9E", 9'000'000'000'000'000'000ULL},
    {"1e9", 1'000'000'000},
    {"1E9", 1'000'000'000},
    {"1e+3", 1000},
    {"12e-1", 2},  // 1.2 rounds up
    {"1.5", 2},    // rounds up, as Quantity.Value()
    {"0.1", 1},
    {"500m", 1},  // 0.5 rounds up
    {"1000m", 1},
    {"2500m", 3},
    {"0.000001Ki", 1},
    {"00012", 12},
    {"1.000Gi", kGiB},
    {"100000000000000000000e-10", 10'000'000'000},
    {"9223372036854775807", 9223372036854775807ULL},
    {"0e5", 0},
    {"0.0", 0},
    {"1e-100", 1},
    {".5Gi", 536870912},
};

void PrintTo(const GoodCase& c, std::ostream* os) { *os << QuoteForMessage(c.text); }

class QuantityGoodTest : public ::testing::TestWithParam<GoodCase> {};

TEST_P(QuantityGoodTest, Parses) {
  const auto& c = GetParam();
  auto got = ParseQuantity(c.text);
  ASSERT_OK(got);
  EXPECT_EQ(*got, c.want) << c.text;
}

INSTANTIATE_TEST_SUITE_P(Table, QuantityGoodTest, ::testing::ValuesIn(kGoodQuantities));

struct BadCase {
  std::string text;
  const char* reason;  // a fragment the message must contain
};

const BadCase kBadQuantities[] = {
    {"", "is empty"},
    {"-1", "negative"},
    {"-4Gi", "negative"},
    {"4 Gi", "whitespace at position 1"},
    {" 4Gi", "whitespace at position 0"},
    {"4Gi ", "whitespace at position 3"},
    {"1.5.3Gi", "more than one decimal point"},
    {"4GB", "unknown suffix \"GB\""},
    {"4gi", "unknown suffix \"gi\""},
    {"4Kb", "unknown suffix"},
    {"4K", "unknown suffix \"K\""},
    {"4Gi4", "unknown suffix"},
    {"Gi", "does not start with a number"},
    {"abc", "does not start with a number"},
    {".", "does not start with a number"},
    {"5.", "no digits after it"},
    {"4\xe2\x80\x8aGi", "non-ASCII byte at position 1"},
    {"\xef\xbc\x94Gi", "non-ASCII byte at position 0"},
    {std::string("4\0Gi", 4), "control character at position 1"},
    {"1e", "unknown suffix \"e\""},
    {"1e+", "unknown suffix"},
    {"1e1001", "exponent out of range"},
    {"1e20", "too large"},
    {"8Ei", "too large"},
    {"9223372036854775808", "too large"},
    {"99999999999999999999999", "too many significant digits"},
    {"1.5Gi%", "unknown suffix"},
    {"0x10", "unknown suffix \"x10\""},
    {"1,5Gi", "unknown suffix \",5Gi\""},
    {"++1", "does not start with a number"},
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << QuoteForMessage(c.text); }

class QuantityBadTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(QuantityBadTest, RejectsWithReasonAndAcceptedForm) {
  const auto& c = GetParam();
  auto got = ParseQuantity(c.text);
  ASSERT_FALSE(got.ok()) << "accepted: " << QuoteForMessage(c.text);
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find(c.reason), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("accepted:"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Table, QuantityBadTest, ::testing::ValuesIn(kBadQuantities));

TEST(Quantity, FormatRoundTrips) {
  const std::uint64_t values[] = {0,        1,          1023,         1024,        1536 * kMiB,
                                  4 * kGiB, 1ULL << 60, kMaxQuantity, 500'000'000, 3 * kKiB + 1};
  for (std::uint64_t v : values) {
    auto back = ParseQuantity(FormatQuantity(v));
    ASSERT_OK(back);
    EXPECT_EQ(*back, v) << FormatQuantity(v);
  }
  EXPECT_EQ(FormatQuantity(4 * kGiB), "4Gi");
  EXPECT_EQ(FormatQuantity(1536 * kMiB), "1536Mi");
  EXPECT_EQ(FormatQuantity(1000), "1000");
}

TEST(Quantity, FormatsForPeople) {
  EXPECT_EQ(FormatBytesHuman(17), "17 B");
  EXPECT_EQ(FormatBytesHuman(4 * kGiB), "4.00 GiB");
  EXPECT_EQ(FormatBytesHuman(1536 * kMiB), "1.50 GiB");
}

struct PercentCase {
  const char* text;
  bool ok;
  std::uint32_t want;
};
constexpr PercentCase kPercents[] = {
    {"30", true, 30},       {"30%", true, 30},  {"100", true, 100}, {"0", true, 0},
    {"250%", true, 250},    {"12.5", false, 0}, {"%", false, 0},    {"-5", false, 0},
    {"30 %", false, 0},     {"abc", false, 0},  {"", false, 0},     {"0.3", false, 0},
    {"99999999", false, 0}, {"+30", false, 0},
};

TEST(Quantity, ParsesPercentages) {
  for (const auto& c : kPercents) {
    auto got = ParsePercent(c.text);
    EXPECT_EQ(got.ok(), c.ok) << c.text;
    if (c.ok && got.ok()) {
      EXPECT_EQ(*got, c.want) << c.text;
    }
    if (!got.ok()) {
      EXPECT_NE(got.status().message().find("accepted:"), std::string::npos);
    }
  }
}

struct KaiMemoryCase {
  const char* text;
  bool ok;
  std::uint64_t want;
};
constexpr KaiMemoryCase kKaiMemory[] = {
    {"2000", true, 2000 * kMiB},
    {"8000", true, 8000 * kMiB},
    {"0", true, 0},
    {"4Gi", true, 4 * kGiB},
    {"1.5Gi", true, 1610612736},
    {"2000Mi", true, 2000 * kMiB},
    {"abc", false, 0},
    {"-2000", false, 0},
    {"2000 ", false, 0},
    {"20 00", false, 0},
    {"2GB", false, 0},
    {"", false, 0},
    {"99999999999999999999", false, 0},
};

TEST(Quantity, ParsesKaiGpuMemoryAsMiB) {
  for (const auto& c : kKaiMemory) {
    auto got = ParseKaiGpuMemory(c.text);
    EXPECT_EQ(got.ok(), c.ok) << c.text;
    if (c.ok && got.ok()) {
      EXPECT_EQ(*got, c.want) << c.text;
    }
    if (!got.ok()) {
      EXPECT_NE(got.status().message().find("MiB"), std::string::npos);
    }
  }
}

struct FractionCase {
  const char* text;
  bool ok;
  std::uint32_t want;
};
constexpr FractionCase kFractions[] = {
    {"0.5", true, 500'000},      {"1", true, 1'000'000}, {"1.0", true, 1'000'000},
    {"0.25", true, 250'000},     {".5", true, 500'000},  {"0.000001", true, 1},
    {"0.333333", true, 333'333}, {"0", false, 0},        {"0.0", false, 0},
    {"1.5", false, 0},           {"2", false, 0},        {"-0.5", false, 0},
    {"0.5Gi", false, 0},         {"50%", false, 0},      {"0.0000001", false, 0},
    {"abc", false, 0},           {"", false, 0},         {"0..5", false, 0},
};

TEST(Quantity, ParsesKaiGpuFraction) {
  for (const auto& c : kFractions) {
    auto got = ParseKaiGpuFraction(c.text);
    EXPECT_EQ(got.ok(), c.ok) << c.text;
    if (c.ok && got.ok()) {
      EXPECT_EQ(*got, c.want) << c.text;
    }
    if (!got.ok()) {
      EXPECT_NE(got.status().message().find("accepted:"), std::string::npos);
    }
  }
}

TEST(Quantity, ErrorCarriesFieldNameWithContext) {
  auto got = ParseQuantity("4 Gi");
  ASSERT_FALSE(got.ok());
  const std::string message = got.status().WithContext("tessera.dev/gpu-memory").ToString();
  EXPECT_EQ(message.rfind("invalid_argument: tessera.dev/gpu-memory: \"4 Gi\"", 0), 0u) << message;
}

TEST(Quantity, QuotesUnsafeBytes) {
  EXPECT_EQ(QuoteForMessage("a\"b\\c\n\xff"), "a\\x22b\\x5cc\\x0a\\xff");
  EXPECT_EQ(QuoteForMessage(std::string(100, 'x')).size(), 64u + 3u);
}

}  // namespace
}  // namespace tessera
