// The HTTP side of `specstack bench soak`: one request against a live server
// (streamed, and maybe abandoned mid-stream by closing the connection), and
// the few /metrics series the soak tracks. Only HTTP, so the server may run
// anywhere (CPU or --device cuda).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "cli/soak_workload.h"

namespace specstack::cli {

struct SoakTarget {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;  // sent as a bearer token when set
  int timeout_s = 120;  // per request (connect, read and write)
};

struct SoakOutcome {
  int status = 0;          // HTTP status; 0: no response (transport error)
  bool cancelled = false;  // we closed the connection mid-stream, as planned
  double seconds = 0;      // from send to the last byte (or the cancel)
  // Set when the response is wrong in itself: a transport error, a stream
  // without its [DONE], a 200 body that is not a completion with n choices.
  std::string problem;
};

SoakOutcome send_soak_request(const SoakTarget& target, const SoakRequest& request);

// The series of GET /metrics that the soak reads, by name (labels dropped;
// a series missing from the server is missing from the map).
Result<std::map<std::string, double>> scrape_metrics(const SoakTarget& target);

// The id of the first model GET /v1/models lists.
Result<std::string> served_model(const SoakTarget& target);

}  // namespace specstack::cli
