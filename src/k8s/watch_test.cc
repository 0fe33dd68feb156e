#include "k8s/watch.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "k8s/errors.h"
#include "testutil/status_matchers.h"

namespace tessera::k8s {
namespace {

const std::string kStream =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"11\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"12\"},"
    "\"data\":{\"k\":\"line\\nbreak \\u00e9\"}}}\r\n"
    "\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"15\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"16\"}}}"
    "\n";

std::vector<std::string> Lines(const std::vector<std::string>& chunks) {
  LineSplitter splitter;
  std::vector<std::string> lines;
  for (const std::string& chunk : chunks) {
    EXPECT_OK(splitter.Feed(chunk, [&](std::string_view line) {
      lines.emplace_back(line);
      return true;
    }));
  }
  EXPECT_EQ(splitter.buffered(), 0u);
  return lines;
}

TEST(LineSplitter, SameLinesForEverySplitPoint) {
  const std::vector<std::string> whole = Lines({kStream});
  ASSERT_EQ(whole.size(), 4u);
  for (std::size_t cut = 0; cut <= kStream.size(); ++cut) {
    EXPECT_EQ(Lines({kStream.substr(0, cut), kStream.substr(cut)}), whole) << "cut at " << cut;
  }
  // Byte by byte, and random chunkings (fixed seed).
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_EQ(Lines(bytes), whole);
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> chunks;
    std::size_t at = 0;
    while (at < kStream.size()) {
      const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
      chunks.push_back(kStream.substr(at, n));
      at += n;
    }
    EXPECT_EQ(Lines(chunks), whole) << "round " << round;
  }
}

TEST(LineSplitter, KeepsAPartialLineAndStopsWhenAsked) {
  LineSplitter splitter;
  int calls = 0;
  ASSERT_OK(splitter.Feed("one\ntwo\nthr", [&](std::string_view) { return ++calls < 1; }));
  EXPECT_EQ(calls, 1);  // stopped after the first line
  LineSplitter partial;
  ASSERT_OK(partial.Feed("abc\nde", [](std::string_view) { return true; }));
  EXPECT_EQ(partial.TakeRemainder(), "de");
  EXPECT_EQ(partial.buffered(), 0u);
}

TEST(LineSplitter, BoundsTheLineLength) {
  LineSplitter splitter(/*max_line_bytes=*/8);
  ASSERT_OK(splitter.Feed("12345", [](std::string_view) { return true; }));
  Status s = splitter.Feed("67890", [](std::string_view) { return true; });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
}

TEST(ParseWatchEvent, TypesObjectsAndErrors) {
  const std::vector<std::string> lines = Lines({kStream});
  const WatchEventType types[] = {WatchEventType::kAdded, WatchEventType::kModified,
                                  WatchEventType::kBookmark, WatchEventType::kDeleted};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    StatusOr<WatchEvent> event = ParseWatchEvent(lines[i]);
    ASSERT_OK(event);
    EXPECT_EQ(event->type, types[i]);
  }
  EXPECT_EQ(ParseWatchEvent(lines[1])->object["data"]["k"], "line\nbreak \xc3\xa9");
  EXPECT_EQ(WatchEventTypeName(WatchEventType::kBookmark), "BOOKMARK");

  for (const char* bad : {"not json", "[1]", "{\"type\":\"ADDED\"}",
                          "{\"type\":\"RENAMED\",\"object\":{}}", "{\"object\":{}}"}) {
    EXPECT_EQ(ParseWatchEvent(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(WatchErrorStatus, Code410IsGone) {
  StatusOr<WatchEvent> event = ParseWatchEvent(
      R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",)j"
      R"j("message":"too old resource version: 1 (200)","reason":"Expired","code":410}})j");
  ASSERT_OK(event);
  ASSERT_EQ(event->type, WatchEventType::kError);
  Status s = WatchErrorStatus("/api/v1/pods", event->object);
  EXPECT_TRUE(IsGone(s));
  EXPECT_NE(s.message().find("too old resource version: 1 (200)"), std::string::npos);
  EXPECT_EQ(WatchErrorStatus("/p", Json::parse(R"j({"kind":"Status","code":500})j")).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace tessera::k8s
