// tests/core/file_test.cc: okl::ReadFile reads every byte, and its errors name the file
// with the errno-derived code.

#include "core/file.h"

#include <pthread.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

TEST(ReadFileTest, ReadsEveryByteOfABinaryFileLargerThanOneBuffer) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/file_test_binary");
  std::string written;
  for (int i = 0; i < 200000; ++i) written.push_back(static_cast<char>(i * 31 % 256));
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(std::fwrite(written.data(), 1, written.size(), file), written.size());
  ASSERT_EQ(std::fclose(file), 0);
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, written);  // NULs included
  std::remove(path.c_str());
}

TEST(ReadFileTest, ReadsAnEmptyFileAndAProcFileWhoseSizeIsZero) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/file_test_empty");
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(std::fclose(file), 0);
  absl::StatusOr<std::string> empty = ReadFile(path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
  std::remove(path.c_str());
  // stat says 0 bytes; the contents start with the process id and its name in parens.
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_THAT(*stat, HasSubstr(" ("));
}

// The metrics exposer reads /proc on a web server thread with a small stack: ReadFile
// must not put a large buffer on the stack (it once held 64 KiB there, and overflowed).
TEST(ReadFileTest, ReadsOnAThreadWithASmallStack) {
  pthread_attr_t attributes;
  ASSERT_EQ(pthread_attr_init(&attributes), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attributes, 64 << 10), 0);
  struct Result {
    bool ok = false;
    size_t bytes = 0;
  } result;
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attributes,
                [](void* argument) -> void* {
                  auto* out = static_cast<Result*>(argument);
                  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
                  out->ok = stat.ok();
                  out->bytes = stat.ok() ? stat->size() : 0;
                  return nullptr;
                },
                &result),
            0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attributes);
  EXPECT_TRUE(result.ok);
  EXPECT_GT(result.bytes, 0u);
}

TEST(ReadFileTest, AMissingFileIsNotFoundAndNamed) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/file_test_no_such_file");
  const absl::Status status = ReadFile(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("cannot open ", path)));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
}

TEST(ReadFileTest, ADirectoryOpensButDoesNotRead) {
  const absl::Status status = ReadFile(::testing::TempDir()).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("cannot read"));
  EXPECT_THAT(status.message(), HasSubstr("Is a directory"));
}

}  // namespace
}  // namespace okl
