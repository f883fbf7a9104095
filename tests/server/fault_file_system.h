// tests/server/fault_file_system.h
//
// FaultInjectingFileSystem: RocksDB's operating-system filesystem, except that once armed
// it fails chosen writes with a chosen error, as a full disk or a failing device would.
// Give it to ModelStore::Options::file_system (ModelHost::Options::store_file_system).
//
// Armed with `hold`, the chosen writes wait until Disarm() instead, as a slow device's
// would, and then succeed.
//
// Example: the next append to a write-ahead log file fails as on a full disk.
//   auto fs = std::make_shared<FaultInjectingFileSystem>();
//   fs->Arm({.op = FaultInjectingFileSystem::Op::kAppend, .file_suffix = ".log",
//            .error = rocksdb::IOStatus::NoSpace("injected")});
#ifndef OKL_TESTS_SERVER_FAULT_FILE_SYSTEM_H_
#define OKL_TESTS_SERVER_FAULT_FILE_SYSTEM_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "rocksdb/file_system.h"

namespace okl::testing {

class FaultInjectingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  enum class Op { kAppend, kSync };
  struct Fault {
    Op op = Op::kAppend;
    // Files whose name ends so: ".log" (the write-ahead log), ".sst", "" (every file).
    std::string file_suffix;
    rocksdb::IOStatus error = rocksdb::IOStatus::IOError("injected");
    // Fail every matching operation until Disarm(), not only the next one.
    bool sticky = false;
    // Instead of failing, wait until Disarm() and then do the operation.
    bool hold = false;
  };

  FaultInjectingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FaultInjectingFileSystem"; }

  void Arm(Fault fault) {
    std::lock_guard<std::mutex> lock(mu_);
    fault_ = std::move(fault);
    armed_ = true;
  }
  void Disarm() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      armed_ = false;
    }
    changed_.notify_all();
  }
  // Waits until an operation is held (Fault::hold).
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return held_ > 0; });
  }
  // Operations failed so far.
  int injected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    return Wrap(name, target()->NewWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name,
                                       const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* file,
                                       rocksdb::IODebugContext* debug) override {
    return Wrap(name, target()->ReopenWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* file,
                                      rocksdb::IODebugContext* debug) override {
    return Wrap(name, target()->ReuseWritableFile(name, old_name, options, file, debug), file);
  }

 private:
  // A writable file whose appends and syncs ask Check() first.
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, FaultInjectingFileSystem* fs,
         std::string name)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus s = fs_->Check(Op::kAppend, name_);
      return s.ok() ? target()->Append(data, options, debug) : s;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus s = fs_->Check(Op::kAppend, name_);
      return s.ok() ? target()->Append(data, options, info, debug) : s;
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus s = fs_->Check(Op::kAppend, name_);
      return s.ok() ? target()->PositionedAppend(data, offset, options, debug) : s;
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus s = fs_->Check(Op::kSync, name_);
      return s.ok() ? target()->Sync(options, debug) : s;
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus s = fs_->Check(Op::kSync, name_);
      return s.ok() ? target()->Fsync(options, debug) : s;
    }

   private:
    FaultInjectingFileSystem* const fs_;
    const std::string name_;
  };

  rocksdb::IOStatus Wrap(const std::string& name, rocksdb::IOStatus opened,
                         std::unique_ptr<rocksdb::FSWritableFile>* file) {
    if (opened.ok()) *file = std::make_unique<File>(std::move(*file), this, name);
    return opened;
  }

  // The error to return instead of doing `op` on file `name`, or OK.
  rocksdb::IOStatus Check(Op op, const std::string& name) {
    std::unique_lock<std::mutex> lock(mu_);
    const std::string& suffix = fault_.file_suffix;
    if (!armed_ || op != fault_.op || name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return rocksdb::IOStatus::OK();
    }
    if (fault_.hold) {
      ++held_;
      changed_.notify_all();
      changed_.wait(lock, [this] { return !armed_; });
      --held_;
      return rocksdb::IOStatus::OK();
    }
    if (!fault_.sticky) armed_ = false;
    ++injected_;
    return fault_.error;
  }

  mutable std::mutex mu_;
  std::condition_variable changed_;  // armed_ or held_ changed
  Fault fault_;
  bool armed_ = false;
  int injected_ = 0;
  int held_ = 0;  // operations waiting in Check
};

}  // namespace okl::testing

#endif  // OKL_TESTS_SERVER_FAULT_FILE_SYSTEM_H_
