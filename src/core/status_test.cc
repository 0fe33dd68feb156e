#include "tessera/status.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "testutil/status_matchers.h"

namespace tessera {
namespace {

TEST(Status, OkIsDefaultAndCheap) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_EQ(Status(StatusCode::kOk, "ignored").message(), "");
}

TEST(Status, EveryCodeHasItsName) {
#define TESSERA_CHECK_NAME(name, label) EXPECT_EQ(StatusCodeName(StatusCode::k##name), label);
  TESSERA_STATUS_CODES(TESSERA_CHECK_NAME)
#undef TESSERA_CHECK_NAME
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(200)), "unknown");
}

TEST(Status, EveryErrorCodeHasItsFactory) {
#define TESSERA_CHECK_FACTORY(name, label)                 \
  EXPECT_EQ(name##Error("m").code(), StatusCode::k##name); \
  EXPECT_EQ(name##Error("m").ToString(), std::string(label) + ": m");
  TESSERA_STATUS_ERROR_CODES(TESSERA_CHECK_FACTORY)
#undef TESSERA_CHECK_FACTORY
}

TEST(Status, ContextPrefixesMessage) {
  Status s = InvalidArgumentError("bad").WithContext("field");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "invalid_argument: field: bad");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(Status, ConstructorsSetTheirCodes) {
  EXPECT_EQ(AlreadyExistsError("x").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(AbortedError("x").code(), StatusCode::kAborted);
  EXPECT_EQ(OutOfRangeError("x").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(UnauthenticatedError("x").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(AbortedError("conflict").ToString(), "aborted: conflict");
  EXPECT_EQ(OutOfRangeError("gone").ToString(), "out_of_range: gone");
  // The CLI exit codes distinguish only bad input and not found.
  EXPECT_EQ(ToExitCode(AlreadyExistsError("x")), 1);
  EXPECT_EQ(ToExitCode(UnauthenticatedError("x")), 1);
}

StatusOr<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgumentError("odd");
  return v / 2;
}

StatusOr<int> Quarter(int v) {
  TESSERA_ASSIGN_OR_RETURN(int half, Half(v));
  TESSERA_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int v) {
  TESSERA_RETURN_IF_ERROR(Half(v).status().ok() ? Status::Ok() : Half(v).status());
  return Status::Ok();
}

TEST(StatusOr, PropagatesErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_FALSE(CheckEven(3).ok());
  EXPECT_OK(CheckEven(4));
}

TEST(StatusOr, ErrorFromOkStatusBecomesInternal) {
  StatusOr<int> bad(Status::Ok());
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

TEST(StatusOr, HoldsMoveOnlyValuesAndCopies) {
  StatusOr<std::unique_ptr<int>> p(std::make_unique<int>(7));
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 7);

  StatusOr<std::string> a(std::string("hello"));
  StatusOr<std::string> b = a;
  EXPECT_EQ(*b, "hello");
  b = StatusOr<std::string>(NotFoundError("gone"));
  EXPECT_FALSE(b.ok());
  b = a;
  EXPECT_EQ(b->size(), 5u);
}

}  // namespace
}  // namespace tessera
