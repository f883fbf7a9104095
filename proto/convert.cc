// proto/convert.cc

#include "proto/convert.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/select.h"
#include "core/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace okl {
namespace {

absl::StatusOr<KernelConfig> KernelFromProto(const v1::KernelConfig& proto) {
  KernelConfig kernel;
  switch (proto.kind_case()) {
    case v1::KernelConfig::kGaussian:
      kernel.type = KernelType::kGaussian;
      kernel.gamma = proto.gaussian().gamma();
      return kernel;
    case v1::KernelConfig::kLaplacian:
      kernel.type = KernelType::kLaplacian;
      kernel.gamma = proto.laplacian().gamma();
      return kernel;
    case v1::KernelConfig::kLinear:
      kernel.type = KernelType::kLinear;
      kernel.c = proto.linear().c();
      return kernel;
    case v1::KernelConfig::kPolynomial:
      kernel.type = KernelType::kPolynomial;
      kernel.gamma = proto.polynomial().gamma();
      kernel.c = proto.polynomial().c();
      kernel.degree = proto.polynomial().degree();
      return kernel;
    case v1::KernelConfig::kHeat:
      kernel.type = KernelType::kHeat;
      kernel.t = proto.heat().t();
      return kernel;
    case v1::KernelConfig::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "kernel must set one of gaussian, laplacian, linear, polynomial, heat");
}

absl::StatusOr<LossConfig> LossFromProto(const v1::LossConfig& proto) {
  LossConfig loss;
  switch (proto.kind_case()) {
    case v1::LossConfig::kSquared:
      loss.type = LossType::kSquared;
      return loss;
    case v1::LossConfig::kHinge:
      loss.type = LossType::kHinge;
      if (proto.hinge().has_rho()) loss.rho = proto.hinge().rho();
      loss.nu = proto.hinge().nu();
      return loss;
    case v1::LossConfig::kEpsilonInsensitive:
      loss.type = LossType::kEpsilonInsensitive;
      if (proto.epsilon_insensitive().has_epsilon()) {
        loss.epsilon = proto.epsilon_insensitive().epsilon();
      }
      loss.nu = proto.epsilon_insensitive().nu();
      return loss;
    case v1::LossConfig::kLogistic:
      loss.type = LossType::kLogistic;
      return loss;
    case v1::LossConfig::kHuber:
      loss.type = LossType::kHuber;
      loss.delta = proto.huber().delta();
      return loss;
    case v1::LossConfig::kNovelty:
      loss.type = LossType::kNovelty;
      if (proto.novelty().has_rho()) loss.rho = proto.novelty().rho();
      loss.nu = proto.novelty().nu();
      return loss;
    case v1::LossConfig::kMulticlassHinge:
      loss.type = LossType::kMulticlassHinge;
      if (proto.multiclass_hinge().has_rho()) loss.rho = proto.multiclass_hinge().rho();
      return loss;
    case v1::LossConfig::kSoftmax:
      loss.type = LossType::kSoftmax;
      return loss;
    case v1::LossConfig::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "loss must set one of squared, hinge, epsilon_insensitive, logistic, huber, "
      "novelty, multiclass_hinge, softmax");
}

absl::StatusOr<LearningRateConfig> LearningRateFromProto(const v1::LearningRate& proto) {
  LearningRateConfig rate;
  rate.eta0 = proto.eta0();
  if (proto.has_theta()) rate.theta = proto.theta();
  switch (proto.schedule()) {
    case v1::LearningRate::SCHEDULE_UNSPECIFIED:
    case v1::LearningRate::CONSTANT:
      rate.schedule = Schedule::kConstant;
      return rate;
    case v1::LearningRate::INVERSE_SQRT:
      rate.schedule = Schedule::kInverseSqrt;
      return rate;
    case v1::LearningRate::POWER:
      rate.schedule = Schedule::kPower;
      return rate;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("learning_rate.schedule ", static_cast<int>(proto.schedule()),
                   " is not one of CONSTANT (1), INVERSE_SQRT (2), POWER (3)"));
}

absl::StatusOr<BudgetConfig> BudgetFromProto(const v1::Budget& proto) {
  BudgetConfig budget;
  budget.max_terms = proto.max_terms();
  budget.drop_below = proto.drop_below();
  switch (proto.policy()) {
    case v1::Budget::POLICY_UNSPECIFIED:
    case v1::Budget::OLDEST:
      budget.policy = BudgetPolicy::kOldest;
      return budget;
    case v1::Budget::SMALLEST:
      budget.policy = BudgetPolicy::kSmallest;
      return budget;
    case v1::Budget::MERGE:
      budget.policy = BudgetPolicy::kMerge;
      return budget;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("budget.policy ", static_cast<int>(proto.policy()),
                   " is not one of OLDEST (1), SMALLEST (2), MERGE (3)"));
}

// The tracker's fields, with the unset ones at their defaults (forgetting 1, jitter 1e-6).
// The fields it replaces must be absent: a learning rate or a budget given with it would
// be ignored, so it is refused (ValidateConfig refuses lambda and offset).
absl::StatusOr<KrlsTrackerConfig> KrlsTrackerFromProto(const v1::ModelConfig& proto) {
  const v1::KrlsTracker& krls = proto.krls_tracker();
  if (krls.max_basis() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "krls_tracker.max_basis must be in [1, ", kMaxBasis,
        "] (the dictionary size); remove krls_tracker for a NORMA model"));
  }
  if (proto.has_learning_rate()) {
    return absl::InvalidArgumentError(
        "learning_rate must be unset for krls_tracker (it takes exact second-order steps, "
        "with no step size)");
  }
  if (proto.has_budget()) {
    return absl::InvalidArgumentError(
        "budget must be unset for krls_tracker (krls_tracker.max_basis bounds its "
        "dictionary)");
  }
  KrlsTrackerConfig config;
  config.max_basis = krls.max_basis();
  config.noise_variance = krls.noise_variance();
  if (krls.has_forgetting()) config.forgetting = krls.forgetting();
  if (krls.has_jitter()) config.jitter = krls.jitter();
  return config;
}

v1::KernelConfig KernelToProto(const KernelConfig& kernel) {
  v1::KernelConfig proto;
  switch (kernel.type) {
    case KernelType::kGaussian:
      proto.mutable_gaussian()->set_gamma(kernel.gamma);
      break;
    case KernelType::kLaplacian:
      proto.mutable_laplacian()->set_gamma(kernel.gamma);
      break;
    case KernelType::kLinear:
      proto.mutable_linear()->set_c(kernel.c);
      break;
    case KernelType::kPolynomial:
      proto.mutable_polynomial()->set_gamma(kernel.gamma);
      proto.mutable_polynomial()->set_c(kernel.c);
      proto.mutable_polynomial()->set_degree(kernel.degree);
      break;
    case KernelType::kHeat:
      proto.mutable_heat()->set_t(kernel.t);
      break;
  }
  return proto;
}

v1::LossConfig LossToProto(const LossConfig& loss) {
  v1::LossConfig proto;
  switch (loss.type) {
    case LossType::kSquared:
      proto.mutable_squared();
      break;
    case LossType::kHinge:
      proto.mutable_hinge()->set_rho(loss.rho);
      proto.mutable_hinge()->set_nu(loss.nu);
      break;
    case LossType::kEpsilonInsensitive:
      proto.mutable_epsilon_insensitive()->set_epsilon(loss.epsilon);
      proto.mutable_epsilon_insensitive()->set_nu(loss.nu);
      break;
    case LossType::kLogistic:
      proto.mutable_logistic();
      break;
    case LossType::kHuber:
      proto.mutable_huber()->set_delta(loss.delta);
      break;
    case LossType::kNovelty:
      proto.mutable_novelty()->set_rho(loss.rho);
      proto.mutable_novelty()->set_nu(loss.nu);
      break;
    case LossType::kMulticlassHinge:
      proto.mutable_multiclass_hinge()->set_rho(loss.rho);
      break;
    case LossType::kSoftmax:
      proto.mutable_softmax();
      break;
  }
  return proto;
}

v1::LearningRate::Schedule ScheduleToProto(Schedule schedule) {
  switch (schedule) {
    case Schedule::kConstant:
      return v1::LearningRate::CONSTANT;
    case Schedule::kInverseSqrt:
      return v1::LearningRate::INVERSE_SQRT;
    case Schedule::kPower:
      return v1::LearningRate::POWER;
  }
  return v1::LearningRate::SCHEDULE_UNSPECIFIED;
}

v1::Budget::Policy PolicyToProto(BudgetPolicy policy) {
  switch (policy) {
    case BudgetPolicy::kOldest:
      return v1::Budget::OLDEST;
    case BudgetPolicy::kSmallest:
      return v1::Budget::SMALLEST;
    case BudgetPolicy::kMerge:
      return v1::Budget::MERGE;
  }
  return v1::Budget::POLICY_UNSPECIFIED;
}

// A selection's config: dim, the loss and the candidates, each completed with the outer
// dim and loss where it leaves them unset.
absl::StatusOr<ModelConfig> SelectFromProto(const v1::ModelConfig& proto) {
  const std::pair<absl::string_view, bool> own_fields[] = {
      {"kernel", proto.has_kernel()}, {"learning_rate", proto.has_learning_rate()},
      {"budget", proto.has_budget()}, {"random_features", proto.has_random_features()},
      {"sparse", proto.has_sparse()}, {"krls_tracker", proto.has_krls_tracker()},
  };
  for (const auto& [field, set] : own_fields) {
    if (set) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          " must be left unset beside select: each candidate has its own (set it in "
          "select.candidates)"));
    }
  }
  ModelConfig config;
  config.dim = proto.dim();
  OKL_ASSIGN_OR_RETURN(config.loss, LossFromProto(proto.loss()));
  config.lambda = proto.lambda();
  config.offset = proto.offset();
  config.averaged = proto.averaged();
  config.averaging_window = proto.averaging_window();
  config.regret_window = proto.regret_window();
  config.max_classes = proto.max_classes();
  config.select.enabled = true;
  config.select.live = proto.select().live();
  switch (proto.select().prediction()) {
    case v1::Select::PREDICTION_UNSPECIFIED:
      config.select.prediction = SelectPrediction::kDefault;
      break;
    case v1::Select::CHAMPION:
      config.select.prediction = SelectPrediction::kChampion;
      break;
    case v1::Select::LEADERS:
      config.select.prediction = SelectPrediction::kLeaders;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("select.prediction ", static_cast<int>(proto.select().prediction()),
                       " is not one of PREDICTION_UNSPECIFIED (0), CHAMPION (1), LEADERS (2)"));
  }
  if (proto.select().candidates_size() > static_cast<int>(kMaxCandidates)) {
    return absl::InvalidArgumentError(absl::StrCat("select.candidates may list at most ",
                                                   kMaxCandidates, " configs, got ",
                                                   proto.select().candidates_size()));
  }
  for (int i = 0; i < proto.select().candidates_size(); ++i) {
    const std::string name = absl::StrCat("select.candidates[", i, "]");
    v1::ModelConfig candidate = proto.select().candidates(i);
    // Checked before converting: a candidate's own candidates would nest without end.
    if (candidate.has_select()) {
      return absl::InvalidArgumentError(name + " sets select: a candidate cannot select");
    }
    if (candidate.dim() == 0) candidate.set_dim(proto.dim());
    if (!candidate.has_loss()) *candidate.mutable_loss() = proto.loss();
    absl::StatusOr<ModelConfig> converted = FromProto(candidate);
    if (!converted.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", converted.status().message()));
    }
    config.select.candidates.push_back(*std::move(converted));
  }
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

}  // namespace

absl::StatusOr<ModelConfig> FromProto(const v1::ModelConfig& proto) {
  if (proto.has_select()) return SelectFromProto(proto);
  ModelConfig config;
  config.dim = proto.dim();
  OKL_ASSIGN_OR_RETURN(config.kernel, KernelFromProto(proto.kernel()));
  OKL_ASSIGN_OR_RETURN(config.loss, LossFromProto(proto.loss()));
  if (proto.has_krls_tracker()) {
    OKL_ASSIGN_OR_RETURN(config.krls_tracker, KrlsTrackerFromProto(proto));
  } else {
    OKL_ASSIGN_OR_RETURN(config.learning_rate, LearningRateFromProto(proto.learning_rate()));
  }
  config.lambda = proto.lambda();
  config.offset = proto.offset();
  OKL_ASSIGN_OR_RETURN(config.budget, BudgetFromProto(proto.budget()));
  config.averaged = proto.averaged();
  config.averaging_window = proto.averaging_window();
  config.regret_window = proto.regret_window();
  config.random_features = {.dimension = proto.random_features().dimension(),
                            .seed = proto.random_features().seed()};
  config.sparse.max_nonzeros = proto.sparse().max_nonzeros();
  config.max_classes = proto.max_classes();
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

v1::ModelConfig ToProto(const ModelConfig& config) {
  v1::ModelConfig proto;
  proto.set_dim(config.dim);
  if (config.select_kind()) {
    // A selection has no kernel, step or budget of its own: FromProto refuses them.
    *proto.mutable_loss() = LossToProto(config.loss);
    v1::Select* select = proto.mutable_select();
    select->set_live(config.select.live);
    switch (config.select.prediction) {
      case SelectPrediction::kDefault:
        select->set_prediction(v1::Select::PREDICTION_UNSPECIFIED);
        break;
      case SelectPrediction::kChampion:
        select->set_prediction(v1::Select::CHAMPION);
        break;
      case SelectPrediction::kLeaders:
        select->set_prediction(v1::Select::LEADERS);
        break;
    }
    for (const ModelConfig& candidate : config.select.candidates) {
      *select->add_candidates() = ToProto(candidate);
    }
    proto.set_max_classes(config.max_classes);
    return proto;
  }
  *proto.mutable_kernel() = KernelToProto(config.kernel);
  *proto.mutable_loss() = LossToProto(config.loss);
  if (config.krls_tracker_kind()) {
    // The tracker has no learning rate or budget: FromProto refuses them beside it.
    v1::KrlsTracker* krls = proto.mutable_krls_tracker();
    krls->set_max_basis(config.krls_tracker.max_basis);
    krls->set_noise_variance(config.krls_tracker.noise_variance);
    krls->set_forgetting(config.krls_tracker.forgetting);
    krls->set_jitter(config.krls_tracker.jitter);
  } else {
    v1::LearningRate* rate = proto.mutable_learning_rate();
    rate->set_eta0(config.learning_rate.eta0);
    rate->set_schedule(ScheduleToProto(config.learning_rate.schedule));
    rate->set_theta(config.learning_rate.theta);
    v1::Budget* budget = proto.mutable_budget();
    budget->set_max_terms(config.budget.max_terms);
    budget->set_policy(PolicyToProto(config.budget.policy));
    budget->set_drop_below(config.budget.drop_below);
  }
  proto.set_lambda(config.lambda);
  proto.set_offset(config.offset);
  proto.set_averaged(config.averaged);
  proto.set_averaging_window(config.averaging_window);
  proto.set_regret_window(config.regret_window);
  if (config.random_features.dimension > 0) {
    proto.mutable_random_features()->set_dimension(config.random_features.dimension);
    proto.mutable_random_features()->set_seed(config.random_features.seed);
  }
  if (config.sparse_storage()) proto.mutable_sparse()->set_max_nonzeros(config.sparse.max_nonzeros);
  proto.set_max_classes(config.max_classes);
  return proto;
}

std::string CanonicalConfigBytes(const ModelConfig& config) {
  const v1::ModelConfig proto = ToProto(config);
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  proto.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

namespace {

template <typename T>
using Repeated = google::protobuf::RepeatedField<T>;

void SparseRowsToProto(const SparseRows& rows, Repeated<uint64_t>* ends,
                       Repeated<uint32_t>* indices, Repeated<double>* values) {
  ends->Assign(rows.ends.begin(), rows.ends.end());
  indices->Assign(rows.indices.begin(), rows.indices.end());
  values->Assign(rows.values.begin(), rows.values.end());
}

// The rows as written; NormaModel::FromState checks that they are well formed.
SparseRows SparseRowsFromProto(const Repeated<uint64_t>& ends,
                               const Repeated<uint32_t>& indices,
                               const Repeated<double>& values) {
  SparseRows rows;
  rows.ends.assign(ends.begin(), ends.end());
  rows.indices.assign(indices.begin(), indices.end());
  rows.values.assign(values.begin(), values.end());
  return rows;
}

v1::CandidateStatus CandidateStatusToProto(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::kWaiting:
      return v1::WAITING;
    case CandidateStatus::kLive:
      return v1::LIVE;
    case CandidateStatus::kRetired:
      return v1::RETIRED;
  }
  return v1::CANDIDATE_STATUS_UNSPECIFIED;
}

absl::StatusOr<CandidateStatus> CandidateStatusFromProto(v1::CandidateStatus status) {
  switch (status) {
    case v1::WAITING:
      return CandidateStatus::kWaiting;
    case v1::LIVE:
      return CandidateStatus::kLive;
    case v1::RETIRED:
      return CandidateStatus::kRetired;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("candidate status ", static_cast<int>(status),
                                                 " is not WAITING, LIVE or RETIRED"));
}

}  // namespace

v1::ModelSnapshot ToProto(const ModelState& state) {
  v1::ModelSnapshot proto;
  // The oldest version that holds the state, so a server of the version before reads
  // every snapshot it could.
  proto.set_format_version(state.config.multiclass()       ? kSnapshotFormatVersion
                           : state.config.select_kind()      ? kSelectSnapshotFormatVersion
                           : state.config.krls_tracker_kind() ? kTrackerSnapshotFormatVersion
                                                              : kExpansionSnapshotFormatVersion);
  *proto.mutable_config() = ToProto(state.config);
  proto.mutable_support()->Assign(state.support.begin(), state.support.end());
  proto.mutable_coefficients()->Assign(state.coefficients.begin(), state.coefficients.end());
  proto.mutable_added_at()->Assign(state.added_at.begin(), state.added_at.end());
  proto.mutable_average_base()->Assign(state.average_base.begin(), state.average_base.end());
  proto.mutable_average_mark()->Assign(state.average_mark.begin(), state.average_mark.end());
  proto.mutable_average_previous()->Assign(state.average_previous.begin(),
                                           state.average_previous.end());
  proto.mutable_retired_support()->Assign(state.retired_support.begin(),
                                          state.retired_support.end());
  proto.mutable_retired_sums()->Assign(state.retired_sums.begin(), state.retired_sums.end());
  proto.mutable_retired_previous_sums()->Assign(state.retired_previous_sums.begin(),
                                                state.retired_previous_sums.end());
  proto.mutable_retired_at()->Assign(state.retired_at.begin(), state.retired_at.end());
  proto.set_average_block_start(state.average_block_start);
  proto.set_average_previous_start(state.average_previous_start);
  proto.set_average_previous_offset_sum(state.average_previous_offset_sum);
  proto.mutable_weights()->Assign(state.weights.begin(), state.weights.end());
  proto.mutable_weight_sums()->Assign(state.weight_sums.begin(), state.weight_sums.end());
  SparseRowsToProto(state.sparse_support, proto.mutable_sparse_support_ends(),
                    proto.mutable_sparse_support_indices(),
                    proto.mutable_sparse_support_values());
  SparseRowsToProto(state.retired_sparse_support, proto.mutable_retired_sparse_support_ends(),
                    proto.mutable_retired_sparse_support_indices(),
                    proto.mutable_retired_sparse_support_values());
  proto.set_scale(state.scale);
  proto.set_offset(state.offset);
  proto.set_margin(state.margin);
  proto.set_steps(state.steps);
  proto.set_average_sum(state.average_sum);
  proto.set_average_offset_sum(state.average_offset_sum);
  proto.set_cumulative_loss(state.cumulative_loss);
  proto.set_mistakes(state.mistakes);
  proto.set_terms_removed(state.terms_removed);
  proto.mutable_posterior_mean()->Assign(state.posterior_mean.begin(), state.posterior_mean.end());
  proto.mutable_posterior_covariance()->Assign(state.posterior_covariance.begin(),
                                               state.posterior_covariance.end());
  proto.mutable_inverse_kernel()->Assign(state.inverse_kernel.begin(), state.inverse_kernel.end());
  proto.mutable_kernel_matrix()->Assign(state.kernel_matrix.begin(), state.kernel_matrix.end());
  proto.set_signal_power_numerator(state.signal_power_numerator);
  proto.set_signal_power_denominator(state.signal_power_denominator);
  const RegretWindow& window = state.regret_window;
  proto.mutable_window_inputs()->Assign(window.xs.begin(), window.xs.end());
  proto.mutable_window_labels()->Assign(window.ys.begin(), window.ys.end());
  proto.mutable_window_online_losses()->Assign(window.online_losses.begin(),
                                               window.online_losses.end());
  for (const ModelState& candidate : state.candidate_states) {
    *proto.add_candidate_states() = ToProto(candidate);
  }
  for (const CandidateRecord& record : state.candidates) {
    v1::CandidateRecord* out = proto.add_candidates();
    out->set_status(CandidateStatusToProto(record.status));
    out->set_steps(record.steps);
    out->set_cumulative_loss(record.cumulative_loss);
    out->set_started_at(record.started_at);
    out->set_weight(record.weight);
    out->set_loss_sum(record.loss_sum);
    out->set_paired_weight(record.paired_weight);
    out->set_difference_sum(record.difference_sum);
    out->set_difference_square_sum(record.difference_square_sum);
  }
  proto.set_champion(state.champion);
  proto.set_champion_changes(state.champion_changes);
  proto.set_input_scale(state.input_scale);
  proto.mutable_warmup_inputs()->Assign(state.warmup_inputs.begin(), state.warmup_inputs.end());
  proto.mutable_warmup_labels()->Assign(state.warmup_labels.begin(), state.warmup_labels.end());
  proto.mutable_classes()->Assign(state.classes.begin(), state.classes.end());
  return proto;
}

absl::StatusOr<ModelState> FromProto(const v1::ModelSnapshot& proto) {
  if (proto.format_version() < kOldestSnapshotFormatVersion ||
      proto.format_version() > kSnapshotFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot format_version ", proto.format_version(),
        " is not supported (this build reads versions ", kOldestSnapshotFormatVersion, " to ",
        kSnapshotFormatVersion, ")"));
  }
  if (!proto.has_config()) {
    return absl::InvalidArgumentError("snapshot has no config");
  }
  ModelState state;
  absl::StatusOr<ModelConfig> config = FromProto(proto.config());
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot config: ", config.status().message()));
  }
  state.config = *std::move(config);
  // proto3 writes no zero scalars, so a scale of 0 is what a writer that forgot the
  // field produces; no live model has one (the scale is renormalised long before).
  if (proto.scale() == 0) {
    return absl::InvalidArgumentError("snapshot scale is 0 (unset)");
  }
  state.support.assign(proto.support().begin(), proto.support().end());
  state.coefficients.assign(proto.coefficients().begin(), proto.coefficients().end());
  state.added_at.assign(proto.added_at().begin(), proto.added_at().end());
  state.average_base.assign(proto.average_base().begin(), proto.average_base().end());
  state.average_mark.assign(proto.average_mark().begin(), proto.average_mark().end());
  state.average_previous.assign(proto.average_previous().begin(),
                                proto.average_previous().end());
  state.retired_support.assign(proto.retired_support().begin(), proto.retired_support().end());
  state.retired_sums.assign(proto.retired_sums().begin(), proto.retired_sums().end());
  state.retired_previous_sums.assign(proto.retired_previous_sums().begin(),
                                     proto.retired_previous_sums().end());
  state.retired_at.assign(proto.retired_at().begin(), proto.retired_at().end());
  state.average_block_start = proto.average_block_start();
  state.average_previous_start = proto.average_previous_start();
  state.average_previous_offset_sum = proto.average_previous_offset_sum();
  state.weights.assign(proto.weights().begin(), proto.weights().end());
  state.weight_sums.assign(proto.weight_sums().begin(), proto.weight_sums().end());
  state.sparse_support = SparseRowsFromProto(proto.sparse_support_ends(),
                                             proto.sparse_support_indices(),
                                             proto.sparse_support_values());
  state.retired_sparse_support = SparseRowsFromProto(proto.retired_sparse_support_ends(),
                                                     proto.retired_sparse_support_indices(),
                                                     proto.retired_sparse_support_values());
  state.scale = proto.scale();
  state.offset = proto.offset();
  state.margin = proto.margin();
  state.steps = proto.steps();
  state.average_sum = proto.average_sum();
  state.average_offset_sum = proto.average_offset_sum();
  state.cumulative_loss = proto.cumulative_loss();
  state.mistakes = proto.mistakes();
  state.terms_removed = proto.terms_removed();
  state.posterior_mean.assign(proto.posterior_mean().begin(), proto.posterior_mean().end());
  state.posterior_covariance.assign(proto.posterior_covariance().begin(),
                                    proto.posterior_covariance().end());
  state.inverse_kernel.assign(proto.inverse_kernel().begin(), proto.inverse_kernel().end());
  state.kernel_matrix.assign(proto.kernel_matrix().begin(), proto.kernel_matrix().end());
  state.signal_power_numerator = proto.signal_power_numerator();
  state.signal_power_denominator = proto.signal_power_denominator();
  RegretWindow& window = state.regret_window;
  window.xs.assign(proto.window_inputs().begin(), proto.window_inputs().end());
  window.ys.assign(proto.window_labels().begin(), proto.window_labels().end());
  window.online_losses.assign(proto.window_online_losses().begin(),
                              proto.window_online_losses().end());
  window.last_step = window.ys.empty() ? 0 : state.steps;
  for (const v1::ModelSnapshot& candidate : proto.candidate_states()) {
    absl::StatusOr<ModelState> candidate_state = FromProto(candidate);
    if (!candidate_state.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("candidate state: ", candidate_state.status().message()));
    }
    state.candidate_states.push_back(*std::move(candidate_state));
  }
  for (const v1::CandidateRecord& in : proto.candidates()) {
    CandidateRecord record;
    OKL_ASSIGN_OR_RETURN(record.status, CandidateStatusFromProto(in.status()));
    record.steps = in.steps();
    record.cumulative_loss = in.cumulative_loss();
    record.started_at = in.started_at();
    record.weight = in.weight();
    record.loss_sum = in.loss_sum();
    record.paired_weight = in.paired_weight();
    record.difference_sum = in.difference_sum();
    record.difference_square_sum = in.difference_square_sum();
    state.candidates.push_back(record);
  }
  state.champion = proto.champion();
  state.champion_changes = proto.champion_changes();
  state.input_scale = proto.input_scale();
  state.warmup_inputs.assign(proto.warmup_inputs().begin(), proto.warmup_inputs().end());
  state.warmup_labels.assign(proto.warmup_labels().begin(), proto.warmup_labels().end());
  state.classes.assign(proto.classes().begin(), proto.classes().end());
  return state;
}

v1::ModelStats ToProto(const ModelStats& stats, LossType loss) {
  v1::ModelStats proto;
  proto.set_steps(stats.steps);
  proto.set_expansion_size(stats.expansion_size);
  proto.set_cumulative_loss(stats.cumulative_loss);
  proto.set_mistakes(stats.mistakes);
  proto.set_truncation_error_bound(stats.truncation_error_bound.value_or(0.0));
  if (stats.regret.has_value()) {
    proto.set_regret(stats.regret->regret);
    proto.set_regret_examples(static_cast<uint32_t>(stats.regret->window));
    proto.set_regret_at_step(stats.regret->last_step);
    proto.set_regret_duality_gap(stats.regret->duality_gap);
  }
  switch (MarginKindOf(loss)) {
    case MarginKind::kRho:
      proto.set_rho(stats.margin);
      break;
    case MarginKind::kEpsilon:
      proto.set_epsilon(stats.margin);
      break;
    case MarginKind::kNone:
      break;
  }
  proto.set_offset(stats.offset);
  proto.set_terms_removed(stats.terms_removed);
  proto.set_noise_variance(stats.noise_variance);
  proto.set_signal_power(stats.signal_power);
  for (const CandidateStats& candidate : stats.candidates) {
    v1::Candidate* out = proto.add_candidates();
    *out->mutable_config() = ToProto(candidate.config);
    out->set_status(CandidateStatusToProto(candidate.status));
    out->set_steps(candidate.steps);
    out->set_cumulative_loss(candidate.cumulative_loss);
    out->set_recent_loss(candidate.recent_loss);
    out->set_started_at(candidate.started_at);
    out->set_serving(candidate.serving);
  }
  proto.set_champion(stats.champion);
  proto.set_champion_changes(stats.champion_changes);
  proto.mutable_classes()->Assign(stats.classes.begin(), stats.classes.end());
  return proto;
}

ModelStats FromProto(const v1::ModelStats& proto, LossType loss) {
  ModelStats stats;
  stats.steps = proto.steps();
  stats.expansion_size = proto.expansion_size();
  stats.cumulative_loss = proto.cumulative_loss();
  stats.mistakes = proto.mistakes();
  stats.terms_removed = proto.terms_removed();
  stats.offset = proto.offset();
  stats.noise_variance = proto.noise_variance();
  stats.signal_power = proto.signal_power();
  for (const v1::Candidate& in : proto.candidates()) {
    // What a server sent: a config it ran and a status it wrote (else the defaults).
    CandidateStats candidate;
    candidate.config = FromProto(in.config()).value_or(ModelConfig{});
    candidate.status =
        CandidateStatusFromProto(in.status()).value_or(CandidateStatus::kWaiting);
    candidate.steps = in.steps();
    candidate.cumulative_loss = in.cumulative_loss();
    candidate.recent_loss = in.recent_loss();
    candidate.started_at = in.started_at();
    candidate.serving = in.serving();
    stats.candidates.push_back(std::move(candidate));
  }
  stats.champion = proto.champion();
  stats.champion_changes = proto.champion_changes();
  stats.classes.assign(proto.classes().begin(), proto.classes().end());
  switch (MarginKindOf(loss)) {
    case MarginKind::kRho:
      stats.margin = proto.rho();
      break;
    case MarginKind::kEpsilon:
      stats.margin = proto.epsilon();
      break;
    case MarginKind::kNone:
      break;
  }
  if (proto.truncation_error_bound() != 0) {
    stats.truncation_error_bound = proto.truncation_error_bound();
  }
  if (proto.regret_at_step() > 0) {  // 0 until the server's first computation
    RegretResult regret;
    regret.regret = proto.regret();
    regret.duality_gap = proto.regret_duality_gap();
    regret.window = proto.regret_examples();
    regret.last_step = proto.regret_at_step();
    stats.regret = regret;
  }
  return stats;
}

v1::ModelRef ModelRefToProto(absl::string_view tenant, absl::string_view model) {
  v1::ModelRef proto;
  proto.set_tenant(std::string(tenant));
  proto.set_model(std::string(model));
  return proto;
}

v1::ModelInfo ToProto(const ModelSummary& summary) {
  v1::ModelInfo proto;
  *proto.mutable_ref() = ModelRefToProto(summary.tenant, summary.model);
  *proto.mutable_config() = ToProto(summary.config);
  *proto.mutable_stats() = ToProto(summary.stats, summary.config.loss.type);
  if (summary.config.krls_tracker_kind()) {
    proto.mutable_stats()->set_dictionary_size(summary.stats.expansion_size);
    proto.mutable_stats()->set_bases_pruned(summary.stats.terms_removed);
  }
  return proto;
}

absl::StatusOr<ModelSummary> FromProto(const v1::ModelInfo& proto) {
  absl::StatusOr<ModelConfig> config = FromProto(proto.config());
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", config.status().message()));
  }
  ModelSummary summary;
  summary.tenant = proto.ref().tenant();
  summary.model = proto.ref().model();
  summary.config = *std::move(config);
  summary.stats = FromProto(proto.stats(), summary.config.loss.type);
  return summary;
}

}  // namespace okl
