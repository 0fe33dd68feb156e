// API answers to tessera Status, in one place.
//
//   HTTP                          Status code           predicate
//   400, 405, 413, 415, 422       kInvalidArgument
//   401                           kUnauthenticated
//   403                           kPermissionDenied
//   404                           kNotFound             IsNotFound
//   409 reason AlreadyExists      kAlreadyExists        IsAlreadyExists
//   409 (other: Conflict)         kAborted              IsConflict
//   410 (resourceVersion expired) kOutOfRange           IsGone
//   412 and other 4xx             kFailedPrecondition
//   429                           kResourceExhausted
//   500, 501                      kInternal
//   502, 503, 504, other 5xx      kUnavailable
//
// The message is "<METHOD> <path>: <http code> <reason>: <the server's Status.message>".
#pragma once

#include <string_view>

#include "tessera/status.h"

namespace tessera::k8s {

StatusCode StatusCodeForHttp(int http_status, std::string_view reason = {});

// `body` is the answer's body: a metav1.Status (JSON) when the API server wrote it, anything
// otherwise (then its start is quoted).
Status ErrorFromResponse(std::string_view method, std::string_view path, int http_status,
                         std::string_view body);

inline bool IsNotFound(const Status& s) { return s.code() == StatusCode::kNotFound; }
inline bool IsAlreadyExists(const Status& s) { return s.code() == StatusCode::kAlreadyExists; }
inline bool IsConflict(const Status& s) { return s.code() == StatusCode::kAborted; }
// The resourceVersion asked for is older than the server keeps (HTTP 410 or a watch ERROR
// event with code 410): list again.
inline bool IsGone(const Status& s) { return s.code() == StatusCode::kOutOfRange; }

}  // namespace tessera::k8s
