// Tests of sparse storage (ModelConfig::sparse): sparse inputs, the sparse kernel sweep,
// and a NormaModel that stores its terms' non-zeros.
//
// A sparse sweep computes a squared distance as |x_i|^2 + |x|^2 - 2 <x_i, x>, the dense
// sweep from differences: on real-valued inputs the two storages agree within rounding,
// and both agree with the plain reference (tests/core/reference_norma.h) on the densified
// inputs; on integer-valued inputs (one-hot and count features, a9a) every sum is exact,
// so a sparse-storage model makes bit-identical predictions to a dense one (compared with
// ==).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/expansion.h"
#include "core/kernel.h"
#include "core/model.h"
#include "core/norma.h"
#include "core/sparse_vector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/reference_norma.h"
#include "tests/core/reference_streams.h"

namespace okl {
namespace {

using ::okl::testing::Agrees;
using ::okl::testing::Uniform;
using ::testing::HasSubstr;

// A stream of sparse inputs: dim kSparseDim, 1 to kMaxNonZeros non-zeros at random places,
// values in [-1, 1); labels by the sign of a fixed sparse linear function (classification)
// or its value plus noise (regression).
constexpr uint32_t kSparseDim = 300;
constexpr uint32_t kMaxNonZeros = 12;

struct SparseStream {
  SparseRows x;
  std::vector<double> y;
  std::vector<double> Dense(size_t i) const {
    std::vector<double> dense(kSparseDim);
    Densify(x.Row(i), absl::MakeSpan(dense));
    return dense;
  }
};

// Values in [-1, 1), or, if `integers`, in {-2, -1, 1, 2}.
SparseStream MakeSparseStream(size_t steps, bool classification, uint64_t seed,
                              bool integers = false) {
  std::mt19937_64 rng(seed);
  SparseStream stream;
  for (size_t t = 0; t < steps; ++t) {
    const size_t nonzeros = 1 + rng() % kMaxNonZeros;
    std::vector<bool> used(kSparseDim, false);
    for (size_t k = 0; k < nonzeros; ++k) used[rng() % kSparseDim] = true;
    std::vector<uint32_t> indices;
    std::vector<double> values;
    double target = 0;
    for (uint32_t j = 0; j < kSparseDim; ++j) {
      if (!used[j]) continue;
      indices.push_back(j);
      const double u = Uniform(rng, -1, 1);
      values.push_back(integers ? (u < 0 ? std::floor(2 * u) : std::floor(2 * u) + 1) : u);
      target += (j % 3 == 0 ? 1.0 : -0.5) * values.back();
    }
    stream.x.Append({.indices = indices, .values = values});
    stream.y.push_back(classification ? (target > 0 ? 1.0 : -1.0)
                                      : target + Uniform(rng, -0.1, 0.1));
  }
  return stream;
}

ModelConfig BaseConfig(KernelType kernel, bool classification) {
  ModelConfig config;
  config.dim = kSparseDim;
  config.kernel = {.type = kernel, .gamma = 0.5, .c = 1.0, .degree = 2, .t = 1.0};
  config.loss = {.type = classification ? LossType::kHinge : LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 0.5};
  config.lambda = 0.01;
  config.budget = {.max_terms = 40, .policy = BudgetPolicy::kOldest};
  return config;
}

ModelConfig Sparse(ModelConfig config, uint32_t max_nonzeros = kMaxNonZeros) {
  config.sparse.max_nonzeros = max_nonzeros;
  return config;
}

struct StorageCase {
  std::string name;
  ModelConfig config;  // dense storage; the test makes its sparse twin
  bool classification;
  bool integers = false;  // integer-valued inputs: the storages agree bit for bit
};

std::vector<StorageCase> StorageCases() {
  std::vector<StorageCase> cases;
  const std::pair<const char*, KernelType> kernels[] = {
      {"Gaussian", KernelType::kGaussian}, {"Laplacian", KernelType::kLaplacian},
      {"Linear", KernelType::kLinear},     {"Polynomial", KernelType::kPolynomial},
      {"Heat", KernelType::kHeat}};
  for (const auto& [name, kernel] : kernels) {
    for (const bool classification : {true, false}) {
      const std::string base = absl::StrCat(name, classification ? "Hinge" : "Squared");
      ModelConfig oldest = BaseConfig(kernel, classification);
      cases.push_back({base + "Oldest", oldest, classification});
      ModelConfig smallest = oldest;
      smallest.budget.policy = BudgetPolicy::kSmallest;
      smallest.budget.drop_below = 1e-3;
      smallest.offset = true;
      cases.push_back({base + "SmallestDropBelowOffset", smallest, classification});
      ModelConfig averaged = oldest;
      averaged.averaged = true;
      averaged.averaging_window = 15;
      cases.push_back({base + "AveragedWindow15", averaged, classification});
    }
  }
  ModelConfig regret = BaseConfig(KernelType::kGaussian, true);
  regret.regret_window = 20;
  cases.push_back({"GaussianHingeRegretWindow", regret, true});
  ModelConfig unbounded = BaseConfig(KernelType::kGaussian, false);
  unbounded.budget = {};
  cases.push_back({"GaussianSquaredNoBudget", unbounded, false});
  // Integer-valued inputs, every kernel, with and without the averaged hypothesis.
  const size_t real_cases = cases.size();
  for (size_t i = 0; i < real_cases; ++i) {
    if (cases[i].name.find("SmallestDropBelowOffset") != std::string::npos) continue;
    StorageCase integer = cases[i];
    integer.name += "IntegerInputs";
    integer.integers = true;
    integer.config.kernel.gamma = 0.05;  // distances up to ~100 on these inputs
    cases.push_back(integer);
  }
  return cases;
}

class SparseStorageTest : public ::testing::TestWithParam<StorageCase> {};

// The sparse-storage model on sparse inputs, the same model on the dense inputs, and the
// dense-storage model on either, step for step: the same predictions, losses and states
// (bit for bit on integer inputs, within rounding otherwise), and the plain reference
// agrees within rounding.
TEST_P(SparseStorageTest, MatchesDenseStorageAndTheReference) {
  const StorageCase& c = GetParam();
  const SparseStream stream = MakeSparseStream(300, c.classification, /*seed=*/7, c.integers);
  absl::StatusOr<std::unique_ptr<Model>> dense = CreateModel(c.config);
  absl::StatusOr<std::unique_ptr<Model>> dense_fed_sparse = CreateModel(c.config);
  absl::StatusOr<std::unique_ptr<Model>> sparse = CreateModel(Sparse(c.config));
  absl::StatusOr<std::unique_ptr<Model>> sparse_fed_dense = CreateModel(Sparse(c.config));
  ASSERT_TRUE(dense.ok() && dense_fed_sparse.ok() && sparse.ok() && sparse_fed_dense.ok())
      << sparse.status();
  testing::ReferenceNorma reference(c.config);
  // Bit for bit on integer inputs; else within the reference's tolerance.
  auto expect_same = [&](double actual, double expected, double magnitude) {
    if (c.integers) return ::testing::AssertionResult(actual == expected)
                           << actual << " != " << expected;
    return Agrees(actual, expected, magnitude);
  };
  for (size_t t = 0; t < stream.y.size(); ++t) {
    const std::vector<double> x = stream.Dense(t);
    const double y = stream.y[t];
    const testing::ReferenceObservation expected = reference.Observe(x, y);
    absl::StatusOr<Observation> a = (*dense)->Observe(x, y);
    absl::StatusOr<Observation> b = (*dense_fed_sparse)->ObserveSparse(stream.x.Row(t), y);
    absl::StatusOr<Observation> s = (*sparse)->ObserveSparse(stream.x.Row(t), y);
    absl::StatusOr<Observation> d = (*sparse_fed_dense)->Observe(x, y);
    ASSERT_TRUE(a.ok() && b.ok() && s.ok() && d.ok()) << s.status() << d.status();
    // Either input form gives the storage's own result exactly.
    ASSERT_EQ(b->prediction, a->prediction) << "step " << t + 1;
    ASSERT_EQ(d->prediction, s->prediction) << "step " << t + 1;
    ASSERT_TRUE(expect_same(s->prediction, a->prediction, expected.magnitude))
        << "step " << t + 1;
    ASSERT_TRUE(Agrees(s->prediction, expected.prediction, expected.magnitude))
        << "step " << t + 1;
  }
  const SparseStream probes = MakeSparseStream(20, c.classification, /*seed=*/8, c.integers);
  for (size_t i = 0; i < probes.y.size(); ++i) {
    const std::vector<double> x = probes.Dense(i);
    const double sparse_prediction = *(*sparse)->PredictSparse(probes.x.Row(i));
    EXPECT_EQ(*(*sparse)->Predict(x), sparse_prediction);
    EXPECT_EQ(*(*dense)->PredictSparse(probes.x.Row(i)), *(*dense)->Predict(x));
    const double magnitude = c.config.averaged ? reference.AveragedMagnitude(x)
                                               : reference.Magnitude(x);
    EXPECT_TRUE(expect_same(sparse_prediction, *(*dense)->Predict(x), magnitude));
    EXPECT_TRUE(expect_same(*(*sparse)->Predict(x, PredictionMode::kCurrent),
                            *(*dense)->Predict(x, PredictionMode::kCurrent),
                            reference.Magnitude(x)));
  }
  EXPECT_EQ((*sparse)->expansion_size(), (*dense)->expansion_size());
  EXPECT_EQ((*sparse)->stats().terms_removed, (*dense)->stats().terms_removed);

  // The states hold the same terms, one sparsely and one densely.
  const ModelState sparse_state = (*sparse)->ExportState();
  const ModelState dense_state = (*dense)->ExportState();
  EXPECT_TRUE(sparse_state.support.empty());
  EXPECT_EQ(sparse_state.added_at, dense_state.added_at);
  EXPECT_EQ(sparse_state.retired_at, dense_state.retired_at);
  if (c.integers) {
    EXPECT_EQ(sparse_state.coefficients, dense_state.coefficients);
    EXPECT_EQ(sparse_state.average_base, dense_state.average_base);
    EXPECT_EQ(sparse_state.retired_sums, dense_state.retired_sums);
    EXPECT_EQ((*sparse)->SquaredNorm(), (*dense)->SquaredNorm());
  }
  ASSERT_EQ(sparse_state.sparse_support.size(), sparse_state.coefficients.size());
  for (size_t i = 0; i < sparse_state.sparse_support.size(); ++i) {
    std::vector<double> row(kSparseDim);
    Densify(sparse_state.sparse_support.Row(i), absl::MakeSpan(row));
    EXPECT_TRUE(
        std::equal(row.begin(), row.end(), dense_state.support.begin() + i * kSparseDim))
        << "term " << i;
  }
  ASSERT_EQ(sparse_state.retired_sparse_support.size(), sparse_state.retired_at.size());
}

// ExportState / ModelFromState continues a sparse-storage model exactly.
TEST_P(SparseStorageTest, RestoredStateContinuesExactly) {
  const StorageCase& c = GetParam();
  const SparseStream stream = MakeSparseStream(200, c.classification, /*seed=*/9);
  absl::StatusOr<std::unique_ptr<Model>> original = CreateModel(Sparse(c.config));
  ASSERT_TRUE(original.ok());
  for (size_t t = 0; t < 120; ++t) {
    ASSERT_TRUE((*original)->ObserveSparse(stream.x.Row(t), stream.y[t]).ok());
  }
  const ModelState state = (*original)->ExportState();
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->ExportState(), state);
  for (size_t t = 120; t < stream.y.size(); ++t) {
    const absl::StatusOr<Observation> a = (*original)->ObserveSparse(stream.x.Row(t), stream.y[t]);
    const absl::StatusOr<Observation> b = (*restored)->ObserveSparse(stream.x.Row(t), stream.y[t]);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->prediction, b->prediction) << "step " << t + 1;
  }
  EXPECT_EQ((*restored)->ExportState(), (*original)->ExportState());
}

INSTANTIATE_TEST_SUITE_P(Configs, SparseStorageTest, ::testing::ValuesIn(StorageCases()),
                         [](const auto& info) { return info.param.name; });

// An independent, plain sparse kernel: both vectors into maps, every coordinate of the
// union visited.
double PlainSparseKernel(const KernelConfig& kernel, SparseVectorView a, SparseVectorView b,
                         size_t dim) {
  std::vector<double> da(dim), db(dim);
  Densify(a, absl::MakeSpan(da));
  Densify(b, absl::MakeSpan(db));
  return testing::ReferenceKernel(kernel, da, db);
}

TEST(SparseKernelTest, EvaluatesAsTheReferenceOnTheDensifiedVectors) {
  const SparseStream stream = MakeSparseStream(40, true, /*seed=*/3);
  std::vector<SparseVectorView> rows;
  std::vector<double> norms;
  for (size_t i = 0; i < stream.y.size(); ++i) {
    rows.push_back(stream.x.Row(i));
    norms.push_back(SquaredNorm(rows.back()));
  }
  for (const KernelType type : {KernelType::kGaussian, KernelType::kLaplacian,
                                KernelType::kLinear, KernelType::kPolynomial,
                                KernelType::kHeat}) {
    const KernelConfig config = {.type = type, .gamma = 0.5, .c = 1.0, .degree = 3, .t = 1.0};
    // The same vectors in a model of dim 300 (a dense lookup array) and of dim 2^20 (the
    // bitmap and the hash table) give the same sweep, bit for bit (but the heat kernel's
    // normaliser depends on dim).
    const Kernel kernel(config, kSparseDim);
    const Kernel wide(config, 1u << 20);
    for (const size_t probe : {0, 5, 17}) {
      const SparseVectorView x = stream.x.Row(probe);
      // Equally aligned outputs: Eigen's vectorised exp peels unaligned leading elements
      // off to a scalar exp, which may differ in the last place.
      alignas(64) double out[64];
      alignas(64) double wide_out[64];
      ASSERT_LE(rows.size(), 64u);
      kernel.EvaluateSparseRows(rows, norms.data(), SparseQuery(x, kSparseDim), out);
      wide.EvaluateSparseRows(rows, norms.data(), SparseQuery(x, 1u << 20), wide_out);
      for (size_t i = 0; i < rows.size(); ++i) {
        if (type != KernelType::kHeat) {
          EXPECT_EQ(out[i], wide_out[i]) << KernelTypeName(type);
        }
      }
      for (size_t i = 0; i < rows.size(); ++i) {
        const double want = PlainSparseKernel(config, rows[i], x, kSparseDim);
        EXPECT_NEAR(out[i], want, 1e-12 * std::max(1.0, std::abs(want)))
            << KernelTypeName(type) << " row " << i << " probe " << probe;
        // One pair at a time, from differences: the dense pair exactly.
        EXPECT_EQ(kernel.EvaluateSparse(rows[i], x),
                  kernel.Evaluate(stream.Dense(i), stream.Dense(probe)))
            << KernelTypeName(type) << " row " << i;
      }
      // A row against itself: squared distance exactly 0.
      if (type == KernelType::kGaussian) {
        EXPECT_EQ(out[probe], 1.0);
      }
    }
  }
}

TEST(SparseQueryTest, LooksUpEveryIndexAndLeavesNothingBehind) {
  for (const size_t dim : {size_t{300}, size_t{1} << 24}) {
    const std::vector<uint32_t> ia = {0, 7, 64, 65, 299}, ib = {1, 63, 64};
    const std::vector<double> va = {1, -2, 3, 4, 5}, vb = {6, 7, 8};
    {
      const SparseQuery a({ia, va}, dim);
      EXPECT_EQ(a.squared_norm(), 1 + 4 + 9 + 16 + 25);
      for (size_t k = 0; k < ia.size(); ++k) EXPECT_EQ(a.value(ia[k]), va[k]) << dim;
      for (const uint32_t j : {1u, 6u, 63u, 66u, 298u}) EXPECT_EQ(a.value(j), 0.0) << dim;
      // A second query while the first is alive (a sweep within a sweep) has its own
      // arrays.
      const SparseQuery b({ib, vb}, dim);
      EXPECT_EQ(b.value(64), 8.0);
      EXPECT_EQ(b.value(0), 0.0);
      EXPECT_EQ(a.value(64), 3.0);
    }
    // The thread's arrays are clean again: nothing of the first query is seen.
    const SparseQuery b({ib, vb}, dim);
    for (const uint32_t j : {0u, 7u, 65u, 299u}) EXPECT_EQ(b.value(j), 0.0) << dim;
    EXPECT_EQ(b.value(63), 7.0);
  }
}

TEST(SparseKernelTest, DisjointAndEmptyVectors) {
  const Kernel gaussian({.type = KernelType::kGaussian, .gamma = 1.0}, 10);
  const std::vector<uint32_t> ia = {1, 4}, ib = {2, 9};
  const std::vector<double> va = {1.0, 2.0}, vb = {3.0, -1.0};
  const SparseVectorView a{ia, va}, b{ib, vb}, empty{};
  EXPECT_EQ(gaussian.EvaluateSparse(a, b), std::exp(-(1.0 + 4.0 + 9.0 + 1.0)));
  EXPECT_EQ(gaussian.EvaluateSparse(a, empty), std::exp(-5.0));
  EXPECT_EQ(gaussian.EvaluateSparse(empty, empty), 1.0);
  const Kernel linear({.type = KernelType::kLinear, .c = 0.5}, 10);
  EXPECT_EQ(linear.EvaluateSparse(a, b), 0.5);
  EXPECT_EQ(linear.EvaluateSparse(a, a), 5.5);
}

TEST(SparseVectorTest, ValidationNamesWhatToFix) {
  const std::vector<uint32_t> sorted = {0, 5, 9}, unsorted = {0, 9, 5}, repeated = {0, 5, 5},
                              outside = {0, 5, 10};
  const std::vector<double> values = {1, 2, 3}, nan = {1, std::nan(""), 3}, short_values = {1};
  EXPECT_TRUE(ValidateSparseVector("x", {sorted, values}, 10, 3).ok());
  EXPECT_THAT(ValidateSparseVector("x", {unsorted, values}, 10, 3).message(),
              HasSubstr("x.indices must strictly increase"));
  EXPECT_THAT(ValidateSparseVector("x", {repeated, values}, 10, 3).message(),
              HasSubstr("strictly increase"));
  EXPECT_THAT(ValidateSparseVector("x", {outside, values}, 10, 3).message(),
              HasSubstr("x.indices[2] = 10 is not below dim 10"));
  EXPECT_THAT(ValidateSparseVector("x", {sorted, nan}, 10, 3).message(),
              HasSubstr("x.values[1] is nan"));
  EXPECT_THAT(ValidateSparseVector("x", {sorted, short_values}, 10, 3).message(),
              HasSubstr("3 indices and 1 values"));
  EXPECT_THAT(ValidateSparseVector("x", {sorted, values}, 10, 2).message(),
              HasSubstr("3 non-zeros, more than the model's 2"));
}

TEST(SparseStorageConfigTest, LimitsAndCombinations) {
  ModelConfig config = Sparse(BaseConfig(KernelType::kGaussian, true), 100);
  config.dim = kMaxSparseDimension;
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.dim = kMaxSparseDimension + 1;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("dim must be in [1, 16777216]"));
  config.dim = kMaxDimension + 1;
  config.sparse.max_nonzeros = 0;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("up to 2^24 with sparse storage"));

  ModelConfig too_many = Sparse(BaseConfig(KernelType::kGaussian, true), kSparseDim + 1);
  EXPECT_THAT(ValidateConfig(too_many).message(), HasSubstr("sparse.max_nonzeros must be in"));
  ModelConfig merge = Sparse(BaseConfig(KernelType::kGaussian, true));
  merge.budget.policy = BudgetPolicy::kMerge;
  EXPECT_THAT(ValidateConfig(merge).message(), HasSubstr("MERGE is not available"));
  ModelConfig features = Sparse(BaseConfig(KernelType::kGaussian, true));
  features.budget = {};
  features.random_features = {.dimension = 100, .seed = 1};
  EXPECT_THAT(ValidateConfig(features).message(), HasSubstr("sparse storage is for kernel"));
  ModelConfig regret = Sparse(BaseConfig(KernelType::kGaussian, true));
  regret.dim = 1u << 20;
  regret.regret_window = 10;
  EXPECT_THAT(ValidateConfig(regret).message(), HasSubstr("regret_window needs dim <="));
}

TEST(SparseStorageModelTest, BadInputsChangeNothing) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateModel(Sparse(BaseConfig(KernelType::kGaussian, true), 3));
  ASSERT_TRUE(model.ok());
  const std::vector<uint32_t> ok_indices = {1, 2}, bad_indices = {2, 1},
                              four = {1, 2, 3, 4};
  const std::vector<double> ok_values = {0.5, -0.5}, four_values = {1, 1, 1, 1};
  ASSERT_TRUE((*model)->ObserveSparse({ok_indices, ok_values}, 1.0).ok());
  const ModelState before = (*model)->ExportState();
  EXPECT_EQ((*model)->ObserveSparse({bad_indices, ok_values}, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->ObserveSparse({four, four_values}, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->ObserveSparse({ok_indices, ok_values}, 0.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<double> dense(kSparseDim);
  for (int j = 0; j < 4; ++j) dense[10 * j] = 1.0;  // four non-zeros, over the three allowed
  const absl::Status too_dense = (*model)->Observe(dense, 1.0).status();
  EXPECT_THAT(too_dense.message(), HasSubstr("4 non-zeros, more than the model's 3"));
  EXPECT_EQ((*model)->PredictSparse({four, four_values}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->ExportState(), before);
}

TEST(SparseStorageModelTest, AcceptsInputsFarBeyondTheDenseDimension) {
  ModelConfig config = Sparse(BaseConfig(KernelType::kGaussian, true), 4);
  config.dim = kMaxSparseDimension;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<uint32_t> a = {7, kMaxSparseDimension - 1}, b = {8, kMaxSparseDimension - 1};
  const std::vector<double> v = {1.0, 1.0};
  ASSERT_TRUE((*model)->ObserveSparse({a, v}, 1.0).ok());
  // k(a, b) = exp(-0.5 * 2): b shares one coordinate with a.
  const double eta = 0.5;  // eta0 / sqrt(1)
  EXPECT_DOUBLE_EQ(*(*model)->PredictSparse({b, v}), eta * std::exp(-1.0));
  // A term costs its two non-zeros, not 2^24 coordinates.
  EXPECT_LT((*model)->MemoryBytes(), size_t{1} << 16);
  EXPECT_LE((*model)->MemoryBytes(), WorstCaseMemoryBytes(config));
  const std::vector<uint32_t> outside = {kMaxSparseDimension};
  const std::vector<double> one = {1.0};
  EXPECT_THAT((*model)->PredictSparse({outside, one}).status().message(),
              HasSubstr("is not below dim 16777216"));
}

TEST(SparseStorageModelTest, MemoryIsBoundedByTheWorstCaseAndFarBelowDense) {
  const ModelConfig dense_config = BaseConfig(KernelType::kGaussian, true);
  const ModelConfig sparse_config = Sparse(dense_config);
  absl::StatusOr<std::unique_ptr<Model>> dense = CreateModel(dense_config);
  absl::StatusOr<std::unique_ptr<Model>> sparse = CreateModel(sparse_config);
  ASSERT_TRUE(dense.ok() && sparse.ok());
  const SparseStream stream = MakeSparseStream(500, true, /*seed=*/5);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    ASSERT_TRUE((*dense)->ObserveSparse(stream.x.Row(t), stream.y[t]).ok());
    ASSERT_TRUE((*sparse)->ObserveSparse(stream.x.Row(t), stream.y[t]).ok());
    ASSERT_LE((*sparse)->MemoryBytes(), WorstCaseMemoryBytes(sparse_config));
  }
  // 40 terms of at most 12 non-zeros against 40 x 300 doubles.
  EXPECT_LT((*sparse)->MemoryBytes() * 5, (*dense)->MemoryBytes());
  EXPECT_LT(WorstCaseMemoryBytes(sparse_config) * 5, WorstCaseMemoryBytes(dense_config));
}

TEST(SparseStorageModelTest, StatesThatDoNotFitAreRejected) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateModel(Sparse(BaseConfig(KernelType::kGaussian, true)));
  ASSERT_TRUE(model.ok());
  const SparseStream stream = MakeSparseStream(10, true, /*seed=*/2);
  for (size_t t = 0; t < stream.y.size(); ++t) {
    ASSERT_TRUE((*model)->ObserveSparse(stream.x.Row(t), stream.y[t]).ok());
  }
  const ModelState good = (*model)->ExportState();
  ASSERT_GE(good.sparse_support.size(), 2u);
  ASSERT_TRUE(ModelFromState(good).ok());

  ModelState missing_row = good;
  missing_row.sparse_support.ends.pop_back();
  missing_row.sparse_support.indices.resize(missing_row.sparse_support.ends.back());
  missing_row.sparse_support.values.resize(missing_row.sparse_support.ends.back());
  EXPECT_THAT(ModelFromState(missing_row).status().message(), HasSubstr("rows for"));

  ModelState unsorted = good;
  const size_t first_row_end = unsorted.sparse_support.ends[0];
  ASSERT_GE(first_row_end, 1u);
  unsorted.sparse_support.indices[0] = kSparseDim;  // outside
  EXPECT_THAT(ModelFromState(unsorted).status().message(), HasSubstr("is not below dim"));

  ModelState bad_ends = good;
  bad_ends.sparse_support.ends[0] = bad_ends.sparse_support.indices.size() + 1;
  EXPECT_EQ(ModelFromState(bad_ends).status().code(), absl::StatusCode::kInvalidArgument);

  ModelState dense_too = good;
  dense_too.support.assign(kSparseDim, 0.0);
  EXPECT_THAT(ModelFromState(dense_too).status().message(), HasSubstr("sparse_support only"));

  ModelState wrong_kind = good;
  wrong_kind.config.sparse.max_nonzeros = 0;
  EXPECT_EQ(ModelFromState(wrong_kind).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SparseExpansionTest, RemovedTermsLeaveTheirArraysForTheNextAndTheBytesAreCounted) {
  Expansion expansion(kMaxSparseDimension, /*track_average=*/false, /*max_terms=*/0,
                      Expansion::Storage::kSparse);
  const std::vector<uint32_t> i3 = {1, 2, 3}, i1 = {5};
  const std::vector<double> v3 = {1, 2, 3}, v1 = {4};
  expansion.Append({i3, v3}, 1.0, 1, 0.0);
  expansion.Append({i1, v1}, 2.0, 2, 0.0);
  const size_t bytes = expansion.MemoryBytes();
  EXPECT_GE(bytes, 4 * (sizeof(uint32_t) + sizeof(double)));
  expansion.Remove(0);  // term 2 moves into slot 0
  EXPECT_EQ(expansion.size(), 1u);
  EXPECT_EQ(expansion.SparseSupport(0).indices.size(), 1u);
  EXPECT_EQ(expansion.SparseSupport(0).values[0], 4.0);
  EXPECT_EQ(expansion.MemoryBytes(), bytes);  // slot 1 keeps the three-entry arrays
  expansion.Append({i3, v3}, 3.0, 3, 0.0);    // and reuses them
  EXPECT_EQ(expansion.MemoryBytes(), bytes);
  const Kernel linear({.type = KernelType::kLinear, .c = 0.0}, kMaxSparseDimension);
  const std::vector<uint32_t> probe_i = {3, 5};
  const std::vector<double> probe_v = {1.0, 1.0};
  EXPECT_EQ(expansion.Dot(linear, SparseVectorView{probe_i, probe_v}), 2.0 * 4 + 3.0 * 3);
}

}  // namespace
}  // namespace okl
