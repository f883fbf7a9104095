// tests/cli/cli_units_test.cc
//
// The pieces of the `okl` tool in process: per-command flag parsing over Abseil's
// registry, the streaming row reader, the progress line, and learning curves with their
// gnuplot rendering (skipped where gnuplot is not installed). The tool as a whole,
// against a real okl_server, is tests/cli/cli_test.py.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/input.h"
#include "client/cli/learning_curve.h"
#include "client/cli/progress.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth/tokens.h"

ABSL_FLAG(std::string, test_name, "", "a string flag");
ABSL_FLAG(bool, test_verbose, false, "a bool flag");
ABSL_FLAG(int64_t, test_count, 3, "an integer flag");

namespace okl::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string TempPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  return absl::StrCat(::testing::TempDir(), "/cli_units_test_", ::getpid(), "_", counter++, "_",
                      name);
}

std::string WriteTemp(absl::string_view name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  out << contents;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// argv from words, argv[0] = "okl".
class Argv {
 public:
  explicit Argv(std::vector<std::string> words) : words_(std::move(words)) {
    words_.insert(words_.begin(), "okl");
    for (std::string& word : words_) pointers_.push_back(word.data());
  }
  int argc() { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> pointers_;
};

constexpr absl::string_view kAllowed[] = {"test_name", "test_verbose", "test_count"};

TEST(ModelSizeTextTest, CountsTermsOrRandomFeaturesByTheModelsKind) {
  ModelConfig config;
  EXPECT_EQ(ModelSizeText(config, 1000), "1000 terms");
  config.random_features.dimension = 400;
  EXPECT_EQ(ModelSizeText(config, 400), "400 random features");
}

TEST(CliArgsTest, SplitsCommandFlagsAndArgumentsInAnyOrder) {
  absl::FlagSaver saver;
  Argv argv({"--test_name", "a", "observe", "-test_count=5", "file.csv", "-", "--test_verbose",
             "--", "--not-a-flag"});
  absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(line->command, "observe");
  EXPECT_THAT(line->args, ElementsAre("file.csv", "-", "--not-a-flag"));
  EXPECT_TRUE(line->Given("test_name"));
  EXPECT_FALSE(line->help);
  ASSERT_TRUE(ApplyFlags(*line, kAllowed, "observe").ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "a");
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 5);
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_verbose));
}

TEST(CliArgsTest, RepeatedFlagKeepsEveryValueAndNegatedBoolIsFalse) {
  absl::FlagSaver saver;
  Argv argv({"predict", "--test_name=1,2", "--test_name=3:1", "--notest_verbose"});
  absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(line->Values("test_name"), ElementsAre("1,2", "3:1"));
  EXPECT_THAT(line->Values("test_verbose"), ElementsAre("false"));
  ASSERT_TRUE(ApplyFlags(*line, kAllowed, "predict").ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "3:1");  // the last value wins
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_verbose));
}

TEST(CliArgsTest, HelpIsNotAFlag) {
  Argv argv({"observe", "--help"});
  absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
  ASSERT_TRUE(line.ok());
  EXPECT_TRUE(line->help);
  EXPECT_TRUE(line->flags.empty());
}

TEST(CliArgsTest, RejectsUnknownForeignAndMalformedFlags) {
  absl::FlagSaver saver;
  {
    Argv argv({"get", "--no_such_flag=1"});
    absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
    ASSERT_TRUE(line.ok());
    const absl::Status status = ApplyFlags(*line, kAllowed, "get");
    EXPECT_THAT(status.message(), HasSubstr("unknown flag --no_such_flag"));
  }
  {
    Argv argv({"get", "--test_count=7"});
    absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
    ASSERT_TRUE(line.ok());
    constexpr absl::string_view kOnlyName[] = {"test_name"};
    const absl::Status status = ApplyFlags(*line, kOnlyName, "get");
    EXPECT_THAT(status.message(), HasSubstr("--test_count is not a flag of `okl get`"));
    EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 3);  // nothing set
  }
  {
    Argv argv({"get", "--test_count=many"});
    absl::StatusOr<CommandLine> line = SplitCommandLine(argv.argc(), argv.argv());
    ASSERT_TRUE(line.ok());
    EXPECT_THAT(ApplyFlags(*line, kAllowed, "get").message(), HasSubstr("--test_count: "));
  }
  {
    Argv argv({"get", "--test_name"});  // a value flag at the end, without its value
    EXPECT_THAT(SplitCommandLine(argv.argc(), argv.argv()).status().message(),
                HasSubstr("--test_name needs a value"));
  }
}

TEST(CliArgsTest, FormatsHelpWithDefaults) {
  constexpr absl::string_view kFlags[] = {"test_count", "test_verbose"};
  const std::string help = FormatFlagHelp(kFlags);
  EXPECT_THAT(help, HasSubstr("  --test_count (default: 3)\n      an integer flag\n"));
  EXPECT_THAT(help, HasSubstr("  --test_verbose\n      a bool flag\n"));
}

TEST(RowReaderTest, ReadsCsvAndLibsvmLikeDataReader) {
  const std::string csv = WriteTemp("rows.csv", "# comment\n1, 2 ,3\n\n4,5,6\r\n");
  absl::StatusOr<std::unique_ptr<RowReader>> reader =
      RowReader::Open({csv}, RowFormat::kCsv, 2, /*labelled=*/true);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->total_bytes(), ReadAll(csv).size());
  std::vector<double> x;
  double y = 0;
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(1, 2));
  EXPECT_EQ(y, 3);
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(4, 5));
  EXPECT_EQ(y, 6);
  EXPECT_FALSE(*(*reader)->Next(&x, &y));
  EXPECT_EQ((*reader)->rows(), 2u);
  EXPECT_EQ((*reader)->bytes_read(), ReadAll(csv).size());

  const std::string libsvm = WriteTemp("rows.libsvm", "+1 3:1 1:0.5\n-1\n");
  reader = RowReader::Open({libsvm, csv}, RowFormat::kLibsvm, 3, /*labelled=*/true);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(0.5, 0, 1));
  EXPECT_EQ(y, 1);
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(0, 0, 0));
  EXPECT_EQ(y, -1);
  // The second file is CSV, so LIBSVM parsing fails on its first data line, which is
  // line 2 of that file.
  const absl::StatusOr<bool> bad = (*reader)->Next(&x, &y);
  EXPECT_THAT(bad.status().message(), HasSubstr(absl::StrCat(csv, ":2: ")));
}

TEST(RowReaderTest, UnlabelledRowsAndErrorsNameTheLine) {
  const std::string csv = WriteTemp("x.csv", "1,2\n3,4,5\n");
  absl::StatusOr<std::unique_ptr<RowReader>> reader =
      RowReader::Open({csv}, RowFormat::kCsv, 2, /*labelled=*/false);
  ASSERT_TRUE(reader.ok());
  std::vector<double> x;
  double y = 7;
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(1, 2));
  EXPECT_EQ(y, 0);
  EXPECT_EQ((*reader)->Next(&x, &y).status().message(),
            absl::StrCat(csv, ":2: expected 2 columns (2 inputs), got 3"));

  // Unlabelled LIBSVM: a leading label is optional and ignored.
  const std::string libsvm = WriteTemp("x.libsvm", "2:5\n-1 1:4\n1 4:1\n");
  reader = RowReader::Open({libsvm}, RowFormat::kLibsvm, 3, /*labelled=*/false);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(0, 5, 0));
  ASSERT_TRUE(*(*reader)->Next(&x, &y));
  EXPECT_THAT(x, ElementsAre(4, 0, 0));
  EXPECT_EQ((*reader)->Next(&x, &y).status().message(),
            absl::StrCat(libsvm, ":3: index 4 exceeds the dimension 3"));

  EXPECT_EQ(RowReader::Open({TempPath("missing")}, RowFormat::kCsv, 2, true).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ParseInputVectorTest, DenseAndSparse) {
  EXPECT_THAT(*ParseInputVector("1, 2,3", 3), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ParseInputVector("3:1 1:+2", 3), ElementsAre(2, 0, 1));
  EXPECT_THAT(ParseInputVector("1,2", 3).status().message(), HasSubstr("expected 3 values"));
  EXPECT_THAT(ParseInputVector("1:1,1:2", 3).status().message(), HasSubstr("appears twice"));
  EXPECT_THAT(ParseInputVector("1,nan,3", 3).status().message(), HasSubstr("non-finite"));
  EXPECT_THAT(ParseInputVector("", 3).status().message(), HasSubstr("no values"));
}

ModelSummary SummaryWithStats(LossType loss, bool offset) {
  ModelSummary summary;
  summary.tenant = "acme";
  summary.model = "m";
  summary.config.dim = 2;
  summary.config.loss = {.type = loss, .nu = 0.2};
  summary.config.offset = offset;
  summary.config.budget = {.max_terms = 10, .policy = BudgetPolicy::kMerge};
  summary.stats.steps = 100;
  summary.stats.expansion_size = 10;
  summary.stats.terms_removed = 37;
  summary.stats.offset = -0.25;
  summary.stats.margin = 0.625;
  summary.stats.regret =
      RegretResult{.regret = 1.5, .duality_gap = 2e-7, .window = 50, .last_step = 90};
  return summary;
}

TEST(SummaryTest, TextShowsTheMarginTheOffsetTermsRemovedAndTheDualityGap) {
  const std::string hinge = SummaryText(SummaryWithStats(LossType::kHinge, true));
  EXPECT_THAT(hinge, HasSubstr("\nrho              0.625 (learned)\n"));
  EXPECT_THAT(hinge, HasSubstr("\noffset           -0.25\n"));
  EXPECT_THAT(hinge, HasSubstr("\nterms removed    37\n"));
  EXPECT_THAT(hinge, HasSubstr("at step 90 (comparator duality gap 2e-07)\n"));
  EXPECT_THAT(hinge, HasSubstr("policy: MERGE"));
  EXPECT_THAT(hinge, Not(HasSubstr("epsilon ")));

  const std::string tube = SummaryText(SummaryWithStats(LossType::kEpsilonInsensitive, false));
  EXPECT_THAT(tube, HasSubstr("\nepsilon          0.625 (learned)\n"));
  EXPECT_THAT(tube, Not(HasSubstr("\nrho ")));
  EXPECT_THAT(tube, Not(HasSubstr("\noffset ")));  // b is 0 without an offset

  const std::string squared = SummaryText(SummaryWithStats(LossType::kSquared, false));
  EXPECT_THAT(squared, Not(HasSubstr("\nrho ")));
  EXPECT_THAT(squared, Not(HasSubstr("\nepsilon ")));
  EXPECT_THAT(squared, HasSubstr("\nterms removed    37\n"));
}

TEST(SummaryTest, JsonHasTheMarginUnderItsNameTheOffsetTermsRemovedAndTheDualityGap) {
  const std::string novelty = SummaryJson(SummaryWithStats(LossType::kNovelty, false));
  EXPECT_THAT(novelty, HasSubstr("\"rho\":0.625"));
  EXPECT_THAT(novelty, Not(HasSubstr("\"epsilon\"")));
  EXPECT_THAT(novelty, Not(HasSubstr("\"offset\"")));
  EXPECT_THAT(novelty, HasSubstr("\"terms_removed\":37"));
  EXPECT_THAT(novelty, HasSubstr("\"duality_gap\":2e-07"));

  const std::string tube = SummaryJson(SummaryWithStats(LossType::kEpsilonInsensitive, true));
  EXPECT_THAT(tube, HasSubstr("\"epsilon\":0.625"));
  EXPECT_THAT(tube, Not(HasSubstr("\"rho\"")));
  EXPECT_THAT(tube, HasSubstr("\"offset\":-0.25"));
}

// A selection's summary: the champion and each candidate's status, steps, recent loss and
// model, or, while the default set warms up, that it has no candidates yet.
TEST(SummaryTest, ASelectionListsItsCandidatesAndChampion) {
  ModelSummary summary;
  summary.tenant = "acme";
  summary.model = "auto";
  summary.config.dim = 3;
  summary.config.loss = {.type = LossType::kSquared};
  summary.config.select.enabled = true;
  summary.stats.steps = 10;
  EXPECT_THAT(SummaryText(summary), HasSubstr("none yet: the default set is built after 32"));

  ModelConfig tracker;
  tracker.dim = 3;
  tracker.kernel.gamma = 0.5;
  tracker.krls_tracker = {.max_basis = 200, .noise_variance = 1e-5};
  ModelConfig norma;
  norma.dim = 3;
  norma.budget = {.max_terms = 100, .policy = BudgetPolicy::kMerge};
  summary.stats.steps = 500;
  summary.stats.champion = 1;
  summary.stats.champion_changes = 2;
  summary.stats.candidates = {
      {.config = norma, .status = CandidateStatus::kRetired, .steps = 300, .recent_loss = 0.5},
      {.config = tracker,
       .status = CandidateStatus::kLive,
       .steps = 500,
       .recent_loss = 0.0125,
       .started_at = 0,
       .serving = true}};
  std::string text = SummaryText(summary);
  EXPECT_THAT(text, HasSubstr("\nchampion         #1 (2 changes)\n"));
  EXPECT_THAT(text, HasSubstr("\npredicts with    the champion (*)\n"));
  EXPECT_THAT(text, HasSubstr("0   retired  300    0.5          NORMA merge B=100"));
  EXPECT_THAT(text,
              HasSubstr("1*  live     500    0.0125       KRLS-T M=200 gaussian(gamma=0.5)"));
  const std::string json = SummaryJson(summary);
  EXPECT_THAT(json, HasSubstr("\"champion\":1,\"champion_changes\":2"));
  EXPECT_THAT(json, HasSubstr("\"status\":\"retired\",\"steps\":300"));
  EXPECT_THAT(json, HasSubstr("\"recent_loss\":0.0125"));
  EXPECT_THAT(json, HasSubstr("\"serving\":true"));
  // A mean of leaders names how many.
  summary.stats.candidates[0].status = CandidateStatus::kLive;
  summary.stats.candidates[0].serving = true;
  text = SummaryText(summary);
  EXPECT_THAT(text, HasSubstr("\npredicts with    the mean of 2 leaders (*)\n"));
  EXPECT_THAT(text, HasSubstr("0*  live     300"));
}

// What RunTokenNew writes, through a temporary FILE*.
std::string TokenNewOutput(const Grant& grant, bool json) {
  std::FILE* out = std::tmpfile();
  EXPECT_NE(out, nullptr);
  const absl::Status status = RunTokenNew(grant, {.json = json, .out = out});
  EXPECT_TRUE(status.ok()) << status;
  std::rewind(out);
  std::string text;
  char buffer[512];
  while (size_t got = std::fread(buffer, 1, sizeof(buffer), out)) text.append(buffer, got);
  std::fclose(out);
  return text;
}

TEST(TokenNewTest, PrintsTheTokenThenItsTokensFileLine) {
  absl::StatusOr<Grant> grant = ParseGrant(Role::kWrite, "b,a");
  ASSERT_TRUE(grant.ok()) << grant.status();
  const std::vector<std::string> lines =
      absl::StrSplit(TokenNewOutput(*grant, /*json=*/false), '\n');
  ASSERT_EQ(lines.size(), 3u);  // two lines, each ending in a newline
  EXPECT_EQ(lines[2], "");
  const std::string& token = lines[0];
  EXPECT_THAT(token, ::testing::StartsWith("okl_"));
  EXPECT_EQ(token.size(), 47u);
  EXPECT_EQ(lines[1], absl::StrCat(Sha256Hex(token), " write a,b"));
  // The line is one the server accepts, and it grants what was asked.
  absl::StatusOr<TokenTable> table = TokenTable::Parse(lines[1], "printed");
  ASSERT_TRUE(table.ok()) << table.status();
  const Grant* found = table->Find(token);
  ASSERT_NE(found, nullptr);
  EXPECT_TRUE(found->Allows(Role::kWrite, "a"));
  EXPECT_FALSE(found->Allows(Role::kRead, "c"));
  // Each run makes a new token.
  EXPECT_NE(TokenNewOutput(*grant, false).substr(0, 47), token);
}

TEST(TokenNewTest, JsonHasTokenRoleTenantsAndLine) {
  absl::StatusOr<Grant> grant = ParseGrant(Role::kAdmin, "");
  ASSERT_TRUE(grant.ok()) << grant.status();
  const std::string json = TokenNewOutput(*grant, /*json=*/true);
  ASSERT_EQ(json.back(), '\n');
  const size_t key = json.find("\"token\":\"okl_");
  ASSERT_NE(key, std::string::npos) << json;
  const std::string token = json.substr(key + 9, 47);
  EXPECT_EQ(json,
            absl::StrCat("{\"token\":\"", token, "\",\"role\":\"admin\",\"tenants\":[\"*\"],",
                         "\"line\":\"", Sha256Hex(token), " admin *\"}\n"));
}

TEST(ProgressTest, FormatsRateAverageAndEta) {
  EXPECT_EQ(FormatProgress("observe", 12288, 2.0, 0.25, 0.41234),
            "observe: 12,288 rows (25.0%)  6,144 rows/s  avg loss 0.4123  ETA 0:06");
  EXPECT_EQ(FormatProgress("observe", 10, 0.0, std::nullopt, std::nullopt), "observe: 10 rows");
  EXPECT_EQ(WithThousands(1234567), "1,234,567");
  EXPECT_EQ(WithThousands(999), "999");
}

TEST(ProgressTest, LogModeWritesWholeLines) {
  const std::string path = TempPath("progress.txt");
  std::FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  ProgressLine progress("observe", file, /*terminal=*/false);
  progress.Update(5, std::nullopt, std::nullopt);  // too soon: nothing
  progress.Update(10, 1.0, 0.5, /*force=*/true);
  progress.Finish();
  std::fclose(file);
  const std::string text = ReadAll(path);
  EXPECT_THAT(text, HasSubstr("observe: 10 rows (100.0%)"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(LearningCurveTest, WritesRowsWithTheRunningMean) {
  const std::string path = TempPath("curve.csv");
  absl::StatusOr<std::unique_ptr<CurveWriter>> curve = CurveWriter::Open(path);
  ASSERT_TRUE(curve.ok());
  ASSERT_TRUE((*curve)->Add(11, 1.0, 1).ok());
  ASSERT_TRUE((*curve)->Add(12, 0.0, 2).ok());
  ASSERT_TRUE((*curve)->Add(13, 0.5, 2).ok());
  ASSERT_TRUE((*curve)->Close().ok());
  EXPECT_EQ(ReadAll(path),
            "step,loss,cumulative_average_loss,expansion_size\n"
            "11,1,1,1\n"
            "12,0,0.5,2\n"
            "13,0.5,0.5,2\n");
  EXPECT_EQ((*curve)->rows(), 3u);
  EXPECT_EQ((*curve)->min_positive_value(), 0.5);
  const std::string script = GnuplotScript(**curve, "out.png", PlotFormat::kPng, "title");
  EXPECT_THAT(script, HasSubstr("set terminal pngcairo"));
  EXPECT_THAT(script, HasSubstr("set logscale y"));
  EXPECT_THAT(script, HasSubstr("axes x1y2"));
}

TEST(LearningCurveTest, AllZeroLossesPlotOnALinearAxis) {
  absl::StatusOr<std::unique_ptr<CurveWriter>> curve = CurveWriter::Open(TempPath("zero.csv"));
  ASSERT_TRUE(curve.ok());
  ASSERT_TRUE((*curve)->Add(1, 0.0, 0).ok());
  ASSERT_TRUE((*curve)->Close().ok());
  const std::string script = GnuplotScript(**curve, "out.svg", PlotFormat::kSvg, "it's");
  EXPECT_THAT(script, Not(HasSubstr("logscale")));
  EXPECT_THAT(script, HasSubstr("set terminal svg"));
  EXPECT_THAT(script, HasSubstr("set title 'it''s'"));  // gnuplot's quoting
}

TEST(LearningCurveTest, PlotFormatComesFromTheExtension) {
  EXPECT_EQ(*PlotFormatFor("a/b.PNG"), PlotFormat::kPng);
  EXPECT_EQ(*PlotFormatFor("b.svg"), PlotFormat::kSvg);
  EXPECT_FALSE(PlotFormatFor("b.jpg").ok());
}

TEST(LearningCurveTest, AMissingGnuplotSaysWhatToInstall) {
  absl::StatusOr<std::unique_ptr<CurveWriter>> curve = CurveWriter::Open(TempPath("c.csv"));
  ASSERT_TRUE(curve.ok());
  ASSERT_TRUE((*curve)->Add(1, 0.5, 1).ok());
  ASSERT_TRUE((*curve)->Close().ok());
  const absl::Status status =
      PlotCurve(**curve, TempPath("c.png"), "t", "/nonexistent/gnuplot");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("gnuplot-nox"));
}

bool HaveGnuplot() { return std::system("gnuplot --version >/dev/null 2>&1") == 0; }

TEST(LearningCurveTest, GnuplotDrawsAPng) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  absl::StatusOr<std::unique_ptr<CurveWriter>> curve = CurveWriter::Open(TempPath("p.csv"));
  ASSERT_TRUE(curve.ok());
  for (int t = 1; t <= 500; ++t) {
    ASSERT_TRUE((*curve)->Add(t, 1.0 / t + (t % 3 == 0 ? 0.0 : 0.01), std::min(t, 100)).ok());
  }
  ASSERT_TRUE((*curve)->Close().ok());
  const std::string png = TempPath("p.png");
  ASSERT_TRUE(PlotCurve(**curve, png, "a test's curve").ok());
  const std::string bytes = ReadAll(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace okl::cli
