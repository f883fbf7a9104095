// tests/client/replay_test.cc
//
// Replay against a NormaModel fed the same rows directly (bit for bit), its errors, and
// the real `okl` binary (CliBinary(), tests/test_paths.h) as a subprocess.

#include "client/replay.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

std::string TempPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  return absl::StrCat(::testing::TempDir(), "/replay_test_", ::getpid(), "_", counter++,
                      "_", name);
}

std::string WriteTemp(absl::string_view name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  out << contents;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::vector<double> ReadPredictions(const std::string& path) {
  std::vector<double> values;
  std::istringstream lines(ReadAll(path));
  std::string line;
  while (std::getline(lines, line)) values.push_back(std::strtod(line.c_str(), nullptr));
  return values;
}

constexpr char kRegressionConfig[] = R"pb(
  dim: 3
  kernel { gaussian { gamma: 0.8 } }
  loss { squared {} }
  learning_rate { eta0: 0.4 schedule: INVERSE_SQRT }
  lambda: 0.05
  offset: true
  budget { max_terms: 16 policy: SMALLEST }
)pb";

ModelConfig RegressionConfig() {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.8};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 0.4};
  config.lambda = 0.05;
  config.offset = true;
  config.budget = {.max_terms = 16, .policy = BudgetPolicy::kSmallest};
  return config;
}

// A deterministic regression stream, y = sin(x1) + x2 x3 + noise, written as CSV with
// %.17g so the file holds exactly these doubles.
struct Stream {
  std::vector<double> x;
  std::vector<double> y;
  std::string csv;
};

Stream MakeStream(int rows) {
  Stream stream;
  std::mt19937 rng(20240601);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int i = 0; i < rows; ++i) {
    double row[3];
    for (double& v : row) v = uniform(rng);
    const double y = std::sin(row[0]) + row[1] * row[2] + 0.05 * uniform(rng);
    stream.x.insert(stream.x.end(), row, row + 3);
    stream.y.push_back(y);
    absl::StrAppendFormat(&stream.csv, "%.17g,%.17g,%.17g,%.17g\n", row[0], row[1], row[2],
                          y);
  }
  return stream;
}

TEST(ReplayTest, PredictionsEqualADirectlyFedModelBitForBit) {
  const Stream stream = MakeStream(200);
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", kRegressionConfig);
  options.input_path = WriteTemp("stream.csv", "# x1,x2,x3,y\n" + stream.csv);
  options.format = InputFormat::kCsv;
  options.output_path = TempPath("predictions.txt");
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_TRUE(summary.ok()) << summary.status();

  absl::StatusOr<std::unique_ptr<NormaModel>> model =
      NormaModel::Create(RegressionConfig());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<double> replayed = ReadPredictions(options.output_path);
  ASSERT_EQ(replayed.size(), stream.y.size());
  for (size_t i = 0; i < stream.y.size(); ++i) {
    absl::StatusOr<Observation> o = (*model)->Observe(
        absl::Span<const double>(stream.x.data() + 3 * i, 3), stream.y[i]);
    ASSERT_TRUE(o.ok()) << o.status();
    ASSERT_EQ(std::bit_cast<uint64_t>(replayed[i]), std::bit_cast<uint64_t>(o->prediction))
        << "row " << i << ": " << replayed[i] << " vs " << o->prediction;
  }

  const ModelStats stats = (*model)->stats();
  EXPECT_EQ(summary->config, RegressionConfig());
  EXPECT_EQ(summary->examples, 200u);
  EXPECT_EQ(summary->stats.steps, 200u);
  EXPECT_EQ(summary->stats.cumulative_loss, stats.cumulative_loss);
  EXPECT_EQ(summary->mean_loss, stats.cumulative_loss / 200);
  EXPECT_EQ(summary->stats.expansion_size, stats.expansion_size);
  EXPECT_LE(summary->stats.expansion_size, 16u);
  EXPECT_FALSE(summary->counts_mistakes);
  EXPECT_GT(summary->examples_per_second, 0);
  EXPECT_THAT(FormatReplaySummary(*summary), HasSubstr("steps            200\n"));
}

TEST(ReplayTest, SeriesEmbeddingDefaultsToTheConfigDim) {
  std::string series;
  for (int n = 0; n < 50; ++n) absl::StrAppendFormat(&series, "%.17g\n", std::sin(0.3 * n));
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", kRegressionConfig);
  options.input_path = WriteTemp("series.dat", series);
  options.format = InputFormat::kSeries;
  options.output_path = TempPath("predictions.txt");
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->examples, 49u);  // N values give N-1 rows
  EXPECT_EQ(ReadPredictions(options.output_path).size(), 49u);

  options.embedding = 3;
  EXPECT_TRUE(Replay(options).ok());
  options.embedding = 4;
  absl::StatusOr<ReplaySummary> mismatch = Replay(options);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(),
              HasSubstr("--embedding=4 differs from the config's dim 3"));
}

TEST(ReplayTest, ClassificationCountsMistakes) {
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", R"pb(
    dim: 2
    kernel { linear { c: 1 } }
    loss { hinge {} }
    learning_rate { eta0: 0.5 }
  )pb");
  // The first prediction is 0, which counts as a mistake; then the margin is learned.
  options.input_path = WriteTemp("stream.svm", "+1 1:1\n-1 2:1\n+1 1:1\n-1 2:1\n");
  options.format = InputFormat::kLibsvm;
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->counts_mistakes);
  EXPECT_EQ(summary->examples, 4u);
  EXPECT_GE(summary->stats.mistakes, 1u);
  EXPECT_THAT(FormatReplaySummary(*summary), HasSubstr("mistakes"));
}

TEST(ReplayTest, DimensionDisagreementIsAnError) {
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", kRegressionConfig);
  options.input_path = WriteTemp("stream.csv", "1,2,3\n");  // 2 inputs, config has 3
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(),
              HasSubstr(options.input_path + ":1: expected 4 columns (3 inputs"));

  options.input_path = WriteTemp("stream.svm", "1 4:1\n");
  options.format = InputFormat::kLibsvm;
  summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(summary.status().message(), HasSubstr("index 4 exceeds the dimension 3"));

  Dataset data;
  data.dim = 2;
  EXPECT_EQ(ReplayDataset(RegressionConfig(), data, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReplayTest, EmbeddingIsOnlyForSeries) {
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", kRegressionConfig);
  options.input_path = WriteTemp("stream.csv", "1,2,3,4\n");
  options.embedding = 3;
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_THAT(summary.status().message(), HasSubstr("only to --format=series"));
}

TEST(ReplayTest, ARejectedExampleNamesItsRowAndFile) {
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", R"pb(
    dim: 1
    kernel { gaussian { gamma: 1 } }
    loss { hinge {} }
    learning_rate { eta0: 0.5 }
  )pb");
  options.input_path =
      WriteTemp("stream.csv", "0.5,1\n0.2,-1\n0.1,0.5\n");  // 0.5: no label
  options.output_path = TempPath("predictions.txt");
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr(options.input_path + ": example 3: "));
  // No partial (or empty) output is left behind.
  EXPECT_NE(::access(options.output_path.c_str(), F_OK), 0);
}

TEST(ReplayTest, AnUnwritableOutputFailsBeforeTheReplay) {
  ReplayOptions options;
  options.config_path = WriteTemp("config.textproto", kRegressionConfig);
  options.input_path = TempPath("never_read.csv");  // missing: must not be reached
  options.output_path = TempPath("no_such_dir") + "/predictions.txt";
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(summary.status().message(),
              HasSubstr("cannot create " + options.output_path));
}

TEST(ReplayTest, ConfigErrorsCarryTheConfigPath) {
  ReplayOptions options;
  options.config_path =
      WriteTemp("bad.textproto", "dim: 3\nkernel { gaussian { gamma: x } }\n");
  options.input_path = WriteTemp("stream.csv", "1,2,3,4\n");
  absl::StatusOr<ReplaySummary> summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(summary.status().message(), HasSubstr(options.config_path + ":2:"));

  options.config_path = TempPath("missing.textproto");
  summary = Replay(options);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kNotFound);
}

TEST(ReplayTest, ParsesInputFormatNames) {
  EXPECT_EQ(*ParseInputFormat("csv"), InputFormat::kCsv);
  EXPECT_EQ(*ParseInputFormat("libsvm"), InputFormat::kLibsvm);
  EXPECT_EQ(*ParseInputFormat("series"), InputFormat::kSeries);
  EXPECT_EQ(ParseInputFormat("json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputFormatName(InputFormat::kLibsvm), "libsvm");
}

// Runs `okl` with `args`; returns its exit code and sets *err to its stderr.
int RunOkl(const std::string& args, std::string* err) {
  const std::string err_path = TempPath("stderr.txt");
  const std::string command = absl::StrCat(okl::testing::CliBinary(), " ", args, " 2>", err_path);
  const int status = std::system(command.c_str());
  *err = ReadAll(err_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(OklBinaryTest, ReplaySucceedsAndFailsWithOneLineOnABadConfig) {
  const std::string config = WriteTemp("config.textproto", kRegressionConfig);
  const std::string input = WriteTemp("stream.csv", MakeStream(20).csv);
  const std::string output = TempPath("predictions.txt");
  std::string err;
  ASSERT_EQ(RunOkl(absl::StrCat("replay --config=", config, " --input=", input,
                                " --format=csv --output=", output),
                   &err),
            0)
      << err;
  EXPECT_EQ(ReadPredictions(output).size(), 20u);
  EXPECT_THAT(err, HasSubstr("steps            20"));

  const std::string bad = WriteTemp("bad.textproto", "dim: 3\nkernel { gaussian {} }\n");
  EXPECT_EQ(RunOkl(absl::StrCat("replay --config=", bad, " --input=", input,
                                " --output=", output),
                   &err),
            1);
  EXPECT_THAT(err, HasSubstr("okl: " + bad + ": "));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(OklBinaryTest, UsageErrorsExitTwo) {
  std::string err;
  EXPECT_EQ(RunOkl("frobnicate", &err), 2);
  EXPECT_THAT(err, HasSubstr("okl: unknown command 'frobnicate'"));
  EXPECT_THAT(err, HasSubstr("usage: okl"));
  EXPECT_EQ(RunOkl("", &err), 2);
  EXPECT_EQ(RunOkl("replay --input=x --output=y", &err), 2);
  EXPECT_THAT(err, HasSubstr("replay needs --config"));
  EXPECT_EQ(RunOkl("help >/dev/null", &err), 0);
}

}  // namespace
}  // namespace okl
