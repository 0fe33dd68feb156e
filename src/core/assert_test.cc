#include "tessera/assert.h"

#include <gtest/gtest.h>

#include "tessera/status.h"

namespace tessera {
namespace {

TEST(AssertDeathTest, ReleaseAssertAbortsNamingTheConditionAndReason) {
  EXPECT_DEATH(TESSERA_RELEASE_ASSERT(1 + 1 == 3, "arithmetic"),
               "assertion failed at .*assert_test.cc:[0-9]+: 1 \\+ 1 == 3 \\(arithmetic\\)");
}

TEST(AssertDeathTest, ReleaseAssertPassesWhenTrue) {
  TESSERA_RELEASE_ASSERT(1 + 1 == 2, "arithmetic");
  SUCCEED();
}

#ifndef NDEBUG
TEST(AssertDeathTest, DebugAssertAbortsInDebugBuilds) {
  EXPECT_DEATH(TESSERA_ASSERT(false, "debug"), "\\(debug\\)");
}

TEST(AssertDeathTest, StatusOrValueOfAnErrorIsCaughtInDebugBuilds) {
  StatusOr<int> error = NotFoundError("x");
  EXPECT_DEATH((void)error.value(), "value\\(\\) of an error");
}
#else
TEST(AssertDeathTest, DebugAssertIsCompiledOutWithNdebug) {
  int evaluated = 0;
  TESSERA_ASSERT(++evaluated == 0, "never evaluated");
  EXPECT_EQ(evaluated, 0);
}
#endif

}  // namespace
}  // namespace tessera
