// bench/sparse_bench.cc
//
// okl_sparse_bench: what sparse storage (ModelConfig::sparse) saves, measured in one
// process. Two workloads:
//   a9a        one pass over data/a9a_train.txt (123 binary features, ~14 non-zero) with
//              client/examples/a9a.textproto, once with dense storage fed dense rows and
//              once with sparse storage (client/examples/a9a_sparse.textproto) fed the
//              rows' non-zeros; then the test accuracy on data/a9a_test.txt. Reports the
//              training examples/s of each, their ratio, the model's bytes
//              (Model::MemoryBytes) and the worst case the quotas reserve
//              (WorstCaseMemoryBytes), and checks that both made the same predictions.
//   synthetic  a stream of --synthetic_steps examples of dim 100,000 with 100 non-zeros
//              each (0.1% density), drawn like words from 50 topics and labelled by
//              topic (see RunSynthetic), learned with sparse storage (gaussian kernel, hinge, --synthetic_terms
//              terms, OLDEST). Dense storage cannot hold it (dim over 65,536); the bytes it
//              would need are computed from WorstCaseMemoryBytes at that dim.
// Prints a table, then one JSON object per row. A benchmark, not a test: exits 0 whatever
// the figures (1 if a data file cannot be read or the two a9a models disagree).
//
// Example:
//   cmake --build build/release --target okl_sparse_bench
//   build/release/bench/okl_sparse_bench
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/io/data_reader.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/runtime/file.h"
#include "core/sparse_vector.h"
#include "core/status_macros.h"
#include "proto/config_text.h"
#include "proto/convert.h"

ABSL_FLAG(std::string, data_dir, OKL_SOURCE_DIR "/data",
          "the directory holding a9a_train.txt and a9a_test.txt");
ABSL_FLAG(std::string, examples_dir, OKL_SOURCE_DIR "/client/examples",
          "the directory holding a9a.textproto and a9a_sparse.textproto");
ABSL_FLAG(int64_t, repetitions, 3, "a9a passes per storage; the fastest is reported");
ABSL_FLAG(int64_t, synthetic_steps, 20000, "examples in the synthetic stream");
ABSL_FLAG(int64_t, synthetic_terms, 1000, "the synthetic model's budget (max_terms)");

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  std::string workload;
  std::string storage;
  uint64_t steps = 0;
  double seconds = 0;  // the Observe calls of one pass, the fastest repetition
  double test_accuracy = -1;
  size_t terms = 0;
  size_t bytes = 0;
  size_t worst_case_bytes = 0;
  double examples_per_second() const { return static_cast<double>(steps) / seconds; }
};

absl::StatusOr<okl::ModelConfig> ReadConfig(const std::string& path) {
  OKL_ASSIGN_OR_RETURN(std::string text, okl::ReadFile(path));
  return okl::ParseModelConfigText(text, path);
}

okl::SparseRows NonZeros(const okl::Dataset& data) {
  okl::SparseRows rows;
  for (size_t i = 0; i < data.size(); ++i) okl::AppendNonZeros(data.row(i), &rows);
  return rows;
}

// One pass over `train` (sparse inputs if the config stores sparse), the fastest of
// --repetitions; the model of the last pass is tested on `test`. `predictions` receives
// the test predictions.
absl::StatusOr<Row> RunA9a(const okl::ModelConfig& config, const okl::Dataset& train,
                           const okl::Dataset& test, std::vector<double>* predictions) {
  const bool sparse = config.sparse_storage();
  const okl::SparseRows train_rows = NonZeros(train);
  const okl::SparseRows test_rows = NonZeros(test);
  Row row{.workload = "a9a", .storage = sparse ? "sparse" : "dense", .steps = train.size()};
  std::unique_ptr<okl::Model> model;
  for (int64_t r = 0; r < absl::GetFlag(FLAGS_repetitions); ++r) {
    OKL_ASSIGN_OR_RETURN(model, okl::CreateModel(config));
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < train.size(); ++i) {
      absl::StatusOr<okl::Observation> o =
          sparse ? model->ObserveSparse(train_rows.Row(i), train.y[i])
                 : model->Observe(train.row(i), train.y[i]);
      if (!o.ok()) return o.status();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r == 0 || seconds < row.seconds) row.seconds = seconds;
  }
  predictions->clear();
  size_t correct = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    absl::StatusOr<double> p =
        sparse ? model->PredictSparse(test_rows.Row(i)) : model->Predict(test.row(i));
    if (!p.ok()) return p.status();
    predictions->push_back(*p);
    if (*p * test.y[i] > 0) ++correct;
  }
  row.test_accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
  row.terms = model->expansion_size();
  row.bytes = model->MemoryBytes();
  row.worst_case_bytes = okl::WorstCaseMemoryBytes(config);
  return row;
}

absl::StatusOr<Row> RunSynthetic(std::vector<Row>* rows) {
  constexpr uint32_t kDim = 100000;
  constexpr uint32_t kNonZeros = 100;
  okl::ModelConfig config;
  config.dim = kDim;
  config.kernel = {.type = okl::KernelType::kGaussian, .gamma = 0.05};
  config.loss = {.type = okl::LossType::kHinge};
  config.learning_rate = {.schedule = okl::Schedule::kConstant, .eta0 = 0.5};
  config.lambda = 0.001;
  config.budget = {.max_terms = static_cast<uint32_t>(absl::GetFlag(FLAGS_synthetic_terms)),
                   .policy = okl::BudgetPolicy::kOldest};
  config.sparse.max_nonzeros = kNonZeros;
  OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));

  // The stream, made before the clock starts, is like text in topics: 50 topics, each
  // with 200 words (indices) of its own; an example takes 80 words of its topic and 20
  // at random from all 100,000 (100 distinct non-zeros, 0.1% density), values in [0, 1),
  // and is labelled +1 for the even topics and -1 for the odd ones.
  constexpr size_t kTopics = 50;
  constexpr size_t kTopicWords = 200;
  constexpr size_t kTopicPicks = 80;
  const auto steps = static_cast<size_t>(absl::GetFlag(FLAGS_synthetic_steps));
  std::mt19937_64 rng(42);
  std::vector<std::vector<uint32_t>> topics(kTopics);
  for (auto& words : topics) {
    for (size_t w = 0; w < kTopicWords; ++w) words.push_back(static_cast<uint32_t>(rng() % kDim));
  }
  okl::SparseRows stream;
  std::vector<double> labels;
  std::vector<double> values;
  for (size_t t = 0; t < steps; ++t) {
    const size_t topic = rng() % kTopics;
    std::vector<uint32_t> picked;
    while (picked.size() < kNonZeros) {
      const uint32_t j = picked.size() < kTopicPicks ? topics[topic][rng() % kTopicWords]
                                                     : static_cast<uint32_t>(rng() % kDim);
      if (std::find(picked.begin(), picked.end(), j) == picked.end()) picked.push_back(j);
    }
    std::sort(picked.begin(), picked.end());
    values.clear();
    for (size_t k = 0; k < picked.size(); ++k) {
      values.push_back(static_cast<double>(rng() >> 11) * 0x1p-53);
    }
    stream.Append({.indices = picked, .values = values});
    labels.push_back(topic % 2 == 0 ? 1.0 : -1.0);
  }
  uint64_t mistakes = 0;
  const Clock::time_point start = Clock::now();
  for (size_t t = 0; t < steps; ++t) {
    OKL_ASSIGN_OR_RETURN(okl::Observation o, model->ObserveSparse(stream.Row(t), labels[t]));
    if (!(o.prediction * labels[t] > 0)) ++mistakes;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Row row{.workload = "synthetic 100k x 0.1%", .storage = "sparse", .steps = steps,
          .seconds = seconds, .test_accuracy = 1.0 - static_cast<double>(mistakes) / steps,
          .terms = model->expansion_size(), .bytes = model->MemoryBytes(),
          .worst_case_bytes = okl::WorstCaseMemoryBytes(config)};
  rows->push_back(row);
  // Dense storage at this dim (not runnable: over kMaxDimension): its worst case.
  okl::ModelConfig dense = config;
  dense.sparse.max_nonzeros = 0;
  Row dense_row{.workload = row.workload, .storage = "dense (would need)", .steps = 0,
                .seconds = 0, .terms = row.terms,
                .bytes = okl::WorstCaseMemoryBytes(dense),
                .worst_case_bytes = okl::WorstCaseMemoryBytes(dense)};
  rows->push_back(dense_row);
  return row;
}

int Run() {
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  const std::string examples_dir = absl::GetFlag(FLAGS_examples_dir);
  absl::StatusOr<okl::ModelConfig> dense = ReadConfig(examples_dir + "/a9a.textproto");
  absl::StatusOr<okl::ModelConfig> sparse = ReadConfig(examples_dir + "/a9a_sparse.textproto");
  absl::StatusOr<okl::Dataset> train = okl::ReadLibsvm(data_dir + "/a9a_train.txt", 123);
  absl::StatusOr<okl::Dataset> test = okl::ReadLibsvm(data_dir + "/a9a_test.txt", 123);
  for (const absl::Status& s : {dense.status(), sparse.status(), train.status(), test.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "okl_sparse_bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::vector<Row> rows;
  std::vector<double> dense_predictions, sparse_predictions;
  absl::StatusOr<Row> a = RunA9a(*dense, *train, *test, &dense_predictions);
  absl::StatusOr<Row> b = RunA9a(*sparse, *train, *test, &sparse_predictions);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "okl_sparse_bench: a9a: %s\n",
                 std::string((a.ok() ? b.status() : a.status()).message()).c_str());
    return 1;
  }
  if (dense_predictions != sparse_predictions) {
    std::fprintf(stderr, "okl_sparse_bench: the sparse model's a9a predictions differ\n");
    return 1;
  }
  rows.push_back(*a);
  rows.push_back(*b);
  absl::StatusOr<Row> synthetic = RunSynthetic(&rows);
  if (!synthetic.ok()) {
    std::fprintf(stderr, "okl_sparse_bench: synthetic: %s\n",
                 std::string(synthetic.status().message()).c_str());
    return 1;
  }

  std::printf("%-22s %-19s %8s %12s %9s %6s %12s %14s\n", "workload", "storage", "steps",
              "examples/s", "accuracy", "terms", "bytes", "worst case");
  for (const Row& r : rows) {
    std::printf("%-22s %-19s %8llu %12s %9s %6zu %12zu %14zu\n", r.workload.c_str(),
                r.storage.c_str(), static_cast<unsigned long long>(r.steps),
                r.steps > 0 ? absl::StrFormat("%.0f", r.examples_per_second()).c_str() : "-",
                r.test_accuracy >= 0 ? absl::StrFormat("%.2f%%", 100 * r.test_accuracy).c_str()
                                     : "-",
                r.terms, r.bytes, r.worst_case_bytes);
  }
  std::printf("a9a sparse/dense: %.2fx the examples/s, %.3fx the bytes, %.3fx the worst case; "
              "identical test predictions\n",
              b->examples_per_second() / a->examples_per_second(),
              static_cast<double>(b->bytes) / static_cast<double>(a->bytes),
              static_cast<double>(b->worst_case_bytes) /
                  static_cast<double>(a->worst_case_bytes));
  std::printf("(accuracy: a9a on a9a_test; synthetic: prequential)\n");
  for (const Row& r : rows) {
    std::printf(
        "{\"workload\":\"%s\",\"storage\":\"%s\",\"steps\":%llu,\"examples_per_second\":%.1f,"
        "\"accuracy\":%.6f,\"terms\":%zu,\"bytes\":%zu,\"worst_case_bytes\":%zu}\n",
        r.workload.c_str(), r.storage.c_str(), static_cast<unsigned long long>(r.steps),
        r.steps > 0 ? r.examples_per_second() : 0.0, r.test_accuracy, r.terms, r.bytes,
        r.worst_case_bytes);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
