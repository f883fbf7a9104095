// proto/inputs.cc

#include "proto/inputs.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace okl {

absl::Status CheckVector(const v1::Vector& vector, uint32_t dim) {
  const size_t values = vector.values_size();
  if (vector.indices().empty()) {
    if (values != dim) {
      return absl::InvalidArgumentError(absl::StrCat("dense vector has ", values,
                                                     " values but the model's dim is ", dim,
                                                     " (set indices for a sparse vector)"));
    }
    return absl::OkStatus();
  }
  const size_t indices = vector.indices_size();
  if (values != indices) {
    return absl::InvalidArgumentError(absl::StrCat("sparse vector has ", indices,
                                                   " indices but ", values,
                                                   " values; give one value per index"));
  }
  for (size_t k = 0; k < indices; ++k) {
    const uint32_t index = vector.indices(k);
    if (index >= dim) {
      return absl::InvalidArgumentError(absl::StrCat("sparse index indices[", k, "] = ", index,
                                                     " is not below the model's dim ", dim,
                                                     " (indices are 0-based)"));
    }
    if (k > 0 && index <= vector.indices(k - 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse indices must be strictly increasing: indices[", k, "] = ", index,
                       " follows ", vector.indices(k - 1)));
    }
  }
  return absl::OkStatus();
}

namespace {

// Writes a vector that passed CheckVector for out.size() densely into `out`.
void DensifyChecked(const v1::Vector& vector, absl::Span<double> out) {
  if (vector.indices().empty()) {
    std::copy(vector.values().begin(), vector.values().end(), out.begin());
    return;
  }
  std::fill(out.begin(), out.end(), 0.0);
  for (int k = 0; k < vector.indices_size(); ++k) out[vector.indices(k)] = vector.values(k);
}

absl::Status CheckDenseBytes(size_t n, uint32_t dim, size_t max_bytes) {
  const size_t bytes = DenseBatchBytes(n, dim);
  if (bytes <= max_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the request's ", n, " vectors take ", bytes, " bytes as dense doubles at dim ", dim,
      ", over this server's limit of ", max_bytes,
      " bytes per request (--max_request_bytes); send fewer per request"));
}

}  // namespace

absl::Status DensifyVector(const v1::Vector& vector, absl::Span<double> out) {
  OKL_RETURN_IF_ERROR(CheckVector(vector, static_cast<uint32_t>(out.size())));
  DensifyChecked(vector, out);
  return absl::OkStatus();
}

void ToCompactVector(absl::Span<const double> x, v1::Vector* out) {
  const auto nonzeros =
      static_cast<size_t>(std::count_if(x.begin(), x.end(), [](double v) { return v != 0; }));
  // A sparse vector without entries would read as an empty dense one: all zeros go dense.
  if (nonzeros == 0 || 3 * nonzeros >= 2 * x.size()) {
    out->mutable_values()->Add(x.begin(), x.end());
    return;
  }
  out->mutable_values()->Reserve(static_cast<int>(nonzeros));
  out->mutable_indices()->Reserve(static_cast<int>(nonzeros));
  for (size_t j = 0; j < x.size(); ++j) {
    if (x[j] == 0) continue;
    out->add_indices(static_cast<uint32_t>(j));
    out->add_values(x[j]);
  }
}

size_t DenseBatchBytes(size_t n, uint32_t dim) {
  return n * (size_t{dim} + 1) * sizeof(double);  // n <= 2^31, dim <= 2^32: no overflow
}

absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim, ExampleBatch* batch,
                       size_t max_bytes) {
  const size_t n = request.examples_size();
  for (size_t i = 0; i < n; ++i) {
    absl::Status status = CheckVector(request.examples(i).x(), dim);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("examples[", i, "].x: ", status.message()));
    }
  }
  OKL_RETURN_IF_ERROR(CheckDenseBytes(n, dim, max_bytes));
  batch->xs.resize(n * dim);
  batch->ys.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const v1::Example& example = request.examples(i);
    DensifyChecked(example.x(), absl::MakeSpan(batch->xs).subspan(i * dim, dim));
    batch->ys[i] = example.y();
  }
  return absl::OkStatus();
}

absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim, std::vector<double>* xs,
                       size_t max_bytes) {
  const size_t n = request.inputs_size();
  for (size_t i = 0; i < n; ++i) {
    absl::Status status = CheckVector(request.inputs(i), dim);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "]: ", status.message()));
    }
  }
  OKL_RETURN_IF_ERROR(CheckDenseBytes(n, dim, max_bytes));
  xs->resize(n * dim);
  for (size_t i = 0; i < n; ++i) {
    DensifyChecked(request.inputs(i), absl::MakeSpan(*xs).subspan(i * dim, dim));
  }
  return absl::OkStatus();
}

namespace {

// Appends a vector that passed CheckVector as a row of its non-zeros: a sparse vector's
// explicit zeros are dropped as a dense vector's are, so both forms give the same row.
// NaN is kept, for the model's validation to reject.
void AppendChecked(const v1::Vector& vector, SparseRows* rows) {
  if (vector.indices().empty()) {
    AppendNonZeros(absl::MakeConstSpan(vector.values().data(), vector.values_size()), rows);
    return;
  }
  for (int k = 0; k < vector.indices_size(); ++k) {
    if (vector.values(k) == 0) continue;
    rows->indices.push_back(vector.indices(k));
    rows->values.push_back(vector.values(k));
  }
  rows->ends.push_back(rows->indices.size());
}

// Checks every vector (name(i) names vector i in the error) and the rows' size.
template <typename VectorAt, typename Name>
absl::Status CheckSparseRequest(size_t n, uint32_t dim, size_t max_bytes, VectorAt vector_at,
                                Name name) {
  size_t entries = 0;
  for (size_t i = 0; i < n; ++i) {
    absl::Status status = CheckVector(vector_at(i), dim);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name(i), ": ", status.message()));
    }
    entries += vector_at(i).values_size();
  }
  const size_t bytes = SparseBatchBytes(n, entries);
  if (bytes <= max_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the request's ", n, " vectors take up to ", bytes,
      " bytes as rows of non-zeros, over "
      "this server's limit of ",
      max_bytes, " bytes per request (--max_request_bytes); send fewer per request"));
}

}  // namespace

size_t SparseBatchBytes(size_t n, size_t entries) {
  return entries * (sizeof(uint32_t) + sizeof(double)) +
         n * (sizeof(uint64_t) + sizeof(double));
}

absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim,
                       SparseExampleBatch* batch, size_t max_bytes) {
  const size_t n = request.examples_size();
  OKL_RETURN_IF_ERROR(CheckSparseRequest(
      n, dim, max_bytes, [&](size_t i) -> const v1::Vector& { return request.examples(i).x(); },
      [](size_t i) { return absl::StrCat("examples[", i, "].x"); }));
  batch->xs.clear();
  batch->ys.resize(n);
  for (size_t i = 0; i < n; ++i) {
    AppendChecked(request.examples(i).x(), &batch->xs);
    batch->ys[i] = request.examples(i).y();
  }
  return absl::OkStatus();
}

absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim, SparseRows* xs,
                       size_t max_bytes) {
  const size_t n = request.inputs_size();
  OKL_RETURN_IF_ERROR(CheckSparseRequest(
      n, dim, max_bytes, [&](size_t i) -> const v1::Vector& { return request.inputs(i); },
      [](size_t i) { return absl::StrCat("inputs[", i, "]"); }));
  xs->clear();
  for (size_t i = 0; i < n; ++i) AppendChecked(request.inputs(i), xs);
  return absl::OkStatus();
}

absl::Status DecodedRequest::Decode(const v1::ObserveRequest& request,
                                    const ModelConfig& config, size_t max_bytes) {
  dim_ = 0;
  sparse_ = config.sparse_storage();
  OKL_RETURN_IF_ERROR(sparse_ ? FromProto(request, config.dim, &sparse_batch_, max_bytes)
                              : FromProto(request, config.dim, &dense_batch_, max_bytes));
  // The class labels, if any example has one (the model's validation checks them; their
  // bytes are already bounded by the message's).
  class_labels_.clear();
  const auto& examples = request.examples();
  if (std::any_of(examples.begin(), examples.end(),
                  [](const v1::Example& e) { return !e.class_label().empty(); })) {
    class_labels_.reserve(examples.size());
    for (const v1::Example& e : examples) class_labels_.push_back(e.class_label());
  }
  dim_ = config.dim;
  return absl::OkStatus();
}

absl::Status DecodedRequest::Decode(const v1::PredictRequest& request,
                                    const ModelConfig& config, size_t max_bytes) {
  dim_ = 0;
  sparse_ = config.sparse_storage();
  dense_batch_.ys.clear();
  sparse_batch_.ys.clear();
  class_labels_.clear();
  OKL_RETURN_IF_ERROR(sparse_ ? FromProto(request, config.dim, &sparse_batch_.xs, max_bytes)
                              : FromProto(request, config.dim, &dense_batch_.xs, max_bytes));
  dim_ = config.dim;
  return absl::OkStatus();
}

InputBatch DecodedRequest::inputs() const {
  return sparse_ ? InputBatch::Sparse(sparse_batch_.xs)
                 : InputBatch::Dense(dense_batch_.xs, dim_ > 0 ? dim_ : 1);
}

void AppendToProto(absl::Span<const Observation> observations, v1::ObserveResponse* response) {
  auto* predictions = response->mutable_predictions();
  auto* losses = response->mutable_losses();
  predictions->Reserve(predictions->size() + observations.size());
  losses->Reserve(losses->size() + observations.size());
  for (const Observation& o : observations) {
    predictions->AddAlreadyReserved(o.prediction);
    losses->AddAlreadyReserved(o.loss);
  }
}

void AppendClassesToProto(absl::Span<const Observation> observations,
                          absl::Span<const std::string> classes,
                          v1::ObserveResponse* response) {
  auto* predicted = response->mutable_predicted_classes();
  predicted->Reserve(predicted->size() + static_cast<int>(observations.size()));
  for (const Observation& o : observations) {
    *predicted->Add() = o.predicted_class < classes.size() ? classes[o.predicted_class] : "";
  }
}

}  // namespace okl
