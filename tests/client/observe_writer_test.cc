// tests/client/observe_writer_test.cc
//
// okl::ObserveWriter against a real okl_server: ten thousand examples acknowledged in
// order with core's predictions; a message the server rejects; and a server killed in the
// middle of a stream, after which nothing acknowledged is lost and resuming from
// AppliedSinceOpen() gives the model that sees every example exactly once; and a tenant
// fenced for a move part-way through a stream, whose refused messages the writer (and a
// refused Observe, the client) sends again, so that every example lands once.

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tests/client/client_test_util.h"
#include "tests/server/server_process.h"

namespace okl::testing {
namespace {

using ::testing::HasSubstr;

constexpr size_t kExamples = 10000;

// Collects the acknowledgements and checks that they come in order, without gaps.
struct AckLog {
  WriterOptions Options(size_t batch_size, size_t batches_per_stream) {
    return {.batch_size = batch_size,
            .batches_per_stream = batches_per_stream,
            .on_ack = [this](const AckedBatch& ack) {
              EXPECT_EQ(ack.first, next) << "acknowledgements out of order";
              EXPECT_EQ(ack.predictions.size(), ack.count);
              EXPECT_EQ(ack.losses.size(), ack.count);
              EXPECT_EQ(ack.steps, steps_at_open + ack.first + ack.count);
              next = ack.first + ack.count;
              counts.push_back(ack.count);
              predictions.insert(predictions.end(), ack.predictions.begin(),
                                 ack.predictions.end());
              losses.insert(losses.end(), ack.losses.begin(), ack.losses.end());
            }};
  }

  uint64_t steps_at_open = 0;
  uint64_t next = 0;
  std::vector<uint64_t> counts;
  std::vector<double> predictions;
  std::vector<double> losses;
};

// The snapshot bytes of the core twin: equal bytes mean equal models, to the last bit of
// every coefficient, counter and statistic.
std::string TwinSnapshot(const CoreTwin& twin) {
  absl::StatusOr<std::string> bytes = EncodeSnapshot(twin.model->ExportState());
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

TEST(ObserveWriterTest, TenThousandExamplesAreAcknowledgedInOrderWithCoresPredictions) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const Client client(server->channel());
  const ModelId id{"acme", "stream"};
  const ModelConfig config = TestConfig();
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(kExamples, kDim, /*seed=*/21);
  CoreTwin twin(config);
  twin.Observe(data, 0, kExamples);

  AckLog log;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> opened =
      client.OpenObserveWriter(id, log.Options(/*batch_size=*/100, /*batches_per_stream=*/8));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ObserveWriter& writer = **opened;
  // One at a time, then the rest in one call.
  for (size_t i = 0; i < kExamples / 2; ++i) {
    ASSERT_TRUE(writer.Add(data.x(i), data.ys[i]).ok());
  }
  ASSERT_TRUE(
      writer
          .Add(data.xs_range(kExamples / 2, kExamples), data.ys_range(kExamples / 2, kExamples))
          .ok());
  // Streams of 800 examples so far, acknowledged as each closed.
  EXPECT_EQ(writer.acknowledged(), kExamples / 800 * 800);
  ASSERT_TRUE(writer.Close().ok()) << writer.status();
  EXPECT_EQ(writer.added(), kExamples);
  EXPECT_EQ(writer.acknowledged(), kExamples);
  EXPECT_EQ(log.next, kExamples);
  EXPECT_EQ(log.counts.size(), 13u);  // 12 x 800, then the last 400 on Close
  EXPECT_EQ(log.counts.back(), 400u);
  EXPECT_EQ(Bits(log.predictions), Bits(twin.predictions));
  EXPECT_EQ(Bits(log.losses), Bits(twin.losses));

  absl::StatusOr<uint64_t> applied = writer.AppliedSinceOpen();
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, kExamples);
  absl::StatusOr<std::string> snapshot = client.Snapshot(id);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(*snapshot == TwinSnapshot(twin)) << "the server's model differs from core's";
}

TEST(ObserveWriterTest, ARejectedMessageFailsTheWriterAndAppliedSinceOpenSaysWhereToResume) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const Client client(server->channel());
  const ModelId id{"acme", "stream"};
  const ModelConfig config = TestConfig();
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  Data data = MakeData(100, kDim, /*seed=*/22);
  const double good_label = data.ys[65];
  data.ys[65] = std::nan("");  // in the third message of the second stream

  AckLog log;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> opened =
      client.OpenObserveWriter(id, log.Options(/*batch_size=*/10, /*batches_per_stream=*/4));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ObserveWriter& writer = **opened;
  absl::Status added;
  for (size_t i = 0; i < data.size() && added.ok(); ++i) {
    added = writer.Add(data.x(i), data.ys[i]);
  }
  const absl::Status closed = writer.Close();
  EXPECT_EQ(closed.code(), absl::StatusCode::kInvalidArgument) << closed;
  EXPECT_THAT(std::string(closed.message()), HasSubstr("ObserveStream message 3"));
  EXPECT_THAT(std::string(closed.message()), HasSubstr("examples 40 to"));
  if (!added.ok()) {
    EXPECT_EQ(added, closed);
  }
  EXPECT_EQ(writer.Add(data.x(0), 1.0), closed);  // failed for good
  EXPECT_EQ(writer.acknowledged(), 40u);
  // The stream's first two messages were applied, unacknowledged.
  absl::StatusOr<uint64_t> applied = writer.AppliedSinceOpen();
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 60u);

  // Resume from there with the label fixed: every example once.
  data.ys[65] = good_label;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> resumed = client.OpenObserveWriter(id);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->steps_at_open(), 60u);
  ASSERT_TRUE((*resumed)->Add(data.xs_range(*applied, 100), data.ys_range(*applied, 100)).ok());
  ASSERT_TRUE((*resumed)->Close().ok());
  CoreTwin twin(config);
  twin.Observe(data, 0, 100);
  absl::StatusOr<std::string> snapshot = client.Snapshot(id);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(*snapshot == TwinSnapshot(twin));
}

// A tenant move fences the tenant's writes on its server part-way through a stream: the
// server applies the stream's first two messages, refuses the rest (UNAVAILABLE, saying
// how many it applied), and keeps refusing until the fence is lifted. The writer
// acknowledges the two, sends the rest again until they are taken, and the caller sees no
// error: the model is core's, fed every example once.
TEST(ObserveWriterTest, AStreamRefusedByATenantFenceIsSentAgainAndEveryExampleLandsOnce) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  const Client client(server->channel());
  const ModelId id{"moving", "stream"};
  const ModelConfig config = TestConfig();
  ASSERT_TRUE(client.CreateModel(id, config).ok());
  const Data data = MakeData(100, kDim, /*seed=*/31);

  std::vector<AckedBatch> acks;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> opened = client.OpenObserveWriter(
      id, {.batch_size = 10,
           .batches_per_stream = 4,
           .on_ack = [&acks](const AckedBatch& ack) { acks.push_back(ack); }});
  ASSERT_TRUE(opened.ok()) << opened.status();
  ObserveWriter& writer = **opened;
  // Two messages on the open stream, applied (the model's steps say so), not acknowledged.
  ASSERT_TRUE(writer.Add(data.xs_range(0, 20), data.ys_range(0, 20)).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (client.GetModel(id)->stats.steps < 20 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(writer.acknowledged(), 0u);
  absl::StatusOr<std::vector<std::string>> fenced = client.FenceTenant("moving", true);
  ASSERT_TRUE(fenced.ok()) << fenced.status();
  EXPECT_EQ(*fenced, std::vector<std::string>{"stream"});
  // Lifts the fence after a while, as a move's end would (here: on the same server).
  const auto lift_later = [&client] {
    return std::thread([&client] {
      absl::SleepFor(absl::Milliseconds(300));
      EXPECT_TRUE(client.FenceTenant("moving", false).ok());
    });
  };
  std::thread lifter = lift_later();
  EXPECT_TRUE(writer.Add(data.xs_range(20, 90), data.ys_range(20, 90)).ok());
  EXPECT_TRUE(writer.Flush().ok()) << writer.status();
  lifter.join();
  // A unary Observe refused by a fence is retried too, until the fence is lifted.
  ASSERT_TRUE(client.FenceTenant("moving", true).ok());
  lifter = lift_later();
  absl::StatusOr<ObserveResult> observed = client.Observe(id, data.xs_range(90, 100),
                                                          data.ys_range(90, 100));
  lifter.join();
  EXPECT_TRUE(observed.ok()) << observed.status();
  EXPECT_TRUE(writer.Close().ok()) << writer.status();
  EXPECT_EQ(writer.acknowledged(), 90u);
  EXPECT_GE(writer.streams_refused(), 2u);  // the fence refused the stream's rest, then more
  // The applied prefix is acknowledged first, without predictions (the refusal has none);
  // then the rest, in order.
  ASSERT_GE(acks.size(), 2u);
  EXPECT_EQ(acks[0].first, 0u);
  EXPECT_EQ(acks[0].count, 20u);
  EXPECT_TRUE(acks[0].predictions.empty());
  uint64_t next = 0;
  for (const AckedBatch& ack : acks) {
    EXPECT_EQ(ack.first, next);
    next = ack.first + ack.count;
  }
  EXPECT_EQ(next, 90u);

  CoreTwin twin(config);
  twin.Observe(data, 0, 100);
  absl::StatusOr<std::string> snapshot = client.Snapshot(id);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(*snapshot == TwinSnapshot(twin));
}

// The server is killed (SIGKILL) in the middle of a stream, then restarted on the same
// port and data directory.
TEST(ObserveWriterTest, AServerThatGoesAwayLosesNothingAcknowledgedAndTheWriterCanResume) {
  absl::StatusOr<int> port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string data_dir = MakeTempDir("data");
  const ServerProcessOptions options = {.listen = absl::StrCat("127.0.0.1:", *port),
                                        .data_dir = data_dir};
  std::unique_ptr<ServerProcess> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  // Patient reads, so that AppliedSinceOpen() waits out the reconnection after the restart.
  absl::StatusOr<Client> client = Client::Connect(
      server->address(), {.max_attempts = 50, .max_backoff = absl::Milliseconds(200)});
  ASSERT_TRUE(client.ok()) << client.status();
  const ModelId id{"acme", "stream"};
  const ModelConfig config = TestConfig();
  ASSERT_TRUE(client->CreateModel(id, config).ok());
  const Data data = MakeData(kExamples, kDim, /*seed=*/23);

  AckLog log;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> opened =
      client->OpenObserveWriter(id, log.Options(/*batch_size=*/100, /*batches_per_stream=*/8));
  ASSERT_TRUE(opened.ok()) << opened.status();
  ObserveWriter& writer = **opened;
  constexpr size_t kKillAt = 5000;  // streams of 800: the seventh (4800..5599) is open
  absl::Status added;
  for (size_t i = 0; i < kExamples && added.ok(); ++i) {
    if (i == kKillAt) {
      ASSERT_TRUE(server->Kill().ok());
    }
    added = writer.Add(data.x(i), data.ys[i]);
  }
  const absl::Status closed = writer.Close();
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable) << closed;
  if (!added.ok()) {
    EXPECT_EQ(added, closed);
  }
  EXPECT_EQ(writer.acknowledged(), 4800u);
  EXPECT_EQ(log.next, 4800u);

  server.reset();
  server = StartServer(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<uint64_t> applied = writer.AppliedSinceOpen();
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_GE(*applied, writer.acknowledged());  // nothing acknowledged is lost
  EXPECT_LE(*applied, kKillAt);                // nothing after the kill was sent

  // Resume exactly where the model is.
  AckLog resumed_log;
  resumed_log.steps_at_open = *applied;
  absl::StatusOr<std::unique_ptr<ObserveWriter>> resumed =
      client->OpenObserveWriter(id, resumed_log.Options(100, 8));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->steps_at_open(), *applied);
  ASSERT_TRUE((*resumed)
                  ->Add(data.xs_range(*applied, kExamples), data.ys_range(*applied, kExamples))
                  .ok());
  ASSERT_TRUE((*resumed)->Close().ok()) << (*resumed)->status();
  EXPECT_EQ((*resumed)->acknowledged(), kExamples - *applied);

  // The model is the one that saw every example exactly once, and every acknowledged
  // prediction is the one core made.
  CoreTwin twin(config);
  twin.Observe(data, 0, kExamples);
  absl::StatusOr<std::string> snapshot = client->Snapshot(id);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(*snapshot == TwinSnapshot(twin)) << "the resumed model differs";
  EXPECT_EQ(Bits(log.predictions),
            Bits(absl::MakeConstSpan(twin.predictions).subspan(0, log.predictions.size())));
  EXPECT_EQ(Bits(resumed_log.predictions),
            Bits(absl::MakeConstSpan(twin.predictions).subspan(*applied)));
  server.reset();
  std::filesystem::remove_all(data_dir);
}

}  // namespace
}  // namespace okl::testing
