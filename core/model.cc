#include "core/model.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/norma.h"
#include "core/random_features.h"
#include "core/status_macros.h"

namespace okl {

size_t WorstCaseMemoryBytes(const ModelConfig& config) {
  return config.random_features.dimension > 0
             ? RandomFeatureModel::WorstCaseMemoryBytes(config)
             : NormaModel::WorstCaseMemoryBytes(config);
}

double WorstCaseWorkPerExample(const ModelConfig& config) {
  const double dim = config.dim;
  if (config.random_features.dimension > 0) {
    const double features = config.random_features.dimension;
    return dim * features / 2 + features;
  }
  if (config.budget.max_terms == 0) return std::numeric_limits<double>::infinity();
  return dim * (static_cast<double>(config.budget.max_terms) +
                static_cast<double>(NormaModel::MaxRetiredTerms(config)));
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config) {
  if (config.random_features.dimension > 0) return RandomFeatureModel::Create(config);
  return NormaModel::Create(config);
}

absl::StatusOr<std::unique_ptr<Model>> ModelFromState(const ModelState& state) {
  if (state.config.random_features.dimension > 0) return RandomFeatureModel::FromState(state);
  return NormaModel::FromState(state);
}

absl::Status Model::CheckFiniteValues(absl::string_view name, absl::Span<const double> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "[", i, "] is ", values[i], "; values must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::ValidateRegretWindow(const ModelState& state) {
  const RegretWindow& window = state.regret_window;
  const size_t n = window.size();
  auto inconsistent = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("inconsistent model state: regret window ", what));
  };
  if (n > state.config.regret_window || n > state.steps) {
    return inconsistent(absl::StrCat("holds ", n, " examples, more than regret_window ",
                                     state.config.regret_window, " or steps ", state.steps));
  }
  if (window.xs.size() != n * state.config.dim || window.online_losses.size() != n) {
    return inconsistent(absl::StrCat("has ", window.xs.size(), " input values and ",
                                     window.online_losses.size(), " losses for ", n,
                                     " labels at dim ", state.config.dim));
  }
  if (n > 0 && window.last_step != state.steps) {
    return inconsistent(absl::StrCat("ends at step ", window.last_step, ", not at steps ",
                                     state.steps));
  }
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window input", window.xs));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window label", window.ys));
  OKL_RETURN_IF_ERROR(CheckFiniteValues("regret window loss", window.online_losses));
  for (size_t i = 0; i < n; ++i) {
    if (window.online_losses[i] < 0) {
      return inconsistent(absl::StrCat("loss ", i, " is negative"));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::ValidateInput(absl::Span<const double> x) const {
  if (x.size() != config_.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input has ", x.size(), " values but the model's dim is ", config_.dim));
  }
  return CheckFiniteValues("x", x);
}

absl::Status Model::ValidateExample(absl::Span<const double> x, double y) const {
  OKL_RETURN_IF_ERROR(ValidateInput(x));
  if (!std::isfinite(y)) {
    return absl::InvalidArgumentError(absl::StrCat("label y is ", y, "; it must be finite"));
  }
  if (IsClassificationLoss(config_.loss.type) && y != 1.0 && y != -1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("label y must be -1 or +1 for the ", LossTypeName(config_.loss.type),
                     " loss, got ", y));
  }
  return absl::OkStatus();
}

absl::StatusOr<Observation> Model::Observe(absl::Span<const double> x, double y) {
  OKL_RETURN_IF_ERROR(ValidateExample(x, y));
  return Step(x, y);
}

absl::Status Model::ValidateBatch(absl::Span<const double> xs,
                                       absl::Span<const double> ys) const {
  const size_t dim = config_.dim;
  if (xs.size() != ys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.size(),
                                                   " input values for ", ys.size(),
                                                   " labels at dim ", dim));
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    absl::Status status = ValidateExample(xs.subspan(i * dim, dim), ys[i]);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, ": ", status.message(), " (no example applied)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::ObserveBatch(absl::Span<const double> xs, absl::Span<const double> ys,
                                      std::vector<Observation>* out) {
  const size_t dim = config_.dim;
  OKL_RETURN_IF_ERROR(ValidateBatch(xs, ys));
  out->reserve(out->size() + ys.size());
  for (size_t i = 0; i < ys.size(); ++i) {
    absl::StatusOr<Observation> o = Step(xs.subspan(i * dim, dim), ys[i]);
    if (!o.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "example ", i, ": ", o.status().message(), " (", i, " of ", ys.size(),
          " examples applied)"));
    }
    out->push_back(*o);
  }
  return absl::OkStatus();
}

absl::Status Model::CheckPredictionMode(PredictionMode mode) const {
  if (mode == PredictionMode::kAveraged && !config_.averaged) {
    return absl::FailedPreconditionError(
        "the model does not track the averaged hypothesis; create it with averaged: true");
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Model::Predict(absl::Span<const double> x,
                                           PredictionMode mode) const {
  OKL_RETURN_IF_ERROR(ValidateInput(x));
  OKL_RETURN_IF_ERROR(CheckPredictionMode(mode));
  return PredictUnchecked(x, mode);
}

absl::Status Model::PredictBatch(absl::Span<const double> xs, absl::Span<double> out,
                                      PredictionMode mode) const {
  const size_t dim = config_.dim;
  if (xs.size() != out.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat("batch holds ", xs.size(),
                                                   " input values for ", out.size(),
                                                   " outputs at dim ", dim));
  }
  OKL_RETURN_IF_ERROR(CheckPredictionMode(mode));
  for (size_t i = 0; i < out.size(); ++i) {
    absl::Status status = ValidateInput(xs.subspan(i * dim, dim));
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", status.message()));
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = PredictUnchecked(xs.subspan(i * dim, dim), mode);
  }
  return absl::OkStatus();
}

}  // namespace okl
