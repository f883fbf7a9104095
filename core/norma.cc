#include "core/norma.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/merge.h"
#include "core/sparse_vector.h"
#include "core/status_macros.h"

namespace okl {
namespace {

// The scale factor is folded into the coefficients once it falls below this. Far above
// underflow; the early fold also keeps the averaged sums accurate: a term's summed
// coefficient is a_i (u - mark_i), whose rounding error is eps * u relative to the
// smallest increment (the scale), so u / scale must stay moderate (below 2^16 here).
constexpr double kMinScale = 0x1p-8;
// The running scale sum u of the averaged hypothesis is folded when it exceeds this.
constexpr double kMaxAverageSum = 0x1p8;
// MERGE picks the oldest of the terms whose |alpha| is within this relative distance of the
// smallest: far above rounding (1e-13 after many steps), far below real differences.
constexpr double kMergeTieTolerance = 1e-9;

// The buffers a step fills and leaves: one set per thread, not per model, so that an idle
// model costs none of them (at 10,000 models of 100 terms they were 2 MB). A model's steps
// run one at a time on one thread, and each buffer is used by one function, which no
// other user of the same buffer calls.
struct StepBuffers {
  std::vector<double> kernel_values;  // MergeSmallestTerm's k(x_m, x_n)
  std::vector<MergeLossEstimate> merge_estimates;
  std::vector<double> merge_support;  // x_m, copied out of the expansion
  std::vector<double> merge_point;    // z, the merged term
  std::vector<double> retired_support;
  SparseRows sparse_input;  // a dense input's non-zeros, under sparse storage
};

StepBuffers& ThreadStepBuffers() {
  thread_local StepBuffers buffers;
  return buffers;
}

// InvalidArgument unless `rows` holds `terms` rows, each a valid input of `config`.
absl::Status ValidateSparseTerms(absl::string_view name, const SparseRows& rows,
                                 size_t terms, const ModelConfig& config) {
  auto inconsistent = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent model state: ", name, " ", what));
  };
  if (rows.size() != terms) {
    return inconsistent(absl::StrCat("has ", rows.size(), " rows for ", terms, " terms"));
  }
  absl::Status status = ValidateSparseRowsShape(name, rows);
  for (size_t i = 0; status.ok() && i < terms; ++i) {
    status = ValidateSparseVector(absl::StrCat(name, "[", i, "]"), rows.Row(i), config.dim,
                                  config.sparse.max_nonzeros);
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent model state: ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status Inconsistent(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("inconsistent model state: ", what));
}

Expansion::Storage StorageOf(const ModelConfig& config) {
  return config.sparse_storage() ? Expansion::Storage::kSparse : Expansion::Storage::kDense;
}

// What one slot of `config`'s expansion costs at most (the averaged sums if `averaged`).
size_t WorstCaseSlotBytes(const ModelConfig& config, bool averaged) {
  return config.sparse_storage()
             ? Expansion::SparseBytesPerSlot(config.sparse.max_nonzeros, averaged)
             : Expansion::BytesPerSlot(config.dim, averaged);
}

}  // namespace

uint64_t NormaModel::MaxRetiredTerms(const ModelConfig& config) {
  // Those removed within the two blocks the window spans: at most the max_terms alive when
  // they began plus two per step (a step adds one term and MERGE makes one more).
  if (!config.averaged || config.budget.max_terms == 0) return 0;
  return uint64_t{config.budget.max_terms} + 4 * EffectiveAveragingWindow(config);
}

NormaModel::NormaModel(const ModelConfig& config)
    : Model(config),
      kernel_(config.kernel, config.dim),
      expansion_(config.dim, config.averaged, config.budget.max_terms, StorageOf(config)),
      retired_(config.averaged ? std::make_unique<Expansion>(config.dim, /*track_average=*/true,
                                                             MaxRetiredTerms(config),
                                                             StorageOf(config))
                               : nullptr),
      average_window_(EffectiveAveragingWindow(config)),
      min_abs_coefficient_bound_(std::numeric_limits<double>::infinity()) {}

size_t NormaModel::WorstCaseMemoryBytes(const ModelConfig& config) {
  if (config.budget.max_terms == 0) return SIZE_MAX;
  const uint64_t dim = config.dim;
  // Slots are allocated in cache-line groups, so a full expansion may hold up to
  // kSlotAlignment more slots than its cap.
  const uint64_t terms = uint64_t{config.budget.max_terms} + Expansion::kSlotAlignment;
  const uint64_t retired = config.averaged ? MaxRetiredTerms(config) + Expansion::kSlotAlignment
                                           : 0;
  const uint64_t window = config.regret_window;
  const uint64_t window_bytes = window * (dim + 2) * sizeof(double);
  const uint64_t gram_bytes = window * window * sizeof(double);
  return terms * WorstCaseSlotBytes(config, config.averaged) +
         retired * WorstCaseSlotBytes(config, true) + window_bytes + gram_bytes;
}

absl::StatusOr<std::unique_ptr<NormaModel>> NormaModel::Create(const ModelConfig& config) {
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  return std::unique_ptr<NormaModel>(new NormaModel(config));
}

absl::StatusOr<std::unique_ptr<NormaModel>> NormaModel::FromState(const ModelState& state) {
  const ModelConfig& config = state.config;
  OKL_RETURN_IF_ERROR(ValidateConfig(config));
  OKL_RETURN_IF_ERROR(ValidateTermLayout(state));
  OKL_RETURN_IF_ERROR(CheckFiniteTerms(state));
  OKL_RETURN_IF_ERROR(ValidateStateScalars(state));
  OKL_RETURN_IF_ERROR(ValidateTermRanges(state));
  if (!state.weights.empty() || !state.weight_sums.empty()) {
    return Inconsistent("a kernel expansion has no random-feature weights");
  }
  if (HasTrackerFields(state)) {
    return Inconsistent(
        "a kernel expansion has no KRLS tracker posterior (posterior_mean, "
        "posterior_covariance, inverse_kernel, kernel_matrix, signal power)");
  }
  OKL_RETURN_IF_ERROR(ValidateAverageWindowState(state));

  std::unique_ptr<NormaModel> model(new NormaModel(config));
  model->RestoreTerms(state);
  model->RestoreRetiredTerms(state);
  model->average_block_start_ = state.average_block_start;
  model->average_previous_start_ = state.average_previous_start;
  model->average_previous_offset_sum_ = state.average_previous_offset_sum;
  model->RestoreStateScalars(state);
  model->scale_ = state.scale;
  model->average_sum_ = state.average_sum;
  model->average_offset_sum_ = state.average_offset_sum;
  model->terms_removed_ = state.terms_removed;
  model->min_abs_coefficient_bound_ = model->expansion_.MinAbsCoefficient();
  return model;
}

absl::Status NormaModel::ValidateTermLayout(const ModelState& state) {
  const ModelConfig& config = state.config;
  const size_t n = state.coefficients.size();
  if (config.sparse_storage()) {
    OKL_RETURN_IF_ERROR(ValidateSparseTerms("sparse_support", state.sparse_support, n, config));
    OKL_RETURN_IF_ERROR(ValidateSparseTerms("retired_sparse_support",
                                            state.retired_sparse_support,
                                            state.retired_at.size(), config));
    if (!state.support.empty() || !state.retired_support.empty()) {
      return Inconsistent("a sparse-storage model lists its terms in sparse_support only");
    }
  } else if (state.support.size() != n * config.dim) {
    return Inconsistent(absl::StrCat("support holds ", state.support.size(),
                                     " values, expected ", n, " terms x dim ", config.dim));
  } else if (!state.sparse_support.empty() || !state.retired_sparse_support.empty()) {
    return Inconsistent("a dense-storage model has no sparse_support");
  }
  if (state.added_at.size() != n) {
    return Inconsistent(
        absl::StrCat("added_at has ", state.added_at.size(), " entries for ", n, " terms"));
  }
  const size_t average_terms = config.averaged ? n : 0;
  if (state.average_base.size() != average_terms ||
      state.average_mark.size() != average_terms) {
    return Inconsistent(
        absl::StrCat("averaged-hypothesis arrays have ", state.average_base.size(), " and ",
                     state.average_mark.size(), " entries, expected ", average_terms));
  }
  if (config.budget.max_terms > 0 && n > config.budget.max_terms) {
    return Inconsistent(
        absl::StrCat(n, " terms exceed budget.max_terms ", config.budget.max_terms));
  }
  return absl::OkStatus();
}

absl::Status NormaModel::CheckFiniteTerms(const ModelState& state) {
  OKL_RETURN_IF_ERROR(CheckFiniteValues("support", state.support));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("coefficients", state.coefficients));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("average_base", state.average_base));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("average_mark", state.average_mark));
  for (const auto& [name, value] : {std::pair<absl::string_view, double>{"scale", state.scale},
                                    {"average_sum", state.average_sum}}) {
    if (!std::isfinite(value)) return Inconsistent(absl::StrCat(name, " is ", value));
  }
  return absl::OkStatus();
}

absl::Status NormaModel::ValidateTermRanges(const ModelState& state) {
  const ModelConfig& config = state.config;
  const size_t n = state.coefficients.size();
  if (!(state.scale > 0 && state.scale <= 1)) {
    return Inconsistent(absl::StrCat("scale must be in (0, 1], got ", state.scale));
  }
  if (config.averaged) {
    // Step keeps u in [0, kMaxAverageSum] (it folds above) and each mark in [0, u] (u when
    // the term joined, 0 after a fold). Outside these the next fold, base += a (u - mark),
    // can overflow (tests/fuzz/regressions/snapshot/average_mark_far_below_zero.snap).
    if (!(state.average_sum >= 0 && state.average_sum <= kMaxAverageSum)) {
      return Inconsistent(absl::StrCat("average_sum must be in [0, ", kMaxAverageSum, "], got ",
                                       state.average_sum));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!(state.average_mark[i] >= 0 && state.average_mark[i] <= state.average_sum)) {
        return Inconsistent(absl::StrCat("average_mark[", i, "] = ", state.average_mark[i],
                                         " is outside [0, average_sum = ", state.average_sum,
                                         "]"));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // An averaged model keeps a term whose coefficient underflowed: its past still counts
    // in the average. Otherwise such terms are removed at once.
    if (state.coefficients[i] == 0 && !config.averaged) {
      return Inconsistent(absl::StrCat("coefficients[", i, "] is zero"));
    }
    if (state.added_at[i] < 1 || state.added_at[i] > state.steps) {
      return Inconsistent(absl::StrCat("added_at[", i, "] = ", state.added_at[i],
                                       " is outside [1, steps = ", state.steps, "]"));
    }
  }
  return absl::OkStatus();
}

void NormaModel::RestoreTerms(const ModelState& state) {
  const ModelConfig& config = state.config;
  const size_t n = state.coefficients.size();
  expansion_.Reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const double mark = config.averaged ? state.average_mark[i] : 0.0;
    if (config.sparse_storage()) {
      expansion_.Append(state.sparse_support.Row(i), state.coefficients[i], state.added_at[i],
                        mark);
    } else {
      expansion_.Append(absl::MakeConstSpan(state.support).subspan(i * config.dim, config.dim),
                        state.coefficients[i], state.added_at[i], mark);
    }
  }
  if (config.averaged) {
    // A state written before averaging windows existed has no previous-block sums: 0.
    for (size_t i = 0; i < n; ++i) {
      expansion_.set_average_base(i, state.average_base[i]);
      if (!state.average_previous.empty()) {
        expansion_.set_average_previous(i, state.average_previous[i]);
      }
    }
  }
}

void NormaModel::RestoreRetiredTerms(const ModelState& state) {
  const ModelConfig& config = state.config;
  const size_t retired = state.retired_at.size();  // 0 unless averaged (validated above)
  if (retired > 0) retired_->Reserve(retired);
  for (size_t i = 0; i < retired; ++i) {
    if (config.sparse_storage()) {
      retired_->Append(state.retired_sparse_support.Row(i), 0.0, state.retired_at[i], 0.0);
    } else {
      retired_->Append(
          absl::MakeConstSpan(state.retired_support).subspan(i * config.dim, config.dim), 0.0,
          state.retired_at[i], 0.0);
    }
    retired_->set_average_base(i, state.retired_sums[i]);
    retired_->set_average_previous(i, state.retired_previous_sums[i]);
  }
}

absl::Status NormaModel::ValidateAverageWindowState(const ModelState& state) {
  const ModelConfig& config = state.config;
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent model state: averaged hypothesis: ", what));
  };
  const size_t n = state.coefficients.size();
  const size_t retired = state.retired_at.size();
  if (!config.averaged) {
    if (!state.average_previous.empty() || retired > 0 || !state.retired_support.empty() ||
        !state.retired_sums.empty() || !state.retired_previous_sums.empty() ||
        state.average_block_start != 0 || state.average_previous_start != 0 ||
        state.average_previous_offset_sum != 0) {
      return inconsistent("the config does not track it, but the state holds its sums");
    }
    return absl::OkStatus();
  }
  if (!state.average_previous.empty() && state.average_previous.size() != n) {
    return inconsistent(absl::StrCat("average_previous has ", state.average_previous.size(),
                                     " entries for ", n, " terms"));
  }
  const size_t retired_dim = config.sparse_storage() ? 0 : config.dim;
  if (state.retired_support.size() != retired * retired_dim ||
      state.retired_sums.size() != retired || state.retired_previous_sums.size() != retired) {
    return inconsistent(absl::StrCat(
        "retired terms have ", state.retired_support.size(), " input values, ",
        state.retired_sums.size(), " and ", state.retired_previous_sums.size(),
        " sums for ", retired, " steps at dim ", config.dim));
  }
  const uint64_t max_retired = MaxRetiredTerms(config);
  if (max_retired > 0 && retired > max_retired) {
    return inconsistent(absl::StrCat(retired, " retired terms exceed the ", max_retired,
                                     " its window can need"));
  }
  OKL_RETURN_IF_ERROR(CheckFiniteValues("average_previous", state.average_previous));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("retired_support", state.retired_support));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("retired_sums", state.retired_sums));
  OKL_RETURN_IF_ERROR(
      CheckFiniteValues("retired_previous_sums", state.retired_previous_sums));
  if (!std::isfinite(state.average_previous_offset_sum)) {
    return inconsistent(absl::StrCat("average_previous_offset_sum is ",
                                     state.average_previous_offset_sum));
  }
  if (!(state.average_previous_start <= state.average_block_start &&
        state.average_block_start <= state.steps)) {
    return inconsistent(absl::StrCat(
        "blocks start at steps ", state.average_previous_start, " and ",
        state.average_block_start, "; they must be in order and at most steps = ",
        state.steps));
  }
  if (EffectiveAveragingWindow(config) == 0 && state.average_block_start != 0) {
    return inconsistent("a model averaging every step since the first has one block");
  }
  for (size_t i = 0; i < retired; ++i) {
    if (!(state.retired_at[i] > state.average_previous_start &&
          state.retired_at[i] <= state.steps)) {
      return inconsistent(absl::StrCat("retired_at[", i, "] = ", state.retired_at[i],
                                       " is outside (", state.average_previous_start,
                                       ", steps = ", state.steps, "]"));
    }
  }
  return absl::OkStatus();
}

ModelState NormaModel::ExportState() const {
  ModelState state;
  state.config = config_;
  const size_t n = expansion_.size();
  const size_t dim = config_.dim;
  const bool sparse = config_.sparse_storage();
  if (!sparse) state.support.resize(n * dim);
  state.coefficients.resize(n);
  state.added_at.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (sparse) {
      state.sparse_support.Append(expansion_.SparseSupport(i));
    } else {
      expansion_.CopySupport(i, state.support.data() + i * dim);
    }
    state.coefficients[i] = expansion_.coefficient(i);
    state.added_at[i] = expansion_.added_at(i);
  }
  if (config_.averaged) {
    state.average_base.resize(n);
    state.average_mark.resize(n);
    state.average_previous.resize(n);
    for (size_t i = 0; i < n; ++i) {
      state.average_base[i] = expansion_.average_base(i);
      state.average_mark[i] = expansion_.average_mark(i);
      state.average_previous[i] = expansion_.average_previous(i);
    }
    const size_t retired = retired_->size();
    if (!sparse) state.retired_support.resize(retired * dim);
    state.retired_sums.resize(retired);
    state.retired_previous_sums.resize(retired);
    state.retired_at.resize(retired);
    for (size_t i = 0; i < retired; ++i) {
      if (sparse) {
        state.retired_sparse_support.Append(retired_->SparseSupport(i));
      } else {
        retired_->CopySupport(i, state.retired_support.data() + i * dim);
      }
      state.retired_sums[i] = retired_->average_base(i);
      state.retired_previous_sums[i] = retired_->average_previous(i);
      state.retired_at[i] = retired_->added_at(i);
    }
  }
  ExportStateScalars(&state);
  state.scale = scale_;
  state.average_sum = average_sum_;
  state.average_offset_sum = average_offset_sum_;
  state.average_block_start = average_block_start_;
  state.average_previous_start = average_previous_start_;
  state.average_previous_offset_sum = average_previous_offset_sum_;
  state.terms_removed = terms_removed_;
  return state;
}

absl::StatusOr<Observation> NormaModel::Step(absl::Span<const double> x, double y) {
  if (!config_.sparse_storage()) return StepOn(x, y);
  SparseRows& sparse = ThreadStepBuffers().sparse_input;
  sparse.clear();
  AppendNonZeros(x, &sparse);
  return StepOn(sparse.Row(0), y);
}

absl::StatusOr<Observation> NormaModel::StepSparse(SparseVectorView x, double y) {
  if (!config_.sparse_storage()) return Model::StepSparse(x, y);
  return StepOn(x, y);
}

template <typename Input>
absl::StatusOr<Observation> NormaModel::StepOn(const Input& x, double y) {
  // t is also every new term's added_at; a wrapped counter would leave a state FromState
  // rejects.
  OKL_RETURN_IF_ERROR(CheckStepCounter());
  // 1-2: the prequential prediction and the loss's derivative there.
  const StepScalars step =
      ComputeStepScalars(scale_ * expansion_.Dot(kernel_, x) + offset_, y);
  const double eta = step.eta;
  const double alpha = -eta * step.at.derivative;
  // The new term is stored unscaled, alpha / scale, and a huge eta0 can make alpha finite
  // but that not; after MaybeRenormalize the scale is at least kMinScale
  // (tests/fuzz/regressions/config_text/huge_eta0_coefficient_overflow.textproto).
  const double stored_alpha = alpha / std::max(scale_ * (1.0 - eta * config_.lambda), kMinScale);
  const bool starts_block = config_.averaged && average_window_ > 0 &&
                            steps_ - average_block_start_ >= average_window_;
  OKL_RETURN_IF_ERROR(CheckStepFinite(
      step, std::isfinite(stored_alpha) && AverageSumsStayFinite(starts_block)));

  if (config_.averaged) {
    if (starts_block) StartAverageBlock();
    // f_t, which made this step's prediction, joins the running sum of hypotheses.
    average_sum_ += scale_;
    average_offset_sum_ += offset_;
  }
  // 3: shrink every coefficient at once through the common scale.
  scale_ *= 1.0 - eta * config_.lambda;
  MaybeRenormalize();
  // b, the margin and steps() = t (every new term's added_at) before the new term.
  const Observation observation = CommitStepScalars(step, x, y);
  // 4-5: the new term, then drop_below and the budget.
  if (alpha != 0) {
    InsertWithinBudget(x, alpha / scale_);
  } else {
    DropBelowThreshold();
  }
  return observation;
}

bool NormaModel::AverageSumsStayFinite(bool starts_block) const {
  if (!config_.averaged) return true;
  // A new block keeps the sums so far as its previous block and starts its own at
  // a_i scale_ and b (finite); otherwise f_t joins the current block's sums, which a fold
  // or a retirement later this step stores. Huge coefficients (a restored state can hold
  // them) must fail the step here, not leave an inf that no snapshot can carry
  // (tests/fuzz/regressions/snapshot/averaged_sums_overflow_at_block_start.snap).
  if (starts_block) return expansion_.SummedCoefficientsFinite(average_sum_);
  return std::isfinite(average_offset_sum_ + offset_) &&
         expansion_.SummedCoefficientsFinite(average_sum_ + scale_);
}

void NormaModel::MaybeRenormalize() {
  const bool fold_average = config_.averaged && average_sum_ > kMaxAverageSum;
  if (scale_ >= kMinScale && !fold_average) return;
  if (config_.averaged) {
    expansion_.FoldAverage(average_sum_);
    average_sum_ = 0.0;
  }
  expansion_.ScaleCoefficients(scale_);
  min_abs_coefficient_bound_ *= scale_;
  scale_ = 1.0;
  // Coefficients that underflowed to 0 have no effect on f: remove them, as a zero
  // coefficient is never stored (the averaged model keeps them for their past sums).
  if (min_abs_coefficient_bound_ == 0 && !config_.averaged) {
    RemoveTermsWhere([](double coefficient) { return coefficient == 0; });
  }
}

void NormaModel::StartAverageBlock() {
  // The new previous block starts after the current one's start: a term retired by then
  // is in none of the hypotheses averaged from now on.
  retired_->RemoveAddedAtMost(average_block_start_);
  expansion_.StartAverageBlock(average_sum_);
  retired_->StartAverageBlock(0.0);
  average_sum_ = 0.0;
  average_previous_offset_sum_ = average_offset_sum_;
  average_offset_sum_ = 0.0;
  average_previous_start_ = average_block_start_;
  average_block_start_ = steps_;
}

void NormaModel::RetireTerm(size_t slot) {
  if (!config_.averaged) return;
  // It was part of f_1 .. f_{steps_}: its sums are final, so its coefficient is 0.
  if (config_.sparse_storage()) {
    retired_->Append(expansion_.SparseSupport(slot), 0.0, steps_, 0.0);
  } else {
    std::vector<double>& support = ThreadStepBuffers().retired_support;
    support.resize(config_.dim);
    expansion_.CopySupport(slot, support.data());
    retired_->Append(support, 0.0, steps_, 0.0);
  }
  const size_t r = retired_->size() - 1;
  retired_->set_average_base(r, expansion_.SummedCoefficient(slot, average_sum_));
  retired_->set_average_previous(r, expansion_.average_previous(slot));
}

template <typename Predicate>
void NormaModel::RemoveTermsWhere(Predicate remove) {
  size_t slot = 0;
  while (slot < expansion_.size()) {
    if (remove(expansion_.coefficient(slot))) {
      RetireTerm(slot);
      expansion_.Remove(slot);  // the last term moves into `slot`; look at it next
      ++terms_removed_;
    } else {
      ++slot;
    }
  }
  min_abs_coefficient_bound_ = expansion_.MinAbsCoefficient();
}

void NormaModel::DropBelowThreshold() {
  const double threshold = config_.budget.drop_below;
  if (threshold <= 0 || min_abs_coefficient_bound_ * scale_ >= threshold) return;
  const double scale = scale_;
  RemoveTermsWhere([=](double coefficient) {
    return std::abs(coefficient) * scale < threshold;
  });
}

template <typename Input>
void NormaModel::InsertWithinBudget(const Input& x, double coefficient) {
  DropBelowThreshold();
  const double abs_coefficient = std::abs(coefficient);
  if (abs_coefficient * scale_ < config_.budget.drop_below) {
    ++terms_removed_;  // added and dropped in the same step
    return;
  }
  const size_t max_terms = config_.budget.max_terms;
  if (max_terms == 0 || expansion_.size() < max_terms) {
    expansion_.Append(x, coefficient, steps_, average_sum_);
    min_abs_coefficient_bound_ = std::min(min_abs_coefficient_bound_, abs_coefficient);
    return;
  }
  // Full: one of the size + 1 candidates goes. The new term is the newest, so it is never
  // the OLDEST victim, and on a SMALLEST tie the older term goes and the new one stays.
  ++terms_removed_;
  if constexpr (std::is_same_v<Input, absl::Span<const double>>) {
    // Dense storage only (ValidateConfig).
    if (config_.budget.policy == BudgetPolicy::kMerge) {
      MergeSmallestTerm(x, coefficient);
      return;
    }
  }
  size_t victim;
  if (config_.budget.policy == BudgetPolicy::kOldest) {
    victim = expansion_.OldestSlot();
  } else {
    victim = expansion_.SmallestSlot();
    if (std::abs(expansion_.coefficient(victim)) > abs_coefficient) return;
  }
  RetireTerm(victim);
  expansion_.Replace(victim, x, coefficient, steps_, average_sum_);
  min_abs_coefficient_bound_ = std::min(min_abs_coefficient_bound_, abs_coefficient);
}

void NormaModel::MergeSmallestTerm(absl::Span<const double> x, double coefficient) {
  // m: the smallest |a| of the size + 1 terms, the oldest of those within a relative
  // kMergeTieTolerance of it. Terms often tie in exact arithmetic (with Pegasos steps
  // every unmerged term has |alpha| = 1 / (lambda t)), and rounding must not decide.
  const size_t size = expansion_.size();
  const size_t new_term = size;  // the candidate index that stands for the new term
  const double smallest = std::min(expansion_.MinAbsCoefficient(), std::abs(coefficient));
  const size_t m = expansion_.OldestSlotAtMost(smallest * (1 + kMergeTieTolerance));
  const bool m_is_new = m == new_term;  // no stored term is that small
  StepBuffers& buffers = ThreadStepBuffers();
  std::vector<double>& kernel_values = buffers.kernel_values;
  std::vector<MergeLossEstimate>& merge_estimates = buffers.merge_estimates;
  absl::Span<const double> x_m = x;
  if (!m_is_new) {
    buffers.merge_support.resize(config_.dim);
    expansion_.CopySupport(m, buffers.merge_support.data());
    x_m = buffers.merge_support;
  }
  const double a_m = m_is_new ? coefficient : expansion_.coefficient(m);
  auto coefficient_of = [&](size_t i) {
    return i == new_term ? coefficient : expansion_.coefficient(i);
  };
  // A partner has m's sign and is not m.
  auto mergeable = [&](size_t n) { return n != m && a_m != 0 && a_m * coefficient_of(n) > 0; };

  // k(x_m, x_n) for every candidate n, the new term last; then the merge loss of each
  // same-sign candidate estimated from the table, and the best upper bound on a loss.
  kernel_values.resize(size + 1);
  expansion_.KernelValues(kernel_, x_m, absl::MakeSpan(kernel_values).first(size));
  kernel_values[new_term] = m_is_new ? 1.0 : kernel_.Evaluate(x_m, x);
  merge_estimates.assign(size + 1, {.loss = std::numeric_limits<double>::infinity()});
  double best_bound = std::numeric_limits<double>::infinity();
  for (size_t n = 0; n <= size; ++n) {
    if (!mergeable(n)) continue;
    merge_estimates[n] =
        EstimateGaussianMergeLoss(std::abs(a_m), std::abs(coefficient_of(n)), kernel_values[n]);
    best_bound = std::min(best_bound, merge_estimates[n].loss + merge_estimates[n].error);
  }
  // Only the candidates the estimates cannot rule out are merged exactly; the least loss
  // wins, the lowest candidate index on a tie. (With no partner at all the bound is
  // infinite and rules nothing out: the test of mergeable() keeps m from merging with
  // itself, which wrote the new term past the end of the expansion and broke the age
  // order that OLDEST ties and later merges read.)
  size_t partner = new_term + 1;  // none
  GaussianMerge best;
  for (size_t n = 0; n <= size; ++n) {
    if (!mergeable(n) || merge_estimates[n].loss - merge_estimates[n].error > best_bound) {
      continue;
    }
    const GaussianMerge merge = MergeGaussianPair(
        std::abs(a_m), std::abs(coefficient_of(n)), kernel_values[n]);
    if (partner > new_term || merge.loss < best.loss) {
      partner = n;
      best = merge;
    }
  }

  // A merged coefficient lies between |a_m| and |a_m| + |a_n|: the sum overflows only for
  // coefficients near DBL_MAX, and the rounded products could underflow to 0 only for
  // subnormal ones (a restored state can hold both). m is removed then too: a stored
  // coefficient is finite and never 0.
  if (partner <= new_term &&
      (!std::isfinite(std::abs(a_m) + std::abs(coefficient_of(partner))) ||
       !(best.coefficient > 0))) {
    partner = new_term + 1;
  }
  if (partner > new_term) {
    // No term of m's sign (or no finite merge): m is removed, as SMALLEST would.
    if (!m_is_new) {
      RetireTerm(m);
      expansion_.Replace(m, x, coefficient, steps_, average_sum_);
    }
    min_abs_coefficient_bound_ = expansion_.MinAbsCoefficient();
    return;
  }
  // z = h x_m + (1 - h) x_n takes the partner's slot (m's if the partner is the new
  // term); the new term, if it is neither, takes m's.
  const double sign = a_m > 0 ? 1.0 : -1.0;
  const double a_z = sign * best.coefficient;
  const size_t z_slot = partner == new_term ? m : partner;
  std::vector<double>& z = buffers.merge_point;
  z.resize(config_.dim);
  for (size_t j = 0; j < config_.dim; ++j) {
    const double x_n = partner == new_term ? x[j] : expansion_.support(partner, j);
    z[j] = best.h * x_m[j] + (1 - best.h) * x_n;
  }
  const uint64_t added_at =
      m_is_new || partner == new_term
          ? steps_
          : std::max(expansion_.added_at(m), expansion_.added_at(partner));
  // z is a new term: m and its partner leave, and the averaged hypothesis keeps them.
  if (!m_is_new) RetireTerm(m);
  if (partner != new_term) RetireTerm(partner);
  expansion_.Replace(z_slot, z, a_z, added_at, average_sum_);
  if (!m_is_new && partner != new_term) {
    expansion_.Replace(m, x, coefficient, steps_, average_sum_);
  }
  min_abs_coefficient_bound_ =
      std::min({min_abs_coefficient_bound_, std::abs(a_z), std::abs(coefficient)});
}

double NormaModel::PredictUnchecked(absl::Span<const double> x, PredictionMode mode) const {
  if (!config_.sparse_storage()) return PredictOn(x, mode);
  // Predictions may run concurrently: each thread its own buffer.
  thread_local SparseRows nonzeros;
  nonzeros.clear();
  AppendNonZeros(x, &nonzeros);
  return PredictOn(nonzeros.Row(0), mode);
}

double NormaModel::PredictSparseUnchecked(SparseVectorView x, PredictionMode mode) const {
  if (!config_.sparse_storage()) return Model::PredictSparseUnchecked(x, mode);
  return PredictOn(x, mode);
}

template <typename Input>
double NormaModel::PredictOn(const Input& x, PredictionMode mode) const {
  if (mode == PredictionMode::kCurrent ||
      (mode == PredictionMode::kConfigured && !config_.averaged)) {
    return scale_ * expansion_.Dot(kernel_, x) + offset_;
  }
  // The mean of f_t over t in (average_previous_start_, steps_].
  const uint64_t hypotheses = steps_ - average_previous_start_;
  if (hypotheses == 0) return 0.0;  // the average of no hypotheses: f_1 = 0
  const double sum = expansion_.AveragedDot(kernel_, x, average_sum_) +
                     retired_->AveragedDot(kernel_, x, 0.0) + average_previous_offset_sum_ +
                     average_offset_sum_;
  return sum / static_cast<double>(hypotheses);
}

double NormaModel::SquaredNorm() const {
  const size_t n = expansion_.size();
  std::vector<double> x(config_.sparse_storage() ? 0 : config_.dim);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double f_i;
    if (config_.sparse_storage()) {
      f_i = expansion_.Dot(kernel_, expansion_.SparseSupport(i));
    } else {
      expansion_.CopySupport(i, x.data());
      f_i = expansion_.Dot(kernel_, x);
    }
    sum += expansion_.coefficient(i) * f_i;
  }
  return scale_ * scale_ * sum;
}

ModelStats NormaModel::stats() const {
  ModelStats stats = ScalarStats();
  stats.expansion_size = static_cast<uint32_t>(expansion_.size());
  stats.terms_removed = terms_removed_;
  const BudgetConfig& budget = config_.budget;
  const std::optional<double> c = loss_.DerivativeBound();
  const std::optional<double> x = kernel_.FeatureNormBound();
  if (config_.learning_rate.schedule == Schedule::kConstant && config_.lambda > 0 &&
      budget.max_terms > 0 && budget.policy == BudgetPolicy::kOldest &&
      budget.drop_below == 0 && c && x) {
    const double eta = config_.learning_rate.eta0;
    stats.truncation_error_bound =
        terms_removed_ == 0
            ? 0.0
            : std::pow(1 - eta * config_.lambda, budget.max_terms) * *c * *x / config_.lambda;
  }
  return stats;
}

}  // namespace okl
