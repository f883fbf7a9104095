// okl_fuzz_make_corpus: writes the fuzz targets' seed corpora, tests/fuzz/corpus/<target>/,
// from real examples made by the real code: snapshots of models of several configs
// trained through okl::Model and encoded by EncodeSnapshot, the text configs of
// client/examples/ with hand-written ones for every kernel, loss and schedule (and
// rejected ones), and Observe and Predict requests, valid and not. The output is
// deterministic for one build, so rerunning it after a change shows in `git diff` what
// moved.
//
//   cmake --build build/release --target okl_fuzz_make_corpus
//   build/release/tests/fuzz/okl_fuzz_make_corpus      # into the tree it was built from
//   build/release/tests/fuzz/okl_fuzz_make_corpus DIR  # into the checkout at DIR
//
// It replaces the three corpus folders whole; regressions/ and pending/ are not touched.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/model.h"
#include "okl/v1/okl.pb.h"
#include "proto/config_text.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace okl::fuzz {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "okl_fuzz_make_corpus: %s\n", message.c_str());
  std::exit(1);
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Die(absl::StrCat("cannot write ", path.string()));
}

// A deterministic sequence in [0, 1) that is the same on every platform (std's
// distributions are not).
class Sequence {
 public:
  double Next() {
    state_ = state_ * 6364136223846793005u + 1442695040888963407u;
    return static_cast<double>(state_ >> 11) * 0x1p-53;
  }

 private:
  uint64_t state_ = 0x6f6b6c2d66757a7a;  // "okl-fuzz"
};

// --- Snapshots ----------------------------------------------------------------------

ModelConfig BaseConfig(uint32_t dim) {
  ModelConfig config;
  config.dim = dim;
  config.learning_rate.eta0 = 0.5;
  config.lambda = 0.01;
  return config;
}

// How the training inputs look: dense in [-1, 1], or sparse binary (a few ones).
enum class Inputs { kDense, kSparseBinary };

// Trains a model of `config` on `steps` examples and returns its snapshot bytes.
std::string TrainedSnapshot(const ModelConfig& config, int steps, Inputs inputs) {
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  if (!model.ok()) Die(model.status().ToString());
  Sequence random;
  const bool classification = IsClassificationLoss(config.loss.type);
  std::vector<double> x(config.dim);
  for (int t = 0; t < steps; ++t) {
    for (double& v : x) {
      v = inputs == Inputs::kDense ? 2 * random.Next() - 1 : (random.Next() < 0.15 ? 1.0 : 0.0);
    }
    const double target = std::sin(3 * x[0]) + 0.1 * (random.Next() - 0.5);
    const double y = classification ? (target > 0 ? 1.0 : -1.0) : target;
    absl::StatusOr<Observation> o = (*model)->Observe(x, y);
    if (!o.ok()) Die(o.status().ToString());
  }
  absl::StatusOr<std::string> bytes = EncodeSnapshot((*model)->ExportState());
  if (!bytes.ok()) Die(bytes.status().ToString());
  return *std::move(bytes);
}

void WriteSnapshots(const fs::path& dir) {
  {
    // Selections: a default set still warming up (its examples kept), and two listed
    // candidates of three live, a tracker among them, after a promotion or retirement.
    ModelConfig config;
    config.dim = 3;
    config.select.enabled = true;
    WriteFile(dir / "select_default_warming_up.snap",
              TrainedSnapshot(config, 10, Inputs::kDense));
    ModelConfig slow = BaseConfig(3);
    slow.learning_rate.eta0 = 0.001;
    slow.budget.max_terms = 6;
    ModelConfig fast = slow;
    fast.learning_rate.eta0 = 0.5;
    ModelConfig tracker;
    tracker.dim = 3;
    tracker.krls_tracker = {.max_basis = 5, .noise_variance = 1e-2};
    config.select.live = 2;
    config.select.candidates = {slow, fast, tracker};
    WriteFile(dir / "select_listed_two_live.snap",
              TrainedSnapshot(config, 400, Inputs::kDense));
  }
  {
    // A KRLS tracker with forgetting (its kernel matrix too) and a regret window, pruned
    // many times over: a dictionary of 4 after 20 steps.
    ModelConfig config;
    config.dim = 3;
    config.kernel = {.type = KernelType::kGaussian, .gamma = 0.7};
    config.krls_tracker = {.max_basis = 4, .noise_variance = 1e-2, .forgetting = 0.99};
    config.regret_window = 5;
    WriteFile(dir / "krls_tracker_forgetting_regret.snap",
              TrainedSnapshot(config, 20, Inputs::kDense));
  }
  {
    // MERGE with an averaging window of 3 steps over 24: retired terms, block ends, and
    // retired terms dropped again.
    ModelConfig config = BaseConfig(3);
    config.budget = {.max_terms = 5, .policy = BudgetPolicy::kMerge};
    config.averaged = true;
    config.averaging_window = 3;
    WriteFile(dir / "gaussian_merge_averaged_window.snap",
              TrainedSnapshot(config, 24, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(5);
    config.kernel = {.type = KernelType::kLaplacian, .gamma = 0.5};
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.offset = true;
    config.averaged = true;
    config.random_features = {.dimension = 8, .seed = 42};
    WriteFile(dir / "laplacian_random_features_averaged.snap",
              TrainedSnapshot(config, 10, Inputs::kDense));
  }
  {
    // Sparse storage with the averaged hypothesis: terms and retired terms as rows of
    // non-zeros.
    ModelConfig config = BaseConfig(24);
    config.kernel = {.type = KernelType::kGaussian, .gamma = 0.3};
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.budget = {.max_terms = 6, .policy = BudgetPolicy::kOldest};
    config.averaged = true;
    config.averaging_window = 3;
    config.sparse.max_nonzeros = 24;
    WriteFile(dir / "gaussian_sparse_storage_averaged_window.snap",
              TrainedSnapshot(config, 14, Inputs::kSparseBinary));
  }
  {
    ModelConfig config = BaseConfig(3);
    config.budget.max_terms = 8;  // 20 steps: the OLDEST budget evicts
    WriteFile(dir / "gaussian_squared_dense_budget.snap",
              TrainedSnapshot(config, 20, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(24);
    config.kernel = {.type = KernelType::kLaplacian, .gamma = 0.3};
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.budget = {.max_terms = 6, .policy = BudgetPolicy::kSmallest};
    WriteFile(dir / "laplacian_hinge_sparse_inputs_smallest.snap",
              TrainedSnapshot(config, 14, Inputs::kSparseBinary));
  }
  {
    ModelConfig config = BaseConfig(2);
    config.kernel = {.type = KernelType::kPolynomial, .gamma = 0.5, .c = 1, .degree = 3};
    config.loss.type = LossType::kLogistic;
    config.averaged = true;
    config.budget.max_terms = 10;
    WriteFile(dir / "polynomial_logistic_averaged.snap",
              TrainedSnapshot(config, 15, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(2);
    config.loss = {.type = LossType::kEpsilonInsensitive, .epsilon = 0.1, .nu = 0.3};
    config.learning_rate.schedule = Schedule::kInverseSqrt;
    config.regret_window = 5;
    config.budget.max_terms = 16;
    WriteFile(dir / "gaussian_epsilon_nu_regret_window.snap",
              TrainedSnapshot(config, 12, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(2);
    config.kernel = {.type = KernelType::kHeat, .t = 0.1};
    config.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.2};
    config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.5, .theta = 0.7};
    config.budget = {.max_terms = 12, .drop_below = 0.01};
    WriteFile(dir / "heat_novelty_power_drop_below.snap",
              TrainedSnapshot(config, 12, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(4);
    config.kernel = {.type = KernelType::kLinear, .c = 1};
    config.loss = {.type = LossType::kHuber, .delta = 0.5};
    config.offset = true;
    config.averaged = true;
    config.regret_window = 3;
    config.budget.max_terms = 6;
    WriteFile(dir / "linear_huber_offset_averaged_regret.snap",
              TrainedSnapshot(config, 10, Inputs::kDense));
  }
  {
    // eta lambda = 0.75: the scale falls 4x a step, so it is folded every few steps.
    ModelConfig config = BaseConfig(2);
    config.learning_rate.eta0 = 1.5;
    config.lambda = 0.5;
    config.averaged = true;
    config.budget.max_terms = 4;
    WriteFile(dir / "renormalized_scale_averaged.snap",
              TrainedSnapshot(config, 30, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(16);
    config.loss = {.type = LossType::kHinge, .rho = 1.0};
    config.averaged = true;
    config.regret_window = 8;
    config.budget = {.max_terms = 5, .policy = BudgetPolicy::kSmallest};
    WriteFile(dir / "hinge_averaged_regret_sparse_inputs.snap",
              TrainedSnapshot(config, 12, Inputs::kSparseBinary));
  }
  {
    ModelConfig config = BaseConfig(1);  // no budget: every term stays
    WriteFile(dir / "gaussian_no_budget_dim1.snap",
              TrainedSnapshot(config, 10, Inputs::kDense));
  }
  {
    ModelConfig config = BaseConfig(5);
    config.budget.max_terms = 4;
    WriteFile(dir / "empty_model.snap", TrainedSnapshot(config, 0, Inputs::kDense));
  }
  // Rejected by DecodeSnapshot: a flipped checksum, and a truncated snapshot.
  ModelConfig config = BaseConfig(3);
  config.budget.max_terms = 4;
  std::string bytes = TrainedSnapshot(config, 6, Inputs::kDense);
  std::string flipped = bytes;
  flipped.back() = static_cast<char>(flipped.back() ^ 0x01);
  WriteFile(dir / "bad_checksum.snap", flipped);
  WriteFile(dir / "truncated.snap", bytes.substr(0, bytes.size() / 2));
}

// --- Text configs -------------------------------------------------------------------

struct NamedText {
  const char* name;
  const char* text;
};

constexpr NamedText kConfigTexts[] = {
    {"laplacian_epsilon_nu_inverse_sqrt.textproto", R"pb(
       dim: 3
       kernel { laplacian { gamma: 0.5 } }
       loss { epsilon_insensitive { epsilon: 0.05 nu: 0.2 } }
       learning_rate { eta0: 0.3 schedule: INVERSE_SQRT }
       lambda: 0.01
       budget { max_terms: 64 policy: SMALLEST drop_below: 1e-6 }
       regret_window: 32
     )pb"},
    {"polynomial_logistic_averaged.textproto", R"pb(
       dim: 2
       kernel { polynomial { gamma: 1 c: 1 degree: 4 } }
       loss { logistic {} }
       learning_rate { eta0: 0.1 schedule: POWER theta: 0.75 }
       lambda: 0.001
       averaged: true
       budget { max_terms: 100 }
     )pb"},
    {"linear_huber_offset.textproto", R"pb(
       # comments and a trailing comma-free list
       dim: 10
       kernel { linear { c: 0.5 } }
       loss { huber { delta: 2 } }
       learning_rate { eta0: 0.01 }
       offset: true
     )pb"},
    {"heat_novelty.textproto", R"pb(
       dim: 4
       kernel { heat { t: 0.0796 } }
       loss { novelty { rho: 0.2 nu: 0.1 } }
       learning_rate { eta0: 0.5 schedule: CONSTANT }
       lambda: 0.1
       budget { max_terms: 8 policy: OLDEST }
     )pb"},
    {"hinge_unset_rho_regret.textproto", R"pb(
       dim: 1
       kernel { gaussian { gamma: 2 } }
       loss { hinge { nu: 0.5 } }
       learning_rate { eta0: 1 }
       lambda: 0.5
       regret_window: 4
     )pb"},
    {"enum_numbers_and_exponents.textproto", R"pb(
       dim: 65536
       kernel { gaussian { gamma: 1.5e-5 } }
       loss { squared {} }
       learning_rate { eta0: 5E-1 schedule: 3 theta: 1.0 }
       lambda: -0
       budget { max_terms: 4194304 policy: 2 drop_below: 0 }
     )pb"},
    {"short_form_colons.textproto",
     "dim:7 kernel:{gaussian:{gamma:1}} loss:<squared:<>> learning_rate{eta0:0.5} "
     "lambda:0.001 budget{max_terms:512}"},
    // Rejected: each by a different rule.
    {"reject_unknown_field.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
       momentum: 0.9
     )pb"},
    {"select_default.textproto", "dim: 123 loss { hinge {} } select {}"},
    {"select_listed.textproto", R"pb(
       dim: 2
       loss { squared {} }
       select {
         live: 1
         candidates {
           kernel { gaussian { gamma: 1 } }
           learning_rate { eta0: 0.5 }
         }
         candidates {
           kernel { laplacian { gamma: 2 } }
           krls_tracker { max_basis: 4 noise_variance: 0.1 }
         }
       }
     )pb"},
    {"reject_select_kernel.textproto", R"pb(
       dim: 2
       loss { squared {} }
       kernel { gaussian { gamma: 1 } }
       select {}
     )pb"},
    {"reject_select_nested.textproto", R"pb(
       dim: 2
       loss { squared {} }
       select { candidates { select {} } }
     )pb"},
    {"reject_syntax_error.textproto", "dim: 2\nkernel { gaussian { gamma: 1 }\nloss {"},
    {"reject_nan_gamma.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: nan } }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
     )pb"},
    {"reject_inf_unread_field.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 theta: inf }
     )pb"},
    {"reject_dim_zero.textproto",
     "kernel { gaussian { gamma: 1 } } loss { squared {} }\n"
     "learning_rate { eta0: 0.5 }\n"},
    {"reject_no_kernel.textproto", "dim: 3 loss { squared {} } learning_rate { eta0: 0.5 }\n"},
    {"reject_degree_65.textproto", R"pb(
       dim: 2
       kernel { polynomial { gamma: 1 c: 0 degree: 65 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
     )pb"},
    {"krls_tracker.textproto", R"pb(
       dim: 6
       kernel { gaussian { gamma: 0.00048828125 } }
       loss { squared {} }
       krls_tracker { max_basis: 100 noise_variance: 1e-6 forgetting: 1 }
     )pb"},
    {"krls_tracker_laplacian_defaults.textproto", R"pb(
       dim: 2
       kernel { laplacian { gamma: 1 } }
       loss { squared {} }
       krls_tracker { max_basis: 3 noise_variance: 0.1 }
       regret_window: 8
     )pb"},
    {"reject_krls_tracker_learning_rate.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
       krls_tracker { max_basis: 10 noise_variance: 0.1 }
     )pb"},
    {"reject_krls_tracker_hinge.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { hinge {} }
       krls_tracker { max_basis: 10 noise_variance: 0.1 forgetting: 0.5 }
     )pb"},
    {"reject_eta_lambda_one.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { squared {} }
       learning_rate { eta0: 2 }
       lambda: 0.5
     )pb"},
    {"reject_heat_normaliser.textproto", R"pb(
       dim: 4096
       kernel { heat { t: 10 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
     )pb"},
    {"reject_bad_enum.textproto", R"pb(
       dim: 2
       kernel { gaussian { gamma: 1 } }
       loss { squared {} }
       learning_rate { eta0: 0.5 schedule: 7 }
     )pb"},
    {"reject_two_kernels.textproto", R"pb(
       dim: 2
       kernel {
         gaussian { gamma: 1 }
         linear { c: 1 }
       }
       loss { squared {} }
       learning_rate { eta0: 0.5 }
     )pb"},
};

void WriteConfigTexts(const fs::path& dir, const fs::path& examples) {
  size_t copied = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(examples)) {
    if (entry.path().extension() != ".textproto") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    if (!ParseModelConfigText(text).ok())
      Die(absl::StrCat(entry.path().string(), " is invalid"));
    WriteFile(dir / absl::StrCat("example_", entry.path().filename().string()), text);
    ++copied;
  }
  if (copied == 0) Die(absl::StrCat("no *.textproto in ", examples.string()));
  for (const NamedText& config : kConfigTexts) {
    const bool valid = ParseModelConfigText(config.text).ok();
    if (valid == absl::StartsWith(config.name, "reject_")) {
      Die(absl::StrCat(config.name, valid ? " parses" : " does not parse"));
    }
    WriteFile(dir / config.name, config.text);
  }
}

// --- Requests -----------------------------------------------------------------------

// data[0] of okl_fuzz_request (tests/fuzz/fuzz_bodies.h): bit 0 the request type, bits
// 1-7 the model's config.
constexpr uint8_t kObserve = 0;
constexpr uint8_t kPredict = 1;
constexpr uint8_t kLaplacian = 1 << 1;
constexpr uint8_t kPolynomial = 2 << 1;
constexpr uint8_t kLinear = 3 << 1;
constexpr uint8_t kHinge = 1 << 3;
constexpr uint8_t kAveraged = 1 << 4;
constexpr uint8_t kRegretWindow = 1 << 5;
constexpr uint8_t kSmallest = 1 << 6;
constexpr uint8_t kOffsetInverseSqrt = 1 << 7;

std::string RequestFile(uint8_t selector, const google::protobuf::Message& request) {
  return std::string(1, static_cast<char>(selector)) + request.SerializeAsString();
}

void SetRef(v1::ModelRef* ref) {
  ref->set_tenant("fuzz");
  ref->set_model("seed");
}

v1::Vector Dense(std::vector<double> values) {
  v1::Vector v;
  v.mutable_values()->Assign(values.begin(), values.end());
  return v;
}

v1::Vector Sparse(std::vector<uint32_t> indices, std::vector<double> values) {
  v1::Vector v;
  v.mutable_indices()->Assign(indices.begin(), indices.end());
  v.mutable_values()->Assign(values.begin(), values.end());
  return v;
}

v1::ObserveRequest Observe(std::vector<std::pair<v1::Vector, double>> examples) {
  v1::ObserveRequest request;
  SetRef(request.mutable_ref());
  for (auto& [x, y] : examples) {
    v1::Example* example = request.add_examples();
    *example->mutable_x() = std::move(x);
    example->set_y(y);
  }
  return request;
}

v1::PredictRequest Predict(std::vector<v1::Vector> inputs) {
  v1::PredictRequest request;
  SetRef(request.mutable_ref());
  for (v1::Vector& x : inputs) *request.add_inputs() = std::move(x);
  return request;
}

void WriteRequests(const fs::path& dir) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> seven = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7};
  auto write = [&](const char* name, uint8_t selector, const google::protobuf::Message& r) {
    WriteFile(dir / name, RequestFile(selector, r));
  };
  // Observe, valid for the dims they name.
  write("observe_dense_dim1.bin", kObserve,
        Observe({{Dense({0.5}), 0.48}, {Dense({-1.0}), -0.84}, {Dense({2.0}), 0.91}}));
  write("observe_dense_dim7_hinge.bin", kObserve | kHinge,
        Observe({{Dense(seven), 1.0}, {Dense({0, 0, 0, 0, 0, 0, 1}), -1.0}}));
  write("observe_sparse_low_indices_averaged.bin", kObserve | kAveraged | kLaplacian,
        Observe({{Sparse({0}, {1.5}), 1.0}, {Sparse({0, 3, 6}, {1, 2, 3}), -0.5}}));
  write("observe_sparse_dim4096_regret.bin", kObserve | kRegretWindow | kPolynomial,
        Observe({{Sparse({5, 100, 4000}, {1, 1, 1}), 0.3},
                 {Sparse({0, 4095}, {0.25, -0.25}), -0.1},
                 {Sparse({17}, {3}), 1.2}}));
  write("observe_smallest_offset_linear.bin",
        kObserve | kSmallest | kOffsetInverseSqrt | kLinear,
        Observe({{Dense({0.2}), 1.0}, {Dense({0.4}), 1.0}, {Dense({-0.3}), -2.0}}));
  write("observe_huge_values_diverge.bin", kObserve | kLinear,
        Observe({{Dense({1e300}), 1e300}, {Dense({-1e300}), 1e300}}));
  // The polynomial kernel with SMALLEST's bit and the squared loss: a KRLS tracker.
  write("observe_dense_dim7_krls_tracker.bin", kObserve | kPolynomial | kSmallest,
        Observe(
            {{Dense(seven), 0.3}, {Dense({0, 0, 0, 1, 0, 0, 0}), -0.2}, {Dense(seven), 0.31}}));
  write("observe_empty.bin", kObserve, Observe({}));
  // Observe, rejected by conversion or validation.
  write("observe_reject_indices_not_increasing.bin", kObserve,
        Observe({{Sparse({3, 2}, {1, 1}), 0.0}}));
  write("observe_reject_index_count_mismatch.bin", kObserve,
        Observe({{Sparse({0, 1}, {1}), 0.0}}));
  write("observe_reject_nan_value.bin", kObserve, Observe({{Dense({nan}), 0.0}}));
  write("observe_reject_inf_label.bin", kObserve | kAveraged, Observe({{Dense({1.0}), inf}}));
  write("observe_reject_label_not_pm1_hinge.bin", kObserve | kHinge,
        Observe({{Dense({1.0}), 1.0}, {Dense({0.5}), 0.5}}));
  write("observe_reject_no_x.bin", kObserve, Observe({{v1::Vector(), 1.0}}));
  // Predict.
  write("predict_dense_dim1.bin", kPredict, Predict({Dense({0.5}), Dense({-3.0})}));
  write("predict_dense_dim7_averaged.bin", kPredict | kAveraged, Predict({Dense(seven)}));
  write("predict_sparse_dim4096.bin", kPredict | kPolynomial | kRegretWindow,
        Predict({Sparse({1, 2, 4095}, {0.5, 0.5, 0.5}), Sparse({0}, {-1})}));
  write("predict_dense_dim7_krls_tracker.bin", kPredict | kPolynomial | kSmallest,
        Predict({Dense(seven), Dense({1, 1, 1, 1, 1, 1, 1})}));
  write("predict_empty.bin", kPredict, Predict({}));
  write("predict_reject_nan.bin", kPredict, Predict({Dense({nan})}));
  write("predict_reject_index_too_large.bin", kPredict | kLaplacian,
        Predict({Sparse({4096}, {1.0})}));
}

void Run(const fs::path& root) {
  const fs::path corpus = root / "tests" / "fuzz" / "corpus";
  const std::pair<const char*, std::function<void(const fs::path&)>> targets[] = {
      {"snapshot", WriteSnapshots},
      {"config_text",
       [&](const fs::path& dir) { WriteConfigTexts(dir, root / "client" / "examples"); }},
      {"request", WriteRequests},
  };
  for (const auto& [target, write] : targets) {
    const fs::path dir = corpus / target;
    fs::remove_all(dir);
    fs::create_directories(dir);
    write(dir);
    size_t files = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++files;
    std::printf("%s: %zu files\n", dir.string().c_str(), files);
  }
}

}  // namespace
}  // namespace okl::fuzz

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [REPO_ROOT]\n", argv[0]);
    return 2;
  }
  okl::fuzz::Run(argc == 2 ? argv[1] : OKL_SOURCE_DIR);
  return 0;
}
