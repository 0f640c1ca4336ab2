// The requests `specstack bench soak` sends: a seeded mix of the shapes a
// real client produces (streamed or not, n 1-3, logprobs, stop strings,
// streams abandoned mid-way) plus a few malformed bodies. Request i depends
// only on (seed, i), so a run is the same whatever order the workers take
// them in.
#pragma once

#include <cstdint>
#include <string>

namespace specstack::cli {

struct SoakMix {
  double stream_fraction = 0.7;
  double logprobs_fraction = 0.2;
  double cancel_fraction = 0.2;  // of streamed requests
  double stop_fraction = 0.3;
  double malformed_fraction = 0.03;
  int32_t max_prompt_words = 48;
  int32_t max_tokens = 32;
};

struct SoakRequest {
  std::string path = "/v1/completions";
  std::string body;  // JSON (or, for a malformed request, maybe not)
  bool stream = false;
  bool malformed = false;  // the server must answer 4xx
  // > 0: close the connection after this many streamed bytes (a client that
  // goes away mid-stream); the request is then neither a success nor a failure.
  int64_t cancel_after_bytes = 0;
  std::string kind;  // "plain", "stream", "cancel", or the malformation, for the report
};

// Request `index` of the run with `seed`, for the served model `model`.
SoakRequest make_soak_request(uint32_t seed, int64_t index, const SoakMix& mix,
                              const std::string& model);

}  // namespace specstack::cli
