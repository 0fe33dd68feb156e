#include "k8s/errors.h"

#include <string>

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

TEST(ErrorFromResponse, MapsCodesAndKeepsTheServersMessage) {
  const std::string conflict =
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be )"
      R"(fulfilled on configmaps \"x\": the object has been modified","reason":"Conflict",)"
      R"("code":409})";
  Status s = ErrorFromResponse("PUT", "/api/v1/namespaces/a/configmaps/x", 409, conflict);
  EXPECT_TRUE(IsConflict(s));
  EXPECT_EQ(s.message(),
            "PUT /api/v1/namespaces/a/configmaps/x: 409 Conflict: Operation cannot be fulfilled "
            "on configmaps \"x\": the object has been modified");

  const std::string exists =
      R"({"kind":"Status","reason":"AlreadyExists","message":"configmaps \"x\" already exists"})";
  EXPECT_TRUE(IsAlreadyExists(ErrorFromResponse("POST", "/p", 409, exists)));
  EXPECT_TRUE(
      IsGone(ErrorFromResponse("GET", "/p", 410, R"({"kind":"Status","reason":"Expired"})")));
  EXPECT_TRUE(IsNotFound(ErrorFromResponse("GET", "/p", 404, "")));

  // Not a Status: the body's start is quoted.
  Status html = ErrorFromResponse("GET", "/p", 502, "<html>bad gateway</html>");
  EXPECT_EQ(html.code(), StatusCode::kUnavailable);
  EXPECT_EQ(html.message(), "GET /p: 502: \"<html>bad gateway</html>\"");
}

TEST(StatusCodeForHttp, Table) {
  const struct {
    int http;
    const char* reason;
    StatusCode code;
  } rows[] = {
      {400, "", StatusCode::kInvalidArgument},
      {401, "", StatusCode::kUnauthenticated},
      {403, "", StatusCode::kPermissionDenied},
      {404, "", StatusCode::kNotFound},
      {405, "", StatusCode::kInvalidArgument},
      {409, "Conflict", StatusCode::kAborted},
      {409, "AlreadyExists", StatusCode::kAlreadyExists},
      {410, "Expired", StatusCode::kOutOfRange},
      {412, "", StatusCode::kFailedPrecondition},
      {422, "Invalid", StatusCode::kInvalidArgument},
      {429, "TooManyRequests", StatusCode::kResourceExhausted},
      {500, "", StatusCode::kInternal},
      {503, "", StatusCode::kUnavailable},
      {504, "", StatusCode::kUnavailable},
      {418, "", StatusCode::kFailedPrecondition},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(StatusCodeForHttp(row.http, row.reason), row.code) << row.http << " " << row.reason;
  }
}

}  // namespace
}  // namespace tessera::k8s
