#include "tests/fuzz/fuzz_bodies.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/config.h"
#include "core/create_model.h"
#include "core/input_batch.h"
#include "core/norma.h"
#include "core/regret.h"
#include "google/protobuf/text_format.h"
#include "okl/v1/okl.pb.h"
#include "proto/config_text.h"
#include "proto/convert.h"
#include "proto/inputs.h"
#include "proto/snapshot_codec.h"

// Not an assert: it must fire in every build type, and trap rather than abort so that
// libFuzzer's and the sanitizers' reports show the stack of the broken invariant.
#define OKL_FUZZ_CHECK(condition, ...)                                              \
  do {                                                                              \
    if (!(condition)) {                                                             \
      ::okl::fuzz::Fail(__FILE__, __LINE__, #condition, absl::StrCat(__VA_ARGS__)); \
    }                                                                               \
  } while (0)

namespace okl::fuzz {
namespace {

[[noreturn]] void Fail(const char* file, int line, const char* condition,
                       const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n  %s\n", file, line, condition,
               detail.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// Work caps, so that a legitimately large input costs the fuzzer seconds, not minutes:
// kernel evaluations x dim per operation, and the dense bytes a request may convert to.
constexpr uint64_t kMaxWork = 1'000'000;
constexpr uint64_t kMaxDenseBytes = uint64_t{16} << 20;
// The model work of one request (values applied x kRequestMaxTerms kernel terms).
constexpr uint64_t kMaxRequestValues = uint64_t{1} << 18;
constexpr uint32_t kRequestMaxTerms = 16;
constexpr uint32_t kRequestDims[] = {1, 7, 4096};
// The regret comparator is O(n^3); the fuzzer checks it on small windows only.
constexpr size_t kMaxRegretExamples = 32;
// The checksum field DecodeSnapshot expects last (proto/convert.h): tag, FNV-1a 64 LE.
constexpr size_t kChecksumFieldBytes = 10;

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool SameBits(absl::Span<const double> a, absl::Span<const double> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// A fixed input with varied coordinates, so that no kernel sees only zeros.
std::vector<double> FixedInput(size_t dim, int variant) {
  std::vector<double> x(dim);
  for (size_t j = 0; j < dim; ++j) {
    x[j] = static_cast<double>((j * 7 + static_cast<size_t>(variant) * 3) % 11) / 8.0 - 0.6;
  }
  return x;
}

// A fixed sparse input for a model with sparse storage: min(max_nonzeros, 16) non-zeros
// spread over dim (whatever dim is), valued as FixedInput's.
SparseRows FixedSparseInput(const ModelConfig& config, int variant) {
  const uint64_t k = std::min<uint64_t>(config.sparse.max_nonzeros, 16);
  const uint64_t step = std::max<uint64_t>(config.dim / k, 1);
  SparseRows rows;
  for (uint64_t i = 0; i < k; ++i) {
    rows.indices.push_back(static_cast<uint32_t>(i * step));
    rows.values.push_back(static_cast<double>((i * 7 + static_cast<uint64_t>(variant) * 3) % 11) /
                              8.0 -
                          0.6);  // never 0
  }
  rows.ends.push_back(k);
  return rows;
}

std::string EncodeOrDie(const ModelState& state) {
  absl::StatusOr<std::string> bytes = EncodeSnapshot(state);
  OKL_FUZZ_CHECK(bytes.ok(), bytes.status().ToString());
  return *std::move(bytes);
}

// What must hold for every state a model reaches: FromState takes it back, the model
// holds no more memory than the server's quotas reserve for its config, and its snapshot
// is no longer than a Restore accepts for that config.
void CheckRestorable(const Model& model, absl::string_view after) {
  const ModelState state = model.ExportState();
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
  OKL_FUZZ_CHECK(restored.ok(), "the state after ", after,
                 " does not restore: ", restored.status().ToString());
  OKL_FUZZ_CHECK(model.MemoryBytes() <= WorstCaseMemoryBytes(model.config()), after, ": ",
                 model.MemoryBytes(), " bytes, over WorstCaseMemoryBytes ",
                 WorstCaseMemoryBytes(model.config()));
  // A Restore refuses snapshots longer than MaxSnapshotBytes of their config.
  const size_t snapshot_bytes = EncodeOrDie(state).size();
  OKL_FUZZ_CHECK(snapshot_bytes <= MaxSnapshotBytes(model.config()), after, ": the snapshot ",
                 "takes ", snapshot_bytes, " bytes, over MaxSnapshotBytes ",
                 MaxSnapshotBytes(model.config()));
}

// Predict in every mode the model supports; PredictBatch must agree bit for bit.
void CheckPredictions(const Model& model, absl::Span<const double> x) {
  std::vector<PredictionMode> modes = {PredictionMode::kConfigured, PredictionMode::kCurrent};
  if (model.config().averaged) modes.push_back(PredictionMode::kAveraged);
  std::vector<double> xs(x.begin(), x.end());
  xs.insert(xs.end(), x.begin(), x.end());
  for (const PredictionMode mode : modes) {
    absl::StatusOr<double> p = model.Predict(x, mode);
    OKL_FUZZ_CHECK(p.ok(), p.status().ToString());
    double batch[2];
    const absl::Status status = model.PredictBatch(xs, absl::MakeSpan(batch), mode);
    OKL_FUZZ_CHECK(status.ok(), status.ToString());
    OKL_FUZZ_CHECK(SameBits(batch[0], *p) && SameBits(batch[1], *p), "PredictBatch gave ",
                   batch[0], " and ", batch[1], ", Predict ", *p);
  }
  if (!model.config().averaged) {
    OKL_FUZZ_CHECK(
        absl::IsFailedPrecondition(model.Predict(x, PredictionMode::kAveraged).status()),
        "kAveraged on a model without the average");
  }
}

// The windowed regret as the server's RegretScheduler computes it; any status but a
// crash is fine (a snapshot's window may hold labels the comparator rejects).
void CheckRegret(const Model& model) {
  const RegretWindow window = model.RegretWindowCopy();
  const uint64_t n = window.size();
  if (n == 0 || n > kMaxRegretExamples || n * n * model.config().dim > kMaxWork) return;
  ComparatorOptions options;
  options.max_epochs = 50;
  absl::StatusOr<RegretResult> regret =
      ComputeRegret(model.config(), model.stats().margin, window, options);
  if (!regret.ok()) {
    OKL_FUZZ_CHECK(
        absl::IsInvalidArgument(regret.status()) || absl::IsInternal(regret.status()),
        regret.status().ToString());
    return;
  }
  OKL_FUZZ_CHECK(regret->window == n, regret->window, " != ", n);
}

// One Observe: a success must leave a restorable state, a failure an unchanged one.
// One step through `observe` (the model's Observe or ObserveSparse): either it fails with
// FailedPrecondition and changes nothing, or it counts and leaves a restorable model.
template <typename ObserveCall>
void CheckStep(Model& model, ObserveCall observe, absl::string_view what) {
  const ModelState before = model.ExportState();
  absl::StatusOr<Observation> o = observe();
  if (!o.ok()) {
    OKL_FUZZ_CHECK(absl::IsFailedPrecondition(o.status()), what, ": ", o.status().ToString());
    OKL_FUZZ_CHECK(model.ExportState() == before, what, " failed but changed the model");
    return;
  }
  OKL_FUZZ_CHECK(model.steps() == before.steps + 1, what);
  CheckRestorable(model, what);
}

// One step on the fixed input `variant` in the form the model stores.
void CheckObserve(Model& model, int variant, double y, absl::string_view what) {
  if (model.config().sparse_storage()) {
    const SparseRows x = FixedSparseInput(model.config(), variant);
    CheckStep(model, [&] { return model.ObserveSparse(x.Row(0), y); }, what);
  } else {
    const std::vector<double> x = FixedInput(model.config().dim, variant);
    CheckStep(model, [&] { return model.Observe(x, y); }, what);
  }
}

// CheckPredictions on the fixed input `variant` in the form the model stores; a sparse
// input's PredictBatch must agree with PredictSparse bit for bit too.
void CheckFixedPredictions(const Model& model, int variant) {
  if (!model.config().sparse_storage()) {
    CheckPredictions(model, FixedInput(model.config().dim, variant));
    return;
  }
  SparseRows xs = FixedSparseInput(model.config(), variant);
  xs.Append(xs.Row(0));
  std::vector<PredictionMode> modes = {PredictionMode::kConfigured, PredictionMode::kCurrent};
  if (model.config().averaged) modes.push_back(PredictionMode::kAveraged);
  for (const PredictionMode mode : modes) {
    absl::StatusOr<double> p = model.PredictSparse(xs.Row(0), mode);
    OKL_FUZZ_CHECK(p.ok(), p.status().ToString());
    double batch[2];
    const absl::Status status =
        model.PredictBatch(InputBatch::Sparse(xs), absl::MakeSpan(batch), mode);
    OKL_FUZZ_CHECK(status.ok() && SameBits(batch[0], *p) && SameBits(batch[1], *p),
                   "sparse PredictBatch gave ", status.ToString(), " ", batch[0], " and ",
                   batch[1], ", PredictSparse ", *p);
  }
}

// --- Snapshots ----------------------------------------------------------------------

// PeekSnapshotConfig on any bytes: an error is DataLoss, a config is a valid one.
std::optional<ModelConfig> CheckPeek(absl::string_view bytes) {
  absl::StatusOr<std::optional<ModelConfig>> peeked = PeekSnapshotConfig(bytes);
  if (!peeked.ok()) {
    OKL_FUZZ_CHECK(absl::IsDataLoss(peeked.status()), peeked.status().ToString());
    return std::nullopt;
  }
  if (peeked->has_value()) {
    const absl::Status valid = ValidateConfig(**peeked);
    OKL_FUZZ_CHECK(valid.ok(),
                   "PeekSnapshotConfig returned an invalid config: ", valid.ToString());
  }
  return *std::move(peeked);
}

// On EncodeSnapshot's bytes, every prefix peeks as "not yet" or as the snapshot's config,
// and once a prefix holds the config every longer one does too.
void CheckPeekOnPrefixes(absl::string_view bytes, const ModelConfig& config) {
  const std::string canonical = CanonicalConfigBytes(config);
  bool seen = false;
  for (size_t length = 0; length <= bytes.size(); ++length) {
    // Past the config the answer cannot change; the full bytes are checked below.
    if (seen && length < bytes.size()) continue;
    absl::StatusOr<std::optional<ModelConfig>> peeked =
        PeekSnapshotConfig(bytes.substr(0, length));
    OKL_FUZZ_CHECK(peeked.ok(), "the first ", length,
                   " bytes of a snapshot: ", peeked.status().ToString());
    if (!peeked->has_value()) {
      OKL_FUZZ_CHECK(!seen && length < bytes.size(), "the first ", length,
                     " bytes of a snapshot peek as no config");
      continue;
    }
    OKL_FUZZ_CHECK(CanonicalConfigBytes(**peeked) == canonical, "the first ", length,
                   " bytes of a snapshot peek as another config");
    seen = true;
  }
}

// `bytes` with its last kChecksumFieldBytes replaced by a correct checksum field.
std::string Resealed(absl::string_view bytes) {
  std::string out(bytes.substr(0, bytes.size() - kChecksumFieldBytes));
  const uint64_t checksum = Fnv1a64(out);
  out.push_back(static_cast<char>(0xA1));
  out.push_back(static_cast<char>(0x06));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(checksum >> (8 * i)));
  return out;
}

void ExerciseState(const ModelState& state) {
  const absl::Status config_status = ValidateConfig(state.config);
  OKL_FUZZ_CHECK(config_status.ok(),
                 "DecodeSnapshot returned an invalid config: ", config_status.ToString());
  absl::StatusOr<std::unique_ptr<Model>> restored = ModelFromState(state);
  if (!restored.ok()) {
    OKL_FUZZ_CHECK(absl::IsInvalidArgument(restored.status()), restored.status().ToString());
    return;
  }
  Model& model = **restored;
  const uint64_t dim = state.config.dim;
  // What a sweep visits: the terms, the retired terms, or a random-feature model's weights.
  const uint64_t terms =
      state.coefficients.size() + state.retired_at.size() + state.weights.size();
  if (dim * std::max<uint64_t>({terms, state.regret_window.size(), 1}) > kMaxWork) return;

  // A restored model exports exactly what it was restored from (bit for bit: the encoding
  // tells -0.0 from 0.0, which == does not), but that a state of format version 1 has no
  // previous-block sums, which read as zeros.
  ModelState expected = state;
  if (expected.config.averaged && expected.average_previous.empty()) {
    expected.average_previous.assign(expected.coefficients.size(), 0.0);
  }
  const ModelState exported = model.ExportState();
  OKL_FUZZ_CHECK(exported == expected, "ExportState differs from the state restored");
  const std::string bytes = EncodeOrDie(exported);
  OKL_FUZZ_CHECK(bytes == EncodeOrDie(expected), "ExportState encodes differently");
  CheckPeekOnPrefixes(bytes, state.config);
  OKL_FUZZ_CHECK(model.RegretWindowCopy() == state.regret_window, "regret window differs");
  CheckRestorable(model, "FromState");

  // The snapshot round trip gives the same state and the same bytes.
  absl::StatusOr<ModelState> decoded = DecodeSnapshot(bytes);
  OKL_FUZZ_CHECK(decoded.ok(), decoded.status().ToString());
  OKL_FUZZ_CHECK(*decoded == exported, "DecodeSnapshot(EncodeSnapshot(s)) != s");
  OKL_FUZZ_CHECK(EncodeOrDie(*decoded) == bytes, "re-encoding changed the bytes");

  CheckFixedPredictions(model, 0);
  (void)model.stats();
  if (terms * terms * dim <= kMaxWork) (void)model.SquaredNorm();
  CheckRegret(model);
  CheckObserve(model, 0, 1.0, "Observe on a restored snapshot");
}

// --- Requests -----------------------------------------------------------------------

// The small model a request is applied to: data[0]'s bits 1-7 choose its config.
ModelConfig RequestModelConfig(uint32_t dim, uint8_t selector) {
  ModelConfig config;
  config.dim = dim;
  switch ((selector >> 1) & 3) {
    case 0:
      config.kernel = {.type = KernelType::kGaussian, .gamma = 1.0 / dim};
      break;
    case 1:
      config.kernel = {.type = KernelType::kLaplacian, .gamma = 0.5};
      break;
    case 2:
      config.kernel = {
          .type = KernelType::kPolynomial, .gamma = 1.0 / dim, .c = 1, .degree = 3};
      break;
    default:
      config.kernel = {.type = KernelType::kLinear, .c = 1};
      break;
  }
  config.loss.type = (selector & 8) ? LossType::kHinge : LossType::kSquared;
  config.averaged = (selector & 16) != 0;
  config.regret_window = (selector & 32) ? 4 : 0;
  config.budget.max_terms = kRequestMaxTerms;
  if (selector & 64) {
    // MERGE needs the gaussian kernel; the others remove the smallest term.
    config.budget.policy = config.kernel.type == KernelType::kGaussian
                               ? BudgetPolicy::kMerge
                               : BudgetPolicy::kSmallest;
    config.budget.drop_below = 1e-4;
  }
  // A short averaging window, so that the few training steps end blocks.
  if (config.averaged && (selector & 32)) config.averaging_window = 3;
  if ((selector & 1) && (config.kernel.type == KernelType::kGaussian ||
                         config.kernel.type == KernelType::kLaplacian)) {
    config.budget = {};
    config.averaging_window = 0;
    config.random_features = {.dimension = std::min(2 * dim, 64u), .seed = selector};
  }
  // Sparse storage for the linear kernel (a sparse dot product), and for the laplacian
  // with SMALLEST (the squared norms' distance), unless it has random features;
  // max_nonzeros = dim, so that no input is refused for its count and both input forms
  // must agree.
  if (config.random_features.dimension == 0 &&
      (config.kernel.type == KernelType::kLinear ||
       (config.kernel.type == KernelType::kLaplacian && (selector & 64)))) {
    config.sparse.max_nonzeros = std::min(dim, kMaxNonZeros);
  }
  if (selector & 128) {
    config.offset = true;
    config.learning_rate.schedule = Schedule::kInverseSqrt;
  }
  config.learning_rate.eta0 = 0.5;
  config.lambda = 0.01;
  if (config.kernel.type == KernelType::kPolynomial && (selector & 64) &&
      config.loss.type == LossType::kSquared) {
    // The polynomial kernel with bit 6 and the squared loss: a KRLS tracker (with the
    // regret window of bit 5, if set), which has no learning rate, budget or averaging.
    config.learning_rate = {};
    config.lambda = 0;
    config.offset = false;
    config.budget = {};
    config.averaged = false;
    config.averaging_window = 0;
    config.sparse = {};
    config.krls_tracker = {.max_basis = 6, .noise_variance = 1e-3, .forgetting = 0.99};
  }
  return config;
}

// A model of `dim` that has seen a few examples, so that predictions sweep real terms.
// Trained once per (dim, selector) and restored from its state for each input: the state
// is a pure function of the two, so inputs still reproduce alone.
std::unique_ptr<Model> TrainedRequestModel(uint32_t dim, uint8_t selector) {
  static std::mutex mu;
  static std::map<std::pair<uint32_t, uint8_t>, ModelState>* states =
      new std::map<std::pair<uint32_t, uint8_t>, ModelState>();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = states->try_emplace({dim, selector});
  if (inserted) {
    absl::StatusOr<std::unique_ptr<Model>> model =
        CreateModel(RequestModelConfig(dim, selector));
    OKL_FUZZ_CHECK(model.ok(), model.status().ToString());
    for (int k = 0; k < 8; ++k) {
      absl::StatusOr<Observation> o = (*model)->Observe(FixedInput(dim, k), k % 2 ? 1.0 : -1.0);
      OKL_FUZZ_CHECK(o.ok(), o.status().ToString());
    }
    it->second = (*model)->ExportState();
  }
  absl::StatusOr<std::unique_ptr<Model>> model = ModelFromState(it->second);
  OKL_FUZZ_CHECK(model.ok(), model.status().ToString());
  return *std::move(model);
}

// `dense` is `vector` densified as DensifyVector documents it (and, for the first few,
// as DensifyVector itself writes it).
void CheckDensified(const v1::Vector& vector, absl::Span<const double> dense,
                    absl::string_view where, bool call_densify) {
  if (call_densify) {
    std::vector<double> out(dense.size(), -1.0);
    const absl::Status status = DensifyVector(vector, absl::MakeSpan(out));
    OKL_FUZZ_CHECK(status.ok() && SameBits(out, dense), where, ": DensifyVector gave ",
                   status.ToString());
  }
  if (vector.indices().empty()) {
    OKL_FUZZ_CHECK(
        SameBits(absl::MakeConstSpan(vector.values().data(), vector.values_size()), dense),
        where, ": the dense values were not copied as they are");
    return;
  }
  OKL_FUZZ_CHECK(vector.indices_size() == vector.values_size(), where);
  int k = 0;
  for (size_t j = 0; j < dense.size(); ++j) {
    if (k < vector.indices_size() && vector.indices(k) == j) {
      OKL_FUZZ_CHECK(SameBits(dense[j], vector.values(k)), where, ": index ", j);
      ++k;
    } else {
      OKL_FUZZ_CHECK(SameBits(dense[j], 0.0), where, ": index ", j, " is not +0");
    }
  }
  OKL_FUZZ_CHECK(k == vector.indices_size(), where, ": ", vector.indices_size() - k,
                 " indices were not written");
}

// The bounded conversions' contract, given how they ended: InvalidArgument naming the
// first vector CheckVector rejects ("<field>[i]..."), else ResourceExhausted when the
// dense copy would exceed the bound, else OK.
template <typename Vectors, typename GetVector>
void CheckConversionStatus(const absl::Status& status, const Vectors& vectors,
                           GetVector get_vector, absl::string_view field, uint32_t dim,
                           size_t max_bytes) {
  const uint64_t n = static_cast<uint64_t>(vectors.size());
  OKL_FUZZ_CHECK(DenseBatchBytes(n, dim) == n * (uint64_t{dim} + 1) * sizeof(double),
                 "DenseBatchBytes(", n, ", ", dim, ") = ", DenseBatchBytes(n, dim));
  for (int i = 0; i < vectors.size(); ++i) {
    const absl::Status vector_status = CheckVector(get_vector(vectors[i]), dim);
    if (vector_status.ok()) continue;
    OKL_FUZZ_CHECK(absl::IsInvalidArgument(status) &&
                       absl::StartsWith(status.message(), absl::StrCat(field, "[", i, "]")),
                   field, "[", i, "] is bad at dim ", dim, " (", vector_status.ToString(),
                   ") but the conversion said ", status.ToString());
    return;
  }
  if (DenseBatchBytes(n, dim) > max_bytes) {
    OKL_FUZZ_CHECK(absl::IsResourceExhausted(status), "over the bound: ", status.ToString());
    return;
  }
  OKL_FUZZ_CHECK(status.ok(), status.ToString());
}

// A model with sparse storage takes the request's sparse form (what the server gives it)
// exactly as the dense form: the same status, observations and state, bit for bit.
void CheckSparseFormObserves(const v1::ObserveRequest& request, uint32_t dim,
                             uint8_t selector, const absl::Status& dense_status,
                             const std::vector<Observation>& dense_observations,
                             const Model& dense_fed) {
  if (!dense_fed.config().sparse_storage()) return;
  SparseExampleBatch batch;
  const absl::Status converted = FromProto(request, dim, &batch);
  OKL_FUZZ_CHECK(converted.ok(), "the dense form converted but the sparse did not: ",
                 converted.ToString());
  OKL_FUZZ_CHECK(batch.xs.size() == batch.ys.size() &&
                     batch.ys.size() == static_cast<size_t>(request.examples_size()),
                 "sparse batch sizes");
  std::unique_ptr<Model> model = TrainedRequestModel(dim, selector);
  std::vector<Observation> observations;
  const absl::Status observed =
      model->ObserveBatch(InputBatch::Sparse(batch.xs), batch.ys, &observations);
  OKL_FUZZ_CHECK(observed.code() == dense_status.code(), "sparse form: ", observed.ToString(),
                 ", dense form: ", dense_status.ToString());
  OKL_FUZZ_CHECK(observations.size() == dense_observations.size(), "observation counts");
  for (size_t i = 0; i < observations.size(); ++i) {
    OKL_FUZZ_CHECK(SameBits(observations[i].prediction, dense_observations[i].prediction) &&
                       SameBits(observations[i].loss, dense_observations[i].loss),
                   "sparse and dense forms differ at example ", i);
  }
  OKL_FUZZ_CHECK(model->ExportState() == dense_fed.ExportState(),
                 "sparse and dense forms left different states");
}

void FuzzObserveRequest(const v1::ObserveRequest& request, uint32_t dim, uint8_t selector) {
  const uint64_t n = static_cast<uint64_t>(request.examples_size());
  ExampleBatch batch;
  const absl::Status converted = FromProto(request, dim, &batch, kMaxDenseBytes);
  CheckConversionStatus(
      converted, request.examples(),
      [](const v1::Example& e) -> const v1::Vector& { return e.x(); }, "examples", dim,
      kMaxDenseBytes);
  if (!converted.ok()) return;
  // The unbounded overload, run only within the bound just passed, converts the same.
  ExampleBatch unbounded;
  OKL_FUZZ_CHECK(FromProto(request, dim, &unbounded).ok(), "unbounded conversion failed");
  OKL_FUZZ_CHECK(SameBits(unbounded.xs, batch.xs) && SameBits(unbounded.ys, batch.ys),
                 "the bounded and unbounded conversions differ");
  OKL_FUZZ_CHECK(batch.xs.size() == n * dim && batch.ys.size() == n, "batch sizes");
  for (uint64_t i = 0; i < n; ++i) {
    CheckDensified(request.examples(i).x(), absl::MakeConstSpan(batch.xs).subspan(i * dim, dim),
                   absl::StrCat("examples[", i, "].x at dim ", dim), i < 8);
    OKL_FUZZ_CHECK(SameBits(batch.ys[i], request.examples(i).y()), "examples[", i, "].y");
  }
  if (n * dim > kMaxRequestValues) return;

  std::unique_ptr<Model> model = TrainedRequestModel(dim, selector);
  const ModelState before = model->ExportState();
  const absl::Status valid = model->ValidateBatch(batch.xs, batch.ys);
  std::vector<Observation> observations;
  const absl::Status observed = model->ObserveBatch(batch.xs, batch.ys, &observations);
  if (!valid.ok()) {
    OKL_FUZZ_CHECK(absl::IsInvalidArgument(valid), valid.ToString());
    OKL_FUZZ_CHECK(observed == valid, "ObserveBatch said ", observed.ToString(),
                   ", ValidateBatch ", valid.ToString());
    OKL_FUZZ_CHECK(observations.empty() && model->ExportState() == before,
                   "a batch that fails validation changed the model");
    return;
  }
  if (observed.ok()) {
    OKL_FUZZ_CHECK(observations.size() == n, observations.size(), " observations for ", n);
  } else {
    OKL_FUZZ_CHECK(absl::IsFailedPrecondition(observed), observed.ToString());
  }
  OKL_FUZZ_CHECK(model->steps() == before.steps + observations.size(), "steps");
  CheckSparseFormObserves(request, dim, selector, observed, observations, *model);
  v1::ObserveResponse response;
  AppendToProto(observations, &response);
  OKL_FUZZ_CHECK(response.predictions_size() == static_cast<int>(observations.size()) &&
                     response.losses_size() == static_cast<int>(observations.size()),
                 "AppendToProto");
  CheckRestorable(*model, "ObserveBatch");
}

void FuzzPredictRequest(const v1::PredictRequest& request, uint32_t dim, uint8_t selector) {
  const uint64_t n = static_cast<uint64_t>(request.inputs_size());
  std::vector<double> xs;
  const absl::Status converted = FromProto(request, dim, &xs, kMaxDenseBytes);
  CheckConversionStatus(
      converted, request.inputs(), [](const v1::Vector& v) -> const v1::Vector& { return v; },
      "inputs", dim, kMaxDenseBytes);
  if (!converted.ok()) return;
  // The unbounded overload, run only within the bound just passed, converts the same.
  std::vector<double> unbounded;
  OKL_FUZZ_CHECK(FromProto(request, dim, &unbounded).ok(), "unbounded conversion failed");
  OKL_FUZZ_CHECK(SameBits(unbounded, xs), "the bounded and unbounded conversions differ");
  OKL_FUZZ_CHECK(xs.size() == n * dim, "xs size");
  for (uint64_t i = 0; i < n; ++i) {
    CheckDensified(request.inputs(i), absl::MakeConstSpan(xs).subspan(i * dim, dim),
                   absl::StrCat("inputs[", i, "] at dim ", dim), i < 8);
  }
  if (n * dim > kMaxRequestValues) return;

  const std::unique_ptr<Model> model = TrainedRequestModel(dim, selector);
  std::vector<double> out(n);
  const absl::Status predicted = model->PredictBatch(xs, absl::MakeSpan(out));
  const bool all_finite =
      std::all_of(xs.begin(), xs.end(), [](double v) { return std::isfinite(v); });
  if (!all_finite) {
    OKL_FUZZ_CHECK(absl::IsInvalidArgument(predicted),
                   "non-finite input: ", predicted.ToString());
    return;
  }
  OKL_FUZZ_CHECK(predicted.ok(), predicted.ToString());
  for (uint64_t i = 0; i < std::min<uint64_t>(n, 8); ++i) {
    absl::StatusOr<double> p = model->Predict(absl::MakeConstSpan(xs).subspan(i * dim, dim));
    OKL_FUZZ_CHECK(p.ok() && SameBits(*p, out[i]), "Predict and PredictBatch differ at ", i);
  }
}

}  // namespace

int FuzzSnapshot(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string resealed;
  absl::string_view decoded_bytes = bytes;
  absl::StatusOr<ModelState> state = DecodeSnapshot(bytes);
  if (!state.ok()) {
    OKL_FUZZ_CHECK(absl::IsDataLoss(state.status()), state.status().ToString());
    if (size >= kChecksumFieldBytes) {
      resealed = Resealed(bytes);
      decoded_bytes = resealed;
      state = DecodeSnapshot(resealed);
      OKL_FUZZ_CHECK(state.ok() || absl::IsDataLoss(state.status()), state.status().ToString());
    }
  }
  // What a Restore checks its quotas on must be what it installs.
  const std::optional<ModelConfig> peeked = CheckPeek(decoded_bytes);
  if (!state.ok()) return 0;
  if (peeked.has_value()) {
    OKL_FUZZ_CHECK(CanonicalConfigBytes(*peeked) == CanonicalConfigBytes(state->config),
                   "PeekSnapshotConfig and DecodeSnapshot read different configs");
  }
  ExerciseState(*state);
  return 0;
}

int FuzzConfigText(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ModelConfig> config = ParseModelConfigText(text, "<fuzz>");
  if (!config.ok()) {
    OKL_FUZZ_CHECK(absl::IsInvalidArgument(config.status()), config.status().ToString());
    return 0;
  }
  const absl::Status valid = ValidateConfig(*config);
  OKL_FUZZ_CHECK(valid.ok(),
                 "ParseModelConfigText returned an invalid config: ", valid.ToString());
  const std::string canonical = CanonicalConfigBytes(*config);

  // ToProto/FromProto in memory, then through the wire and the text format.
  const v1::ModelConfig proto = ToProto(*config);
  absl::StatusOr<ModelConfig> again = FromProto(proto);
  OKL_FUZZ_CHECK(again.ok(), again.status().ToString());
  OKL_FUZZ_CHECK(CanonicalConfigBytes(*again) == canonical, "FromProto(ToProto(c)) != c");
  OKL_FUZZ_CHECK(*again == *config, "FromProto(ToProto(c)) != c by ==");

  v1::ModelConfig wire;
  OKL_FUZZ_CHECK(wire.ParseFromString(proto.SerializeAsString()), "wire round trip");
  absl::StatusOr<ModelConfig> from_wire = FromProto(wire);
  OKL_FUZZ_CHECK(from_wire.ok() && CanonicalConfigBytes(*from_wire) == canonical,
                 "the wire round trip changed the config");

  std::string printed;
  OKL_FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(proto, &printed), "print");
  absl::StatusOr<ModelConfig> reparsed = ParseModelConfigText(printed, "<printed>");
  OKL_FUZZ_CHECK(reparsed.ok(), reparsed.status().ToString(), "\n", printed);
  OKL_FUZZ_CHECK(CanonicalConfigBytes(*reparsed) == canonical,
                 "the text round trip changed the config:\n", printed);

  // A model of the config takes a few steps (the labels +-1 suit every loss) and restores.
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*config);
  OKL_FUZZ_CHECK(model.ok(), model.status().ToString());
  for (int k = 0; k < 4; ++k) {
    CheckObserve(**model, k, k % 2 ? 1.0 : -1.0,
                 absl::StrCat("Observe ", k, " on a model of the parsed config"));
  }
  CheckFixedPredictions(**model, 5);
  CheckRegret(**model);
  return 0;
}

int FuzzRequest(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const void* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  if (selector & 1) {
    v1::PredictRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    for (const uint32_t dim : kRequestDims) FuzzPredictRequest(request, dim, selector);
  } else {
    v1::ObserveRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    for (const uint32_t dim : kRequestDims) FuzzObserveRequest(request, dim, selector);
  }
  return 0;
}

}  // namespace okl::fuzz
