// tests/client/client_example_test.cc
//
// The `// Example:` blocks of the client library's headers, compiled and run against a
// real okl_server. Each block is copied here between `// BEGIN EXAMPLE <header>#<n>` and
// `// END EXAMPLE` markers (a block may be split over several marked parts, e.g. a
// function and its use); ExamplesMatchTheHeaders fails if a header's example and its copy
// here differ (whitespace aside). Keep them in sync: edit both together.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "client/local_model.h"
#include "client/model_interface.h"
#include "client/remote_model.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "proto/config_text.h"
#include "proto/convert.h"
#include "tests/client/client_test_util.h"
#include "tests/server/server_process.h"
#include "tests/test_paths.h"

namespace okl::testing {
namespace {

absl::Status RunClientExample(const std::string& address) {
  // The text proto stays as the header shows it.
  // clang-format off
  // BEGIN EXAMPLE client/client.h#1
  // `address` is okl_server's host:port, e.g. "127.0.0.1:50051".
  OKL_ASSIGN_OR_RETURN(okl::Client client, okl::Client::Connect(address));
  const okl::ModelId id = {.tenant = "demo", .model = "sine"};
  OKL_ASSIGN_OR_RETURN(okl::ModelConfig config, okl::ParseModelConfigText(R"pb(
    dim: 1
    kernel { gaussian { gamma: 10 } }
    loss { squared {} }
    learning_rate { eta0: 0.5 }
    lambda: 0.001
    budget { max_terms: 200 }
  )pb"));
  OKL_RETURN_IF_ERROR(client.CreateModel(id, config).status());

  const std::vector<double> xs = {0.0, 0.5, 1.0, 1.5, 2.0};  // five inputs of dim 1
  const std::vector<double> ys = {0.0, 0.479, 0.841, 0.997, 0.909};
  OKL_ASSIGN_OR_RETURN(okl::ObserveResult observed, client.Observe(id, xs, ys));
  // observed.predictions[t] is the model's prediction for input t before learning it.

  // High-rate ingestion: examples go out in batches on streams; each stream's examples
  // are acknowledged together once the server applied them.
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ObserveWriter> writer,
                       client.OpenObserveWriter(id, {.batch_size = 256}));
  for (int i = 0; i < 3000; ++i) {
    const double x = std::fmod(i * 0.618034, 3.0);  // spread over [0, 3)
    OKL_RETURN_IF_ERROR(writer->Add({x}, std::sin(x)));
  }
  OKL_RETURN_IF_ERROR(writer->Close());

  OKL_ASSIGN_OR_RETURN(std::vector<double> predictions,
                       client.Predict(id, {0.25, 1.25}, /*dim=*/1));
  OKL_RETURN_IF_ERROR(client.SnapshotToFile(id, "/tmp/sine.okl"));

  // Delayed feedback: predict now and keep the input under an event id; learn from it
  // when its label arrives (exactly once: a second label of the event is a duplicate).
  OKL_ASSIGN_OR_RETURN(okl::RememberedPredictions served,
                       client.PredictRemembering(id, {0.75}, /*dim=*/1, {}));
  OKL_ASSIGN_OR_RETURN(okl::LabelResult labelled,
                       client.Label(id, {{served.event_ids[0], 0.682}}));
  // labelled.outcomes[0] is okl::LabelOutcome::kApplied.
  // END EXAMPLE
  // clang-format on
  if (labelled.outcomes != std::vector<okl::LabelOutcome>{okl::LabelOutcome::kApplied} ||
      served.event_ids[0].size() < 33 || served.event_ids[0].size() > 48) {
    return absl::InternalError("the remembered prediction was not labelled once");
  }
  if (observed.predictions.size() != 5 || observed.predictions[0] != 0.0) {
    return absl::InternalError("unexpected prequential predictions");
  }
  // Learnt: sin(0.25) = 0.247, sin(1.25) = 0.949.
  if (std::abs(predictions[0] - std::sin(0.25)) > 0.1 ||
      std::abs(predictions[1] - std::sin(1.25)) > 0.1) {
    return absl::InternalError(
        absl::StrCat("poor predictions ", predictions[0], " ", predictions[1]));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RunWriterExample(const okl::Client& client, const okl::ModelId& id,
                                          absl::Span<const double> xs,
                                          absl::Span<const double> ys, size_t dim) {
  // BEGIN EXAMPLE client/client.h#2
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::ObserveWriter> writer,
                       client.OpenObserveWriter(id));
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!writer->Add(xs.subspan(i * dim, dim), ys[i]).ok()) break;  // Close() says why
  }
  uint64_t resume_at = ys.size();
  if (absl::Status closed = writer->Close(); !closed.ok()) {
    OKL_ASSIGN_OR_RETURN(resume_at, writer->AppliedSinceOpen());
  }
  // If resume_at < ys.size(): open a new writer and Add the examples from resume_at on.
  // END EXAMPLE
  return resume_at;
}

// BEGIN EXAMPLE client/model_interface.h#1
// Learns from (xs, ys), then predicts `probes`: the same code for either model.
absl::StatusOr<std::vector<double>> LearnAndPredict(okl::ModelInterface& model,
                                                    absl::Span<const double> xs,
                                                    absl::Span<const double> ys,
                                                    absl::Span<const double> probes) {
  OKL_RETURN_IF_ERROR(model.Observe(xs, ys).status());
  return model.Predict(probes);
}
// END EXAMPLE

absl::Status RunInterfaceExample(const okl::Client& client, const okl::ModelConfig& config,
                                 absl::Span<const double> xs, absl::Span<const double> ys,
                                 absl::Span<const double> probes) {
  // BEGIN EXAMPLE client/model_interface.h#1
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::LocalModel> local,
                       okl::LocalModel::Create({"demo", "local"}, config));
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::RemoteModel> remote,
                       okl::RemoteModel::Create(client, {"demo", "remote"}, config));
  OKL_ASSIGN_OR_RETURN(std::vector<double> here, LearnAndPredict(*local, xs, ys, probes));
  OKL_ASSIGN_OR_RETURN(std::vector<double> there, LearnAndPredict(*remote, xs, ys, probes));
  // here == there, bit for bit.
  // END EXAMPLE
  if (Bits(here) != Bits(there)) return absl::InternalError("local and remote differ");
  return absl::OkStatus();
}

absl::Status RunLocalModelExample(const okl::Client& client, const okl::ModelConfig& config,
                                  absl::Span<const double> xs, absl::Span<const double> ys,
                                  absl::Span<const double> probes) {
  // BEGIN EXAMPLE client/local_model.h#1
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::LocalModel> model,
                       okl::LocalModel::Create({"demo", "sine"}, config));
  OKL_ASSIGN_OR_RETURN(okl::ObserveResult observed, model->Observe(xs, ys));
  OKL_ASSIGN_OR_RETURN(std::vector<double> predictions, model->Predict(probes));
  OKL_ASSIGN_OR_RETURN(std::string snapshot, model->Snapshot());
  OKL_RETURN_IF_ERROR(client.Restore({"demo", "sine"}, snapshot).status());
  // END EXAMPLE
  if (observed.steps != ys.size() || predictions.size() * config.dim != probes.size()) {
    return absl::InternalError("unexpected sizes");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RunRemoteModelExample(const std::string& address,
                                                          absl::Span<const double> probes) {
  // BEGIN EXAMPLE client/remote_model.h#1
  OKL_ASSIGN_OR_RETURN(okl::Client client, okl::Client::Connect(address));
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::RemoteModel> model,
                       okl::RemoteModel::Open(client, {"demo", "sine"}));
  OKL_ASSIGN_OR_RETURN(std::vector<double> predictions, model->Predict(probes));
  // END EXAMPLE
  return predictions;
}

class ClientExampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
  }
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ClientExampleTest, ClientHeaderExampleRuns) {
  const std::string path = "/tmp/sine.okl";  // the example's
  std::filesystem::remove(path);
  const absl::Status status = RunClientExample(server_->address());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
}

TEST_F(ClientExampleTest, ObserveWriterExampleRuns) {
  const Client client(server_->channel());
  const okl::ModelId id{"demo", "writer"};
  ASSERT_TRUE(client.CreateModel(id, TestConfig()).ok());
  const Data data = MakeData(1000, kDim, /*seed=*/61);
  absl::StatusOr<uint64_t> resume_at = RunWriterExample(client, id, data.xs, data.ys, kDim);
  ASSERT_TRUE(resume_at.ok()) << resume_at.status();
  EXPECT_EQ(*resume_at, 1000u);
  EXPECT_EQ(client.GetModel(id)->stats.steps, 1000u);
}

TEST_F(ClientExampleTest, ModelExamplesRun) {
  const Client client(server_->channel());
  const Data data = MakeData(500, kDim, /*seed=*/62);
  const std::vector<double> probes = MakeProbes(10, kDim, /*seed=*/63);
  absl::Status status = RunInterfaceExample(client, TestConfig(), data.xs, data.ys, probes);
  EXPECT_TRUE(status.ok()) << status;
  status = RunLocalModelExample(client, TestConfig(), data.xs, data.ys, probes);
  EXPECT_TRUE(status.ok()) << status;
  absl::StatusOr<std::vector<double>> predictions =
      RunRemoteModelExample(server_->address(), probes);
  ASSERT_TRUE(predictions.ok()) << predictions.status();
  // The restored remote model predicts as the local one did: same as the one that
  // learnt in RunInterfaceExample ("demo/remote") from the same data.
  absl::StatusOr<std::vector<double>> remote = client.Predict({"demo", "remote"}, probes, kDim);
  ASSERT_TRUE(remote.ok());
  EXPECT_EQ(Bits(*predictions), Bits(*remote));
}

// --- The copies above match the headers --------------------------------------------------

std::string ReadSource(const std::string& relative_path) {
  const std::string path = SourcePath(relative_path);
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Code without whitespace, so that reflowing (clang-format) does not count as a change.
std::string Squeeze(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    for (char c : line) {
      if (!absl::ascii_isspace(static_cast<unsigned char>(c))) out.push_back(c);
    }
  }
  return out;
}

// The `// Example:` blocks of a header: the comment lines that follow it, "//" removed.
std::vector<std::vector<std::string>> HeaderExamples(const std::string& text) {
  std::vector<std::vector<std::string>> blocks;
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    if (absl::StripAsciiWhitespace(lines[i]) != "// Example:") continue;
    std::vector<std::string>& block = blocks.emplace_back();
    for (size_t j = i + 1; j < lines.size() && absl::StartsWith(lines[j], "//"); ++j) {
      const absl::string_view content =
          absl::StripAsciiWhitespace(absl::string_view(lines[j]).substr(2));
      if (!content.empty()) block.emplace_back(content);
    }
  }
  return blocks;
}

// The marked copies in this file, by tag ("client/client.h#1"), parts concatenated.
std::map<std::string, std::vector<std::string>> MarkedCopies(const std::string& text) {
  std::map<std::string, std::vector<std::string>> copies;
  std::vector<std::string>* copy = nullptr;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "// BEGIN EXAMPLE ")) {
      copy = &copies[std::string(line)];
    } else if (line == "// END EXAMPLE") {
      copy = nullptr;
    } else if (copy != nullptr && !line.empty()) {
      copy->emplace_back(line);
    }
  }
  return copies;
}

TEST(ClientExampleSyncTest, ExamplesMatchTheHeaders) {
  const std::map<std::string, std::vector<std::string>> copies =
      MarkedCopies(ReadSource("tests/client/client_example_test.cc"));
  size_t examples = 0;
  for (const char* header : {"client/client.h", "client/model_interface.h",
                             "client/local_model.h", "client/remote_model.h"}) {
    const std::vector<std::vector<std::string>> blocks = HeaderExamples(ReadSource(header));
    EXPECT_FALSE(blocks.empty()) << header << " has no example";
    for (size_t k = 0; k < blocks.size(); ++k) {
      const std::string tag = absl::StrCat(header, "#", k + 1);
      ++examples;
      auto it = copies.find(tag);
      if (it == copies.end()) {
        ADD_FAILURE() << "no copy of the example " << tag << " in this test";
        continue;
      }
      EXPECT_EQ(Squeeze(blocks[k]), Squeeze(it->second))
          << "the example " << tag << " and its copy in client_example_test.cc differ:\n"
          << absl::StrJoin(blocks[k], "\n") << "\n---\n"
          << absl::StrJoin(it->second, "\n");
    }
  }
  EXPECT_EQ(copies.size(), examples) << "a marked copy has no example in its header";
}

}  // namespace
}  // namespace okl::testing
