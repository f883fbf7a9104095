// tests/client/client_metadata_test.cc
//
// What okl::Client puts on the wire, seen by a small recording okl.v1 service in this
// process: the x-okl-tenant and authorization metadata of every call, how many attempts
// each method makes on UNAVAILABLE (counted where they arrive), the backoff between them,
// deadlines, and the ObserveWriter's messages and streams. The service answers what the
// test sets, so these behaviours are checked exactly; the real server is in
// client_test.cc.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "core/runtime/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "okl/v1/okl.grpc.pb.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tests/client/client_test_util.h"

namespace okl::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One call as the service saw it.
struct SeenCall {
  std::string method;
  std::optional<std::string> tenant;         // x-okl-tenant
  std::optional<std::string> authorization;  // authorization
  // Streams: per message, its ref ("tenant/model", "" if empty) and its size.
  std::vector<std::string> refs = {};
  std::vector<int> sizes = {};
};

std::optional<std::string> Metadata(const grpc::ServerContext& context, absl::string_view key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

std::string RefName(const v1::ModelRef& ref) {
  return ref.tenant().empty() && ref.model().empty()
             ? ""
             : absl::StrCat(ref.tenant(), "/", ref.model());
}

// Answers every call with status() (OK: a plausible answer); records each call.
class RecordingService final : public v1::OnlineKernelLearning::Service {
 public:
  void set_status(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    status_ = std::move(status);
  }
  // Predict waits for its call to be cancelled (at most 10 s) before answering.
  void set_stall_predict(bool stall) ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    stall_predict_ = stall;
  }
  std::vector<SeenCall> calls() const ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    return calls_;
  }
  int count(absl::string_view method) const ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    return static_cast<int>(std::count_if(
        calls_.begin(), calls_.end(), [&](const SeenCall& c) { return c.method == method; }));
  }
  void clear() ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    calls_.clear();
  }

  grpc::Status CreateModel(grpc::ServerContext* context, const v1::CreateModelRequest* request,
                           v1::ModelInfo* response) override {
    return Answer(Record("CreateModel", *context), response);
  }
  grpc::Status GetModel(grpc::ServerContext* context, const v1::ModelRef* request,
                        v1::ModelInfo* response) override {
    return Answer(Record("GetModel", *context), response);
  }
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override {
    return Record("ListModels", *context);
  }
  grpc::Status DeleteModel(grpc::ServerContext* context, const v1::ModelRef* request,
                           v1::DeleteModelResponse* response) override {
    return Record("DeleteModel", *context);
  }
  grpc::Status Observe(grpc::ServerContext* context, const v1::ObserveRequest* request,
                       v1::ObserveResponse* response) override {
    grpc::Status status = Record("Observe", *context);
    for (int i = 0; i < request->examples_size(); ++i) {
      response->add_predictions(0);
      response->add_losses(0);
    }
    return status;
  }
  grpc::Status Predict(grpc::ServerContext* context, const v1::PredictRequest* request,
                       v1::PredictResponse* response) override {
    grpc::Status status = Record("Predict", *context);
    bool stall;
    {
      PlainLock lock(&mu_);
      stall = stall_predict_;
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (stall && !context->IsCancelled() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (int i = 0; i < request->inputs_size(); ++i) response->add_predictions(0);
    return status;
  }
  grpc::Status Label(grpc::ServerContext* context, const v1::LabelRequest* request,
                     v1::LabelResponse* response) override {
    grpc::Status status = Record("Label", *context);
    for (int i = 0; i < request->labels_size(); ++i) response->add_outcomes(v1::LABEL_UNKNOWN);
    return status;
  }
  grpc::Status ObserveStream(grpc::ServerContext* context,
                             grpc::ServerReader<v1::ObserveRequest>* reader,
                             v1::ObserveResponse* response) override {
    grpc::Status status = Record("ObserveStream", *context);
    if (!status.ok()) return status;
    v1::ObserveRequest request;
    std::vector<std::string> refs;
    std::vector<int> sizes;
    while (reader->Read(&request)) {
      refs.push_back(RefName(request.ref()));
      sizes.push_back(request.examples_size());
      for (const v1::Example& example : request.examples()) {
        response->add_predictions(example.y());  // recognisable: the label
        response->add_losses(0);
      }
    }
    PlainLock lock(&mu_);
    steps_ += response->predictions_size();
    response->set_steps(steps_);
    calls_.back().refs = std::move(refs);  // no other calls run in these tests meanwhile
    calls_.back().sizes = std::move(sizes);
    return status;
  }
  grpc::Status Snapshot(grpc::ServerContext* context, const v1::ModelRef* request,
                        grpc::ServerWriter<v1::SnapshotChunk>* writer) override {
    grpc::Status status = Record("Snapshot", *context);
    if (!status.ok()) return status;
    v1::SnapshotChunk chunk;
    for (const char* data : {"ab", "cd", "e"}) {
      chunk.set_data(data);
      writer->Write(chunk);
    }
    return status;
  }
  grpc::Status Restore(grpc::ServerContext* context,
                       grpc::ServerReader<v1::RestoreChunk>* reader,
                       v1::ModelInfo* response) override {
    grpc::Status status = Record("Restore", *context);
    if (!status.ok()) return status;
    v1::RestoreChunk chunk;
    std::vector<std::string> refs;
    std::vector<int> sizes;
    while (reader->Read(&chunk)) {
      refs.push_back(RefName(chunk.ref()));
      sizes.push_back(static_cast<int>(chunk.data().size()));
    }
    PlainLock lock(&mu_);
    calls_.back().refs = std::move(refs);
    calls_.back().sizes = std::move(sizes);
    return Answer(status, response);
  }

 private:
  grpc::Status Record(const char* method, const grpc::ServerContext& context)
      ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    calls_.push_back({.method = method,
                      .tenant = Metadata(context, kTenantMetadataKey),
                      .authorization = Metadata(context, "authorization")});
    return status_;
  }
  // A valid ModelInfo (dim kDim, 7 steps) if `status` is OK.
  static grpc::Status Answer(grpc::Status status, v1::ModelInfo* info) {
    if (status.ok()) {
      ModelSummary summary;
      summary.tenant = "acme";
      summary.model = "m";
      summary.config = TestConfig();
      summary.stats.steps = 7;
      *info = ToProto(summary);
    }
    return status;
  }

  mutable PlainMutex mu_;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  bool stall_predict_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 7;
  std::vector<SeenCall> calls_ ABSL_GUARDED_BY(mu_);
};

class ClientMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  Client MakeClient(ClientOptions options = {}) {
    absl::StatusOr<Client> client = Client::Connect(absl::StrCat("127.0.0.1:", port_), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  RecordingService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ClientMetadataTest, EveryCallCarriesItsTenantAndTheToken) {
  const Client client = MakeClient({.bearer_token = "s3cret"});
  const ModelId id{"acme", "m"};
  const std::vector<double> x = {0.1, 0.2, 0.3};
  const std::vector<double> y = {1};
  EXPECT_TRUE(client.CreateModel(id, TestConfig()).ok());
  EXPECT_TRUE(client.GetModel(id).ok());
  EXPECT_TRUE(client.ListModels("acme").ok());
  EXPECT_TRUE(client.DeleteModel(id).ok());
  EXPECT_TRUE(client.Observe(id, x, y).ok());
  EXPECT_TRUE(client.Predict(id, x, kDim).ok());
  EXPECT_TRUE(client.Snapshot(id).ok());
  EXPECT_TRUE(client.Restore(id, "snapshot").ok());
  {
    absl::StatusOr<std::unique_ptr<ObserveWriter>> writer = client.OpenObserveWriter(id);
    ASSERT_TRUE(writer.ok()) << writer.status();
    EXPECT_TRUE((*writer)->Add(x, 1.0).ok());
    EXPECT_TRUE((*writer)->Close().ok());
  }
  const std::vector<SeenCall> calls = service_.calls();
  std::vector<std::string> methods;
  for (const SeenCall& call : calls) {
    methods.push_back(call.method);
    EXPECT_EQ(call.tenant, "acme") << call.method;
    EXPECT_EQ(call.authorization, "Bearer s3cret") << call.method;
  }
  EXPECT_THAT(methods, ElementsAre("CreateModel", "GetModel", "ListModels", "DeleteModel",
                                   "Observe", "Predict", "Snapshot", "Restore",
                                   "GetModel",  // OpenObserveWriter reads the model's dim
                                   "ObserveStream"));

  // ListModels names its tenant filter only when it has one.
  service_.clear();
  EXPECT_TRUE(client.ListModels().ok());
  EXPECT_TRUE(client.ListModels("zeta").ok());
  ASSERT_EQ(service_.calls().size(), 2u);
  EXPECT_EQ(service_.calls()[0].tenant, std::nullopt);
  EXPECT_EQ(service_.calls()[1].tenant, "zeta");

  // Without a token there is no authorization header.
  service_.clear();
  EXPECT_TRUE(MakeClient().GetModel(id).ok());
  ASSERT_EQ(service_.calls().size(), 1u);
  EXPECT_EQ(service_.calls()[0].authorization, std::nullopt);
  EXPECT_EQ(service_.calls()[0].tenant, "acme");
}

TEST_F(ClientMetadataTest, SnapshotAndRestoreChunkTheBytes) {
  const Client client = MakeClient();
  absl::StatusOr<std::string> bytes = client.Snapshot({"acme", "m"});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "abcde");

  const std::string big(2 * kSnapshotChunkBytes + 5, 'x');
  ASSERT_TRUE(client.Restore({"acme", "m"}, big).ok());
  ASSERT_TRUE(client.Restore({"acme", "m"}, "").ok());
  const std::vector<SeenCall> calls = service_.calls();
  ASSERT_EQ(calls.size(), 3u);
  // The ref goes in the first chunk only; every chunk is at most 1 MiB.
  EXPECT_THAT(calls[1].refs, ElementsAre("acme/m", "", ""));
  const int chunk = static_cast<int>(kSnapshotChunkBytes);
  EXPECT_THAT(calls[1].sizes, ElementsAre(chunk, chunk, 5));
  // Even no bytes at all reach the server, as one empty chunk (which it rejects).
  EXPECT_THAT(calls[2].refs, ElementsAre("acme/m"));
  EXPECT_THAT(calls[2].sizes, ElementsAre(0));
}

TEST_F(ClientMetadataTest, OnlyReadsAreRetriedAndOnlyOnUnavailable) {
  service_.set_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"));
  const Client client =
      MakeClient({.max_attempts = 3, .initial_backoff = absl::Milliseconds(5)});
  const ModelId id{"acme", "m"};
  const std::vector<double> x = {0.1, 0.2, 0.3};
  const std::vector<double> y = {1};
  auto expect_unavailable = [](const absl::Status& status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(status.message(), "draining");
  };
  expect_unavailable(client.GetModel(id).status());
  expect_unavailable(client.ListModels("acme").status());
  expect_unavailable(client.Predict(id, x, kDim).status());
  expect_unavailable(client.Snapshot(id).status());
  expect_unavailable(client.CreateModel(id, TestConfig()).status());
  expect_unavailable(client.DeleteModel(id));
  expect_unavailable(client.Observe(id, x, y).status());
  expect_unavailable(client.Restore(id, "snapshot").status());
  // Label is safe to repeat (the first label of an event wins): retried as the reads.
  expect_unavailable(client.Label(id, {{"event", 1.0}}).status());
  EXPECT_EQ(service_.count("GetModel"), 3);
  EXPECT_EQ(service_.count("ListModels"), 3);
  EXPECT_EQ(service_.count("Predict"), 3);
  EXPECT_EQ(service_.count("Label"), 3);
  // A remembering Predict writes: without the server's word that nothing was applied,
  // one attempt.
  expect_unavailable(client.PredictRemembering(id, x, kDim, {}).status());
  EXPECT_EQ(service_.count("Predict"), 4);
  EXPECT_EQ(service_.count("Snapshot"), 3);
  EXPECT_EQ(service_.count("CreateModel"), 1);
  EXPECT_EQ(service_.count("DeleteModel"), 1);
  EXPECT_EQ(service_.count("Observe"), 1);
  EXPECT_EQ(service_.count("Restore"), 1);

  // The writer's stream is not retried either.
  service_.set_status(grpc::Status::OK);
  absl::StatusOr<std::unique_ptr<ObserveWriter>> writer = client.OpenObserveWriter(id);
  ASSERT_TRUE(writer.ok()) << writer.status();
  service_.set_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "draining"));
  service_.clear();
  EXPECT_TRUE((*writer)->Add(x, 1.0).ok());  // buffered
  const absl::Status closed = (*writer)->Close();
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(closed.message()), HasSubstr("draining"));
  EXPECT_EQ((*writer)->acknowledged(), 0u);
  EXPECT_EQ(service_.count("ObserveStream"), 1);

  // Other codes are final at once.
  service_.clear();
  service_.set_status(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
  EXPECT_EQ(client.GetModel(id).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_.count("GetModel"), 1);
}

TEST_F(ClientMetadataTest, BackoffGrowsAndRetriesStopBeforeTheDeadline) {
  service_.set_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting"));
  // Sleeps of 50, 100 and 200 ms, each within +-20%: at least 280 ms in all.
  const Client patient =
      MakeClient({.max_attempts = 4, .initial_backoff = absl::Milliseconds(50)});
  absl::Time start = absl::Now();
  EXPECT_EQ(patient.GetModel({"acme", "m"}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(280));
  EXPECT_EQ(service_.count("GetModel"), 4);

  // max_backoff caps the sleeps: 10 attempts with sleeps of at most 12 ms.
  service_.clear();
  const Client capped = MakeClient({.max_attempts = 10,
                                    .initial_backoff = absl::Milliseconds(10),
                                    .max_backoff = absl::Milliseconds(10)});
  start = absl::Now();
  EXPECT_EQ(capped.GetModel({"acme", "m"}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(service_.count("GetModel"), 10);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // 9 x 12 ms, and a loaded machine

  // The deadline bounds the retries: no sleep starts that would end after it, and the
  // last answer (UNAVAILABLE) is returned. Sleeps of 100, 200 and 400 ms (+-20%) fit in
  // 1 s, the next (at least 640 ms) does not: 4 attempts, fewer on a very slow machine.
  service_.clear();
  const Client hurried = MakeClient({.deadline = absl::Seconds(1),
                                     .max_attempts = 100,
                                     .initial_backoff = absl::Milliseconds(100)});
  start = absl::Now();
  EXPECT_EQ(hurried.GetModel({"acme", "m"}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LE(service_.count("GetModel"), 4);
  EXPECT_GE(service_.count("GetModel"), 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_F(ClientMetadataTest, ASlowAnswerEndsAtTheDeadline) {
  service_.set_stall_predict(true);
  const Client client = MakeClient({.deadline = absl::Milliseconds(200)});
  const absl::Time start = absl::Now();
  const absl::Status status = client.Predict({"acme", "m"}, {0.1, 0.2, 0.3}, kDim).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_EQ(service_.count("Predict"), 1);  // DEADLINE_EXCEEDED is not retried
  // A per-client override.
  EXPECT_EQ(client.WithDeadline(absl::Milliseconds(50))
                .Predict({"acme", "m"}, {0.1, 0.2, 0.3}, kDim)
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientMetadataTest, HealthCarriesNoTenant) {
  const Client client = MakeClient();
  absl::StatusOr<bool> serving = client.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  server_->GetHealthCheckService()->SetServingStatus(false);
  serving = client.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_FALSE(*serving);
  EXPECT_TRUE(service_.calls().empty());
}

TEST_F(ClientMetadataTest, WriterSendsBatchesOnStreamsAndNamesTheModelOnce) {
  const Client client = MakeClient();
  std::vector<AckedBatch> acks;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> opened = client.OpenObserveWriter(
      {"acme", "m"}, {.batch_size = 2,
                      .batches_per_stream = 2,
                      .on_ack = [&](const AckedBatch& ack) { acks.push_back(ack); }});
  ASSERT_TRUE(opened.ok()) << opened.status();
  ObserveWriter& writer = **opened;
  EXPECT_EQ(writer.dim(), kDim);
  EXPECT_EQ(writer.steps_at_open(), 7u);
  const Data data = MakeData(5, kDim, /*seed=*/1);
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(writer.Add(data.x(i), data.ys[i]).ok());
  ASSERT_TRUE(writer.Add(data.xs_range(3, 5), data.ys_range(3, 5)).ok());
  EXPECT_EQ(acks.size(), 1u);  // the first stream (2 messages of 2) is done
  // A wrong size is refused here and changes nothing.
  EXPECT_EQ(writer.Add({1.0}, 1.0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Add(data.xs_range(0, 2), data.ys_range(0, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.added(), 5u);
  ASSERT_TRUE(writer.Flush().ok());
  ASSERT_TRUE(writer.Flush().ok());  // nothing pending: no stream
  ASSERT_TRUE(writer.Close().ok());
  EXPECT_EQ(writer.Add(data.x(0), 1.0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(writer.Close().ok());

  const std::vector<SeenCall> calls = service_.calls();
  ASSERT_EQ(calls.size(), 3u);  // GetModel, then two streams
  EXPECT_THAT(calls[1].refs, ElementsAre("acme/m", ""));
  EXPECT_THAT(calls[1].sizes, ElementsAre(2, 2));
  EXPECT_THAT(calls[2].refs, ElementsAre("acme/m"));
  EXPECT_THAT(calls[2].sizes, ElementsAre(1));

  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].first, 0u);
  EXPECT_EQ(acks[0].count, 4u);
  EXPECT_EQ(acks[0].steps, 11u);
  EXPECT_EQ(acks[1].first, 4u);
  EXPECT_EQ(acks[1].count, 1u);
  EXPECT_EQ(acks[1].steps, 12u);
  // The recording service answers each example's label as its prediction.
  EXPECT_THAT(acks[0].predictions, ElementsAre(data.ys[0], data.ys[1], data.ys[2], data.ys[3]));
  EXPECT_THAT(acks[1].predictions, ElementsAre(data.ys[4]));
  EXPECT_EQ(writer.acknowledged(), 5u);
}

// A stream may not outlive the deadline: once it has used half of it, the next batch goes
// on a new stream, and the old one is acknowledged first.
TEST_F(ClientMetadataTest, WriterClosesAStreamThatHasUsedHalfItsDeadline) {
  const Client client = MakeClient({.deadline = absl::Seconds(2)});
  std::vector<AckedBatch> acks;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> writer = client.OpenObserveWriter(
      {"acme", "m"}, {.batch_size = 1,
                      .batches_per_stream = 1000,
                      .on_ack = [&](const AckedBatch& ack) { acks.push_back(ack); }});
  ASSERT_TRUE(writer.ok()) << writer.status();
  const Data data = MakeData(3, kDim, /*seed=*/1);
  ASSERT_TRUE((*writer)->Add(data.x(0), data.ys[0]).ok());
  ASSERT_TRUE((*writer)->Add(data.x(1), data.ys[1]).ok());
  EXPECT_TRUE(acks.empty());
  absl::SleepFor(absl::Milliseconds(1100));
  ASSERT_TRUE((*writer)->Add(data.x(2), data.ys[2]).ok());
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].count, 2u);
  ASSERT_TRUE((*writer)->Close().ok());
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[1].first, 2u);
  EXPECT_EQ(service_.count("ObserveStream"), 2);
}

TEST_F(ClientMetadataTest, WriterOptionsAreChecked) {
  const Client client = MakeClient();
  EXPECT_EQ(client.OpenObserveWriter({"acme", "m"}, {.batch_size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.OpenObserveWriter({"acme", "m"}, {.batches_per_stream = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(service_.calls().empty());
}

}  // namespace
}  // namespace okl::testing
