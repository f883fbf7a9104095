// server/base/failpoint.h
//
// Failpoints: named places in okl_server's durable writes where a crash test can have
// the process SIGKILL itself, so that a crash lands exactly there and not wherever a
// timer happens to fall. okl_server arms at most one, with --failpoint=NAME (the first
// time the place is reached) or NAME@N (the N-th time); tests then check that the
// restarted server holds exactly what was acknowledged. Disarmed, a failpoint costs one
// relaxed atomic load.
//
// The places:
//   checkpoint.encoded        a checkpoint's state is exported and encoded, not written
//   checkpoint.written        the checkpoint and its log truncation are in RocksDB; the
//                             log's bookkeeping is not updated
//   restore.received          a Restore's whole snapshot is in, not yet decoded
//   restore.written           the new incarnation is in RocksDB, not in the registry
//   restore.installed         the model is in the registry; the answer is not sent
//   remember.written          a remembering Predict's events are in RocksDB; the answer
//                             is not sent
//   label.checked             a Label's events are looked up and its batch built; nothing
//                             is written
//   label.applied             a Label's batch, its events' new state and the counts are
//                             written (one write) and applied; the answer is not sent
//   expiry.applied            an expiry round's default labels are written and applied,
//                             in one write with the removal of its every due event and
//                             the counts (the batch with its note); the book's counts
//                             in memory are not updated
//   expiry.forgotten          an expiry round with no default label to apply: its due
//                             events' removal and the counts are written
//
// Thread-safe. Example:
//   OKL_RETURN_IF_ERROR(ArmFailpoint("checkpoint.written@3"));
//   ...
//   Failpoint("checkpoint.written");  // the third time: SIGKILL
#ifndef OKL_SERVER_BASE_FAILPOINT_H_
#define OKL_SERVER_BASE_FAILPOINT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace okl {

// Arms `spec`, "NAME" or "NAME@N" (N >= 1). InvalidArgument naming --failpoint for an
// unknown name or a bad count. Replaces any failpoint armed before.
absl::Status ArmFailpoint(absl::string_view spec);

// At the place `name` (one of those above): if it is armed and this is the N-th time it
// is reached, writes "okl_server: failpoint NAME reached: SIGKILL" to stderr and kills
// the process.
void Failpoint(absl::string_view name);

}  // namespace okl

#endif  // OKL_SERVER_BASE_FAILPOINT_H_
