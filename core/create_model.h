// core/create_model.h
//
// The model kinds' common front door: CreateModel makes the kind a config describes,
// ModelFromState the kind a state describes, and the bounds below size a model before it
// exists (the server's quotas, its snapshot limits, its units of work). This is the one
// file of the core that knows every kind; core/model.h, which the kinds implement, knows
// none of them.
//   NormaModel          the kernel expansion (core/norma.h), the default;
//   RandomFeatureModel  random Fourier features (core/random_features.h), chosen by
//                       config.random_features.dimension > 0;
//   KrlsTrackerModel    the KRLS tracker (core/krls_tracker.h), chosen by
//                       config.krls_tracker.max_basis > 0;
//   SelectModel         a selection among candidates (core/select.h), chosen by
//                       config.select;
//   MulticlassNormaModel  a kernel expansion with a coefficient per class
//                       (core/multiclass_norma.h), chosen by a multi-class loss.
//
// Example:
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> model, okl::CreateModel(config));
//   OKL_ASSIGN_OR_RETURN(std::unique_ptr<okl::Model> copy,
//                        okl::ModelFromState(model->ExportState()));
#ifndef OKL_CORE_CREATE_MODEL_H_
#define OKL_CORE_CREATE_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "core/config.h"
#include "core/model.h"

namespace okl {

// The model `config` describes, empty, of the kind listed above. InvalidArgument if
// ValidateConfig(config) fails.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config);
// The model `state` describes (the kind chosen as CreateModel does). InvalidArgument if
// the state is inconsistent.
absl::StatusOr<std::unique_ptr<Model>> ModelFromState(const ModelState& state);


// The most memory a model of `config` can come to hold, in bytes (what the server's
// memory quotas count for a model, before it exists). SIZE_MAX for an unbounded expansion.
size_t WorstCaseMemoryBytes(const ModelConfig& config);

// The most a model of `config` can come to hold, whatever its kind: what its memory, its
// snapshot and its work per example are bounded by. nullopt for an expansion without a
// budget, which has no bound.
struct ModelCapacity {
  uint64_t terms = 0;          // kernel-expansion terms: budget.max_terms
  uint64_t retired_terms = 0;  // removed terms an averaged expansion keeps for its average
  uint64_t features = 0;       // random features: random_features.dimension
  uint64_t bases = 0;          // a KRLS tracker: krls_tracker.max_basis (+1 while a step
                               // decides which to prune)
  uint64_t classes = 0;        // a multi-class expansion: max_classes coefficients per term
};
std::optional<ModelCapacity> LargestState(const ModelConfig& config);

// Roughly the multiply-adds one step or one prediction of a model of `config` costs at
// most: dim times the terms a sweep visits (an averaged expansion's retired terms
// included), or a random-feature model's projections and weights. What the server sizes
// its units of work by. Infinite for an expansion without a budget.
double WorstCaseWorkPerExample(const ModelConfig& config);

}  // namespace okl

#endif  // OKL_CORE_CREATE_MODEL_H_
