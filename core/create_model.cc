#include "core/create_model.h"

#include <limits>

#include "core/krls_tracker.h"
#include "core/multiclass_norma.h"
#include "core/norma.h"
#include "core/random_features.h"
#include "core/select.h"

namespace okl {

size_t WorstCaseMemoryBytes(const ModelConfig& config) {
  if (config.select_kind()) return SelectModel::WorstCaseMemoryBytes(config);
  if (config.multiclass()) return MulticlassNormaModel::WorstCaseMemoryBytes(config);
  if (config.krls_tracker_kind()) return KrlsTrackerModel::WorstCaseMemoryBytes(config);
  return config.random_features.dimension > 0
             ? RandomFeatureModel::WorstCaseMemoryBytes(config)
             : NormaModel::WorstCaseMemoryBytes(config);
}

std::optional<ModelCapacity> LargestState(const ModelConfig& config) {
  // A selection's capacity is its candidates' (SelectModel).
  if (config.select_kind()) return std::nullopt;
  if (config.krls_tracker_kind()) {
    return ModelCapacity{.bases = uint64_t{config.krls_tracker.max_basis} + 1};
  }
  if (config.random_features.dimension > 0) {
    return ModelCapacity{.features = config.random_features.dimension};
  }
  if (config.budget.max_terms == 0) return std::nullopt;
  if (config.multiclass()) {
    return ModelCapacity{.terms = uint64_t{config.budget.max_terms} + 1,
                         .classes = config.max_classes};
  }
  return ModelCapacity{.terms = config.budget.max_terms,
                       .retired_terms = NormaModel::MaxRetiredTerms(config)};
}

double WorstCaseWorkPerExample(const ModelConfig& config) {
  if (config.select_kind()) return SelectModel::WorstCaseWorkPerExample(config);
  const std::optional<ModelCapacity> capacity = LargestState(config);
  if (!capacity.has_value()) return std::numeric_limits<double>::infinity();
  const double dim = config.dim;
  const double features = static_cast<double>(capacity->features);
  const double bases = static_cast<double>(capacity->bases);
  // Random features: the projections over dim inputs, then the features' weights. A KRLS
  // tracker: the kernel row, then about six passes over its (M + 1) x (M + 1) matrices.
  const double terms = static_cast<double>(capacity->terms + capacity->retired_terms);
  // A multi-class expansion's scores add a multiply per term and class, and its merges a
  // dot product per term.
  const double classes = static_cast<double>(capacity->classes);
  return dim * (features / 2 + terms + bases) + features + 6 * bases * bases +
         2 * terms * classes;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config) {
  if (config.select_kind()) return SelectModel::Create(config);
  if (config.multiclass()) return MulticlassNormaModel::Create(config);
  if (config.krls_tracker_kind()) return KrlsTrackerModel::Create(config);
  if (config.random_features.dimension > 0) return RandomFeatureModel::Create(config);
  return NormaModel::Create(config);
}

absl::StatusOr<std::unique_ptr<Model>> ModelFromState(const ModelState& state) {
  if (state.config.select_kind()) return SelectModel::FromState(state);
  if (!state.candidate_states.empty() || !state.candidates.empty() || state.champion != 0 ||
      state.champion_changes != 0 || state.input_scale != 0 || !state.warmup_inputs.empty() ||
      !state.warmup_labels.empty()) {
    return absl::InvalidArgumentError(
        "inconsistent model state: a model that does not select sets a selection's fields");
  }
  if (state.config.multiclass()) return MulticlassNormaModel::FromState(state);
  if (state.config.krls_tracker_kind()) return KrlsTrackerModel::FromState(state);
  if (state.config.random_features.dimension > 0) return RandomFeatureModel::FromState(state);
  return NormaModel::FromState(state);
}

}  // namespace okl
