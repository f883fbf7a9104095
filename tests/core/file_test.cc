// tests/core/file_test.cc: okl::ReadFile reads every byte, okl::AtomicFile and
// WriteFileAtomically replace a file whole or not at all, and their errors name the file
// with the errno-derived code.

#include "core/runtime/file.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

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

// The files of `dir`, by name.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFileTest, ReplacesAFileWholeAndLeavesNothingBeside) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/file_test_atomic");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/routes.map";
  ASSERT_TRUE(WriteFileAtomically(path, "alice a;\n").ok());
  EXPECT_EQ(ReadFile(path).value_or("?"), "alice a;\n");
  ASSERT_TRUE(WriteFileAtomically(path, "alice b;\nbob c;\n").ok());
  EXPECT_EQ(ReadFile(path).value_or("?"), "alice b;\nbob c;\n");

  // Until Commit, readers see the old file; a file never committed leaves no trace.
  {
    AtomicFile file(path);
    ASSERT_TRUE(file.Open().ok());
    ASSERT_TRUE(file.Append("partial").ok());
    EXPECT_EQ(ReadFile(path).value_or("?"), "alice b;\nbob c;\n");
    EXPECT_EQ(FilesIn(dir).size(), 2u);  // the file and its temporary
  }
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"routes.map"});
  // Truncate starts over (a retried download).
  {
    AtomicFile file(path);
    ASSERT_TRUE(file.Open().ok());
    ASSERT_TRUE(file.Append("first try").ok());
    ASSERT_TRUE(file.Truncate().ok());
    ASSERT_TRUE(file.Append("second").ok());
    ASSERT_TRUE(file.Commit().ok());
  }
  EXPECT_EQ(ReadFile(path).value_or("?"), "second");
  EXPECT_EQ(FilesIn(dir), std::vector<std::string>{"routes.map"});
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, AMissingDirectoryIsNotFoundAndNamed) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/no_such_dir/routes.map");
  absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("cannot create " + path + ".tmp."));
}

}  // namespace
}  // namespace okl
