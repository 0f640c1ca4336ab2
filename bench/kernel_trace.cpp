// kernel_trace: a CUPTI activity tracer loaded into any CUDA program, a timeline
// where Nsight Systems is not installed (the device machines have ncu, which
// serialises kernels, but no nsys). It records every kernel, memcpy / memset and
// CUDA runtime call with its start and end (ns, one GPU clock), and writes them
// as CSV at exit; bench/kernel_trace.py turns that into busy time, gaps and a
// per-kernel table for a window (e.g. one prefill).
//   CUDA_INJECTION64_PATH=build/bench/libkernel_trace.so SPECSTACK_TRACE_OUT=trace.csv
//     build/bench/gpu_bench ...
// Tracing costs a little per launch (records are buffered, written at exit), far
// less than ncu's replay; kernels still overlap as in a normal run.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

// The tracer's state: CUPTI's C callbacks can reach only what a static holds.
struct Trace {
  std::mutex mutex;
  std::vector<std::string> lines;  // CSV rows, written at exit
};

Trace& trace() {
  static Trace* t = new Trace;  // never destroyed: atexit handlers still use it
  return *t;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string csv_name(const char* name) {
  std::string s = name ? name : "?";
  for (char& c : s)
    if (c == ',' || c == '"' || c == '\n') c = ';';
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<std::string> rows;
  CUpti_Activity* record = nullptr;
  char line[4096];
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        std::snprintf(line, sizeof(line), "kernel,%llu,%llu,%u,%d,%d,%d,%s",
                      static_cast<unsigned long long>(k->start),
                      static_cast<unsigned long long>(k->end), k->streamId, k->gridX, k->gridY,
                      k->gridZ, csv_name(k->name).substr(0, 3000).c_str());
        rows.emplace_back(line);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        std::snprintf(line, sizeof(line), "memcpy,%llu,%llu,%u,%llu,0,0,kind%d",
                      static_cast<unsigned long long>(m->start),
                      static_cast<unsigned long long>(m->end), m->streamId,
                      static_cast<unsigned long long>(m->bytes), int(m->copyKind));
        rows.emplace_back(line);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        std::snprintf(line, sizeof(line), "memset,%llu,%llu,%u,%llu,0,0,memset",
                      static_cast<unsigned long long>(m->start),
                      static_cast<unsigned long long>(m->end), m->streamId,
                      static_cast<unsigned long long>(m->bytes));
        rows.emplace_back(line);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const char* name = nullptr;
        cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
        std::snprintf(line, sizeof(line), "runtime,%llu,%llu,%u,0,0,0,%s",
                      static_cast<unsigned long long>(a->start),
                      static_cast<unsigned long long>(a->end), a->threadId, csv_name(name).c_str());
        rows.emplace_back(line);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(trace().mutex);
  for (auto& r : rows) trace().lines.push_back(std::move(r));
}

void write_trace() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("SPECSTACK_TRACE_OUT");
  std::FILE* f = std::fopen(path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::fprintf(f, "what,start_ns,end_ns,stream,grid_x,grid_y,grid_z,name\n");
  std::lock_guard<std::mutex> lock(trace().mutex);
  for (const std::string& line : trace().lines) std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu records -> %s\n", trace().lines.size(),
               path ? path : "kernel_trace.csv");
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(write_trace);
  return 1;
}
