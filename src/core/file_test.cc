#include "tessera/file.h"

#include <fstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "testutil/temp_dir.h"

namespace tessera {
namespace {

TEST(ReadFile, ReadsARegularFileWhole) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/a.txt";
  std::ofstream(path, std::ios::binary) << std::string("line one\n\0two", 13);
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, std::string("line one\n\0two", 13));
}

TEST(ReadFile, ReadsAnEmptyFileAsEmpty) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/empty";
  std::ofstream(path).close();
  auto text = ReadFile(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "");
}

TEST(ReadFile, MissingFileIsNotFoundNamingThePath) {
  auto text = ReadFile("/nonexistent/tessera/file");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_NE(text.status().message().find("/nonexistent/tessera/file"), std::string::npos);
}

TEST(ReadFile, DirectoryIsInvalidArgumentNotAnEmptyRead) {
  testutil::TempDir dir;
  auto text = ReadFile(dir.path());
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(text.status().message().find("is a directory"), std::string::npos);
  EXPECT_NE(text.status().message().find(dir.path()), std::string::npos);
}

TEST(ReadFile, DeviceIsRefusedBeforeAnyRead) {
  auto text = ReadFile("/dev/zero");  // would never end
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(text.status().message().find("character device"), std::string::npos);
}

TEST(ReadFile, FifoIsRefusedWithoutBlocking) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto text = ReadFile(path);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidInput);
}

TEST(ReadFile, OversizedFileNamesTheLimit) {
  testutil::TempDir dir;
  const std::string path = dir.path() + "/big";
  std::ofstream(path) << std::string(101, 'x');
  auto text = ReadFile(path, 100);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(text.status().message().find("limit of 100 bytes"), std::string::npos);
  auto exact = ReadFile(path, 101);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->size(), 101u);
}

TEST(ReadFile, ProcFilesWithSizeZeroAreReadUpToTheBound) {
  auto text = ReadFile("/proc/self/status");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_NE(text->find("Pid:"), std::string::npos);
  auto small = ReadFile("/proc/self/status", 8);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidInput);
}

}  // namespace
}  // namespace tessera
