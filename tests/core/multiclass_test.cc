// Multi-class NORMA (core/multiclass_norma.h): its losses against their formulas, its
// steps against the plain reference (tests/core/reference_multiclass.h), its state, its
// merges and what it refuses.
#include "core/multiclass_norma.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/loss.h"
#include "core/merge.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/non_finite.h"
#include "tests/core/reference_multiclass.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

// A stream of 3-dimensional inputs whose class is the quadrant-like region they fall in,
// with some noise, so that the classes overlap and the model keeps learning; the classes
// appear one after another ("c0" first).
struct ClassExample {
  std::vector<double> x;
  std::string label;
};
std::vector<ClassExample> ClassStream(size_t n, size_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.6);
  std::vector<ClassExample> stream;
  for (size_t i = 0; i < n; ++i) {
    // The first examples bring the classes in order; then any class.
    const size_t c = i < classes ? i : rng() % classes;
    const double angle = 2 * M_PI * static_cast<double>(c) / static_cast<double>(classes);
    stream.push_back({.x = {std::cos(angle) + noise(rng), std::sin(angle) + noise(rng),
                            noise(rng)},
                      .label = absl::StrCat("c", c)});
  }
  return stream;
}

ModelConfig ClassConfig(LossType loss, BudgetPolicy policy, uint32_t max_terms,
                        bool pegasos) {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.8};
  config.loss = {.type = loss, .rho = 1.0};
  config.max_classes = 8;
  if (pegasos) {
    config.lambda = 0.01;
    config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 100.0, .theta = 1.0};
  } else {
    config.lambda = 0.01;
    config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.3};
  }
  config.budget = {.max_terms = max_terms, .policy = policy};
  return config;
}

std::unique_ptr<Model> MustCreateClassModel(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<double> ScoresOf(const Model& model, const std::vector<double>& x) {
  std::vector<double> scores(model.classes().size());
  EXPECT_TRUE(model.PredictScores(x, absl::MakeSpan(scores)).ok());
  return scores;
}

// --- the losses -----------------------------------------------------------------------

TEST(ClassLossTest, HingeIsTheMarginAgainstTheBestWrongClass) {
  const Loss loss({.type = LossType::kMulticlassHinge, .rho = 1.0});
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> score(-2.0, 2.0);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t classes = 2 + trial % 5;
    std::vector<double> f(classes);
    for (double& v : f) v = score(rng);
    if (trial % 7 == 0) f[classes - 1] = f[0];  // a tie between two classes
    for (uint32_t y = 0; y < classes; ++y) {
      std::vector<double> gradient(classes, 9.0);
      const ClassLossPoint at = loss.AtClasses(f, y, 1.0, absl::MakeSpan(gradient));
      uint32_t rival = y == 0 ? 1 : 0;
      for (uint32_t c = 0; c < classes; ++c) {
        if (c != y && f[c] > f[rival]) rival = c;  // the first on a tie
      }
      const double expected = std::max(0.0, 1.0 + f[rival] - f[y]);
      EXPECT_EQ(at.rival, rival);
      EXPECT_DOUBLE_EQ(at.value, expected);
      EXPECT_EQ(at.violated, expected > 0);
      for (uint32_t c = 0; c < classes; ++c) {
        const double g = expected > 0 ? (c == rival ? 1.0 : (c == y ? -1.0 : 0.0)) : 0.0;
        EXPECT_EQ(gradient[c], g) << "class " << c;
      }
    }
  }
}

TEST(ClassLossTest, SoftmaxIsTheNegativeLogProbabilityOfTheTrueClass) {
  const Loss loss({.type = LossType::kSoftmax});
  const std::vector<double> f = {0.5, -1.0, 2.0, 0.0};
  double z = 0.0;
  for (double v : f) z += std::exp(v);
  for (uint32_t y = 0; y < f.size(); ++y) {
    std::vector<double> gradient(f.size());
    const ClassLossPoint at = loss.AtClasses(f, y, 0.0, absl::MakeSpan(gradient));
    EXPECT_NEAR(at.value, -std::log(std::exp(f[y]) / z), 1e-14);
    double sum = 0.0;
    for (uint32_t c = 0; c < f.size(); ++c) {
      EXPECT_NEAR(gradient[c], std::exp(f[c]) / z - (c == y ? 1.0 : 0.0), 1e-15);
      sum += gradient[c];
    }
    EXPECT_NEAR(sum, 0.0, 1e-15);
  }
  // Scores far beyond exp's range neither overflow nor lose the answer.
  std::vector<double> gradient(2);
  const ClassLossPoint far = loss.AtClasses({1000.0, 999.0}, 1, 0.0, absl::MakeSpan(gradient));
  EXPECT_NEAR(far.value, std::log1p(std::exp(1.0)), 1e-12);
  EXPECT_NEAR(gradient[0], 1 / (1 + std::exp(-1.0)), 1e-12);
}

TEST(ClassLossTest, OneClassHasNothingToLearn) {
  for (LossType type : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    std::vector<double> gradient = {5.0};
    const ClassLossPoint at =
        Loss({.type = type, .rho = 1.0}).AtClasses({0.3}, 0, 1.0, absl::MakeSpan(gradient));
    EXPECT_EQ(at.value, 0.0);
    EXPECT_EQ(gradient[0], 0.0);
  }
}

// --- the merge ------------------------------------------------------------------------

TEST(ClassMergeTest, OneClassIsTheScalarMerge) {
  for (double k : {0.05, 0.3, 0.7, 0.95}) {
    for (auto [am, an] : {std::pair{0.1, 0.4}, {1.0, 1.0}, {0.2, 3.0}}) {
      const GaussianMerge scalar = MergeGaussianPair(am, an, k);
      const ClassMerge vector = MergeClassPair(am * am, an * an, am * an, k);
      EXPECT_NEAR(vector.loss, scalar.loss, 1e-12 * (am * am + an * an)) << k;
      EXPECT_NEAR(am * vector.k_mz + an * vector.k_nz, scalar.coefficient, 1e-9) << k;
    }
  }
}

TEST(ClassMergeTest, TheBoundIsBelowTheLossAndTheLossBelowRemoval) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t classes = 2 + trial % 6;
    std::vector<double> m(classes), n(classes);
    for (size_t c = 0; c < classes; ++c) {
      // Sparse vectors, as hinge steps make them.
      m[c] = uniform(rng) < 0.5 ? normal(rng) : 0.0;
      n[c] = uniform(rng) < 0.5 ? normal(rng) : 0.0;
    }
    double a = 0, b = 0, c = 0;
    for (size_t i = 0; i < classes; ++i) {
      a += m[i] * m[i];
      b += n[i] * n[i];
      c += m[i] * n[i];
    }
    if (a == 0 || b == 0) continue;
    if (a > b) std::swap(a, b);  // m is the smaller
    const double k = uniform(rng);
    const ClassMerge merge = MergeClassPair(a, b, c, k);
    EXPECT_LE(ClassMergeLossLowerBound(a, b, c, k), merge.loss + 1e-12 * (a + b))
        << "a " << a << " b " << b << " c " << c << " k " << k;
    // h = 0 (z = x_n) loses a (1 - k^2); the search never does worse.
    EXPECT_LE(merge.loss, a * (1 - k * k) + 1e-12 * (a + b));
    // Brute force over h.
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i <= 4000; ++i) {
      const double h = i / 4000.0;
      const double e1 = std::pow(k, (1 - h) * (1 - h)), e2 = std::pow(k, h * h);
      best = std::min(best, a + b + 2 * c * k - (a * e1 * e1 + b * e2 * e2 + 2 * c * e1 * e2));
    }
    EXPECT_LE(merge.loss, best + 1e-9 * (a + b));
  }
}

// --- the model against the reference -------------------------------------------------

struct ClassReferenceCase {
  std::string name;
  ModelConfig config;
};

class MulticlassReferenceTest : public ::testing::TestWithParam<ClassReferenceCase> {};

TEST_P(MulticlassReferenceTest, AgreesWithThePlainReferenceStepByStep) {
  const ModelConfig& config = GetParam().config;
  std::unique_ptr<Model> model = MustCreateClassModel(config);
  ASSERT_NE(model, nullptr);
  testing::ReferenceMulticlass reference(config);
  const std::vector<ClassExample> stream = ClassStream(400, 5, 3);
  for (size_t i = 0; i < stream.size(); ++i) {
    absl::StatusOr<Observation> o = model->ObserveClass(stream[i].x, stream[i].label);
    ASSERT_TRUE(o.ok()) << o.status();
    const testing::ReferenceClassStep r = reference.Observe(stream[i].x, stream[i].label);
    const double tolerance = 1e-7 * (1 + std::abs(r.score) + std::abs(r.loss));
    ASSERT_EQ(o->predicted_class == kNoClass ? -1 : int(o->predicted_class), r.predicted)
        << "step " << i;
    ASSERT_NEAR(o->prediction, r.score, tolerance) << "step " << i;
    ASSERT_NEAR(o->loss, r.loss, tolerance) << "step " << i;
    ASSERT_EQ(model->expansion_size(), reference.size()) << "step " << i;
  }
  EXPECT_EQ(model->classes(), reference.classes());
  for (const ClassExample& probe : ClassStream(20, 5, 99)) {
    const std::vector<double> scores = ScoresOf(*model, probe.x);
    const std::vector<double> expected = reference.Scores(probe.x);
    ASSERT_EQ(scores.size(), expected.size());
    for (size_t c = 0; c < scores.size(); ++c) {
      EXPECT_NEAR(scores[c], expected[c], 1e-7 * (1 + std::abs(expected[c])));
    }
  }
  const ModelStats stats = model->stats();
  EXPECT_EQ(stats.steps, stream.size());
  if (config.budget.max_terms > 0) {
    EXPECT_LE(stats.expansion_size, config.budget.max_terms);
  }
}

std::vector<ClassReferenceCase> ClassReferenceCases() {
  std::vector<ClassReferenceCase> cases;
  for (LossType loss : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    for (bool pegasos : {false, true}) {
      const std::string prefix = absl::StrCat(LossTypeName(loss), pegasos ? "_Pegasos" : "_Constant");
      cases.push_back({prefix + "_Unbudgeted", ClassConfig(loss, BudgetPolicy::kOldest, 0, pegasos)});
      cases.push_back({prefix + "_Oldest", ClassConfig(loss, BudgetPolicy::kOldest, 30, pegasos)});
      cases.push_back({prefix + "_Smallest", ClassConfig(loss, BudgetPolicy::kSmallest, 30, pegasos)});
      cases.push_back({prefix + "_Merge", ClassConfig(loss, BudgetPolicy::kMerge, 30, pegasos)});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, MulticlassReferenceTest, ::testing::ValuesIn(ClassReferenceCases()),
                         [](const auto& info) { return info.param.name; });

// --- the model's behaviour ------------------------------------------------------------

TEST(MulticlassNormaTest, KnowsNoClassBeforeItsFirstExample) {
  std::unique_ptr<Model> model =
      MustCreateClassModel(ClassConfig(LossType::kMulticlassHinge, BudgetPolicy::kMerge, 20, true));
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->classes().empty());
  EXPECT_EQ(*model->Predict({0.1, 0.2, 0.3}), 0.0);
  EXPECT_TRUE(ScoresOf(*model, {0.1, 0.2, 0.3}).empty());
  absl::StatusOr<Observation> first = model->ObserveClass({0.1, 0.2, 0.3}, "only");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->predicted_class, kNoClass);
  EXPECT_EQ(first->prediction, 0.0);
  EXPECT_EQ(model->stats().mistakes, 1u);  // no class predicted: not the true one
  // One class: nothing to tell apart, so nothing is learnt, and it is always predicted.
  absl::StatusOr<Observation> second = model->ObserveClass({0.5, 0.2, 0.3}, "only");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->predicted_class, 0u);
  EXPECT_EQ(second->loss, 0.0);
  EXPECT_EQ(model->expansion_size(), 0u);
  EXPECT_EQ(model->stats().mistakes, 1u);
}

TEST(MulticlassNormaTest, LearnsSeparableClasses) {
  ModelConfig config = ClassConfig(LossType::kMulticlassHinge, BudgetPolicy::kMerge, 40, true);
  std::unique_ptr<Model> model = MustCreateClassModel(config);
  ASSERT_NE(model, nullptr);
  const std::vector<ClassExample> stream = ClassStream(3000, 4, 8);
  uint64_t late_mistakes = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    absl::StatusOr<Observation> o = model->ObserveClass(stream[i].x, stream[i].label);
    ASSERT_TRUE(o.ok());
    if (i >= 2000 && model->classes()[o->predicted_class] != stream[i].label) ++late_mistakes;
  }
  // The classes overlap (noise sd 0.6 around points 1.4 apart): a Bayes error of roughly
  // 15-20%; far better than the 75% of guessing.
  EXPECT_LT(late_mistakes, 300u);
  EXPECT_EQ(model->expansion_size(), 40u);
}

TEST(MulticlassNormaTest, AStateContinuesBitForBit) {
  for (LossType loss : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    for (BudgetPolicy policy :
         {BudgetPolicy::kOldest, BudgetPolicy::kSmallest, BudgetPolicy::kMerge}) {
      const ModelConfig config = ClassConfig(loss, policy, 25, policy == BudgetPolicy::kMerge);
      std::unique_ptr<Model> model = MustCreateClassModel(config);
      ASSERT_NE(model, nullptr);
      const std::vector<ClassExample> stream = ClassStream(600, 6, 21);
      for (size_t i = 0; i < 300; ++i) ASSERT_TRUE(model->ObserveClass(stream[i].x, stream[i].label).ok());
      absl::StatusOr<std::unique_ptr<Model>> copy = ModelFromState(model->ExportState());
      ASSERT_TRUE(copy.ok()) << copy.status();
      EXPECT_EQ((*copy)->ExportState(), model->ExportState());
      for (size_t i = 300; i < stream.size(); ++i) {
        absl::StatusOr<Observation> a = model->ObserveClass(stream[i].x, stream[i].label);
        absl::StatusOr<Observation> b = (*copy)->ObserveClass(stream[i].x, stream[i].label);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->prediction, b->prediction) << i;
        ASSERT_EQ(a->loss, b->loss) << i;
      }
      EXPECT_EQ((*copy)->ExportState(), model->ExportState());
      EXPECT_EQ((*copy)->stats().mistakes, model->stats().mistakes);
    }
  }
}

TEST(MulticlassNormaTest, MemoryStaysWithinItsWorstCase) {
  for (LossType loss : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    ModelConfig config = ClassConfig(loss, BudgetPolicy::kMerge, 30, true);
    config.max_classes = 6;
    std::unique_ptr<Model> model = MustCreateClassModel(config);
    ASSERT_NE(model, nullptr);
    for (const ClassExample& e : ClassStream(500, 6, 4)) {
      ASSERT_TRUE(model->ObserveClass(e.x, e.label).ok());
      ASSERT_LE(model->MemoryBytes(), WorstCaseMemoryBytes(config));
    }
  }
}

TEST(MulticlassNormaTest, BadExamplesAreRefusedAndChangeNothing) {
  ModelConfig config = ClassConfig(LossType::kSoftmax, BudgetPolicy::kMerge, 20, false);
  config.max_classes = 3;
  std::unique_ptr<Model> model = MustCreateClassModel(config);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->ObserveClass({0.0, 0.0, 1.0}, "a").ok());
  ASSERT_TRUE(model->ObserveClass({1.0, 0.0, 0.0}, "b").ok());
  const ModelState before = model->ExportState();
  auto expect_refused = [&](absl::Status status, absl::StatusCode code, const std::string& says) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(says));
    EXPECT_EQ(model->ExportState(), before) << status;
  };
  expect_refused(model->ObserveClass({kNaN, 0.0, 0.0}, "a").status(),
                 absl::StatusCode::kInvalidArgument, "finite");
  expect_refused(model->ObserveClass({1.0, 2.0}, "a").status(),
                 absl::StatusCode::kInvalidArgument, "dim");
  expect_refused(model->ObserveClass({1.0, 2.0, 3.0}, "").status(),
                 absl::StatusCode::kInvalidArgument, "class_label must be 1 to 128 bytes");
  expect_refused(model->ObserveClass({1.0, 2.0, 3.0}, std::string(129, 'x')).status(),
                 absl::StatusCode::kInvalidArgument, "129");
  expect_refused(model->ObserveClass({1.0, 2.0, 3.0}, "\xC3\x28").status(),
                 absl::StatusCode::kInvalidArgument, "UTF-8");
  expect_refused(model->ObserveClass({1.0, 2.0, 3.0}, "\xED\xA0\x80").status(),  // a surrogate
                 absl::StatusCode::kInvalidArgument, "UTF-8");
  expect_refused(model->Observe({1.0, 2.0, 3.0}, 1.0).status(),
                 absl::StatusCode::kInvalidArgument, "class_label");
  // A third class fits; a fourth does not.
  ASSERT_TRUE(model->ObserveClass({0.0, 1.0, 0.0}, "c").ok());
  const ModelState three = model->ExportState();
  const absl::Status full = model->ObserveClass({0.0, 1.0, 1.0}, "d").status();
  EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_classes 3"));
  EXPECT_EQ(model->ExportState(), three);
  // UTF-8 of several bytes is a class like any other.
  config.max_classes = 4;
  std::unique_ptr<Model> named = MustCreateClassModel(config);
  ASSERT_TRUE(named->ObserveClass({0.0, 1.0, 0.0}, "ch\xC3\xA2t \xF0\x9F\x90\x88").ok());
}

TEST(MulticlassNormaTest, ABatchIsValidatedWholeAndRefusedWholePastMaxClasses) {
  ModelConfig config = ClassConfig(LossType::kMulticlassHinge, BudgetPolicy::kOldest, 20, false);
  config.max_classes = 3;
  std::unique_ptr<Model> model = MustCreateClassModel(config);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->ObserveClass({0.0, 0.0, 1.0}, "a").ok());
  const ModelState before = model->ExportState();
  const std::vector<double> xs = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  std::vector<Observation> out;
  // Two new classes fit (a, b, c); three do not (a, b, c, d), though the first would.
  const std::vector<std::string> too_many = {"b", "c", "d", "a"};
  absl::Status status = model->ObserveClassBatch(InputBatch::Dense(xs, 3), too_many, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("no example applied"));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(model->ExportState(), before);
  // A bad example anywhere refuses the whole batch.
  const std::vector<std::string> bad_last = {"b", "a", "c", ""};
  status = model->ObserveClassBatch(InputBatch::Dense(xs, 3), bad_last, &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("example 3"));
  EXPECT_EQ(model->ExportState(), before);
  // A good batch applies in order, as one ObserveClass after another.
  const std::vector<std::string> good = {"b", "a", "c", "b"};
  std::unique_ptr<Model> one_by_one = MustCreateClassModel(config);
  ASSERT_TRUE(one_by_one->ObserveClass({0.0, 0.0, 1.0}, "a").ok());
  ASSERT_TRUE(model->ObserveClassBatch(InputBatch::Dense(xs, 3), good, &out).ok());
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < good.size(); ++i) {
    absl::StatusOr<Observation> o = one_by_one->ObserveClass(
        std::vector<double>(xs.begin() + 3 * i, xs.begin() + 3 * i + 3), good[i]);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(out[i].prediction, o->prediction);
    EXPECT_EQ(out[i].predicted_class, o->predicted_class);
  }
  EXPECT_EQ(model->ExportState(), one_by_one->ExportState());
  EXPECT_EQ(model->classes(), (std::vector<std::string>{"a", "b", "c"}));
}

// The batch path a server takes (Validate with class labels, then ObserveValidated): a
// multi-class example names its class and leaves y 0, any other model's names none, and
// the batch's labels are one per example; each refusal names the example and the field.
TEST(MulticlassNormaTest, AValidatedBatchCarriesItsClassLabels) {
  ModelConfig config = ClassConfig(LossType::kSoftmax, BudgetPolicy::kOldest, 20, false);
  config.max_classes = 3;
  std::unique_ptr<Model> model = MustCreateClassModel(config);
  ASSERT_NE(model, nullptr);
  const std::vector<double> xs = {1, 0, 0, 0, 1, 0};
  const std::vector<double> zeros = {0, 0};
  const std::vector<std::string> labels = {"x", "y"};
  auto refusal = [](const absl::StatusOr<ValidatedBatch>& batch) {
    return batch.ok() ? std::string("accepted") : std::string(batch.status().message());
  };
  EXPECT_THAT(refusal(model->Validate(InputBatch::Dense(xs, 3), zeros)),
              HasSubstr("example 0: a multi-class model"));
  EXPECT_THAT(refusal(model->Validate(InputBatch::Dense(xs, 3), zeros, {"x"})),
              HasSubstr("1 class labels for 2 examples"));
  const std::vector<double> y_set = {0, 1};
  EXPECT_THAT(refusal(model->Validate(InputBatch::Dense(xs, 3), y_set, labels)),
              HasSubstr("example 1: label y is 1; a multi-class example leaves y 0"));
  EXPECT_THAT(refusal(model->Validate(InputBatch::Dense(xs, 3), zeros, {"x", ""})),
              HasSubstr("example 1: a multi-class model"));

  absl::StatusOr<ValidatedBatch> batch = model->Validate(InputBatch::Dense(xs, 3), zeros, labels);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->Subrange(1, 1).class_labels(), absl::MakeConstSpan(labels).subspan(1, 1));
  std::vector<Observation> out;
  ASSERT_TRUE(model->ObserveValidated(*batch, &out).ok());
  std::unique_ptr<Model> by_batch = MustCreateClassModel(config);
  std::vector<Observation> expected;
  ASSERT_TRUE(by_batch->ObserveClassBatch(InputBatch::Dense(xs, 3), labels, &expected).ok());
  EXPECT_EQ(model->ExportState(), by_batch->ExportState());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].predicted_class, expected[1].predicted_class);

  // A binary model refuses a class label where it is given, naming the field.
  ModelConfig binary = config;
  binary.loss = {.type = LossType::kHinge};
  binary.max_classes = 0;
  std::unique_ptr<Model> two = *CreateModel(binary);
  const std::vector<double> signs = {1, -1};
  EXPECT_THAT(refusal(two->Validate(InputBatch::Dense(xs, 3), signs, {"", "y"})),
              HasSubstr("example 1: class_label is for the multi-class losses"));
  EXPECT_TRUE(two->Validate(InputBatch::Dense(xs, 3), signs, {"", ""}).ok());
  // The class label is named even beside a y the model would refuse too (a client that
  // took it for a multi-class model sends y 0).
  EXPECT_THAT(refusal(two->Validate(InputBatch::Dense(xs, 3), zeros, {"cat", "dog"})),
              HasSubstr("example 0: class_label is for the multi-class losses"));
  EXPECT_TRUE(model->CheckClassCapacity(*two->Validate(InputBatch::Dense(xs, 3), signs)).ok());
}

TEST(MulticlassConfigTest, RefusesWhatAMultiClassModelDoesNotOffer) {
  const ModelConfig good = ClassConfig(LossType::kSoftmax, BudgetPolicy::kMerge, 20, false);
  ASSERT_TRUE(ValidateConfig(good).ok());
  struct Case {
    std::string says;
    std::function<void(ModelConfig&)> change;
  };
  const std::vector<Case> cases = {
      {"max_classes must be in [2, 65536]", [](ModelConfig& c) { c.max_classes = 0; }},
      {"max_classes must be in [2, 65536]", [](ModelConfig& c) { c.max_classes = 1; }},
      {"max_classes must be in [2, 65536]", [](ModelConfig& c) { c.max_classes = 65537; }},
      {"averaged", [](ModelConfig& c) { c.averaged = true; }},
      {"offset", [](ModelConfig& c) { c.offset = true; }},
      {"regret_window", [](ModelConfig& c) { c.regret_window = 10; }},
      {"sparse", [](ModelConfig& c) { c.sparse.max_nonzeros = 2; }},
      {"random_features", [](ModelConfig& c) {
         c.random_features.dimension = 16;
         c.budget = {};
       }},
      {"budget.drop_below", [](ModelConfig& c) { c.budget.drop_below = 0.01; }},
      {"loss.multiclass_hinge.nu", [](ModelConfig& c) {
         c.loss = {.type = LossType::kMulticlassHinge, .nu = 0.1};
       }},
  };
  for (const Case& c : cases) {
    ModelConfig config = good;
    c.change(config);
    const absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.says));
  }
  ModelConfig binary = good;
  binary.loss = {.type = LossType::kHinge};
  const absl::Status status = ValidateConfig(binary);
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_classes is for the multi-class"));
  binary.max_classes = 0;
  EXPECT_TRUE(ValidateConfig(binary).ok());
  // A model of a binary loss refuses class labels.
  std::unique_ptr<Model> model = MustCreateClassModel(binary);
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(std::string(model->ObserveClass({0, 0, 0}, "a").status().message()),
              HasSubstr("leave class_label empty"));
}

TEST(MulticlassNormaTest, InconsistentStatesAreRefused) {
  std::unique_ptr<Model> model =
      MustCreateClassModel(ClassConfig(LossType::kMulticlassHinge, BudgetPolicy::kMerge, 20, true));
  ASSERT_NE(model, nullptr);
  for (const ClassExample& e : ClassStream(60, 3, 2)) ASSERT_TRUE(model->ObserveClass(e.x, e.label).ok());
  const ModelState good = model->ExportState();
  ASSERT_TRUE(ModelFromState(good).ok());
  ASSERT_GT(good.added_at.size(), 0u);
  struct Case {
    std::string says;
    std::function<void(ModelState&)> change;
  };
  const std::vector<Case> cases = {
      {"repeats classes[0]", [](ModelState& s) { s.classes[1] = s.classes[0]; }},
      {"coefficients", [](ModelState& s) { s.coefficients.pop_back(); }},
      {"coefficients", [](ModelState& s) { s.coefficients[0] = kInf; }},
      {"no non-zero coefficient",
       [](ModelState& s) { std::fill_n(s.coefficients.begin(), s.classes.size(), 0.0); }},
      {"added_at[0]", [](ModelState& s) { s.added_at[0] = s.steps + 1; }},
      {"scale", [](ModelState& s) { s.scale = 2.0; }},
      {"more than max_classes", [](ModelState& s) {
         s.config.max_classes = 2;
       }},
      {"class_label", [](ModelState& s) { s.classes[0] = ""; }},
  };
  for (const Case& c : cases) {
    ModelState state = good;
    c.change(state);
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(std::string(restored.status().message()), HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace okl
