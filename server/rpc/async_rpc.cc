// server/rpc/async_rpc.cc

#include "server/rpc/async_rpc.h"

#include <grpc/support/time.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/thread_name.h"

namespace okl {

void RawAsyncService::AddRawMethod(absl::string_view full_name, CallFactory factory) {
  names_.emplace_back(full_name);
  // Every method is a bidirectional stream to gRPC: it reads no message before the call
  // starts, and the call reads and writes as its method needs.
  AddMethod(new grpc::internal::RpcServiceMethod(
      names_.back().c_str(), grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodRaw(static_cast<int>(factories_.size()));
  factories_.push_back(std::move(factory));
}

void RawAsyncService::RequestCall(int index, AsyncCall* call,
                                  grpc::ServerCompletionQueue* queue) {
  RequestAsyncBidiStreaming(index, &call->context_, &call->stream_, queue, queue,
                            &call->started_);
}

AsyncCall::AsyncCall() {
  // Before the call is requested, as gRPC requires: the done report is what says a call
  // was cancelled, and what lets the call be deleted.
  context_.AsyncNotifyWhenDone(&done_);
}

AsyncCall::~AsyncCall() {
  if (arrived_) threads_->live_calls_.fetch_sub(1, std::memory_order_release);
}

void AsyncCall::StartRead() {
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Read(&read_buffer_, &read_);
}

absl::Status AsyncCall::TakeMessage(google::protobuf::MessageLite* message) {
  const grpc::Status status =
      grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::MessageLite>(
          &read_buffer_, message);
  if (status.ok()) return absl::OkStatus();
  // Protobuf says no more than that a parse failed; a client's usual cause is a string
  // field holding bytes that are not UTF-8, which proto3 refuses.
  return absl::InvalidArgumentError(absl::StrCat(
      "the request message does not parse as ", message->GetTypeName(),
      status.error_message().empty() ? "" : ": ", status.error_message(),
      " (every string field, such as a name, an event id or a class_label, must be valid "
      "UTF-8)"));
}

absl::Status AsyncCall::TakeRequest(bool ok, google::protobuf::MessageLite* request) {
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the call ended before its request message (", request->GetTypeName(), ") arrived"));
  }
  return TakeMessage(request);
}

void AsyncCall::SerializeToWriteBuffer(const google::protobuf::MessageLite& message) {
  bool own_buffer = false;
  write_buffer_.Clear();
  // Serializing into a ByteBuffer fails only for a message over 2 GiB, which the limits
  // on a response's size exclude.
  (void)grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::MessageLite>(
      message, &write_buffer_, &own_buffer);
}

void AsyncCall::StartWrite(const google::protobuf::MessageLite& message) {
  SerializeToWriteBuffer(message);
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Write(write_buffer_, &written_);
}

void AsyncCall::Finish(const grpc::Status& status,
                       const google::protobuf::MessageLite* response) {
  // Takes over the reference held until now for the finish.
  if (response == nullptr || !status.ok()) {
    stream_.Finish(status, &finished_);
    return;
  }
  SerializeToWriteBuffer(*response);
  stream_.WriteAndFinish(write_buffer_, grpc::WriteOptions(), status, &finished_);
}

void AsyncCall::Proceed(Event event, bool ok) {
  switch (event) {
    case Event::kStarted:
      if (!ok) {  // the server is shutting down: no call came, and none will
        delete this;
        return;
      }
      refs_.store(2, std::memory_order_relaxed);  // the done report, and the finish
      arrived_ = true;
      threads_->live_calls_.fetch_add(1, std::memory_order_relaxed);
      threads_->Request(service_, method_, queue_);
      OnStart();
      return;
    case Event::kRead:
      OnReadDone(ok);
      break;
    case Event::kWritten:
      OnWriteDone(ok);
      break;
    case Event::kDone:
      OnDone();
      break;
    case Event::kFinished:
      break;
  }
  Unref();
}

void AsyncCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

CompletionQueueThreads::CompletionQueueThreads(std::vector<RawAsyncService*> services,
                                               int threads, grpc::ServerBuilder* builder)
    : services_(std::move(services)) {
  for (RawAsyncService* service : services_) builder->RegisterService(service);
  for (int i = 0; i < std::max(threads, 1); ++i) queues_.push_back(builder->AddCompletionQueue());
}

CompletionQueueThreads::~CompletionQueueThreads() { Stop(); }

void CompletionQueueThreads::Start() {
  if (!threads_.empty()) return;
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) {
    for (RawAsyncService* service : services_) {
      for (int method = 0; method < service->method_count(); ++method) {
        for (int i = 0; i < kRequestedPerMethod; ++i) Request(service, method, queue.get());
      }
    }
  }
  for (size_t i = 0; i < queues_.size(); ++i) {
    threads_.emplace_back([this, i, queue = queues_[i].get()] {
      NameThisThread(absl::StrCat("okl-rpc-", i));
      Run(queue);
    });
  }
}

void CompletionQueueThreads::Stop() {
  // Once; a second caller waits for the first to finish.
  std::call_once(stopped_, [this] {
    // gRPC's Shutdown returns once the connections are closed, which may be before every
    // call has seen its last completion: a queue must keep running until then (an event
    // of a call after its queue's shutdown is a fatal error in gRPC). The server's
    // shutdown cancelled what was left, so each call ends soon.
    while (live_calls_.load(std::memory_order_acquire) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) queue->Shutdown();
    if (threads_.empty()) {
      // Never started: nothing was requested, but a queue must still be drained before it
      // is destroyed.
      for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues_) Run(queue.get());
      return;
    }
    for (std::thread& thread : threads_) thread.join();
  });
}

void CompletionQueueThreads::Request(RawAsyncService* service, int method,
                                     grpc::ServerCompletionQueue* queue) {
  AsyncCall* call = service->factories_[method]();
  call->service_ = service;
  call->method_ = method;
  call->queue_ = queue;
  call->threads_ = this;
  service->RequestCall(method, call, queue);
}

namespace {

using IdleWork = std::vector<absl::AnyInvocable<void() &&>>;

// RunWhenIdle's work of this thread; null on a thread that runs no queue.
thread_local IdleWork* idle_work_of_this_thread = nullptr;

void RunIdleWork(IdleWork& idle) {
  IdleWork now;
  now.swap(idle);  // work that queues more runs at the next idle point
  for (absl::AnyInvocable<void() &&>& work : now) std::move(work)();
}

}  // namespace

bool CompletionQueueThreads::RunWhenIdle(absl::AnyInvocable<void() &&>& work) {
  if (idle_work_of_this_thread == nullptr) return false;
  idle_work_of_this_thread->push_back(std::move(work));
  return true;
}

void CompletionQueueThreads::Run(grpc::ServerCompletionQueue* queue) {
  IdleWork idle;
  idle_work_of_this_thread = &idle;
  void* tag = nullptr;
  bool ok = false;
  int events_since_idle = 0;
  while (true) {
    if (idle.empty()) {
      if (!queue->Next(&tag, &ok)) break;
    } else {
      // Work waits for the queue to have nothing ready: look without sleeping.
      const grpc::CompletionQueue::NextStatus next =
          queue->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (next != grpc::CompletionQueue::GOT_EVENT) {
        RunIdleWork(idle);
        events_since_idle = 0;
        if (next == grpc::CompletionQueue::SHUTDOWN) break;
        continue;
      }
    }
    AsyncCall::Tag* call_tag = static_cast<AsyncCall::Tag*>(tag);
    call_tag->call->Proceed(call_tag->event, ok);
    if (++events_since_idle >= kEventsBeforeIdleWork && !idle.empty()) {
      RunIdleWork(idle);
      events_since_idle = 0;
    }
  }
  // Nothing is left: every call was answered before the queue shut down (see Stop).
  RunIdleWork(idle);
  idle_work_of_this_thread = nullptr;
}

}  // namespace okl
