// tests/server/e2e_test_util.cc

#include "tests/server/e2e_test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <ostream>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/create_model.h"
#include "google/protobuf/text_format.h"
#include "proto/convert.h"

namespace okl::testing {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

v1::ModelRef Ref(absl::string_view tenant, absl::string_view model) {
  v1::ModelRef ref;
  ref.set_tenant(std::string(tenant));
  ref.set_model(std::string(model));
  return ref;
}

std::string RefName(const v1::ModelRef& ref) {
  return absl::StrCat(ref.tenant(), "/", ref.model());
}

v1::ModelConfig ParseConfig(absl::string_view text) {
  v1::ModelConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(std::string(text), &config)) {
    ADD_FAILURE() << "not a text-format okl.v1.ModelConfig:\n" << text;
    return v1::ModelConfig();
  }
  return config;
}

v1::Vector DenseVector(absl::Span<const double> values) {
  v1::Vector vector;
  vector.mutable_values()->Add(values.begin(), values.end());
  return vector;
}

v1::Vector SparseVector(absl::Span<const uint32_t> indices, absl::Span<const double> values) {
  v1::Vector vector;
  vector.mutable_indices()->Add(indices.begin(), indices.end());
  vector.mutable_values()->Add(values.begin(), values.end());
  return vector;
}

v1::Example MakeExample(v1::Vector x, double y) {
  v1::Example example;
  *example.mutable_x() = std::move(x);
  example.set_y(y);
  return example;
}

std::vector<double> Densify(const v1::Vector& vector, uint32_t dim) {
  if (vector.indices().empty()) return {vector.values().begin(), vector.values().end()};
  std::vector<double> dense(dim, 0.0);
  for (int k = 0; k < vector.indices_size(); ++k) dense[vector.indices(k)] = vector.values(k);
  return dense;
}

namespace {

v1::Vector RandomVector(uint32_t dim, bool sparse, std::mt19937_64& random) {
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  if (!sparse) {
    std::vector<double> values(dim);
    for (double& v : values) v = value(random);
    return DenseVector(values);
  }
  // A few distinct indices, increasing; at least one.
  const uint32_t nonzeros = std::max<uint32_t>(1, std::min<uint32_t>(dim, 1 + random() % 5));
  std::vector<uint32_t> indices;
  while (indices.size() < nonzeros) {
    const uint32_t index = static_cast<uint32_t>(random() % dim);
    if (std::find(indices.begin(), indices.end(), index) == indices.end()) {
      indices.push_back(index);
    }
  }
  std::sort(indices.begin(), indices.end());
  std::vector<double> values(indices.size());
  for (double& v : values) v = value(random);
  return SparseVector(indices, values);
}

}  // namespace

std::vector<v1::Example> MakeStream(const v1::ModelConfig& config, size_t n, uint64_t seed,
                                    bool sparse) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  const bool classification = config.loss().has_hinge() || config.loss().has_logistic();
  const bool classes = config.loss().has_multiclass_hinge() || config.loss().has_softmax();
  std::vector<v1::Example> stream;
  stream.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v1::Vector x = RandomVector(config.dim(), sparse, random);
    const std::vector<double> dense = Densify(x, config.dim());
    double signal = 0.0;
    for (size_t j = 0; j < dense.size(); ++j) {
      signal += std::sin(1.5 * dense[j] + 0.3 * static_cast<double>(j));
    }
    double y = signal + noise(random);
    if (classification) y = y >= 0.0 ? 1.0 : -1.0;
    if (classes) {  // three bands of the signal, named in the order they may first come
      stream.push_back(MakeExample(std::move(x), 0.0));
      stream.back().set_class_label(y < -0.5 ? "low" : y < 0.5 ? "mid band" : "high \xE2\x86\x91");
      continue;
    }
    stream.push_back(MakeExample(std::move(x), y));
  }
  return stream;
}

std::vector<v1::Vector> MakeProbes(uint32_t dim, size_t n, uint64_t seed, bool sparse) {
  std::mt19937_64 random(seed);
  std::vector<v1::Vector> probes;
  for (size_t i = 0; i < n; ++i) probes.push_back(RandomVector(dim, sparse, random));
  return probes;
}

std::vector<std::vector<v1::Example>> SplitIntoBatches(absl::Span<const v1::Example> examples,
                                                       absl::Span<const size_t> sizes) {
  std::vector<std::vector<v1::Example>> batches;
  size_t next = 0;
  for (size_t i = 0; next < examples.size(); ++i) {
    const size_t size = std::min(sizes[i % sizes.size()], examples.size() - next);
    batches.emplace_back(examples.begin() + next, examples.begin() + next + size);
    next += size;
  }
  return batches;
}

std::vector<uint64_t> Bits(absl::Span<const double> values) {
  std::vector<uint64_t> bits;
  bits.reserve(values.size());
  for (double v : values) bits.push_back(std::bit_cast<uint64_t>(v));
  return bits;
}

// --- RPCs ------------------------------------------------------------------------------

grpc::Status CreateModel(Stub& stub, const v1::ModelRef& ref, const v1::ModelConfig& config,
                         v1::ModelInfo* info) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::CreateModelRequest request;
  *request.mutable_ref() = ref;
  *request.mutable_config() = config;
  v1::ModelInfo ignored;
  return stub.CreateModel(&context, request, info != nullptr ? info : &ignored);
}

grpc::Status GetModel(Stub& stub, const v1::ModelRef& ref, v1::ModelInfo* info) {
  grpc::ClientContext context;
  SetDeadline(&context);
  return stub.GetModel(&context, ref, info);
}

grpc::Status DeleteModel(Stub& stub, const v1::ModelRef& ref) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DeleteModelResponse response;
  return stub.DeleteModel(&context, ref, &response);
}

grpc::Status ListModels(Stub& stub, absl::string_view tenant,
                        v1::ListModelsResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListModelsRequest request;
  request.set_tenant(std::string(tenant));
  return stub.ListModels(&context, request, response);
}

grpc::Status Observe(Stub& stub, const v1::ModelRef& ref,
                     absl::Span<const v1::Example> examples, v1::ObserveResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ObserveRequest request;
  *request.mutable_ref() = ref;
  request.mutable_examples()->Add(examples.begin(), examples.end());
  return stub.Observe(&context, request, response);
}

grpc::Status ObserveStreamRaw(Stub& stub, const std::vector<v1::ObserveRequest>& requests,
                              v1::ObserveResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientWriter<v1::ObserveRequest>> writer =
      stub.ObserveStream(&context, response);
  for (const v1::ObserveRequest& request : requests) {
    // A failed write means the server ended the call; Finish() says why.
    if (!writer->Write(request)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status ObserveStream(Stub& stub, const v1::ModelRef& ref,
                           const std::vector<std::vector<v1::Example>>& batches,
                           v1::ObserveResponse* response) {
  std::vector<v1::ObserveRequest> requests;
  for (const std::vector<v1::Example>& batch : batches) {
    v1::ObserveRequest request;
    if (requests.empty()) *request.mutable_ref() = ref;
    request.mutable_examples()->Add(batch.begin(), batch.end());
    requests.push_back(std::move(request));
  }
  return ObserveStreamRaw(stub, requests, response);
}

grpc::Status Predict(Stub& stub, const v1::ModelRef& ref, absl::Span<const v1::Vector> inputs,
                     std::vector<double>* predictions) {
  v1::PredictResponse response;
  grpc::Status status = Predict(stub, ref, inputs, &response);
  if (predictions != nullptr) {
    predictions->assign(response.predictions().begin(), response.predictions().end());
  }
  return status;
}

namespace {

// A Predict, remembering its inputs if `remember` is set.
grpc::Status PredictWith(Stub& stub, const v1::ModelRef& ref,
                         absl::Span<const v1::Vector> inputs, const v1::Remember* remember,
                         v1::PredictResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PredictRequest request;
  *request.mutable_ref() = ref;
  request.mutable_inputs()->Add(inputs.begin(), inputs.end());
  if (remember != nullptr) *request.mutable_remember() = *remember;
  response->Clear();
  return stub.Predict(&context, request, response);
}

}  // namespace

grpc::Status Predict(Stub& stub, const v1::ModelRef& ref, absl::Span<const v1::Vector> inputs,
                     v1::PredictResponse* response) {
  return PredictWith(stub, ref, inputs, nullptr, response);
}

grpc::Status PredictRemembering(Stub& stub, const v1::ModelRef& ref,
                                absl::Span<const v1::Vector> inputs,
                                const v1::Remember& remember, v1::PredictResponse* response) {
  return PredictWith(stub, ref, inputs, &remember, response);
}

grpc::Status Label(Stub& stub, const v1::ModelRef& ref,
                   const std::vector<std::pair<std::string, double>>& labels,
                   v1::LabelResponse* response) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::LabelRequest request;
  *request.mutable_ref() = ref;
  for (const auto& [id, y] : labels) {
    v1::EventLabel* label = request.add_labels();
    label->set_event_id(id);
    label->set_y(y);
  }
  response->Clear();
  return stub.Label(&context, request, response);
}

grpc::Status Snapshot(Stub& stub, const v1::ModelRef& ref, std::string* bytes,
                      std::vector<size_t>* chunk_sizes) {
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader = stub.Snapshot(&context, ref);
  bytes->clear();
  if (chunk_sizes != nullptr) chunk_sizes->clear();
  v1::SnapshotChunk chunk;
  while (reader->Read(&chunk)) {
    bytes->append(chunk.data());
    if (chunk_sizes != nullptr) chunk_sizes->push_back(chunk.data().size());
  }
  return reader->Finish();
}

grpc::Status RestoreChunks(Stub& stub, const std::vector<v1::RestoreChunk>& chunks,
                           v1::ModelInfo* info) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ModelInfo ignored;
  std::unique_ptr<grpc::ClientWriter<v1::RestoreChunk>> writer =
      stub.Restore(&context, info != nullptr ? info : &ignored);
  for (const v1::RestoreChunk& chunk : chunks) {
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status Restore(Stub& stub, const v1::ModelRef& ref, absl::string_view bytes,
                     size_t chunk_bytes, v1::ModelInfo* info) {
  std::vector<v1::RestoreChunk> chunks;
  size_t next = 0;
  do {
    v1::RestoreChunk chunk;
    if (chunks.empty()) *chunk.mutable_ref() = ref;
    const size_t size = std::min(chunk_bytes, bytes.size() - next);
    chunk.set_data(std::string(bytes.substr(next, size)));
    next += size;
    chunks.push_back(std::move(chunk));
  } while (next < bytes.size());
  return RestoreChunks(stub, chunks, info);
}

// --- Assertions ------------------------------------------------------------------------

std::string CodeName(grpc::StatusCode code) {
  return std::string(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
}

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(CodeName(status.error_code()), ": \"", status.error_message(), "\"");
}

::testing::AssertionResult HasCode(const grpc::Status& status, grpc::StatusCode code) {
  if (status.error_code() == code) return ::testing::AssertionSuccess() << Describe(status);
  return ::testing::AssertionFailure()
         << "expected " << CodeName(code) << ", got " << Describe(status);
}

::testing::AssertionResult IsOk(const grpc::Status& status) {
  return HasCode(status, grpc::StatusCode::OK);
}

absl::StatusOr<ModelFingerprint> Fingerprint(Stub& stub, const v1::ModelRef& ref,
                                             absl::Span<const v1::Vector> probes) {
  v1::ModelInfo info;
  grpc::Status status = GetModel(stub, ref, &info);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("GetModel ", RefName(ref), ": ", status.error_message()));
  }
  std::vector<double> predictions;
  status = Predict(stub, ref, probes, &predictions);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("Predict ", RefName(ref), ": ", status.error_message()));
  }
  ModelFingerprint fingerprint;
  fingerprint.stats = info.stats().SerializeAsString();
  fingerprint.config = info.config().SerializeAsString();
  fingerprint.probe_bits = Bits(predictions);
  return fingerprint;
}

std::ostream& operator<<(std::ostream& out, const ModelFingerprint& fingerprint) {
  v1::ModelStats stats;
  stats.ParseFromString(fingerprint.stats);
  out << "{stats: " << stats.ShortDebugString() << ", probes:";
  for (uint64_t bits : fingerprint.probe_bits) out << " " << std::bit_cast<double>(bits);
  return out << "}";
}

// --- CoreTwin --------------------------------------------------------------------------

std::unique_ptr<CoreTwin> CoreTwin::Create(const v1::ModelConfig& config) {
  absl::StatusOr<ModelConfig> core_config = FromProto(config);
  if (!core_config.ok()) {
    ADD_FAILURE() << "FromProto: " << core_config.status();
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*core_config);
  if (!model.ok()) {
    ADD_FAILURE() << "CreateModel: " << model.status();
    return nullptr;
  }
  return std::unique_ptr<CoreTwin>(new CoreTwin(*std::move(model)));
}

std::unique_ptr<CoreTwin> CoreTwin::FromState(const ModelState& state) {
  absl::StatusOr<std::unique_ptr<Model>> model = ModelFromState(state);
  if (!model.ok()) {
    ADD_FAILURE() << "ModelFromState: " << model.status();
    return nullptr;
  }
  return std::unique_ptr<CoreTwin>(new CoreTwin(*std::move(model)));
}

std::vector<Observation> CoreTwin::Observe(absl::Span<const v1::Example> examples) {
  std::vector<double> xs;
  std::vector<double> ys;
  std::vector<std::string> class_labels;
  for (const v1::Example& example : examples) {
    const std::vector<double> x = Densify(example.x(), dim());
    xs.insert(xs.end(), x.begin(), x.end());
    ys.push_back(example.y());
    class_labels.push_back(example.class_label());
  }
  std::vector<Observation> out;
  absl::Status status =
      model_->config().multiclass()
          ? model_->ObserveClassBatch(InputBatch::Dense(xs, dim()), class_labels, &out)
          : model_->ObserveBatch(xs, ys, &out);
  if (!status.ok()) ADD_FAILURE() << "core ObserveBatch: " << status;
  return out;
}

std::vector<double> CoreTwin::Predict(absl::Span<const v1::Vector> inputs) const {
  std::vector<double> xs;
  for (const v1::Vector& input : inputs) {
    const std::vector<double> x = Densify(input, model_->config().dim);
    xs.insert(xs.end(), x.begin(), x.end());
  }
  std::vector<double> out(inputs.size());
  absl::Status status = model_->PredictBatch(xs, absl::MakeSpan(out));
  if (!status.ok()) ADD_FAILURE() << "core PredictBatch: " << status;
  return out;
}

v1::ModelStats CoreTwin::WireStats() const {
  // As GetModel writes them: through the summary, which adds a tracker's dictionary.
  ModelSummary summary;
  summary.config = model_->config();
  summary.stats = model_->stats();
  return ToProto(summary).stats();
}

std::vector<double> PredictionsOf(absl::Span<const Observation> observations) {
  std::vector<double> out;
  for (const Observation& o : observations) out.push_back(o.prediction);
  return out;
}

std::vector<double> LossesOf(absl::Span<const Observation> observations) {
  std::vector<double> out;
  for (const Observation& o : observations) out.push_back(o.loss);
  return out;
}

}  // namespace okl::testing
