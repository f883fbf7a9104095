// proto/inputs.h
//
// The inputs of Observe and Predict requests as core computes on them: every vector
// checked against the model's dim and the batch's size against the server's bound before
// anything is allocated, then densified (or kept as sparse rows for a model with sparse
// storage). Also the compact wire form of a vector the client sends, and the observations
// an ObserveResponse carries. Every function is thread-safe.
//
// Example:
//   okl::ExampleBatch batch;
//   OKL_RETURN_IF_ERROR(okl::FromProto(observe_request, config.dim, &batch));
//   OKL_RETURN_IF_ERROR(model->ObserveBatch(batch.xs, batch.ys, &observations));
#ifndef OKL_PROTO_INPUTS_H_
#define OKL_PROTO_INPUTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/input_batch.h"
#include "core/model.h"
#include "core/sparse_vector.h"
#include "okl/v1/okl.pb.h"

namespace okl {

// Writes `vector` densely into `out`, whose size is the model's dimension. Dense
// (`indices` empty): exactly out.size() values. Sparse: as many values as indices, the
// indices strictly increasing and below out.size(); the other entries become 0.
// InvalidArgument otherwise, saying what to fix; callers prefix where the vector was.
// Values are copied as they are: NaN and Inf are left for the model's validation.
absl::Status DensifyVector(const v1::Vector& vector, absl::Span<double> out);

// Writes x as the smaller of its two wire forms: its non-zeros (an index and a value each,
// about 12 bytes) when they are fewer than two thirds of it (and not none: a sparse
// vector without entries reads as an empty dense one), else every value. Sparse
// data (text, one-hot features) then costs what it carries, whatever the dim. A sparse
// vector does not say its length, so use it only where x's size was checked against the
// model's dim (as ObserveWriter does); DensifyVector at that dim gives x back.
void ToCompactVector(absl::Span<const double> x, v1::Vector* out);

// A batch of labelled examples as core takes them: xs holds ys.size() inputs of dim
// values each, term-major.
struct ExampleBatch {
  std::vector<double> xs;
  std::vector<double> ys;
};

// OK if `vector` fits a model of dimension `dim` as DensifyVector requires; allocates
// nothing, so a request's vectors are all checked before its dense copy is made.
absl::Status CheckVector(const v1::Vector& vector, uint32_t dim);

// The bytes a dense batch of `n` inputs of dimension `dim` (plus n labels) takes.
size_t DenseBatchBytes(size_t n, uint32_t dim);

// Replaces `batch` with request.examples() densified for a model of dimension `dim`.
// Every vector is checked first (InvalidArgument naming the first bad one,
// "examples[i].x: ..."), then the dense size (ResourceExhausted if DenseBatchBytes is
// over `max_bytes`, naming --max_request_bytes); only then is anything allocated, so a
// small sparse request cannot make the server allocate gigabytes. `batch` is
// unspecified after an error. The values are left for the model's validation.
absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim, ExampleBatch* batch,
                       size_t max_bytes = SIZE_MAX);

// Replaces `xs` with request.inputs() densified for a model of dimension `dim`
// (inputs_size() * dim values, term-major), with the checks and the bound of the
// ObserveRequest overload ("inputs[i]: ...").
absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim, std::vector<double>* xs,
                       size_t max_bytes = SIZE_MAX);

// The sparse form of the two above, for a model with sparse storage
// (ModelConfig::sparse_storage()): each vector becomes a row of its non-zeros (zeros
// dropped, given or not), so a request costs what it carries, whatever the model's dim.
// Every vector is checked as CheckVector does, then the rows' size (ResourceExhausted if
// SparseBatchBytes is over `max_bytes`) before anything is allocated.
struct SparseExampleBatch {
  SparseRows xs;
  std::vector<double> ys;
};
absl::Status FromProto(const v1::ObserveRequest& request, uint32_t dim,
                       SparseExampleBatch* batch, size_t max_bytes = SIZE_MAX);
absl::Status FromProto(const v1::PredictRequest& request, uint32_t dim, SparseRows* xs,
                       size_t max_bytes = SIZE_MAX);
// The most bytes `n` rows of `entries` non-zeros in all (plus n labels) take.
size_t SparseBatchBytes(size_t n, size_t entries);

// One request's inputs (and an Observe's labels) decoded by the FromProto functions
// above for a model's layout: dense at its dim, or sparse rows for sparse storage
// (ModelConfig::sparse_storage()). The server decodes a request before it takes its
// model's lock, with the config of the model it found; Fits() tells whether the model it
// finally runs on (one that replaced it meanwhile) has the same layout, else it decodes
// again. Reused across requests (a stream's messages), so its buffers are too.
class DecodedRequest {
 public:
  absl::Status Decode(const v1::ObserveRequest& request, const ModelConfig& config,
                      size_t max_bytes);
  absl::Status Decode(const v1::PredictRequest& request, const ModelConfig& config,
                      size_t max_bytes);
  // True if the last Decode succeeded for `config`'s layout.
  bool Fits(const ModelConfig& config) const {
    return dim_ == config.dim && sparse_ == config.sparse_storage();
  }
  // The decoded inputs; they point into this object.
  InputBatch inputs() const;
  // The labels of a decoded ObserveRequest (empty for a PredictRequest).
  absl::Span<const double> ys() const { return sparse_ ? sparse_batch_.ys : dense_batch_.ys; }
  // Its examples' class labels, one per example, if any example has one; else empty
  // (and always for a PredictRequest).
  absl::Span<const std::string> class_labels() const { return class_labels_; }

 private:
  uint32_t dim_ = 0;  // 0: nothing decoded
  bool sparse_ = false;
  ExampleBatch dense_batch_;
  SparseExampleBatch sparse_batch_;
  std::vector<std::string> class_labels_;
};

// Appends one prediction and one loss per observation, in order.
void AppendToProto(absl::Span<const Observation> observations, v1::ObserveResponse* response);
// A multi-class model's: appends each observation's predicted class by name, from the
// model's classes (those after the batch: a class keeps its index once learned), "" for
// none.
void AppendClassesToProto(absl::Span<const Observation> observations,
                          absl::Span<const std::string> classes,
                          v1::ObserveResponse* response);

// The trailing metadata of an Observe or ObserveStream that okl_server refused with
// UNAVAILABLE: how many of the call's messages were applied (nothing of the later ones),
// so that a client may send the rest again.
inline constexpr char kBatchesAppliedMetadataKey[] = "okl-batches-applied";

}  // namespace okl

#endif  // OKL_PROTO_INPUTS_H_
