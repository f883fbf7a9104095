// server/store/model_store.cc

#include "server/store/model_store.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "server/base/failpoint.h"

namespace okl {
namespace {

// RocksDB's own log (flushes, compactions, errors), on okl_server's stderr at WARN and
// above, instead of a LOG file in --data_dir: Debian's RocksDB is built with assertions,
// and once a full disk made a LOG write fail, its next line aborted the server.
class StderrLogger final : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    const std::string text =
        absl::StrCat("okl_server: rocksdb: ", absl::string_view(line, std::min<size_t>(
                                                                       n, sizeof(line) - 1)),
                     "\n");
    // One write(2) a line: lines of concurrent threads do not interleave, nothing is buffered.
    (void)!::write(STDERR_FILENO, text.data(), text.size());
  }
};

static_assert(std::endian::native == std::endian::little,
              "the store's records are little-endian");

constexpr char kFormatKey[] = "v";
constexpr char kFormatValue[] = "okl-store 1";
constexpr char kModelPrefix[] = "m/";
constexpr char kIncarnationPrefix[] = "i/";

std::string Hex16(uint64_t value) { return absl::StrFormat("%016x", value); }



std::string ModelRecordKey(absl::string_view tenant, absl::string_view model) {
  return absl::StrCat(kModelPrefix, tenant, "/", model);
}
// Every key of an incarnation lies in [IncarnationPrefix, IncarnationEnd): '0' follows '/'.
std::string IncarnationEnd(uint64_t inc) {
  return absl::StrCat(kIncarnationPrefix, Hex16(inc), "0");
}
std::string CheckpointKey(uint64_t inc) { return absl::StrCat(IncarnationPrefix(inc), "c"); }
std::string LogKey(uint64_t inc, uint64_t seq) {
  return absl::StrCat(IncarnationPrefix(inc), "l/", Hex16(seq));
}

bool ParseHex16(absl::string_view text, uint64_t* value) {
  if (text.size() != 16) return false;
  return absl::SimpleHexAtoi(text, value);
}

void PutFixed64(std::string* out, uint64_t value) {
  char bytes[8];
  std::memcpy(bytes, &value, 8);
  out->append(bytes, 8);
}
uint64_t GetFixed64(const char* p) {
  uint64_t value;
  std::memcpy(&value, p, 8);
  return value;
}

constexpr char kWriteOutcomeUnknownUrl[] = "type.okl.dev/okl.WriteOutcomeUnknown";

// "m/" value: incarnation, ModelConfig (wire bytes), FNV-1a 64 of what precedes it.
std::string EncodeModelRecord(uint64_t inc, const ModelConfig& config) {
  std::string value;
  PutFixed64(&value, inc);
  value.append(ToProto(config).SerializeAsString());
  PutFixed64(&value, Fnv1a64(value));
  return value;
}

absl::Status DecodeModelRecord(absl::string_view value, uint64_t* inc, ModelConfig* config) {
  if (value.size() < 16) {
    return absl::DataLossError(
        absl::StrCat("config record is truncated (", value.size(), " bytes)"));
  }
  const absl::string_view body = value.substr(0, value.size() - 8);
  if (GetFixed64(value.data() + body.size()) != Fnv1a64(body)) {
    return absl::DataLossError("config record fails its checksum");
  }
  *inc = GetFixed64(body.data());
  v1::ModelConfig proto;
  if (!proto.ParseFromArray(body.data() + 8, static_cast<int>(body.size() - 8))) {
    return absl::DataLossError("config record does not parse");
  }
  absl::StatusOr<ModelConfig> parsed = FromProto(proto);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat("config is invalid: ", parsed.status().message()));
  }
  *config = *std::move(parsed);
  return absl::OkStatus();
}

// Checkpoint value: the log sequence it covers, FNV-1a 64 of those 8 bytes, then the
// snapshot bytes (which carry their own checksum; see EncodeSnapshot).
absl::StatusOr<std::string> EncodeCheckpoint(const ModelState& state, uint64_t seq) {
  OKL_ASSIGN_OR_RETURN(std::string snapshot, EncodeSnapshot(state));
  std::string value;
  value.reserve(16 + snapshot.size());
  PutFixed64(&value, seq);
  PutFixed64(&value, Fnv1a64(value));
  value.append(snapshot);
  return value;
}

absl::Status DecodeCheckpoint(absl::string_view value, uint64_t* seq, ModelState* state) {
  if (value.size() < 16) return absl::DataLossError("checkpoint record is truncated");
  if (GetFixed64(value.data() + 8) != Fnv1a64(value.substr(0, 8))) {
    return absl::DataLossError("checkpoint record fails its checksum");
  }
  *seq = GetFixed64(value.data());
  absl::StatusOr<ModelState> decoded = DecodeSnapshot(value.substr(16));
  if (!decoded.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", decoded.status().message()));
  }
  *state = *std::move(decoded);
  return absl::OkStatus();
}

// Log record, dense: example count n (u64), n*dim inputs, n labels, as raw doubles
// (bit-exact). Sparse: n | kSparseRecord (u64), the total non-zeros m (u64), the n rows'
// ends (u64 each), m indices (u32), m values and n labels (raw doubles). A batch with
// class labels (a multi-class model's) sets kClassRecord in n's word and ends with the
// n labels' lengths (u32 each), then their bytes; a record without the bit has none.
// No checksum of our own: RocksDB checksums its write-ahead log records (CRC32C) and
// the blocks of its table files, and reports a mismatch as Corruption.
constexpr uint64_t kSparseRecord = uint64_t{1} << 63;
constexpr uint64_t kClassRecord = uint64_t{1} << 62;

template <typename T>
void PutArray(absl::Span<const T> values, std::string* out) {
  out->append(reinterpret_cast<const char*>(values.data()), sizeof(T) * values.size());
}

template <typename T>
void GetArray(absl::string_view* in, size_t n, std::vector<T>* out) {
  out->resize(n);
  if (n == 0) return;
  std::memcpy(out->data(), in->data(), sizeof(T) * n);
  in->remove_prefix(sizeof(T) * n);
}

void PutClassLabels(absl::Span<const std::string> labels, std::string* out) {
  for (const std::string& label : labels) {
    const auto size = static_cast<uint32_t>(label.size());
    PutArray(absl::MakeConstSpan(&size, 1), out);
  }
  for (const std::string& label : labels) out->append(label);
}

// The n labels that end a kClassRecord record: `in` holds exactly them.
absl::Status GetClassLabels(absl::string_view in, uint64_t n, std::vector<std::string>* out) {
  if (in.size() / 4 < n) return absl::DataLossError("is truncated in its class labels");
  std::vector<uint32_t> sizes;
  GetArray(&in, n, &sizes);
  uint64_t total = 0;
  for (uint32_t size : sizes) total += size;
  if (total != in.size()) {
    return absl::DataLossError(absl::StrCat("has ", in.size(), " bytes of class labels, not ",
                                            total));
  }
  out->reserve(n);
  for (uint32_t size : sizes) {
    out->emplace_back(in.substr(0, size));
    in.remove_prefix(size);
  }
  return absl::OkStatus();
}

std::string EncodeBatch(const ValidatedBatch& batch) {
  const InputBatch& xs = batch.inputs();
  const absl::Span<const double> ys = batch.ys();
  const absl::Span<const std::string> labels = batch.class_labels();
  std::string value;
  const uint64_t n = ys.size();
  const uint64_t class_bit = labels.empty() ? 0 : kClassRecord;
  size_t label_bytes = 4 * labels.size();
  for (const std::string& label : labels) label_bytes += label.size();
  if (!xs.sparse()) {
    value.reserve(8 + 8 * (xs.dense_values().size() + n) + label_bytes);
    const uint64_t head = n | class_bit;
    PutArray(absl::MakeConstSpan(&head, 1), &value);
    PutArray(xs.dense_values(), &value);
    PutArray(ys, &value);
    PutClassLabels(labels, &value);
    return value;
  }
  uint64_t m = 0;
  for (size_t i = 0; i < n; ++i) m += xs.SparseRow(i).indices.size();
  value.reserve(16 + 8 * n + 12 * m + 8 * n + label_bytes);
  const uint64_t header[2] = {n | kSparseRecord | class_bit, m};
  PutArray(absl::MakeConstSpan(header), &value);
  uint64_t end = 0;
  for (size_t i = 0; i < n; ++i) {
    end += xs.SparseRow(i).indices.size();
    PutArray(absl::MakeConstSpan(&end, 1), &value);
  }
  for (size_t i = 0; i < n; ++i) PutArray(xs.SparseRow(i).indices, &value);
  for (size_t i = 0; i < n; ++i) PutArray(xs.SparseRow(i).values, &value);
  PutArray(ys, &value);
  PutClassLabels(labels, &value);
  return value;
}

absl::Status DecodeBatch(absl::string_view value, uint32_t dim, StoredModel::Batch* batch) {
  if (value.size() < 8) return absl::DataLossError("is truncated");
  const uint64_t head = GetFixed64(value.data());
  batch->sparse = (head & kSparseRecord) != 0;
  const bool has_classes = (head & kClassRecord) != 0;
  const uint64_t n = head & ~(kSparseRecord | kClassRecord);
  if (!batch->sparse) {
    // The examples' bytes, checked against the record's size before anything is
    // allocated; the class labels (if any) follow them.
    const uint64_t rest = value.size() - 8;
    const bool fits = n > 0 && n <= rest / 8 / (uint64_t{dim} + 1);
    const uint64_t example_bytes = fits ? 8 * n * (uint64_t{dim} + 1) : 0;
    if (!fits || (has_classes ? rest < example_bytes : rest != example_bytes)) {
      return absl::DataLossError(absl::StrCat("has ", value.size(), " bytes, not ", n,
                                              " examples of dimension ", dim));
    }
    value.remove_prefix(8);
    GetArray(&value, n * dim, &batch->xs);
    GetArray(&value, n, &batch->ys);
    return has_classes ? GetClassLabels(value, n, &batch->class_labels) : absl::OkStatus();
  }
  if (value.size() < 16) return absl::DataLossError("is truncated");
  const uint64_t m = GetFixed64(value.data() + 8);
  const uint64_t rest = value.size() - 16;
  // n and m from the record are checked against its size before anything is allocated.
  const bool fits = n > 0 && n <= rest / 16 && m <= rest / 12 && 16 * n + 12 * m <= rest;
  const uint64_t example_bytes = fits ? 16 * n + 12 * m : 0;
  if (!fits || (has_classes ? rest < example_bytes : rest != example_bytes)) {
    return absl::DataLossError(absl::StrCat("has ", value.size(), " bytes, not ", n,
                                            " sparse examples with ", m, " non-zeros"));
  }
  value.remove_prefix(16);
  SparseRows& rows = batch->sparse_xs;
  GetArray(&value, n, &rows.ends);
  GetArray(&value, m, &rows.indices);
  GetArray(&value, m, &rows.values);
  GetArray(&value, n, &batch->ys);
  // The rows' contents are checked by the model when the batch is replayed.
  absl::Status shape = ValidateSparseRowsShape("the sparse batch", rows);
  if (!shape.ok()) return absl::DataLossError(shape.message());
  return has_classes ? GetClassLabels(value, n, &batch->class_labels) : absl::OkStatus();
}

absl::string_view ToView(const rocksdb::Slice& slice) {
  return absl::string_view(slice.data(), slice.size());
}

// A model's record as stored: its names, and its config and incarnation still encoded.
struct NamedRecord {
  std::string tenant;
  std::string model;
  std::string value;
};

// Every model record ("m/<tenant>/<model>") `it` finds, in key order. DataLoss naming the
// store at `path` for a key of another form; the caller checks it->status().
absl::Status ReadModelRecords(rocksdb::Iterator* it, absl::string_view path,
                              std::vector<NamedRecord>* records) {
  for (it->Seek(kModelPrefix); it->Valid() && it->key().starts_with(kModelPrefix); it->Next()) {
    const absl::string_view key = ToView(it->key()).substr(2);
    const size_t slash = key.find('/');
    if (slash == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat("the model store at \"", path,
                                              "\" holds an unrecognised key \"",
                                              ToView(it->key()), "\""));
    }
    records->push_back({std::string(key.substr(0, slash)), std::string(key.substr(slash + 1)),
                        std::string(ToView(it->value()))});
  }
  return absl::OkStatus();
}

// Reads `model`'s checkpoint and log records with `it`, checking that the checkpoint
// holds the model's config and that the log continues it without a gap. The
// incarnation's other keys, its remembered events (server/events/model_events.h), are not read
// here. DataLoss saying what is damaged.
absl::Status ReadCheckpointAndLog(rocksdb::Iterator* it, StoredModel* stored) {
  StoredModel& model = *stored;
  const std::string checkpoint_key = CheckpointKey(model.incarnation);
  it->Seek(checkpoint_key);
  if (it->Valid() && ToView(it->key()) == checkpoint_key) {
    ModelState state;
    OKL_RETURN_IF_ERROR(DecodeCheckpoint(ToView(it->value()), &model.checkpoint_seq, &state));
    if (CanonicalConfigBytes(state.config) != CanonicalConfigBytes(model.config)) {
      return absl::DataLossError("the checkpoint's config differs from the model's");
    }
    model.checkpoint = std::move(state);
  }
  const std::string log_prefix = absl::StrCat(IncarnationPrefix(model.incarnation), "l/");
  for (it->Seek(log_prefix); it->Valid() && it->key().starts_with(log_prefix); it->Next()) {
    const absl::string_view key = ToView(it->key());
    uint64_t seq = 0;
    if (!ParseHex16(key.substr(log_prefix.size()), &seq)) {
      return absl::DataLossError(absl::StrCat("unrecognised key \"", key, "\""));
    }
    const uint64_t expected =
        model.log.empty() ? model.checkpoint_seq + 1 : model.log.back().seq + 1;
    if (seq != expected) {
      return absl::DataLossError(
          seq < expected
              ? absl::StrCat("log record ", seq, " is at or before the checkpoint (record ",
                             model.checkpoint_seq, ")")
              : absl::StrCat("log records ", expected, " to ", seq - 1, " are missing"));
    }
    StoredModel::Batch batch;
    batch.seq = seq;
    if (absl::Status status = DecodeBatch(ToView(it->value()), model.config.dim, &batch);
        !status.ok()) {
      return absl::DataLossError(absl::StrCat("log record ", seq, " ", status.message()));
    }
    model.log.push_back(std::move(batch));
  }
  return absl::OkStatus();
}

}  // namespace

bool WriteOutcomeUnknown(const absl::Status& status) {
  return status.GetPayload(kWriteOutcomeUnknownUrl).has_value();
}

// --- Write health --------------------------------------------------------------------

// What RocksDB's listener and the failed writes tell of the store's writes (StoreHealth).
class ModelStore::WriteHealth {
 public:
  // RocksDB stopped accepting writes (a background error, hard or fatal).
  void Stopped(const rocksdb::Status& error) ABSL_LOCKS_EXCLUDED(mu_) {
    const bool resumable =
        error.IsNoSpace() && error.severity() < rocksdb::Status::Severity::kFatalError;
    bool news;
    {
      PlainLock lock(&mu_);
      news = health_.writable || (health_.resumable && !resumable);
      health_.writable = false;
      health_.resumable = health_.resumable && resumable;
      health_.error = error.ToString();
    }
    // One line a change, not one per refused write.
    if (news) {
      std::fprintf(stderr, "okl_server: the model store stopped accepting writes: %s; %s\n",
                   error.ToString().c_str(),
                   resumable ? "they resume once space is freed on its filesystem"
                             : "they are refused until okl_server is restarted");
    }
  }
  void Resumed() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      PlainLock lock(&mu_);
      if (health_.writable) return;
      health_.writable = true;
      health_.resumable = true;
      health_.error.clear();
      ++health_.resumptions;
    }
    std::fprintf(stderr, "okl_server: the model store accepts writes again\n");
  }
  void Refused(bool no_space) ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    ++(no_space ? health_.no_space_refusals : health_.io_error_refusals);
  }
  StoreHealth Get() const ABSL_LOCKS_EXCLUDED(mu_) {
    PlainLock lock(&mu_);
    return health_;
  }

 private:
  mutable PlainMutex mu_;
  StoreHealth health_ ABSL_GUARDED_BY(mu_);
};

namespace {

// RocksDB's error handling, reported to WriteHealth. RocksDB would resume by itself
// after a full disk only once the free space reaches a whole memtable's reserve (64 MiB),
// and refuses a manual Resume while that recovery is pending; so okl vetoes it and
// resumes itself (ModelStore::TryResume, from the server's background thread), which
// succeeds as soon as the memtables fit.
class StoreListener final : public rocksdb::EventListener {
 public:
  explicit StoreListener(std::shared_ptr<ModelStore::WriteHealth> health)
      : health_(std::move(health)) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    // A soft error (a failed compaction) leaves writes working and recovers by itself.
    if (error->severity() >= rocksdb::Status::Severity::kHardError) health_->Stopped(*error);
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status error,
                            bool* auto_recovery) override {
    if (error.severity() >= rocksdb::Status::Severity::kHardError) *auto_recovery = false;
  }
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override {
    if (info.new_bg_error.ok()) health_->Resumed();
  }

 private:
  const std::shared_ptr<ModelStore::WriteHealth> health_;
};

}  // namespace

// --- ModelStore ----------------------------------------------------------------------

ModelStore::ModelStore(std::string path, Options options, std::unique_ptr<rocksdb::Env> env,
                       std::shared_ptr<WriteHealth> write_health,
                       std::unique_ptr<rocksdb::DB> db)
    : path_(std::move(path)),
      options_(std::move(options)),
      env_(std::move(env)),
      write_health_(std::move(write_health)),
      db_(std::move(db)) {}

ModelStore::~ModelStore() = default;

absl::StatusOr<std::unique_ptr<ModelStore>> ModelStore::Open(const std::string& path,
                                                             Options options) {
  auto unusable = [&path](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use the model store at \"", path, "\" (--data_dir): ", why));
  };
  if (path.empty()) return unusable("the path is empty");
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return unusable(absl::StrCat("cannot create the directory: ", error.message()));
  if (!std::filesystem::is_directory(path, error)) return unusable("not a directory");

  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  // A torn last record (a crash in the middle of a write that was never acknowledged) is
  // dropped; corruption anywhere else stops the open instead of silently losing data.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  db_options.max_background_jobs = 2;
  db_options.info_log = std::make_shared<StderrLogger>();
  auto write_health = std::make_shared<WriteHealth>();
  db_options.listeners.push_back(std::make_shared<StoreListener>(write_health));
  // No automatic resume after retryable I/O errors either: with it, closing the database
  // can hang (rocksdb issue 11440); TryResume covers what is resumable.
  db_options.max_bgerror_resume_count = 0;
  std::unique_ptr<rocksdb::Env> env;  // declared before the DB: destroyed after it
  if (options.file_system != nullptr) {
    env = rocksdb::NewCompositeEnv(options.file_system);
    db_options.env = env.get();
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(db_options, path, &raw);
  if (!status.ok()) {
    if (status.IsCorruption()) {
      return absl::DataLossError(absl::StrCat(
          "the model store at \"", path, "\" (--data_dir) is corrupt: ", status.ToString()));
    }
    if (status.IsIOError() && absl::StrContains(status.ToString(), "lock")) {
      return unusable(
          absl::StrCat(status.ToString(), " (another okl_server is probably using it)"));
    }
    return unusable(status.ToString());
  }
  std::unique_ptr<rocksdb::DB> db(raw);

  std::string format;
  status = db->Get(rocksdb::ReadOptions(), kFormatKey, &format);
  if (status.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) return unusable("it holds data but no okl format marker");
    rocksdb::WriteOptions write;
    write.sync = true;
    status = db->Put(write, kFormatKey, kFormatValue);
    if (!status.ok()) return unusable(status.ToString());
  } else if (!status.ok()) {
    return absl::DataLossError(absl::StrCat(
        "the model store at \"", path, "\" (--data_dir) is unreadable: ", status.ToString()));
  } else if (format != kFormatValue) {
    return unusable(absl::StrCat("its format is \"", format, "\", this server reads \"",
                                 kFormatValue, "\""));
  }
  return std::unique_ptr<ModelStore>(new ModelStore(path, std::move(options), std::move(env),
                                                    std::move(write_health), std::move(db)));
}

absl::Status ModelStore::LoadModels(
    const std::function<absl::Status(StoredModel model)>& on_model,
    const std::function<absl::Status(absl::string_view tenant, absl::string_view model,
                                     absl::string_view what)>& on_damaged) {
  auto unreadable = [this](const rocksdb::Status& status) {
    return absl::DataLossError(absl::StrCat(
        "the model store at \"", path_, "\" (--data_dir) is unreadable: ", status.ToString()));
  };
  rocksdb::ReadOptions read;
  read.fill_cache = false;

  // 1. The models: "m/<tenant>/<model>".
  std::vector<NamedRecord> named;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    OKL_RETURN_IF_ERROR(ReadModelRecords(it.get(), path_, &named));
    if (!it->status().ok()) return unreadable(it->status());
  }

  // 2. Their configs; the highest incarnation anywhere, so new ones never reuse one.
  std::vector<StoredModel> models;
  std::vector<std::pair<const NamedRecord*, std::string>> damaged_configs;
  absl::flat_hash_set<uint64_t> live;
  uint64_t max_inc = 0;
  for (const NamedRecord& n : named) {
    StoredModel model;
    model.tenant = n.tenant;
    model.model = n.model;
    absl::Status status = DecodeModelRecord(n.value, &model.incarnation, &model.config);
    if (!status.ok()) {
      damaged_configs.emplace_back(&n, std::string(status.message()));
      continue;
    }
    max_inc = std::max(max_inc, model.incarnation);
    live.insert(model.incarnation);
    models.push_back(std::move(model));
  }
  std::vector<uint64_t> orphans;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    for (it->Seek(kIncarnationPrefix);
         it->Valid() && it->key().starts_with(kIncarnationPrefix);) {
      uint64_t inc = 0;
      if (!ParseHex16(ToView(it->key()).substr(2, 16), &inc)) {
        return absl::DataLossError(absl::StrCat("the model store at \"", path_,
                                                "\" holds an unrecognised key \"",
                                                ToView(it->key()), "\""));
      }
      max_inc = std::max(max_inc, inc);
      if (!live.contains(inc)) orphans.push_back(inc);
      if (inc == UINT64_MAX) break;
      it->Seek(IncarnationPrefix(inc + 1));
    }
    if (!it->status().ok()) return unreadable(it->status());
  }
  next_incarnation_.store(max_inc + 1);
  // A model whose config cannot be read may own any incarnation: delete no orphan then.
  if (damaged_configs.empty() && !orphans.empty()) {
    rocksdb::WriteBatch batch;
    for (uint64_t inc : orphans) {
      batch.DeleteRange(IncarnationPrefix(inc), IncarnationEnd(inc));
    }
    rocksdb::Status status = db_->Write(rocksdb::WriteOptions(), &batch);
    if (!status.ok()) return WriteError(status);
  }
  for (const auto& [n, what] : damaged_configs) {
    OKL_RETURN_IF_ERROR(on_damaged(n->tenant, n->model, what));
  }

  // 3. Each model's checkpoint and log, one model at a time.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  for (StoredModel& model : models) {
    absl::Status damage = ReadCheckpointAndLog(it.get(), &model);
    if (damage.ok() && !it->status().ok()) {
      damage = absl::DataLossError(absl::StrCat("unreadable: ", it->status().ToString()));
      it.reset(db_->NewIterator(read));  // a failed iterator stays failed
    }
    if (!damage.ok()) {
      OKL_RETURN_IF_ERROR(on_damaged(model.tenant, model.model, damage.message()));
      continue;
    }
    OKL_RETURN_IF_ERROR(on_model(std::move(model)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ModelLog>> ModelStore::CreateModel(absl::string_view tenant,
                                                                  absl::string_view model,
                                                                  const ModelConfig& config) {
  const uint64_t inc = NewIncarnation();
  rocksdb::WriteOptions write;
  write.sync = options_.sync_writes;
  rocksdb::Status status =
      db_->Put(write, ModelRecordKey(tenant, model), EncodeModelRecord(inc, config));
  if (!status.ok()) return WriteError(status);
  return std::make_shared<ModelLog>(this, std::string(tenant), std::string(model), inc,
                                    /*next_seq=*/1, /*checkpoint_seq=*/0);
}

absl::StatusOr<std::shared_ptr<ModelLog>> ModelStore::ReplaceModel(
    absl::string_view tenant, absl::string_view model, const ModelState& state,
    ModelLog* replaced, const SnapshotEvents* events) {
  const uint64_t inc = NewIncarnation();
  OKL_ASSIGN_OR_RETURN(std::string checkpoint, EncodeCheckpoint(state, /*seq=*/0));
  rocksdb::WriteBatch batch;
  batch.Put(ModelRecordKey(tenant, model), EncodeModelRecord(inc, state.config));
  batch.Put(CheckpointKey(inc), checkpoint);
  if (events != nullptr) {
    batch.Put(EventCountsKey(inc), EncodeEventCounts(events->counts));
    for (const StoredEvent& stored : events->events) {
      PutEvent(inc, stored.state, stored.event, &batch);
    }
  }
  rocksdb::WriteOptions write;
  write.sync = options_.sync_writes;
  if (replaced == nullptr) {
    rocksdb::Status status = db_->Write(write, &batch);
    if (!status.ok()) return WriteError(status);
  } else {
    // Under the replaced log's lock, so that no append or checkpoint of the old
    // incarnation lands after its removal.
    WriterLock lock(&replaced->mu_);
    if (!replaced->closed_) {
      batch.DeleteRange(IncarnationPrefix(replaced->incarnation_),
                        IncarnationEnd(replaced->incarnation_));
    }
    rocksdb::Status status = db_->Write(write, &batch);
    if (!status.ok()) return WriteError(status);
    replaced->closed_ = true;
  }
  return std::make_shared<ModelLog>(this, std::string(tenant), std::string(model), inc,
                                    /*next_seq=*/1, /*checkpoint_seq=*/0);
}

std::shared_ptr<ModelLog> ModelStore::OpenLog(const StoredModel& model) {
  auto log = std::make_shared<ModelLog>(
      this, model.tenant, model.model, model.incarnation,
      model.log.empty() ? model.checkpoint_seq + 1 : model.log.back().seq + 1,
      model.checkpoint_seq);
  uint64_t examples = 0;
  for (const StoredModel::Batch& batch : model.log) examples += batch.ys.size();
  WriterLock lock(&log->mu_);
  log->examples_ = examples;
  return log;
}

absl::Status ModelStore::DeleteModel(ModelLog* log) {
  WriterLock lock(&log->mu_);
  if (log->closed_) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  batch.Delete(ModelRecordKey(log->tenant_, log->model_));
  batch.DeleteRange(IncarnationPrefix(log->incarnation_), IncarnationEnd(log->incarnation_));
  rocksdb::WriteOptions write;
  write.sync = options_.sync_writes;
  rocksdb::Status status = db_->Write(write, &batch);
  if (!status.ok()) return WriteError(status);
  log->closed_ = true;
  return absl::OkStatus();
}

absl::Status ModelStore::Flush() {
  rocksdb::Status status = db_->Flush(rocksdb::FlushOptions());
  if (!status.ok()) return WriteError(status);
  return absl::OkStatus();
}

StoreHealth ModelStore::health() const { return write_health_->Get(); }

absl::Status ModelStore::TryResume() {
  const StoreHealth health = write_health_->Get();
  if (health.writable) return absl::OkStatus();
  if (!health.resumable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model store stopped on an error only a restart clears: ", health.error));
  }
  rocksdb::Status status = db_->Resume();
  if (!status.ok()) {
    return status.IsNoSpace()
               ? absl::ResourceExhaustedError(absl::StrCat("still no room: ", status.ToString()))
               : absl::UnavailableError(status.ToString());
  }
  write_health_->Resumed();
  return absl::OkStatus();
}

absl::Status ModelStore::WriteError(const rocksdb::Status& status) {
  write_health_->Refused(status.IsNoSpace());
  // Not RocksDB's text, which names the server's files: the server's log has it.
  if (status.IsNoSpace()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the model store is full (no space left on its filesystem): this write was not "
        "applied",
        options_.sync_writes ? " (if its fsync was what failed, a restart before writes "
                               "resume replays it)"
                             : "",
        "; reads still work, and writes resume by themselves once space is freed on "
        "--data_dir's filesystem"));
  }
  const StoreHealth health = write_health_->Get();
  absl::Status error = absl::UnavailableError(
      !health.writable && !health.resumable
          ? "the model store cannot write (an I/O error; okl_server's log has RocksDB's "
            "message): this write was not applied to the model; reads still work, and "
            "writes are refused until okl_server is restarted"
          : "the model store cannot write (an I/O error; okl_server's log has RocksDB's "
            "message): this write was not applied to the model");
  // A failed fsync may still leave the write in the log, to be replayed at the next start.
  error.SetPayload(kWriteOutcomeUnknownUrl, absl::Cord("1"));
  return error;
}

// --- ModelLog ------------------------------------------------------------------------

ModelLog::ModelLog(ModelStore* store, std::string tenant, std::string model,
                   uint64_t incarnation, uint64_t next_seq, uint64_t checkpoint_seq)
    : store_(store),
      tenant_(std::move(tenant)),
      model_(std::move(model)),
      incarnation_(incarnation),
      next_seq_(next_seq),
      checkpoint_seq_(checkpoint_seq),
      last_checkpoint_(absl::Now()) {}

absl::Status ModelLog::CheckOpen() const {
  if (!closed_) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("model \"", model_, "\" of tenant \"", tenant_,
                                          "\" was deleted or replaced"));
}

absl::Status ModelLog::Write(rocksdb::WriteBatch* batch) const {
  rocksdb::WriteOptions write;
  write.sync = store_->options_.sync_writes;
  rocksdb::Status status = store_->db_->Write(write, batch);
  return status.ok() ? absl::OkStatus() : store_->WriteError(status);
}

absl::Status ModelLog::WriteIfOpen(rocksdb::WriteBatch* batch) const {
  ReaderLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckOpen());
  return Write(batch);
}

absl::Status ModelLog::Append(const ValidatedBatch& examples, const JournalNote* note) {
  rocksdb::WriteBatch batch;
  const std::string value = EncodeBatch(examples);
  if (const auto* events = dynamic_cast<const EventNote*>(note)) {
    batch.Put(EventCountsKey(incarnation_), EncodeEventCounts(events->counts));
    for (const StoredEvent& stored : events->labelled) {
      batch.Put(EventRecordKey(incarnation_, stored.event),
                EncodeEvent(EventState::kLabelled, stored.event));
    }
    for (const StoredEvent& stored : events->forgotten) {
      DeleteEvent(incarnation_, stored.event, &batch);
    }
  }
  WriterLock lock(&mu_);
  OKL_RETURN_IF_ERROR(CheckOpen());
  // If the write fails the sequence is not consumed. A record whose fsync failed after
  // its bytes reached RocksDB's log (--sync_writes) is dropped when writes resume, since
  // RocksDB then flushes its memtables and starts a new log; only a restart before that
  // replays it (WriteError says so).
  batch.Put(LogKey(incarnation_, next_seq_), value);
  OKL_RETURN_IF_ERROR(Write(&batch));
  ++next_seq_;
  examples_ += examples.size();
  return absl::OkStatus();
}

ModelLog::Position ModelLog::position() const {
  ReaderLock lock(&mu_);
  return Position{.seq = next_seq_ - 1, .examples = examples_};
}

bool ModelLog::CheckpointDue(uint64_t every_examples, absl::Duration every,
                             absl::Time now) const {
  ReaderLock lock(&mu_);
  if (closed_ || next_seq_ - 1 <= checkpoint_seq_ || now < retry_checkpoint_at_) return false;
  if (every_examples > 0 && examples_ - examples_at_checkpoint_ >= every_examples) return true;
  return every > absl::ZeroDuration() && now - last_checkpoint_ >= every;
}

bool ModelLog::HasLog() const {
  ReaderLock lock(&mu_);
  return !closed_ && next_seq_ - 1 > checkpoint_seq_;
}

void ModelLog::CheckpointFailed(absl::Time now) {
  WriterLock lock(&mu_);
  const absl::Duration wait =
      std::min(absl::Seconds(1) * (int64_t{1} << std::min(failed_checkpoints_, 9)),
               absl::Minutes(5));
  ++failed_checkpoints_;
  retry_checkpoint_at_ = now + wait;
}

bool ModelLog::checkpoint_failing() const {
  ReaderLock lock(&mu_);
  return failed_checkpoints_ > 0;
}

absl::Status ModelLog::Checkpoint(const ModelState& state, Position at) {
  {
    ReaderLock lock(&mu_);
    if (closed_ || at.seq <= checkpoint_seq_) return absl::OkStatus();
  }
  // Encoded outside the lock: Append waits for this lock inside the entry's writer lock.
  OKL_ASSIGN_OR_RETURN(std::string value, EncodeCheckpoint(state, at.seq));
  Failpoint("checkpoint.encoded");
  rocksdb::WriteBatch batch;
  batch.Put(CheckpointKey(incarnation_), value);
  rocksdb::WriteOptions write;
  write.sync = store_->options_.sync_writes;
  WriterLock lock(&mu_);
  // Rechecked under the lock that DeleteModel/ReplaceModel hold while they remove the
  // incarnation, and that orders two checkpoints (the background one and shutdown's).
  if (closed_ || at.seq <= checkpoint_seq_) return absl::OkStatus();
  // The records up to at.seq, and only those: records appended since the state was
  // exported have higher sequences and so keys outside the range, whichever of the two
  // writes RocksDB applies first.
  batch.DeleteRange(LogKey(incarnation_, 0), LogKey(incarnation_, at.seq + 1));
  rocksdb::Status status = store_->db_->Write(write, &batch);
  if (!status.ok()) return store_->WriteError(status);
  Failpoint("checkpoint.written");
  checkpoint_seq_ = at.seq;
  examples_at_checkpoint_ = at.examples;
  last_checkpoint_ = absl::Now();
  failed_checkpoints_ = 0;
  retry_checkpoint_at_ = absl::InfinitePast();
  return absl::OkStatus();
}

}  // namespace okl
