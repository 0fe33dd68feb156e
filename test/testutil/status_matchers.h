// ASSERT_OK / EXPECT_OK for tessera::Status and StatusOr (leveldb's ASSERT_LEVELDB_OK idea).
#pragma once

#include <gtest/gtest.h>

#include "tessera/status.h"

namespace tessera::testutil {

inline const Status& AsStatus(const Status& status) { return status; }
template <typename T>
const Status& AsStatus(const StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace tessera::testutil

#define EXPECT_OK(expr)                                 \
  EXPECT_TRUE(::tessera::testutil::AsStatus(expr).ok()) \
      << ::tessera::testutil::AsStatus(expr).ToString()
#define ASSERT_OK(expr)                                 \
  ASSERT_TRUE(::tessera::testutil::AsStatus(expr).ok()) \
      << ::tessera::testutil::AsStatus(expr).ToString()
