#include "server/metrics.h"

#include <fmt/format.h>

namespace specstack {
namespace {

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void sample(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            T value) {
  header(out, name, type, help);
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

// Buckets are cumulative; HistogramSnapshot::counts holds one count per bound
// and then the +Inf count. A snapshot without buckets (an engine that has not
// observed anything yet) still exposes the +Inf bucket, _sum and _count.
void histogram(std::string& out, std::string_view name, std::string_view help,
               const HistogramSnapshot& snapshot) {
  header(out, name, "histogram", help);
  if (snapshot.counts.size() == snapshot.bounds.size() + 1) {
    for (size_t i = 0; i < snapshot.bounds.size(); ++i) {
      fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", name,
                     snapshot.bounds[i], snapshot.counts[i]);
    }
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"+Inf\"}} {}\n", name, snapshot.count);
  fmt::format_to(std::back_inserter(out), "{}_sum {}\n{}_count {}\n", name, snapshot.sum, name,
                 snapshot.count);
}

}  // namespace

void HttpCounters::record(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++by_status_[status];
}

std::vector<std::pair<int, int64_t>> HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {by_status_.begin(), by_status_.end()};
}

ThroughputRates ThroughputMeter::observe(std::chrono::steady_clock::time_point now,
                                         int64_t prompt_tokens_total,
                                         int64_t generation_tokens_total) {
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.push_back(Sample{now, prompt_tokens_total, generation_tokens_total});
  // Keep one sample at or before the window's start so the rate spans it all.
  while (samples_.size() > 2 && samples_[1].time <= now - window_) samples_.pop_front();
  ThroughputRates rates;
  const Sample& first = samples_.front();
  const double seconds = std::chrono::duration<double>(now - first.time).count();
  if (samples_.size() < 2 || seconds <= 0) return rates;
  rates.prompt_tokens_per_s =
      static_cast<double>(prompt_tokens_total - first.prompt_tokens) / seconds;
  rates.generation_tokens_per_s =
      static_cast<double>(generation_tokens_total - first.generation_tokens) / seconds;
  return rates;
}

std::string render_prometheus(const EngineMetrics& engine,
                              const std::vector<std::pair<int, int64_t>>& http_responses,
                              const ThroughputRates& rates, const MemoryGauges& memory,
                              const ConnectionGauges& connections) {
  std::string out;
  if (connections.open >= 0) {
    sample(out, "specstack_http_connections_open", "gauge",
           "Open HTTP connections, idle ones included (bounded by --max-connections).",
           connections.open);
    sample(out, "specstack_http_connections_idle", "gauge",
           "Open HTTP connections that hold no worker: no request yet, or its head arriving.",
           connections.idle);
  }
  if (memory.process_resident_bytes >= 0) {
    sample(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           memory.process_resident_bytes);
  }
  if (memory.heap_in_use_bytes >= 0) {
    sample(out, "specstack_heap_in_use_bytes", "gauge",
           "Bytes malloc has handed out and not had back (live allocations).",
           memory.heap_in_use_bytes);
    sample(out, "specstack_heap_held_bytes", "gauge",
           "Bytes malloc holds from the system, in use or free (held - in use: fragmentation).",
           memory.heap_held_bytes);
  }
  sample(out, "specstack_kv_cache_bytes", "gauge", "KV cache pool size in bytes (as reserved).",
         memory.engine.kv_cache_bytes);
  sample(out, "specstack_kv_cache_resident_bytes", "gauge",
         "KV cache pool bytes in memory now (a host pool fills in as blocks are first used).",
         memory.engine.kv_cache_resident_bytes);
  if (memory.engine.device_memory_used_bytes >= 0) {
    sample(out, "specstack_device_memory_used_bytes", "gauge",
           "Memory in use on the model's GPU (all processes).",
           memory.engine.device_memory_used_bytes);
  }
  sample(out, "specstack_num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
         engine.n_waiting);
  sample(out, "specstack_num_requests_running", "gauge", "Requests being computed.",
         engine.n_running);
  sample(out, "specstack_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         engine.kv_blocks_total);
  sample(out, "specstack_kv_blocks_free", "gauge",
         "KV cache blocks no request holds (cached blocks included).", engine.kv_blocks_free);
  sample(out, "specstack_kv_blocks_cached", "gauge", "KV cache blocks in the prefix cache.",
         engine.kv_blocks_cached);
  sample(out, "specstack_draft_kv_blocks_total", "gauge",
         "The draft model's KV cache blocks (0 without a draft).", engine.draft_kv_blocks_total);
  sample(out, "specstack_draft_kv_blocks_free", "gauge",
         "The draft model's KV cache blocks no sequence holds.", engine.draft_kv_blocks_free);
  const double usage = engine.kv_blocks_total > 0
                           ? static_cast<double>(engine.kv_blocks_total - engine.kv_blocks_free) /
                                 static_cast<double>(engine.kv_blocks_total)
                           : 0.0;
  sample(out, "specstack_kv_cache_usage_ratio", "gauge",
         "Fraction of KV cache blocks held by requests.", usage);
  sample(out, "specstack_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.", engine.prefix_cache_queried_tokens);
  sample(out, "specstack_prefix_cache_hits_total", "counter",
         "Prompt tokens found in the prefix cache.", engine.prefix_cache_hit_tokens);
  const double hit_rate = engine.prefix_cache_queried_tokens > 0
                              ? static_cast<double>(engine.prefix_cache_hit_tokens) /
                                    static_cast<double>(engine.prefix_cache_queried_tokens)
                              : 0.0;
  sample(out, "specstack_prefix_cache_hit_rate", "gauge",
         "Prefix cache hits / queries (tokens) since start.", hit_rate);
  sample(out, "specstack_prompt_tokens_total", "counter", "Prompt tokens processed.",
         engine.prompt_tokens_total);
  sample(out, "specstack_generation_tokens_total", "counter", "Tokens generated.",
         engine.generation_tokens_total);
  sample(out, "specstack_avg_prompt_throughput_tokens_per_second", "gauge",
         "Prompt tokens/s over the last few seconds.", rates.prompt_tokens_per_s);
  sample(out, "specstack_avg_generation_throughput_tokens_per_second", "gauge",
         "Generated tokens/s over the last few seconds.", rates.generation_tokens_per_s);
  sample(out, "specstack_requests_finished_total", "counter", "Requests finished.",
         engine.requests_finished_total);
  sample(out, "specstack_requests_aborted_total", "counter", "Requests cancelled or aborted.",
         engine.requests_aborted_total);
  sample(out, "specstack_preemptions_total", "counter", "Requests preempted for KV space.",
         engine.preemptions_total);
  sample(out, "specstack_engine_steps_total", "counter", "Engine steps run.", engine.steps_total);
  sample(out, "specstack_engine_step_seconds_total", "counter",
         "Engine-thread seconds in steps (schedule, forward, sampling, grammar).",
         engine.step_seconds_total);
  sample(out, "specstack_engine_forward_seconds_total", "counter",
         "Of the steps, seconds in the model's forward (device grammar masks are made inside it).",
         engine.forward_seconds_total);
  sample(out, "specstack_grammar_mask_seconds_total", "counter",
         "Engine-thread seconds computing grammar masks (structured outputs).",
         engine.grammar_mask_seconds_total);
  sample(out, "specstack_grammar_accept_seconds_total", "counter",
         "Engine-thread seconds advancing grammar states by sampled tokens.",
         engine.grammar_accept_seconds_total);
  sample(out, "specstack_specprefill_applied_total", "counter",
         "Requests whose prompt the target prefilled sparsely (speculative prefill).",
         engine.specprefill_applied_total);
  sample(out, "specstack_specprefill_fallback_total", "counter",
         "Requests where speculative prefill was attempted and fell back to full prefill.",
         engine.specprefill_fallback_total);
  sample(out, "specstack_specprefill_tokens_saved_total", "counter",
         "Prompt tokens the target did not prefill thanks to speculative prefill.",
         engine.specprefill_tokens_saved_total);
  sample(out, "specstack_spec_decode_draft_tokens_total", "counter",
         "Draft tokens the target verified (speculative decoding).",
         engine.specdecode_draft_tokens_total);
  sample(out, "specstack_spec_decode_accepted_tokens_total", "counter",
         "Draft tokens the target accepted (speculative decoding).",
         engine.specdecode_accepted_tokens_total);
  sample(out, "specstack_spec_decode_verifications_total", "counter",
         "Target verifications of draft tokens, one per sequence and step.",
         engine.specdecode_verify_total);
  sample(out, "specstack_spec_decode_device_verifications_total", "counter",
         "Sampled verifications done on the target's device (no logits to the host).",
         engine.specdecode_device_verify_total);
  // Bounds are token counts 0..K, so le="2" reads "at most 2 drafts accepted".
  histogram(out, "specstack_spec_decode_accepted_length", "Draft tokens accepted per verification.",
            engine.specdecode_accepted_length);
  histogram(out, "specstack_time_to_first_token_seconds", "Time from arrival to first token.",
            engine.time_to_first_token);
  histogram(out, "specstack_inter_token_latency_seconds", "Time between consecutive tokens.",
            engine.inter_token_latency);
  header(out, "specstack_http_requests_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, count] : http_responses) {
    fmt::format_to(std::back_inserter(out), "specstack_http_requests_total{{code=\"{}\"}} {}\n",
                   status, count);
  }
  return out;
}

}  // namespace specstack
