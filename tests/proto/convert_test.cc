// tests/proto/convert_test.cc

#include "proto/convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/create_model.h"
#include "core/model.h"
#include "core/norma.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/config_text.h"
#include "proto/snapshot_codec.h"

namespace okl {
namespace {

using ::testing::HasSubstr;

ModelConfig BaseConfig() {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kGaussian, .gamma = 0.5};
  config.loss = {.type = LossType::kSquared};
  config.learning_rate = {.schedule = Schedule::kConstant, .eta0 = 0.25};
  config.lambda = 0.01;
  return config;
}

void ExpectConfigRoundTrip(const ModelConfig& config) {
  ASSERT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  absl::StatusOr<ModelConfig> back = FromProto(ToProto(config));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config);
}

TEST(ConvertConfigTest, EveryKernelRoundTrips) {
  std::vector<KernelConfig> kernels;
  kernels.push_back({.type = KernelType::kGaussian, .gamma = 0.3});
  kernels.push_back({.type = KernelType::kLaplacian, .gamma = 1.0 / 3});
  kernels.push_back({.type = KernelType::kLinear, .c = 2.5});
  kernels.push_back(
      {.type = KernelType::kPolynomial, .gamma = 0.7, .c = 1.25, .degree = 5});
  kernels.push_back({.type = KernelType::kHeat, .t = 0.08});
  for (const KernelConfig& kernel : kernels) {
    SCOPED_TRACE(KernelTypeName(kernel.type));
    ModelConfig config = BaseConfig();
    config.kernel = kernel;
    ExpectConfigRoundTrip(config);
  }
}

TEST(ConvertConfigTest, EveryLossRoundTrips) {
  std::vector<LossConfig> losses;
  losses.push_back({.type = LossType::kSquared});
  losses.push_back({.type = LossType::kHinge, .rho = 0.75, .nu = 0.2});
  losses.push_back({.type = LossType::kHinge, .rho = 0.0});
  losses.push_back({.type = LossType::kEpsilonInsensitive, .epsilon = 0.05, .nu = 0.5});
  losses.push_back({.type = LossType::kEpsilonInsensitive, .epsilon = 0.0});
  losses.push_back({.type = LossType::kLogistic});
  losses.push_back({.type = LossType::kHuber, .delta = 0.3});
  losses.push_back({.type = LossType::kNovelty, .rho = -0.5, .nu = 0.1});
  for (const LossConfig& loss : losses) {
    SCOPED_TRACE(LossTypeName(loss.type));
    ModelConfig config = BaseConfig();
    config.loss = loss;
    ExpectConfigRoundTrip(config);
  }
}

TEST(ConvertConfigTest, EveryScheduleBudgetAndFlagRoundTrips) {
  ModelConfig config = BaseConfig();
  config.learning_rate = {.schedule = Schedule::kPower, .eta0 = 0.9, .theta = 0.6};
  config.lambda = 0.125;
  config.offset = true;
  config.budget = {.max_terms = 77, .policy = BudgetPolicy::kSmallest, .drop_below = 1e-9};
  config.averaged = true;
  config.regret_window = 500;
  ExpectConfigRoundTrip(config);

  config.learning_rate = {.schedule = Schedule::kInverseSqrt, .eta0 = 2.0, .theta = 0.5};
  config.budget = {.max_terms = 0, .policy = BudgetPolicy::kOldest, .drop_below = 0.0};
  ExpectConfigRoundTrip(config);
}

TEST(ConvertConfigTest, FullySpecifiedProtoRoundTrips) {
  v1::ModelConfig proto;
  proto.set_dim(4);
  proto.mutable_kernel()->mutable_polynomial()->set_gamma(0.5);
  proto.mutable_kernel()->mutable_polynomial()->set_c(1);
  proto.mutable_kernel()->mutable_polynomial()->set_degree(3);
  proto.mutable_loss()->mutable_hinge()->set_rho(0.5);
  proto.mutable_loss()->mutable_hinge()->set_nu(0.25);
  proto.mutable_learning_rate()->set_eta0(0.1);
  proto.mutable_learning_rate()->set_schedule(v1::LearningRate::POWER);
  proto.mutable_learning_rate()->set_theta(0.75);
  proto.set_lambda(0.5);
  proto.set_offset(true);
  proto.mutable_budget()->set_max_terms(10);
  proto.mutable_budget()->set_policy(v1::Budget::SMALLEST);
  proto.mutable_budget()->set_drop_below(0.001);
  proto.set_averaged(true);
  proto.set_regret_window(64);
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  const v1::ModelConfig back = ToProto(*config);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, proto))
      << back.DebugString() << "\nvs\n"
      << proto.DebugString();
}

TEST(ConvertConfigTest, UnspecifiedScheduleMeansConstantAndUnspecifiedPolicyMeansOldest) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_learning_rate()->set_schedule(v1::LearningRate::SCHEDULE_UNSPECIFIED);
  proto.mutable_budget()->set_policy(v1::Budget::POLICY_UNSPECIFIED);
  proto.mutable_budget()->set_max_terms(5);
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->learning_rate.schedule, Schedule::kConstant);
  EXPECT_EQ(config->budget.policy, BudgetPolicy::kOldest);
}

TEST(ConvertConfigTest, UnsetMarginsAndThetaTakeCoreDefaultsButExplicitZeroStays) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_loss()->mutable_hinge();
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss.rho, 1.0);

  proto.mutable_loss()->mutable_hinge()->set_rho(0.0);
  config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss.rho, 0.0);

  proto.mutable_loss()->mutable_novelty();
  config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss.rho, 1.0);

  proto.mutable_loss()->mutable_epsilon_insensitive();
  config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss.epsilon, 0.1);

  proto.mutable_learning_rate()->set_schedule(v1::LearningRate::POWER);
  proto.mutable_learning_rate()->clear_theta();
  config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->learning_rate.theta, 0.5);
}

void ExpectInvalid(const v1::ModelConfig& proto, const std::string& needle) {
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(needle));
}

TEST(ConvertConfigTest, RejectsUnsetKernel) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.clear_kernel();
  ExpectInvalid(proto, "kernel");
}

TEST(ConvertConfigTest, RejectsUnsetLoss) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_loss()->clear_kind();
  ExpectInvalid(proto, "loss");
}

TEST(ConvertConfigTest, RejectsUnknownScheduleNumber) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_learning_rate()->set_schedule(static_cast<v1::LearningRate::Schedule>(7));
  ExpectInvalid(proto, "learning_rate.schedule 7");
}

TEST(ConvertConfigTest, RejectsUnknownPolicyNumberNamingTheKnownOnes) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_budget()->set_policy(static_cast<v1::Budget::Policy>(9));
  ExpectInvalid(proto, "budget.policy 9 is not one of OLDEST (1), SMALLEST (2), MERGE (3)");
}

TEST(ConvertConfigTest, MergePolicyRoundTripsBothWays) {
  ModelConfig config = BaseConfig();  // gaussian: the kernel MERGE needs
  config.budget = {.max_terms = 20, .policy = BudgetPolicy::kMerge};
  ExpectConfigRoundTrip(config);
  EXPECT_EQ(ToProto(config).budget().policy(), v1::Budget::MERGE);

  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_budget()->set_max_terms(20);
  proto.mutable_budget()->set_policy(v1::Budget::MERGE);
  absl::StatusOr<ModelConfig> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->budget.policy, BudgetPolicy::kMerge);
}

TEST(ConvertConfigTest, RejectsMergeWithAKernelOtherThanGaussian) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_kernel()->mutable_laplacian()->set_gamma(0.5);
  proto.mutable_budget()->set_max_terms(20);
  proto.mutable_budget()->set_policy(v1::Budget::MERGE);
  ExpectInvalid(proto, "MERGE");
}

TEST(ConvertConfigTest, RunsValidateConfig) {
  v1::ModelConfig proto = ToProto(BaseConfig());
  proto.mutable_kernel()->mutable_gaussian()->set_gamma(0);
  ExpectInvalid(proto, "kernel.gaussian.gamma");

  proto = ToProto(BaseConfig());
  proto.set_dim(0);
  ExpectInvalid(proto, "dim");
}

// A state with every field set to a distinct value that is not a short decimal.
ModelState SampleState() {
  ModelState state;
  state.config = BaseConfig();
  state.config.dim = 2;
  state.config.averaged = true;
  state.config.budget.max_terms = 8;
  state.support = {0.1, -1.0 / 3, 2.0 / 7, 1e-300};
  state.coefficients = {0.625, -1.0 / 9};
  state.added_at = {3, 18446744073709551615u};
  state.average_base = {1.0 / 11, -2.5};
  state.average_mark = {0.0, 4.0 / 13};
  state.scale = 0.004 / 3;
  state.offset = -0.1;
  state.margin = 0.2;
  state.steps = 123456789012345;
  state.average_sum = 17.0 / 19;
  state.average_offset_sum = -1.0 / 23;
  state.cumulative_loss = 1234.5678;
  state.mistakes = 42;
  state.terms_removed = 7;
  state.config.regret_window = 3;
  state.regret_window = {.xs = {0.5, -1.0 / 7, 3.0 / 17, 1e-200},
                         .ys = {2.0 / 3, -0.25},
                         .online_losses = {1.0 / 29, 0.0},
                         .last_step = state.steps};
  return state;
}

TEST(ConvertSnapshotTest, StateRoundTripsThroughBytesExactly) {
  const ModelState state = SampleState();
  const v1::ModelSnapshot snapshot = ToProto(state);
  EXPECT_EQ(snapshot.format_version(), kExpansionSnapshotFormatVersion);
  std::string bytes;
  ASSERT_TRUE(snapshot.SerializeToString(&bytes));
  v1::ModelSnapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  absl::StatusOr<ModelState> back = FromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, state);
  // operator== on doubles equates -0 and 0; the bits must match too.
  EXPECT_EQ(std::bit_cast<uint64_t>(back->scale), std::bit_cast<uint64_t>(state.scale));
}

TEST(ConvertSnapshotTest, RestoredModelContinuesBitIdentically) {
  ModelConfig config = BaseConfig();
  config.dim = 2;
  config.offset = true;
  config.averaged = true;
  config.budget = {.max_terms = 4, .policy = BudgetPolicy::kSmallest};
  config.regret_window = 6;
  absl::StatusOr<std::unique_ptr<NormaModel>> model = NormaModel::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int t = 0; t < 10; ++t) {
    const double x[2] = {0.1 * t, 1.0 - 0.07 * t * t};
    ASSERT_TRUE((*model)->Observe(x, 0.3 * t - 1).ok());
  }
  std::string bytes;
  ASSERT_TRUE(ToProto((*model)->ExportState()).SerializeToString(&bytes));
  v1::ModelSnapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  absl::StatusOr<ModelState> state = FromProto(parsed);
  ASSERT_TRUE(state.ok()) << state.status();
  absl::StatusOr<std::unique_ptr<NormaModel>> restored = NormaModel::FromState(*state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (int t = 10; t < 20; ++t) {
    const double x[2] = {0.05 * t, -0.5 + 0.01 * t};
    absl::StatusOr<Observation> a = (*model)->Observe(x, 0.2 * t);
    absl::StatusOr<Observation> b = (*restored)->Observe(x, 0.2 * t);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(std::bit_cast<uint64_t>(a->prediction),
              std::bit_cast<uint64_t>(b->prediction))
        << "step " << t;
  }
  EXPECT_EQ((*model)->ExportState(), (*restored)->ExportState());
}

TEST(ConvertConfigTest, SparseStorageRoundTripsAndIsAbsentWhenDense) {
  ModelConfig config = BaseConfig();
  config.dim = 100000;
  config.sparse.max_nonzeros = 50;
  absl::StatusOr<ModelConfig> back = FromProto(ToProto(config));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config);
  EXPECT_FALSE(ToProto(BaseConfig()).has_sparse());
  v1::ModelConfig merge = ToProto(config);
  merge.mutable_budget()->set_policy(v1::Budget::MERGE);
  EXPECT_THAT(FromProto(merge).status().message(), HasSubstr("not available with sparse"));
}

void ExpectSnapshotInvalid(const v1::ModelSnapshot& snapshot, const std::string& needle) {
  absl::StatusOr<ModelState> state = FromProto(snapshot);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr(needle));
}

TEST(ConvertSnapshotTest, RejectsUnknownFormatVersions) {
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.set_format_version(0);
  ExpectSnapshotInvalid(snapshot, "format_version 0");
  snapshot.set_format_version(kSnapshotFormatVersion + 1);
  ExpectSnapshotInvalid(snapshot, absl::StrCat("format_version ", kSnapshotFormatVersion + 1));
}

// Version 1 (before averaging windows) is still read: its averaged state has no
// previous-block sums and no retired terms, and it continues as one block from step 0.
TEST(ConvertSnapshotTest, ReadsFormatVersion1) {
  ModelConfig config = BaseConfig();
  config.averaged = true;
  config.budget.max_terms = 5;
  auto model = NormaModel::Create(config);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<Observation> out;
  std::vector<double> x(config.dim);
  for (int t = 0; t < 4; ++t) {
    for (size_t j = 0; j < x.size(); ++j) x[j] = 0.1 * t - 0.2 * j;
    ASSERT_TRUE((*model)->ObserveBatch(x, {std::sin(t)}, &out).ok());
  }
  v1::ModelSnapshot snapshot = ToProto((*model)->ExportState());
  snapshot.set_format_version(1);
  snapshot.clear_average_previous();  // a version-1 writer had none (all zero here)
  absl::StatusOr<ModelState> state = FromProto(snapshot);
  ASSERT_TRUE(state.ok()) << state.status();
  auto restored = NormaModel::FromState(*state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  const std::vector<double> probe(config.dim, 0.3);
  for (const PredictionMode mode : {PredictionMode::kCurrent, PredictionMode::kAveraged}) {
    EXPECT_EQ(*(*restored)->Predict(probe, mode), *(*model)->Predict(probe, mode));
  }
}

TEST(ConvertSnapshotTest, RejectsMissingConfig) {
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.clear_config();
  ExpectSnapshotInvalid(snapshot, "no config");
}

TEST(ConvertSnapshotTest, RejectsInvalidConfig) {
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.mutable_config()->mutable_kernel()->Clear();
  ExpectSnapshotInvalid(snapshot, "snapshot config: kernel");
}

TEST(ConvertSnapshotTest, RejectsUnsetScale) {
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.clear_scale();
  ExpectSnapshotInvalid(snapshot, "scale");
}

TEST(ConvertStatsTest, CopiesEveryFieldAndZeroForAnAbsentBound) {
  ModelStats stats;
  stats.steps = 10;
  stats.expansion_size = 4;
  stats.cumulative_loss = 2.5;
  stats.mistakes = 3;
  v1::ModelStats proto = ToProto(stats, LossType::kSquared);
  EXPECT_EQ(proto.steps(), 10u);
  EXPECT_EQ(proto.expansion_size(), 4u);
  EXPECT_EQ(proto.cumulative_loss(), 2.5);
  EXPECT_EQ(proto.mistakes(), 3u);
  EXPECT_EQ(proto.truncation_error_bound(), 0.0);
  EXPECT_EQ(proto.regret(), 0.0);
  EXPECT_EQ(proto.regret_examples(), 0u);
  EXPECT_EQ(proto.regret_at_step(), 0u);
  EXPECT_EQ(proto.regret_duality_gap(), 0.0);
  stats.truncation_error_bound = 0.75;
  EXPECT_EQ(ToProto(stats, LossType::kSquared).truncation_error_bound(), 0.75);
  stats.regret =
      RegretResult{.regret = -0.375, .duality_gap = 1e-7, .window = 7, .last_step = 9};
  proto = ToProto(stats, LossType::kSquared);
  EXPECT_EQ(proto.regret(), -0.375);
  EXPECT_EQ(proto.regret_examples(), 7u);
  EXPECT_EQ(proto.regret_at_step(), 9u);
  EXPECT_EQ(proto.regret_duality_gap(), 1e-7);
}

// Statistics with every field the wire carries set to a distinct value that is not a
// short decimal, as a model of `loss` reports them (the margin is 0 for a loss without
// one). The regret's online and comparator losses stay 0: the wire does not carry them.
ModelStats SampleStats(LossType loss, bool with_bound_and_regret) {
  ModelStats stats;
  stats.steps = 1234567;
  stats.expansion_size = 321;
  stats.cumulative_loss = 98.0 / 7;
  stats.mistakes = 4321;
  stats.terms_removed = 1234246;
  stats.offset = -1.0 / 3;
  const bool has_margin = loss == LossType::kHinge || loss == LossType::kNovelty ||
                          loss == LossType::kEpsilonInsensitive;
  stats.margin = has_margin ? 2.0 / 3 : 0.0;
  if (IsMulticlassLoss(loss)) stats.classes = {"b", "a", "\xC3\xA9t\xC3\xA9"};
  if (with_bound_and_regret) {
    stats.truncation_error_bound = 1.0 / 11;
    stats.regret = RegretResult{.regret = -5.0 / 13,
                                .duality_gap = 1.0 / 1024 / 3,
                                .window = 4096,
                                .last_step = 1234500};
  }
  return stats;
}

void ExpectSameStats(const ModelStats& actual, const ModelStats& expected) {
  EXPECT_EQ(actual.steps, expected.steps);
  EXPECT_EQ(actual.expansion_size, expected.expansion_size);
  EXPECT_EQ(actual.cumulative_loss, expected.cumulative_loss);
  EXPECT_EQ(actual.mistakes, expected.mistakes);
  EXPECT_EQ(actual.terms_removed, expected.terms_removed);
  EXPECT_EQ(actual.classes, expected.classes);
  EXPECT_EQ(actual.offset, expected.offset);
  EXPECT_EQ(actual.margin, expected.margin);
  EXPECT_EQ(actual.truncation_error_bound, expected.truncation_error_bound);
  ASSERT_EQ(actual.regret.has_value(), expected.regret.has_value());
  if (expected.regret.has_value()) {
    EXPECT_EQ(actual.regret->regret, expected.regret->regret);
    EXPECT_EQ(actual.regret->online_loss, expected.regret->online_loss);
    EXPECT_EQ(actual.regret->comparator_loss, expected.regret->comparator_loss);
    EXPECT_EQ(actual.regret->duality_gap, expected.regret->duality_gap);
    EXPECT_EQ(actual.regret->window, expected.regret->window);
    EXPECT_EQ(actual.regret->last_step, expected.regret->last_step);
  }
}

TEST(ConvertStatsTest, RoundTripsForEveryKindOfMargin) {
  for (const LossType loss : {LossType::kHinge, LossType::kNovelty,
                              LossType::kEpsilonInsensitive, LossType::kSquared,
                              LossType::kMulticlassHinge}) {
    for (const bool with_bound_and_regret : {false, true}) {
      SCOPED_TRACE(absl::StrCat(LossTypeName(loss),
                                with_bound_and_regret ? " with" : " without",
                                " bound and regret"));
      const ModelStats stats = SampleStats(loss, with_bound_and_regret);
      ExpectSameStats(FromProto(ToProto(stats, loss), loss), stats);
    }
  }
}

// Every value the wire can carry has a name in core's tables, and the same one: a
// kernel's or loss's oneof field, a schedule's, policy's or candidate status's enum
// value (lower case) is the core name of what it converts to, and each table has as
// many entries as the wire has values.
TEST(ConvertConfigTest, WireValuesAndCoreNameTablesAgree) {
  const google::protobuf::OneofDescriptor* kernels =
      v1::KernelConfig::descriptor()->FindOneofByName("kind");
  ASSERT_NE(kernels, nullptr);
  EXPECT_EQ(static_cast<size_t>(kernels->field_count()), kKernelTypeNames.size());
  const google::protobuf::OneofDescriptor* losses =
      v1::LossConfig::descriptor()->FindOneofByName("kind");
  ASSERT_NE(losses, nullptr);
  EXPECT_EQ(static_cast<size_t>(losses->field_count()), kLossTypeNames.size());
  EXPECT_EQ(static_cast<size_t>(v1::LearningRate::Schedule_descriptor()->value_count() - 1),
            kScheduleNames.size());
  EXPECT_EQ(static_cast<size_t>(v1::Budget::Policy_descriptor()->value_count() - 1),
            kBudgetPolicyNames.size());
  EXPECT_EQ(static_cast<size_t>(v1::CandidateStatus_descriptor()->value_count() - 1),
            kCandidateStatusNames.size());
  // PREDICTION_UNSPECIFIED is core's "default" (resolved by the loss), so the table names
  // every wire value.
  EXPECT_EQ(static_cast<size_t>(v1::Select::Prediction_descriptor()->value_count()),
            kSelectPredictionNames.size());
  ModelConfig config;
  config.dim = 1;
  config.budget.max_terms = 10;
  // The name of the field set in `message`'s oneof, "" if none is.
  const auto set_field = [](const google::protobuf::Message& message,
                            const google::protobuf::OneofDescriptor* oneof) -> std::string {
    const google::protobuf::FieldDescriptor* field =
        message.GetReflection()->GetOneofFieldDescriptor(message, oneof);
    return field == nullptr ? "" : field->name();
  };
  for (const auto& [kernel, name] : kKernelTypeNames) {
    config.kernel.type = kernel;
    EXPECT_EQ(set_field(ToProto(config).kernel(), kernels), name);
  }
  for (const auto& [loss, name] : kLossTypeNames) {
    config.loss.type = loss;
    EXPECT_EQ(set_field(ToProto(config).loss(), losses), name);
  }
  for (const auto& [schedule, name] : kScheduleNames) {
    config.learning_rate.schedule = schedule;
    EXPECT_EQ(absl::AsciiStrToLower(
                  v1::LearningRate::Schedule_Name(ToProto(config).learning_rate().schedule())),
              name);
  }
  for (const auto& [policy, name] : kBudgetPolicyNames) {
    config.budget.policy = policy;
    EXPECT_EQ(absl::AsciiStrToLower(v1::Budget::Policy_Name(ToProto(config).budget().policy())),
              name);
  }
  ModelConfig selection;
  selection.dim = 1;
  selection.select.enabled = true;
  for (const auto& [prediction, name] : kSelectPredictionNames) {
    selection.select.prediction = prediction;
    const v1::Select::Prediction wire = ToProto(selection).select().prediction();
    EXPECT_EQ(prediction == SelectPrediction::kDefault
                  ? "default"
                  : absl::AsciiStrToLower(v1::Select::Prediction_Name(wire)),
              name);
    EXPECT_EQ(prediction == SelectPrediction::kDefault,
              wire == v1::Select::PREDICTION_UNSPECIFIED);
  }
  for (const auto& [status, name] : kCandidateStatusNames) {
    ModelStats stats;
    CandidateStats candidate;
    candidate.status = status;
    stats.candidates.push_back(candidate);
    const v1::ModelStats proto = ToProto(stats, LossType::kSquared);
    ASSERT_EQ(proto.candidates_size(), 1);
    EXPECT_EQ(absl::AsciiStrToLower(v1::CandidateStatus_Name(proto.candidates(0).status())),
              name);
  }
}

TEST(ConvertStatsTest, TheMarginIsRhoOrEpsilonAsTheLossNamesIt) {
  ModelStats stats;
  stats.margin = 0.625;
  stats.offset = 0.25;
  stats.terms_removed = 17;

  v1::ModelStats hinge = ToProto(stats, LossType::kHinge);
  EXPECT_EQ(hinge.rho(), 0.625);
  EXPECT_EQ(hinge.epsilon(), 0.0);
  v1::ModelStats novelty = ToProto(stats, LossType::kNovelty);
  EXPECT_EQ(novelty.rho(), 0.625);
  EXPECT_EQ(novelty.epsilon(), 0.0);
  v1::ModelStats tube = ToProto(stats, LossType::kEpsilonInsensitive);
  EXPECT_EQ(tube.rho(), 0.0);
  EXPECT_EQ(tube.epsilon(), 0.625);
  for (const LossType loss : {LossType::kSquared, LossType::kLogistic, LossType::kHuber}) {
    SCOPED_TRACE(LossTypeName(loss));
    const v1::ModelStats proto = ToProto(stats, loss);
    EXPECT_EQ(proto.rho(), 0.0);
    EXPECT_EQ(proto.epsilon(), 0.0);
    EXPECT_EQ(proto.offset(), 0.25);
    EXPECT_EQ(proto.terms_removed(), 17u);
  }

  // Reading back, the field the loss does not use is ignored.
  hinge.set_epsilon(9);
  EXPECT_EQ(FromProto(hinge, LossType::kHinge).margin, 0.625);
  tube.set_rho(9);
  EXPECT_EQ(FromProto(tube, LossType::kEpsilonInsensitive).margin, 0.625);
  EXPECT_EQ(FromProto(tube, LossType::kSquared).margin, 0.0);
}

TEST(ConvertStatsTest, NoRegretUntilTheFirstComputation) {
  v1::ModelStats proto;
  proto.set_steps(5);
  proto.set_regret_examples(3);  // inconsistent without regret_at_step: still no regret
  EXPECT_FALSE(FromProto(proto, LossType::kSquared).regret.has_value());
  EXPECT_FALSE(FromProto(proto, LossType::kSquared).truncation_error_bound.has_value());
}

TEST(ConvertModelInfoTest, CarriesRefConfigAndStats) {
  ModelSummary summary;
  summary.tenant = "acme";
  summary.model = "churn";
  summary.config = BaseConfig();
  summary.stats.steps = 12;
  summary.stats.expansion_size = 5;
  summary.stats.truncation_error_bound = 0.125;
  const v1::ModelInfo info = ToProto(summary);
  EXPECT_EQ(info.ref().tenant(), "acme");
  EXPECT_EQ(info.ref().model(), "churn");
  absl::StatusOr<ModelConfig> config = FromProto(info.config());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, summary.config);
  EXPECT_EQ(info.stats().steps(), 12u);
  EXPECT_EQ(info.stats().expansion_size(), 5u);
  EXPECT_EQ(info.stats().truncation_error_bound(), 0.125);
  EXPECT_EQ(info.stats().regret(), 0.0);
}

TEST(ConvertModelInfoTest, RoundTripsTheSummaryButItsMemoryBytes) {
  ModelSummary summary;
  summary.tenant = "acme";
  summary.model = "door-sensor";
  summary.config = BaseConfig();
  summary.config.loss = {.type = LossType::kNovelty, .rho = 0.5, .nu = 0.1};
  summary.stats = SampleStats(LossType::kNovelty, /*with_bound_and_regret=*/true);
  summary.memory_bytes = 4096;  // not on the wire
  absl::StatusOr<ModelSummary> back = FromProto(ToProto(summary));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tenant, "acme");
  EXPECT_EQ(back->model, "door-sensor");
  EXPECT_EQ(back->config, summary.config);
  ExpectSameStats(back->stats, summary.stats);
  EXPECT_EQ(back->memory_bytes, 0u);
}

TEST(ConvertModelInfoTest, RejectsAnInvalidConfigNamingIt) {
  ModelSummary summary;
  summary.tenant = "acme";
  summary.model = "m";
  summary.config = BaseConfig();
  v1::ModelInfo info = ToProto(summary);
  info.mutable_config()->mutable_budget()->set_policy(static_cast<v1::Budget::Policy>(4));
  absl::StatusOr<ModelSummary> back = FromProto(info);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.status().message(), HasSubstr("config: budget.policy 4"));
}

TEST(ConvertModelRefTest, CarriesBothNames) {
  const v1::ModelRef ref = ModelRefToProto("acme", "churn");
  EXPECT_EQ(ref.tenant(), "acme");
  EXPECT_EQ(ref.model(), "churn");
}

TEST(Fnv1a64Test, MatchesPublishedValues) {
  // From the reference test vectors of FNV's authors.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325u);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cu);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8u);
}

std::string EncodeOrDie(const ModelState& state) {
  absl::StatusOr<std::string> bytes = EncodeSnapshot(state);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

TEST(SnapshotBytesTest, RoundTripsExactlyAndEndsInTheChecksumField) {
  const ModelState state = SampleState();
  const std::string bytes = EncodeOrDie(state);
  ASSERT_GT(bytes.size(), 10u);
  const std::string body = bytes.substr(0, bytes.size() - 10);
  EXPECT_EQ(static_cast<unsigned char>(bytes[bytes.size() - 10]), 0xA1);
  EXPECT_EQ(static_cast<unsigned char>(bytes[bytes.size() - 9]), 0x06);
  // The trailer is an ordinary protobuf field: a plain parse sees the checksum.
  v1::ModelSnapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.checksum(), Fnv1a64(body));

  absl::StatusOr<ModelState> back = DecodeSnapshot(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, state);
  EXPECT_EQ(std::bit_cast<uint64_t>(back->scale), std::bit_cast<uint64_t>(state.scale));
}

TEST(SnapshotBytesTest, EveryFlippedBitIsDataLoss) {
  const std::string bytes = EncodeOrDie(SampleState());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(corrupt[i] ^ (1 << bit));
      absl::StatusOr<ModelState> state = DecodeSnapshot(corrupt);
      ASSERT_FALSE(state.ok()) << "byte " << i << " bit " << bit;
      EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss)
          << "byte " << i << " bit " << bit << ": " << state.status();
    }
  }
}

TEST(SnapshotBytesTest, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeOrDie(SampleState());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<ModelState> state = DecodeSnapshot(absl::string_view(bytes).substr(0, n));
    ASSERT_FALSE(state.ok()) << n << " bytes";
    EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss) << n << " bytes";
  }
  // So are bytes appended after the checksum.
  absl::StatusOr<ModelState> state = DecodeSnapshot(bytes + "x");
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
}

// `body` with a correct checksum field appended, as EncodeSnapshot would.
std::string WithChecksum(std::string body) {
  const uint64_t checksum = Fnv1a64(body);
  body.push_back(static_cast<char>(0xA1));
  body.push_back(static_cast<char>(0x06));
  for (int i = 0; i < 8; ++i) body.push_back(static_cast<char>(checksum >> (8 * i)));
  return body;
}

TEST(SnapshotBytesTest, WellFormedButInvalidContentIsDataLoss) {
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.set_format_version(kSnapshotFormatVersion + 1);
  absl::StatusOr<ModelState> state = DecodeSnapshot(WithChecksum(snapshot.SerializeAsString()));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(),
              HasSubstr(absl::StrCat("format_version ", kSnapshotFormatVersion + 1)));

  // Bytes that are not a protobuf message at all (a truncated varint).
  state = DecodeSnapshot(WithChecksum("\x08\xff"));
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(state.status().message(), HasSubstr("do not parse"));
}

TEST(CanonicalConfigBytesTest, EqualExactlyForTheSameConfiguration) {
  ModelConfig a = BaseConfig();
  ModelConfig b = BaseConfig();
  EXPECT_EQ(CanonicalConfigBytes(a), CanonicalConfigBytes(b));
  b.lambda = 0.02;
  EXPECT_NE(CanonicalConfigBytes(a), CanonicalConfigBytes(b));
  // A field the kernel does not read is not part of the configuration.
  b = BaseConfig();
  b.kernel.c = 5;
  EXPECT_EQ(CanonicalConfigBytes(a), CanonicalConfigBytes(b));
  // A NaN (which == calls unequal to itself) still equals itself here.
  a.learning_rate.theta = std::nan("");
  EXPECT_EQ(CanonicalConfigBytes(a), CanonicalConfigBytes(a));
}

// A sparse-storage model (config.sparse) round-trips through the snapshot bytes with its
// terms and retired terms as rows of non-zeros, and continues bit-identically.
// The model `state` becomes through its snapshot bytes: they stay within the config's
// MaxSnapshotBytes and decode to `state` exactly. Null (and a failure) otherwise.
std::unique_ptr<Model> ThroughSnapshotBytes(const ModelState& state) {
  const std::string bytes = EncodeOrDie(state);
  EXPECT_LE(bytes.size(), MaxSnapshotBytes(state.config));
  absl::StatusOr<ModelState> back = DecodeSnapshot(bytes);
  if (!back.ok()) {
    ADD_FAILURE() << back.status();
    return nullptr;
  }
  EXPECT_EQ(*back, state);
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(*back);
  if (!restored.ok()) {
    ADD_FAILURE() << restored.status();
    return nullptr;
  }
  return *std::move(restored);
}

TEST(ConvertSnapshotTest, SparseStorageRoundTripsAndContinuesBitIdentically) {
  ModelConfig config = BaseConfig();
  config.dim = 1u << 20;
  config.sparse.max_nonzeros = 3;
  config.averaged = true;
  config.averaging_window = 4;
  config.budget = {.max_terms = 5, .policy = BudgetPolicy::kOldest};
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  auto input = [](int t, std::vector<uint32_t>* indices, std::vector<double>* values) {
    *indices = {static_cast<uint32_t>(t % 7), static_cast<uint32_t>(1000 + 37 * t),
                (1u << 20) - 1 - static_cast<uint32_t>(t % 3)};
    *values = {0.1 * t, -0.5, 0.25 * (t % 4)};
  };
  std::vector<uint32_t> indices;
  std::vector<double> values;
  for (int t = 0; t < 14; ++t) {
    input(t, &indices, &values);
    ASSERT_TRUE((*model)->ObserveSparse({indices, values}, 0.3 * t - 1).ok());
  }
  const ModelState state = (*model)->ExportState();
  ASSERT_EQ(state.sparse_support.size(), 5u);
  ASSERT_FALSE(state.retired_at.empty());
  EXPECT_EQ(state.retired_sparse_support.size(), state.retired_at.size());
  const v1::ModelSnapshot snapshot = ToProto(state);
  EXPECT_EQ(snapshot.config().sparse().max_nonzeros(), 3u);
  EXPECT_EQ(snapshot.support_size(), 0);
  EXPECT_EQ(snapshot.sparse_support_ends_size(), 5);
  std::unique_ptr<Model> restored = ThroughSnapshotBytes(state);
  ASSERT_NE(restored, nullptr);
  for (int t = 14; t < 24; ++t) {
    input(t, &indices, &values);
    absl::StatusOr<Observation> a = (*model)->ObserveSparse({indices, values}, 0.2 * t);
    absl::StatusOr<Observation> b = restored->ObserveSparse({indices, values}, 0.2 * t);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(std::bit_cast<uint64_t>(a->prediction), std::bit_cast<uint64_t>(b->prediction))
        << "step " << t;
  }
  EXPECT_EQ((*model)->ExportState(), restored->ExportState());
}

// A multi-class model's config: dim 2, a Gaussian kernel, a MERGE budget of 5 terms and up
// to 4 classes.
ModelConfig ClassConfig(LossType loss) {
  ModelConfig config = BaseConfig();
  config.dim = 2;
  config.loss = {.type = loss};
  if (loss == LossType::kMulticlassHinge) config.loss.rho = 0.5;  // softmax has no margin
  config.budget = {.max_terms = 5, .policy = BudgetPolicy::kMerge};
  config.max_classes = 4;
  return config;
}

TEST(ConvertConfigTest, MultiClassConfigsRoundTrip) {
  for (const LossType loss : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    SCOPED_TRACE(LossTypeName(loss));
    const ModelConfig config = ClassConfig(loss);
    ExpectConfigRoundTrip(config);
    EXPECT_EQ(ToProto(config).max_classes(), 4u);
  }
  // Unset, the multi-class hinge's margin is 1, as the binary hinge's.
  v1::ModelConfig proto = ToProto(ClassConfig(LossType::kMulticlassHinge));
  proto.mutable_loss()->mutable_multiclass_hinge()->clear_rho();
  absl::StatusOr<ModelConfig> config = FromProto(proto);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->loss.rho, 1.0);
}

TEST(ConvertConfigTest, AMultiClassLossNeedsMaxClassesAndNoOtherLossTakesIt) {
  v1::ModelConfig proto = ToProto(ClassConfig(LossType::kSoftmax));
  proto.set_max_classes(0);
  absl::Status status = FromProto(proto).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_classes must be in [2, "));
  proto.set_max_classes(1);
  EXPECT_EQ(FromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ModelConfig binary = ToProto(BaseConfig());
  binary.set_max_classes(3);
  status = FromProto(binary).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_classes is for the multi-class losses"));
  // What a multi-class model does not offer is named.
  v1::ModelConfig averaged = ToProto(ClassConfig(LossType::kMulticlassHinge));
  averaged.set_averaged(true);
  status = FromProto(averaged).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("averaged is not offered for a multi-class model"));
}

// A multi-class model's snapshot is format version 5 with its classes, decodes to the same
// state, stays within MaxSnapshotBytes, and the restored model continues bit for bit.
TEST(ConvertSnapshotTest, AMultiClassModelRoundTripsAsVersion5AndContinuesBitIdentically) {
  for (const LossType loss : {LossType::kMulticlassHinge, LossType::kSoftmax}) {
    SCOPED_TRACE(LossTypeName(loss));
    const ModelConfig config = ClassConfig(loss);
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
    ASSERT_TRUE(model.ok()) << model.status();
    const std::string names[] = {"cat", "dog \xF0\x9F\x90\x95", std::string(kMaxClassLabelBytes, 'e')};
    auto x_at = [](int t) { return std::vector<double>{std::sin(0.9 * t), std::cos(1.3 * t)}; };
    for (int t = 0; t < 12; ++t) {
      ASSERT_TRUE((*model)->ObserveClass(x_at(t), names[t % 3]).ok());
    }
    const ModelState state = (*model)->ExportState();
    ASSERT_EQ(state.classes.size(), 3u);
    const v1::ModelSnapshot snapshot = ToProto(state);
    EXPECT_EQ(snapshot.format_version(), kSnapshotFormatVersion);
    EXPECT_EQ(kSnapshotFormatVersion, 5u);
    ASSERT_EQ(snapshot.classes_size(), 3);
    EXPECT_EQ(snapshot.classes(1), names[1]);
    EXPECT_EQ(snapshot.coefficients_size(), snapshot.added_at_size() * 3);
    std::unique_ptr<Model> restored = ThroughSnapshotBytes(state);
    ASSERT_NE(restored, nullptr);
    for (int t = 12; t < 24; ++t) {
      const std::string name = t == 20 ? "emu" : names[t % 3];  // a fourth class joins
      absl::StatusOr<Observation> a = (*model)->ObserveClass(x_at(t), name);
      absl::StatusOr<Observation> b = restored->ObserveClass(x_at(t), name);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::bit_cast<uint64_t>(a->prediction), std::bit_cast<uint64_t>(b->prediction))
          << "step " << t;
      EXPECT_EQ(a->predicted_class, b->predicted_class);
    }
    EXPECT_EQ((*model)->ExportState(), restored->ExportState());
  }
}

// The bound covers a full multi-class model: every class, each with the longest name, and
// a coefficient per class on every term.
TEST(MaxSnapshotBytesTest, BoundsAFullMultiClassModel) {
  ModelConfig config = ClassConfig(LossType::kSoftmax);
  config.max_classes = 6;
  config.budget.max_terms = 8;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int t = 0; t < 40; ++t) {
    const std::vector<double> x = {std::sin(0.7 * t), std::cos(0.4 * t)};
    const std::string name(kMaxClassLabelBytes, static_cast<char>('a' + t % 6));
    ASSERT_TRUE((*model)->ObserveClass(x, name).ok());
  }
  ASSERT_EQ((*model)->expansion_size(), 8u);
  ASSERT_EQ((*model)->classes().size(), 6u);
  const std::string bytes = EncodeOrDie((*model)->ExportState());
  EXPECT_LE(bytes.size(), MaxSnapshotBytes(config));
  // Loose by at most the fixed part, one more term (a step's, which the bound counts) and
  // 2 bytes a class.
  EXPECT_GE(bytes.size() + 4096 + (2 + 6) * sizeof(double) + 10 + 6 * 2,
            MaxSnapshotBytes(config));
}

// A full model's snapshot never exceeds MaxSnapshotBytes, and the bound is not loose by
// more than the fixed part, a 10-byte added_at (or retired_at) per term and the retired
// terms the averaged hypothesis could hold but does not: checked on models grown to their
// budget.
TEST(MaxSnapshotBytesTest, BoundsTheSnapshotOfAFullModel) {
  for (const bool averaged : {false, true}) {
    for (const uint32_t window : {0u, 16u}) {
      for (const uint32_t dim : {1u, 3u, 40u}) {
        ModelConfig config = BaseConfig();
        config.dim = dim;
        config.averaged = averaged;
        config.regret_window = window;
        config.budget.max_terms = 24;
        auto model = NormaModel::Create(config);
        ASSERT_TRUE(model.ok()) << model.status();
        std::vector<double> x(dim);
        std::vector<Observation> out;
        for (int t = 0; t < 60; ++t) {
          for (uint32_t j = 0; j < dim; ++j) x[j] = std::sin(t * 0.7 + j);
          ASSERT_TRUE((*model)->ObserveBatch(x, {std::cos(t * 0.3)}, &out).ok());
        }
        ASSERT_EQ((*model)->expansion_size(), 24u);
        const ModelState state = (*model)->ExportState();
        const std::string bytes = EncodeOrDie(state);
        const size_t bound = MaxSnapshotBytes(config);
        const size_t unused_retired =
            NormaModel::MaxRetiredTerms(config) - state.retired_at.size();
        EXPECT_EQ(state.retired_at.empty(), !averaged);
        EXPECT_LE(bytes.size(), bound) << dim << " " << averaged << " " << window;
        EXPECT_GE(bytes.size() + 4096 + 10 * (24 + state.retired_at.size()) +
                      unused_retired * ((dim + 2) * 8 + 10),
                  bound)
            << dim << " " << averaged << " " << window;
      }
    }
  }
  ModelConfig unbounded = BaseConfig();
  unbounded.budget.max_terms = 0;
  EXPECT_EQ(MaxSnapshotBytes(unbounded), SIZE_MAX);
}

TEST(PeekSnapshotConfigTest, FindsTheConfigInEveryLongEnoughPrefix) {
  const ModelState state = SampleState();
  const std::string bytes = EncodeOrDie(state);
  bool found = false;
  for (size_t n = 0; n <= std::min<size_t>(bytes.size(), 400); ++n) {
    absl::StatusOr<std::optional<ModelConfig>> config =
        PeekSnapshotConfig(absl::string_view(bytes).substr(0, n));
    ASSERT_TRUE(config.ok()) << n << ": " << config.status();
    if (config->has_value()) {
      EXPECT_EQ(CanonicalConfigBytes(**config), CanonicalConfigBytes(state.config));
      found = true;
    } else {
      EXPECT_FALSE(found) << "a longer prefix lost the config at " << n;
    }
  }
  EXPECT_TRUE(found);
}

TEST(PeekSnapshotConfigTest, JunkAndOtherVersionsAreDataLossAtOnce) {
  EXPECT_EQ(PeekSnapshotConfig(std::string(1000, 'x')).status().code(),
            absl::StatusCode::kDataLoss);
  v1::ModelSnapshot snapshot = ToProto(SampleState());
  snapshot.set_format_version(kSnapshotFormatVersion + 1);
  EXPECT_THAT(PeekSnapshotConfig(snapshot.SerializeAsString()).status().message(),
              HasSubstr("format_version"));
  snapshot.set_format_version(kSnapshotFormatVersion);
  snapshot.mutable_config()->set_dim(0);
  EXPECT_EQ(PeekSnapshotConfig(snapshot.SerializeAsString()).status().code(),
            absl::StatusCode::kDataLoss);
  snapshot.clear_config();
  EXPECT_THAT(PeekSnapshotConfig(snapshot.SerializeAsString()).status().message(),
              HasSubstr("no config"));
}

TEST(SnapshotBytesTest, ChunkSizeIsOneMebibyte) { EXPECT_EQ(kSnapshotChunkBytes, 1u << 20); }

ModelConfig TrackerConfig(double forgetting) {
  ModelConfig config;
  config.dim = 3;
  config.kernel = {.type = KernelType::kLaplacian, .gamma = 0.6};
  config.loss = {.type = LossType::kSquared};
  config.regret_window = 7;
  config.krls_tracker = {
      .max_basis = 9, .noise_variance = 0.02, .forgetting = forgetting, .jitter = 1e-7};
  return config;
}

TEST(ConvertKrlsTrackerTest, ConfigRoundTripsWithoutALearningRateOrBudget) {
  const ModelConfig config = TrackerConfig(0.99);
  const v1::ModelConfig proto = ToProto(config);
  EXPECT_FALSE(proto.has_learning_rate());
  EXPECT_FALSE(proto.has_budget());
  EXPECT_EQ(proto.krls_tracker().max_basis(), 9u);
  absl::StatusOr<ModelConfig> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, config);
}

TEST(ConvertKrlsTrackerTest, UnsetForgettingAndJitterTakeTheirDefaults) {
  absl::StatusOr<ModelConfig> config = ParseModelConfigText(R"pb(
    dim: 6
    kernel { gaussian { gamma: 0.00048828125 } }
    loss { squared {} }
    krls_tracker { max_basis: 100 noise_variance: 1e-6 }
  )pb");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->krls_tracker.forgetting, 1.0);
  EXPECT_EQ(config->krls_tracker.jitter, 1e-6);
  EXPECT_EQ(config->krls_tracker.max_basis, 100u);
  EXPECT_EQ(config->learning_rate, LearningRateConfig{});
}

TEST(ConvertKrlsTrackerTest, RefusesTheFieldsItReplacesNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"learning_rate { eta0: 0.1 }", "learning_rate must be unset for krls_tracker"},
      {"budget { max_terms: 10 }", "budget must be unset for krls_tracker"},
      {"lambda: 0.1", "lambda must be unset for krls_tracker"},
      {"offset: true", "offset must be unset for krls_tracker"},
  };
  for (const auto& [field, message] : cases) {
    absl::StatusOr<ModelConfig> config = ParseModelConfigText(
        absl::StrCat("dim: 2 kernel { gaussian { gamma: 1 } } loss { squared {} } ", field,
                     " krls_tracker { max_basis: 5 noise_variance: 0.1 }"));
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(config.status().message(), HasSubstr(message)) << field;
  }
  absl::StatusOr<ModelConfig> empty = ParseModelConfigText(
      "dim: 2 kernel { gaussian { gamma: 1 } } loss { squared {} } krls_tracker {}");
  EXPECT_THAT(empty.status().message(),
              HasSubstr("krls_tracker.max_basis must be in [1, 4096]"));
}

TEST(ConvertKrlsTrackerTest, SnapshotIsVersion3AndContinuesBitIdentically) {
  for (const double forgetting : {1.0, 0.97}) {
    SCOPED_TRACE(forgetting);
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(TrackerConfig(forgetting));
    ASSERT_TRUE(model.ok()) << model.status();
    for (int t = 0; t < 40; ++t) {
      const double x[3] = {std::sin(0.3 * t), std::cos(0.2 * t), 0.01 * t};
      ASSERT_TRUE((*model)->Observe(x, std::sin(0.5 * t)).ok());
    }
    const ModelState state = (*model)->ExportState();
    EXPECT_EQ(state.kernel_matrix.empty(), forgetting == 1.0);
    const v1::ModelSnapshot snapshot = ToProto(state);
    EXPECT_EQ(snapshot.format_version(), kTrackerSnapshotFormatVersion);
    const std::string bytes = EncodeOrDie(state);
    EXPECT_LE(bytes.size(), MaxSnapshotBytes(state.config));
    absl::StatusOr<ModelState> decoded = DecodeSnapshot(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, state);
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(*decoded);
    ASSERT_TRUE(restored.ok()) << restored.status();
    for (int t = 40; t < 60; ++t) {
      const double x[3] = {std::sin(0.3 * t), std::cos(0.2 * t), 0.01 * t};
      absl::StatusOr<Observation> a = (*model)->Observe(x, std::sin(0.5 * t));
      absl::StatusOr<Observation> b = (*restored)->Observe(x, std::sin(0.5 * t));
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::bit_cast<uint64_t>(a->prediction), std::bit_cast<uint64_t>(b->prediction));
    }
    EXPECT_EQ((*model)->ExportState(), (*restored)->ExportState());
  }
}

// A full dictionary with forgetting (three matrices): the snapshot fits MaxSnapshotBytes,
// which is within its fixed part and one more basis of it (the bound counts M + 1).
TEST(ConvertKrlsTrackerTest, MaxSnapshotBytesBoundsAFullTracker) {
  ModelConfig config = TrackerConfig(0.99);
  config.krls_tracker.max_basis = 60;
  config.regret_window = 0;
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(config);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int t = 0; t < 300; ++t) {
    const double x[3] = {std::sin(0.3 * t), std::cos(0.17 * t), std::sin(0.05 * t)};
    ASSERT_TRUE((*model)->Observe(x, std::sin(0.5 * t)).ok());
  }
  ASSERT_EQ((*model)->expansion_size(), 60u);
  const std::string bytes = EncodeOrDie((*model)->ExportState());
  const size_t bound = MaxSnapshotBytes(config);
  EXPECT_GT(bytes.size(), 40000u);  // 3 packed triangles of 1,830 doubles and more
  EXPECT_LE(bytes.size(), bound);
  const size_t one_basis = sizeof(double) * (3 + 2 + 3 * 61);
  EXPECT_LE(bound, bytes.size() + 4096 + one_basis);
}

TEST(ConvertKrlsTrackerTest, StatsCarryTheDictionaryThroughTheSummary) {
  ModelSummary summary;
  summary.tenant = "t";
  summary.model = "m";
  summary.config = TrackerConfig(1.0);
  summary.stats.expansion_size = 9;
  summary.stats.terms_removed = 31;
  summary.stats.noise_variance = 0.5;
  summary.stats.signal_power = 25;
  const v1::ModelInfo info = ToProto(summary);
  EXPECT_EQ(info.stats().dictionary_size(), 9u);
  EXPECT_EQ(info.stats().bases_pruned(), 31u);
  EXPECT_EQ(info.stats().noise_variance(), 0.5);
  EXPECT_EQ(info.stats().signal_power(), 25);
  absl::StatusOr<ModelSummary> back = FromProto(info);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->stats.noise_variance, 0.5);
  EXPECT_EQ(back->stats.signal_power, 25);
  // Another kind has no dictionary on the wire.
  summary.config = BaseConfig();
  EXPECT_EQ(ToProto(summary).stats().dictionary_size(), 0u);
}

// --- Selection (config.select) ---------------------------------------------------------

TEST(ConvertSelectTest, TheIssuesConfigParsesAndCandidatesInheritDimAndLoss) {
  absl::StatusOr<ModelConfig> bare =
      ParseModelConfigText("dim: 123 loss { hinge {} } select {}");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_TRUE(bare->select_kind());
  EXPECT_TRUE(bare->select.candidates.empty());
  EXPECT_EQ(bare->loss.rho, 1.0);

  absl::StatusOr<ModelConfig> listed = ParseModelConfigText(R"pb(
    dim: 3
    loss { squared {} }
    select {
      live: 1
      prediction: LEADERS
      candidates {
        kernel { gaussian { gamma: 2 } }
        learning_rate { eta0: 0.5 }
        budget { max_terms: 10 }
      }
      candidates {
        kernel { gaussian { gamma: 1 } }
        krls_tracker { max_basis: 20 noise_variance: 0.01 }
      }
    }
  )pb");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->select.candidates.size(), 2u);
  for (const ModelConfig& candidate : listed->select.candidates) {
    EXPECT_EQ(candidate.dim, 3u);
    EXPECT_EQ(candidate.loss.type, LossType::kSquared);
  }
  EXPECT_TRUE(listed->select.candidates[1].krls_tracker_kind());
  EXPECT_EQ(bare->select.prediction, SelectPrediction::kDefault);
  EXPECT_EQ(listed->select.prediction, SelectPrediction::kLeaders);
  // The wire form round-trips, canonical bytes included.
  for (const ModelConfig& config : {*bare, *listed}) {
    absl::StatusOr<ModelConfig> back = FromProto(ToProto(config));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, config);
    EXPECT_EQ(CanonicalConfigBytes(*back), CanonicalConfigBytes(config));
  }
}

TEST(ConvertSelectTest, RefusesOwnFieldsNestingAndBadCandidatesNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"dim: 3 loss { squared {} } kernel { gaussian { gamma: 1 } } select {}",
       "kernel must be left unset beside select"},
      {"dim: 3 loss { squared {} } learning_rate { eta0: 1 } select {}", "learning_rate"},
      {"dim: 3 loss { squared {} } lambda: 0.1 select {}", "lambda"},
      {"dim: 3 loss { squared {} } select { candidates { select {} } }", "cannot select"},
      {"dim: 3 loss { squared {} } select { candidates { dim: 4 kernel { gaussian { gamma: 1 } "
       "} "
       "learning_rate { eta0: 1 } } }",
       "select.candidates[0].dim"},
      {"dim: 3 loss { squared {} } select { candidates { kernel { gaussian { gamma: -1 } } "
       "learning_rate { eta0: 1 } } }",
       "select.candidates[0]: "},
      {"dim: 3 loss { squared {} } select { live: 17 }", "select.live"},
      {"dim: 3 loss { squared {} } select { prediction: 7 }", "select.prediction 7"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<ModelConfig> config = ParseModelConfigText(text);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(config.status().message(), HasSubstr(message)) << text;
  }
}

TEST(ConvertSelectTest, SnapshotIsVersion4AndContinuesBitIdentically) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfigText("dim: 3 loss { squared {} } select {}");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*config);
  ASSERT_TRUE(model.ok()) << model.status();
  int t = 0;
  for (const int cut : {10, 200}) {  // warming up, then with its candidates built
    for (; t < cut; ++t) {
      const double x[3] = {std::sin(0.3 * t), std::cos(0.2 * t), 0.01 * t};
      ASSERT_TRUE((*model)->Observe(x, std::sin(0.5 * t)).ok());
    }
    const ModelState state = (*model)->ExportState();
    EXPECT_EQ(ToProto(state).format_version(), kSelectSnapshotFormatVersion);
    const std::string bytes = EncodeOrDie(state);
    EXPECT_LE(bytes.size(), MaxSnapshotBytes(state.config));
    absl::StatusOr<ModelState> decoded = DecodeSnapshot(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, state);
    absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(*decoded);
    ASSERT_TRUE(restored.ok()) << restored.status();
    for (int s = t; s < t + 30; ++s) {
      const double x[3] = {std::sin(0.3 * s), std::cos(0.2 * s), 0.01 * s};
      absl::StatusOr<Observation> a = (*model)->Observe(x, std::sin(0.5 * s));
      absl::StatusOr<Observation> b = (*restored)->Observe(x, std::sin(0.5 * s));
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(std::bit_cast<uint64_t>(a->prediction), std::bit_cast<uint64_t>(b->prediction));
    }
    EXPECT_EQ((*model)->ExportState(), (*restored)->ExportState());
    t += 30;
  }
  // The stats list every candidate over the wire.
  ModelSummary summary;
  summary.tenant = "t";
  summary.model = "m";
  summary.config = *config;
  summary.stats = (*model)->stats();
  ASSERT_EQ(summary.stats.candidates.size(), 8u);
  absl::StatusOr<ModelSummary> back = FromProto(ToProto(summary));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->stats.candidates.size(), 8u);
  EXPECT_EQ(back->stats.champion, summary.stats.champion);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(back->stats.candidates[i].config, summary.stats.candidates[i].config);
    EXPECT_EQ(back->stats.candidates[i].status, summary.stats.candidates[i].status);
    EXPECT_EQ(back->stats.candidates[i].recent_loss, summary.stats.candidates[i].recent_loss);
  }
}

}  // namespace
}  // namespace okl
