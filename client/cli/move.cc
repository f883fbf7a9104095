// client/cli/move.cc
//
// `okl move`: a tenant's models from one replica to another, with nothing acknowledged
// lost; and `okl fence`, its fence by hand. The steps of a move, and what each failure
// leaves:
//   1. lift any old fence of the tenant on the target (a tenant moved away from it once);
//   2. fence the tenant's writes on the source (FenceTenant): writes are refused
//      (UNAVAILABLE, nothing applied: clients retry) and the running ones finish;
//   3. Snapshot each model on the source and Restore it on the target;
//   4. pin the tenant to the target in the router's override map and reload the router;
//   5. delete the models on the source behind the fence, which stays up: requests still
//      reaching the source (over connections opened before the reload) are refused and
//      retried, and reach the target.
// A failure before the map names the target deletes what step 3 restored on the target
// and lifts the source's fence: the tenant stays where it was, whole. Once the map names
// the target, a failed reload cannot tell whether the router switched (nginx may have
// taken the new map before the command failed), so nothing is rolled back: the target
// holds every model, the source stays fenced with its copies (no write lands on either
// side twice), and the error says to reload by hand and then delete the source's copies.
// A failure in step 5 leaves the tenant moved, with stale copies on the fenced source,
// and says so.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/commands.h"
#include "client/io/json_writer.h"
#include "core/runtime/file.h"
#include "core/runtime/model_key.h"
#include "core/status_macros.h"

namespace okl::cli {
namespace {

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// The map with `tenant`'s line set to `address` (added, or replacing its old one). Lines
// are `"TENANT" ADDRESS;`, nginx's map syntax; others are kept as they are.
std::string PinTenant(absl::string_view map, absl::string_view tenant,
                      absl::string_view address) {
  const std::string key = absl::StrCat("\"", tenant, "\"");
  std::string out;
  for (absl::string_view line : absl::StrSplit(map, '\n', absl::SkipEmpty())) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(stripped, key) && stripped.size() > key.size() &&
        (stripped[key.size()] == ' ' || stripped[key.size()] == '\t')) {
      continue;  // the tenant's old pin
    }
    absl::StrAppend(&out, line, "\n");
  }
  absl::StrAppend(&out, key, " ", address, ";\n");
  return out;
}

// Step 4, first half: `route_map` pins the tenant to `address`.
absl::Status PinInRouteMap(const MoveOptions& options, absl::string_view tenant,
                           absl::string_view address) {
  std::string map;
  if (::access(options.route_map.c_str(), F_OK) == 0) {
    OKL_ASSIGN_OR_RETURN(map, ReadFile(options.route_map));
  }
  return WriteFileAtomically(options.route_map, PinTenant(map, tenant, address));
}

// Step 4, second half: the router rereads the map. Its failure is not rolled back (see
// the top of this file), so the message says what is where and what to do.
absl::Status ReloadRouter(const MoveOptions& options, absl::string_view tenant) {
  if (options.route_reload.empty()) return absl::OkStatus();
  const int exit_status = std::system(options.route_reload.c_str());
  if (exit_status == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "tenant \"", tenant, "\" is copied to ", options.route_to, " and pinned there in ",
      options.route_map, ", but the router's reload command (", options.route_reload,
      ") failed with status ", exit_status,
      "; the router may still send the tenant to the source, which stays fenced (writes are "
      "refused and retried) and keeps its copies: reload the router by hand, then delete "
      "them with okl fence --delete_models --tenant=",
      tenant, " --server=", options.from));
}

// Undoes steps 2 and 3 after a failure before the map named the target.
absl::Status RollBack(const Client& from, const Client& to, absl::string_view tenant,
                      const std::vector<std::string>& restored, absl::Status failure) {
  std::vector<std::string> problems;
  for (const std::string& model : restored) {
    if (absl::Status deleted = to.DeleteModel({std::string(tenant), model}); !deleted.ok()) {
      problems.push_back(absl::StrCat("deleting the copy of \"", model,
                                      "\" on the target: ", deleted.message()));
    }
  }
  if (absl::StatusOr<std::vector<std::string>> lifted = from.FenceTenant(tenant, false);
      !lifted.ok()) {
    problems.push_back(absl::StrCat("lifting the source's fence (writes stay refused until "
                                    "it is lifted or the source restarts): ",
                                    lifted.status().message()));
  }
  return absl::Status(
      failure.code(),
      absl::StrCat("move of tenant \"", tenant, "\" failed, and was rolled back",
                   problems.empty() ? "" : " in part", ": ", failure.message(),
                   problems.empty() ? "" : absl::StrCat(" (rollback: ",
                                                        absl::StrJoin(problems, "; "), ")")));
}

}  // namespace

absl::Status RunMove(const Client& from, const Client& to, absl::string_view tenant,
                     const MoveOptions& options, const Output& output) {
  OKL_RETURN_IF_ERROR(ValidateName("tenant", tenant));
  if (options.route_map.empty()) {
    return absl::InvalidArgumentError(
        "move needs --route_map, the router's override map to pin the tenant in");
  }
  const absl::Time start = absl::Now();
  // 1. The target may hold a fence from a move of this tenant away from it.
  OKL_RETURN_IF_ERROR(to.FenceTenant(tenant, false).status());
  OKL_ASSIGN_OR_RETURN(std::vector<ModelSummary> on_target, to.ListModels(tenant));
  if (!on_target.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the target already holds ", on_target.size(), " model(s) of tenant \"",
                     tenant, "\" (the first is \"", on_target[0].model,
                     "\"); a move never overwrites: delete them there, or move elsewhere"));
  }
  // 2. Fence: from here on the source applies no write of the tenant.
  OKL_ASSIGN_OR_RETURN(std::vector<std::string> models, from.FenceTenant(tenant, true));
  const absl::Time fenced = absl::Now();
  // 3. Copy each model.
  std::vector<std::string> restored;
  uint64_t bytes = 0;
  uint64_t steps = 0;
  for (const std::string& model : models) {
    const ModelId id = {std::string(tenant), model};
    absl::StatusOr<std::string> snapshot = from.Snapshot(id);
    if (!snapshot.ok()) {
      return RollBack(from, to, tenant, restored,
                      WithContext(snapshot.status(), absl::StrCat("snapshot of \"", model, "\"")));
    }
    bytes += snapshot->size();
    absl::StatusOr<ModelSummary> copy = to.Restore(id, *snapshot);
    if (copy.ok()) restored.push_back(model);
    if (!copy.ok()) {
      return RollBack(from, to, tenant, restored,
                      WithContext(copy.status(), absl::StrCat("restore of \"", model, "\"")));
    }
    steps += copy->stats.steps;
  }
  // 4. Route the tenant to the target.
  if (absl::Status pinned = PinInRouteMap(options, tenant, options.route_to); !pinned.ok()) {
    return RollBack(
        from, to, tenant, restored,
        WithContext(pinned, absl::StrCat("pinning the tenant in ", options.route_map)));
  }
  OKL_RETURN_IF_ERROR(ReloadRouter(options, tenant));
  const absl::Time routed = absl::Now();
  // 5. Drop the source's copies; its fence stays up.
  if (absl::StatusOr<std::vector<std::string>> dropped = from.FenceTenant(tenant, true, true);
      !dropped.ok()) {
    return absl::Status(
        dropped.status().code(),
        absl::StrCat("tenant \"", tenant, "\" is moved and routed to ", options.route_to,
                     ", but deleting its models on the source failed (they stay there, "
                     "fenced, unused): ",
                     dropped.status().message(), "; run okl delete on the source to retry"));
  }
  const double paused_ms = absl::ToDoubleMilliseconds(routed - fenced);
  const double total_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  if (output.json) {
    JsonObject json;
    json.AddString("tenant", tenant)
        .AddString("route_to", options.route_to)
        .AddUint("models", models.size())
        .AddUint("steps", steps)
        .AddUint("snapshot_bytes", bytes)
        .AddDouble("writes_paused_ms", paused_ms)
        .AddDouble("elapsed_ms", total_ms);
    const std::string text = absl::StrCat(json.str(), "\n");
    std::fwrite(text.data(), 1, text.size(), output.out);
  } else {
    const std::string text = absl::StrCat(
        "moved tenant ", tenant, " to ", options.route_to, ": ", models.size(), " model",
        models.size() == 1 ? "" : "s", ", ", steps, " steps, ", bytes,
        " snapshot bytes; writes paused ", absl::StrFormat("%.1f", paused_ms), " ms, took ",
        absl::StrFormat("%.1f", total_ms), " ms\n");
    std::fwrite(text.data(), 1, text.size(), output.out);
  }
  return absl::OkStatus();
}

absl::Status RunFence(const Client& client, absl::string_view tenant, bool fenced,
                      bool delete_models, const Output& output) {
  OKL_ASSIGN_OR_RETURN(std::vector<std::string> models,
                       client.FenceTenant(tenant, fenced, delete_models));
  std::string text;
  if (output.json) {
    JsonObject json;
    json.AddString("tenant", tenant)
        .AddBool("fenced", fenced)
        .AddBool("models_deleted", delete_models)
        .AddStrings("models", models);
    text = absl::StrCat(json.str(), "\n");
  } else if (!fenced) {
    text = absl::StrCat("lifted the fence of tenant ", tenant, "\n");
  } else {
    text = absl::StrCat(delete_models ? "deleted behind the fence of tenant " : "fenced tenant ",
                        tenant, ": ", models.size(), " model", models.size() == 1 ? "" : "s",
                        models.empty() ? "" : " (", absl::StrJoin(models, ", "),
                        models.empty() ? "" : ")", "\n");
  }
  std::fwrite(text.data(), 1, text.size(), output.out);
  return absl::OkStatus();
}

}  // namespace okl::cli
