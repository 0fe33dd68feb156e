#include "tessera/log.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::log {
namespace {

std::vector<std::string>* g_lines = nullptr;

void Capture(Level, Component component, std::string_view line) {
  g_lines->push_back(std::string(Name(component)) + "|" + std::string(line));
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_lines = &lines_;
    SetSink(Capture);
  }
  void TearDown() override {
    SetSink(nullptr);
    SetLevel(Level::kWarn);
    g_lines = nullptr;
  }
  std::vector<std::string> lines_;
};

TEST_F(LogTest, FiltersByLevel) {
  SetLevel(Level::kWarn);
  TESSERA_LOG(kInfo, kCore, "hidden %d", 1);
  TESSERA_LOG(kError, kHook, "limit %s used %d", "4Gi", 7);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "hook|limit 4Gi used 7");
  SetLevel(Level::kDebug);
  TESSERA_LOG(kDebug, kCore, "shown");
  EXPECT_EQ(lines_.size(), 2u);
}

TEST_F(LogTest, TruncatesLongLines) {
  std::string long_text(5000, 'x');
  TESSERA_LOG(kError, kCore, "%s", long_text.c_str());
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].size(), std::string("core|").size() + 1023);
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(*ParseLevel("debug"), Level::kDebug);
  EXPECT_FALSE(ParseLevel("verbose").ok());
}

}  // namespace
}  // namespace tessera::log
