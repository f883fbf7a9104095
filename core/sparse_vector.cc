#include "core/sparse_vector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace okl {

absl::Status ValidateSparseVector(absl::string_view name, SparseVectorView x, uint64_t dim,
                                  uint64_t max_nonzeros) {
  if (x.indices.size() != x.values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has ", x.indices.size(),
                                                   " indices and ", x.values.size(),
                                                   " values; give one value per index"));
  }
  if (x.indices.size() > max_nonzeros) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " has ", x.indices.size(), " non-zeros, more than the model's ",
        max_nonzeros, " (sparse.max_nonzeros)"));
  }
  for (size_t k = 0; k < x.indices.size(); ++k) {
    if (x.indices[k] >= dim) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".indices[", k, "] = ",
                                                     x.indices[k], " is not below dim ", dim));
    }
    if (k > 0 && x.indices[k] <= x.indices[k - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".indices must strictly increase; indices[", k, "] = ", x.indices[k],
          " follows ", x.indices[k - 1]));
    }
    if (!std::isfinite(x.values[k])) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".values[", k, "] is ",
                                                     x.values[k], "; values must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSparseRowsShape(absl::string_view name, const SparseRows& rows) {
  if (rows.values.size() != rows.indices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has ", rows.indices.size(),
                                                   " indices and ", rows.values.size(),
                                                   " values"));
  }
  uint64_t start = 0;
  for (size_t r = 0; r < rows.ends.size(); ++r) {
    if (rows.ends[r] < start || rows.ends[r] > rows.indices.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": row ", r, " ends at ", rows.ends[r], ", outside [", start, ", ",
          rows.indices.size(), "]"));
    }
    start = rows.ends[r];
  }
  if (start != rows.indices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the rows end at ", start, " of ",
                                                   rows.indices.size(), " entries"));
  }
  return absl::OkStatus();
}

void Densify(SparseVectorView x, absl::Span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  for (size_t k = 0; k < x.indices.size(); ++k) out[x.indices[k]] = x.values[k];
}

void AppendNonZeros(absl::Span<const double> x, SparseRows* rows) {
  for (size_t j = 0; j < x.size(); ++j) {
    if (x[j] != 0) {
      rows->indices.push_back(static_cast<uint32_t>(j));
      rows->values.push_back(x[j]);
    }
  }
  rows->ends.push_back(rows->indices.size());
}

}  // namespace okl
