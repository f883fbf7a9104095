// Runs each fuzz target's body on every file of its seed corpus and of its regressions
// (tests/fuzz/{corpus,regressions}/<target>/), so that the crashes the fuzzers found stay
// fixed under the ordinary sanitizer builds, which have no libFuzzer. A body that breaks
// an invariant traps: the test binary dies with the invariant's message, after the
// "input:" line naming the file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/file.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_bodies.h"
#include "tests/test_paths.h"

namespace okl::fuzz {
namespace {

namespace fs = std::filesystem;

using Body = int (*)(const uint8_t*, size_t);

// The files of tests/fuzz/<folder>/<target>/, sorted; none if the folder does not exist.
std::vector<fs::path> InputsIn(const std::string& folder, const std::string& target) {
  const fs::path dir = fs::path(okl::testing::SourcePath("tests/fuzz")) / folder / target;
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != "README.md") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs `body` on every input of the target's corpus and regressions; returns how many.
size_t RunAll(Body body, const std::string& target) {
  size_t runs = 0;
  for (const std::string folder : {"corpus", "regressions"}) {
    for (const fs::path& path : InputsIn(folder, target)) {
      const absl::StatusOr<std::string> read = ReadFile(path.string());
      EXPECT_TRUE(read.ok()) << read.status();
      const std::string bytes = read.value_or("");
      // Printed first: a broken invariant traps, and this says which file did it.
      std::fprintf(stderr, "input: %s\n", path.c_str());
      EXPECT_EQ(body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++runs;
    }
  }
  return runs;
}

// The seed corpora hold a dozen files or more each; fewer means the folder moved.
constexpr size_t kMinCorpusFiles = 8;

TEST(FuzzRegressionTest, SnapshotBodyKeepsItsInvariantsOnEveryCorpusAndRegressionInput) {
  EXPECT_GE(RunAll(FuzzSnapshot, "snapshot"), kMinCorpusFiles);
}

TEST(FuzzRegressionTest, ConfigTextBodyKeepsItsInvariantsOnEveryCorpusAndRegressionInput) {
  EXPECT_GE(RunAll(FuzzConfigText, "config_text"), kMinCorpusFiles);
}

TEST(FuzzRegressionTest, RequestBodyKeepsItsInvariantsOnEveryCorpusAndRegressionInput) {
  EXPECT_GE(RunAll(FuzzRequest, "request"), kMinCorpusFiles);
}

// The bodies must take what libFuzzer starts every run with.
TEST(FuzzRegressionTest, BodiesAcceptEmptyAndOneByteInputs) {
  for (const Body body : {FuzzSnapshot, FuzzConfigText, FuzzRequest}) {
    EXPECT_EQ(body(nullptr, 0), 0);
    const uint8_t byte = 0xA1;
    EXPECT_EQ(body(&byte, 1), 0);
  }
}

}  // namespace
}  // namespace okl::fuzz
