// proto/label_outcome.h
//
// What a label for a remembered event did (delayed feedback, docs/delayed-feedback.md):
// the server's event book decides it and the C++ client reports it, both as this enum,
// okl.v1.LabelOutcome without protobuf. A concept of the wire, not of learning: core
// knows nothing of it.
#ifndef OKL_PROTO_LABEL_OUTCOME_H_
#define OKL_PROTO_LABEL_OUTCOME_H_

namespace okl {

enum class LabelOutcome {
  kApplied,    // learned, now
  kDuplicate,  // the event was labelled before (the first label wins)
  kUnknown,    // no such event for the model, or its wait ended
};

}  // namespace okl

#endif  // OKL_PROTO_LABEL_OUTCOME_H_
