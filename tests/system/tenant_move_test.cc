// tests/system/tenant_move_test.cc
//
// Moving a tenant with nothing acknowledged lost, on the real cluster: three okl_server
// replicas behind Debian's nginx (deploy/cluster/local_cluster.sh), four writers
// (okl::ObserveWriter, each on its own channel to the router) streaming into four models
// of one tenant, and `local_cluster.sh move` (okl move) taking the tenant to another
// replica twice while they write. Afterwards every model must equal, to the last bit, a
// core model fed exactly the examples its writer had acknowledged: each once, in order.
//
// The cluster runs in the test's temporary directory on ports 20070-20073: fixed, because
// the ring hashes the replicas' addresses, and below the kernel's ephemeral range
// (32768-60999), so no port-0 server or outgoing connection of a concurrent test can take
// one; SystemClusterTest uses 20060-20064.

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "core/model.h"
#include "core/runtime/file.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tests/client/client_test_util.h"
#include "tests/test_paths.h"

namespace okl::testing {
namespace {

constexpr int kClusterPort = 20070;
constexpr int kReplicas = 3;
constexpr int kWriters = 4;
constexpr size_t kExamplesPerWriter = 12000;
constexpr char kTenant[] = "mover";

std::string Quote(absl::string_view text) { return absl::StrCat("'", text, "'"); }

// local_cluster.sh in a directory of its own; stopped when destroyed.
class Cluster {
 public:
  Cluster() : dir_(MakeTempDir("cluster")) {}
  ~Cluster() { (void)Run("stop"); }

  // Runs `local_cluster.sh ARGS`; its stdout, or a failure naming its exit status.
  absl::StatusOr<std::string> Run(absl::string_view args) const {
    const std::string command = absl::StrCat(
        "env -u NGINX OKL_CLUSTER_DIR=", Quote(dir_), " OKL_CLUSTER_PORT=", kClusterPort,
        " OKL_SERVER=", Quote(ServerBinary()), " OKL_CLI=", Quote(CliBinary()),
        " OKL_NGINX=", Quote(OKL_NGINX), " ", Quote(SourcePath("deploy/cluster/local_cluster.sh")), " ", args, " 2>",
        Quote(dir_ + "/script.err"));
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return absl::InternalError("popen failed");
    std::string out;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
    const int status = ::pclose(pipe);
    if (status != 0) {
      return absl::InternalError(absl::StrCat("local_cluster.sh ", args, " exited ",
                                              WEXITSTATUS(status), ": ", out,
                                              ReadFile(dir_ + "/script.err").value_or("")));
    }
    return out;
  }

  static std::string Router() { return absl::StrCat("127.0.0.1:", kClusterPort); }
  static std::string Replica(int n) { return absl::StrCat("127.0.0.1:", kClusterPort + n); }

 private:
  std::string dir_;
};

// The replica (1-based) whose ListModels shows the tenant's models; 0 if none, -1 if
// several do.
int Holder(absl::string_view tenant) {
  int holder = 0;
  for (int n = 1; n <= kReplicas; ++n) {
    absl::StatusOr<Client> replica = Client::Connect(Cluster::Replica(n));
    if (!replica.ok()) return -1;
    absl::StatusOr<std::vector<ModelSummary>> models = replica->ListModels(tenant);
    if (!models.ok() || models->empty()) continue;
    holder = holder == 0 ? n : -1;
  }
  return holder;
}

struct Writer {
  Data data;
  std::atomic<uint64_t> acknowledged{0};
  std::atomic<bool> done{false};
  uint64_t next_expected = 0;  // the first example of the next acknowledgement
  bool in_order = true;
  absl::Status closed;
  uint64_t streams_refused = 0;
};

TEST(TenantMoveTest, FourWritersThroughTheRouterLoseNothingWhileTheirTenantMovesTwice) {
  Cluster cluster;
  absl::StatusOr<std::string> started = cluster.Run(absl::StrCat("start ", kReplicas));
  ASSERT_TRUE(started.ok()) << started.status();

  const ModelConfig config = TestConfig(kDim, /*max_terms=*/200);
  absl::StatusOr<Client> admin = Client::Connect(Cluster::Router());
  ASSERT_TRUE(admin.ok()) << admin.status();
  for (int w = 0; w < kWriters; ++w) {
    absl::StatusOr<ModelSummary> created =
        admin->CreateModel({kTenant, absl::StrCat("w", w)}, config);
    ASSERT_TRUE(created.ok()) << created.status();
  }
  const int first_holder = Holder(kTenant);
  ASSERT_GE(first_holder, 1);

  std::vector<std::unique_ptr<Writer>> writers;
  std::vector<std::thread> threads;
  // Each writer stops in the middle of a stream at 60% of its examples until the second
  // move is over, so that the move certainly fences a stream that is open (paced
  // writers alone may all be between streams when a move comes, on a loaded machine).
  std::atomic<bool> moves_over{false};
  const size_t pause_at = kExamplesPerWriter * 3 / 5 + 4;
  for (int w = 0; w < kWriters; ++w) {
    writers.push_back(std::make_unique<Writer>());
    writers.back()->data = MakeData(kExamplesPerWriter, kDim, /*seed=*/100 + w);
  }
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      Writer& writer = *writers[w];
      // Each writer has its own channel: its own HTTP/2 connection to the router.
      absl::StatusOr<Client> client = Client::Connect(Cluster::Router());
      if (!client.ok()) {
        writer.closed = client.status();
        return;
      }
      WriterOptions options;
      options.batch_size = 8;
      options.batches_per_stream = 16;
      options.on_ack = [&writer](const AckedBatch& ack) {
        if (ack.first != writer.next_expected) writer.in_order = false;
        writer.next_expected = ack.first + ack.count;
        writer.acknowledged.store(writer.next_expected);
      };
      absl::StatusOr<std::unique_ptr<ObserveWriter>> stream =
          client->OpenObserveWriter({kTenant, absl::StrCat("w", w)}, options);
      if (!stream.ok()) {
        writer.closed = stream.status();
        return;
      }
      for (size_t i = 0; i < writer.data.size(); ++i) {
        if (!(*stream)->Add(writer.data.x(i), writer.data.ys[i]).ok()) break;
        // Paced, so that the writers are still writing when the moves come.
        if (i % 8 == 7) absl::SleepFor(absl::Microseconds(500));
        while (i == pause_at && !moves_over.load()) absl::SleepFor(absl::Milliseconds(5));
      }
      writer.closed = (*stream)->Close();
      writer.streams_refused = (*stream)->streams_refused();
      writer.done.store(true);
    });
  }
  // Moves the tenant to replica `to` once every writer has `fraction` acknowledged.
  const auto move_when = [&](double fraction, int to) -> absl::Status {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (const auto& writer : writers) {
      while (writer->acknowledged.load() < fraction * kExamplesPerWriter) {
        if (writer->done.load()) return absl::AbortedError("a writer stopped early");
        if (absl::Now() > deadline) return absl::DeadlineExceededError("writers too slow");
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    return cluster.Run(absl::StrCat("move ", kTenant, " ", to)).status();
  };
  const int second_holder = first_holder % kReplicas + 1;
  const int third_holder = second_holder % kReplicas + 1;
  const absl::Status first_move = move_when(0.2, second_holder);
  const absl::Status second_move = first_move.ok() ? move_when(0.5, third_holder) : first_move;
  moves_over.store(true);
  for (std::thread& thread : threads) thread.join();
  uint64_t refused = 0;
  for (int w = 0; w < kWriters; ++w) {
    const Writer& writer = *writers[w];
    EXPECT_TRUE(writer.closed.ok()) << "writer " << w << ": " << writer.closed;
    EXPECT_TRUE(writer.in_order) << "writer " << w;
    EXPECT_EQ(writer.acknowledged.load(), kExamplesPerWriter) << "writer " << w;
    refused += writer.streams_refused;
  }
  ASSERT_TRUE(first_move.ok()) << first_move;
  ASSERT_TRUE(second_move.ok()) << second_move;
  // The moves did cut streams (or this test would prove nothing about them).
  EXPECT_GE(refused, 1u);
  std::fprintf(stderr, "streams refused by the moves' fences and sent again: %llu\n",
               static_cast<unsigned long long>(refused));

  // The tenant lives on the third replica only; the others answer UNAVAILABLE ("moved").
  EXPECT_EQ(Holder(kTenant), third_holder);
  for (const int n : {first_holder, second_holder}) {
    absl::StatusOr<Client> replica = Client::Connect(Cluster::Replica(n));
    ASSERT_TRUE(replica.ok());
    absl::StatusOr<ModelSummary> stale = replica->WithDeadline(absl::Seconds(2))
                                             .GetModel({kTenant, "w0"});
    EXPECT_EQ(stale.status().code(), absl::StatusCode::kUnavailable) << stale.status();
  }

  // Every model, read through the router, is bit-identical to core fed its writer's
  // examples once each, in order.
  for (int w = 0; w < kWriters; ++w) {
    CoreTwin twin(config);
    ASSERT_NE(twin.model, nullptr);
    twin.Observe(writers[w]->data, 0, kExamplesPerWriter);
    absl::StatusOr<std::string> bytes = admin->Snapshot({kTenant, absl::StrCat("w", w)});
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<ModelState> served = DecodeSnapshot(*bytes);
    ASSERT_TRUE(served.ok()) << served.status();
    const ModelState expected = twin.model->ExportState();
    EXPECT_EQ(served->steps, expected.steps) << "model w" << w;
    EXPECT_TRUE(*served == expected) << "model w" << w << " differs from core's";
  }
}

}  // namespace
}  // namespace okl::testing
