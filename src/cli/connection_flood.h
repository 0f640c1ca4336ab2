// The connection-flood check of `specstack bench soak`: open many idle TCP
// connections and some slowloris ones (a request's headers trickled a line a
// second, never finished) to a server on this machine, and measure whether a
// normal request still gets through as fast as before. A thread-per-
// connection server that lets such sockets pin its workers fails it.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "cli/soak_client.h"

namespace specstack::cli {

struct FloodOptions {
  int32_t idle = 0;       // connections opened and left silent
  int32_t slowloris = 0;  // connections that trickle header lines
  double hold_s = 3.0;    // how long the flood is held while probes run
  // A probe under the flood may take at most this much longer than the
  // median probe before it.
  double max_delay_s = 1.0;
};

struct FloodReport {
  int32_t idle_opened = 0;
  int32_t slowloris_opened = 0;
  double probe_before_s = 0;   // median of the probes before the flood
  double probe_during_s = 0;   // slowest probe during it
  int32_t probe_failures = 0;  // probes during the flood without a 200
  bool passed = false;
};

// Errors: the server is not on a loopback address (the check is for this
// machine only), the descriptor limit is too low, or the probes fail before
// any flood. `probe_model` is the model name the probe requests use.
Result<FloodReport> check_connection_flood(const SoakTarget& target, const std::string& probe_model,
                                           const FloodOptions& options);

}  // namespace specstack::cli
