// quant_matmul_bench: the CPU int8 quantized matmul (backend/cpu/quant_matmul.h)
// alone, one weight shape, per block type, isa (--isas avx2 / avxvnni / avx512vnni),
// thread count, activation rows and weight memory: anonymous memory as
// Tensor::zeros gives it (transparent huge pages where the kernel grants
// them) or a file mapped as a GGUF model is (page-cache pages). Enough
// copies of the matrix to pass --min-mb, cycled call by call, so every call
// streams its weights from DRAM as a decode step does; the variants are
// interleaved call by call (a shared machine drifts), median of the calls.
// Prints microseconds per call and the weight bytes read per second.
//   build/bench/quant_matmul_bench [--types q8_0,q4_k,q6_k] [--out 8192 --in 2048]
//       [--rows 1,4] [-t 1,2] [--passes 1,4] [--acts prep,blocks] [--min-mb 1024] [--calls 30]
//       [--file-dir /tmp]
// --passes: weight rows per pass over an activation row (1: the one-row
// kernel, 4: the four-row kernels), an A/B inside one process.
// --acts: how the rows path hands the activations to the kernels: "prep"
// (the kernel's prepared form where it has one: Q4_0 on AVX2 / AVX-512
// VNNI) and/or "blocks" (the quantized blocks, as before session 25), an A/B
// inside one process; the other types run the same code either way.
// --paths: "rows" (matmul_quant, the decode path), "rows-apart" (the same
// with one activation row per pass where "rows" takes K-quant weight rows
// against four at once: QuantKernel::dot_acts), "panels" (Q8_0 repacked
// into 16-row panels, quant_panels.h, AVX-512 VNNI / AVX-VNNI), "tiled" (the int8 GEMM
// tiles of quant_gemm.h, Q8_0 / Q4_0 / Q5_0), "blocksum" (quant_blocksum.h's GEMM,
// on either VNNI) and "sgemm" (matmul_large: dequantized
// weight tiles + OpenBLAS, what prefill ran before), interleaved likewise;
// for prefill shapes, e.g. --rows 512 --paths tiled,sgemm --memory anon
// --min-mb 64 --calls 5. Gop/s counts 2 ops per multiply-add.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/quant_blocksum.h"
#include "backend/cpu/quant_gemm.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_panels.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"

using namespace specstack;

namespace {

// Offsets of each block's f16 scales: set to small normal values so that
// no product is a denormal (which would time microcode assists, not the kernel).
std::vector<size_t> scale_offsets(DType dtype) {
  switch (dtype) {
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {0, 2};
    case DType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

void fill_random(DType dtype, uint8_t* bytes, size_t n, std::mt19937& rng) {
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(rng());
  const size_t block = dtype_block_bytes(dtype);
  const uint16_t scale = f32_to_f16(0.01f);
  for (size_t b = 0; b < n / block; ++b) {
    for (size_t off : scale_offsets(dtype)) std::memcpy(bytes + b * block + off, &scale, 2);
  }
}

bool quantized_dtype(const std::string& name, DType* out) {
  for (DType d :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    if (name == dtype_name(d)) return *out = d, true;
  }
  return false;
}

struct Variant {
  std::string name;
  cpu::Isa isa;
  int threads;
  int rows_per_pass;
  cpu::QuantActForm form;
  std::string path;  // rows, rows-apart, panels, tiled, blocksum or sgemm
  bool file;
  std::vector<double> us;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> types = {"q8_0", "q4_k", "q6_k"};
  std::vector<int64_t> rows_list = {1, 4};
  std::vector<int> thread_list = {1, 2};
  std::vector<int> pass_list = {1, 4};
  std::vector<std::string> path_list = {"rows"};
  std::vector<std::string> acts_list = {"prep"};
  std::vector<std::string> memory_list = {"anon", "file"};
  std::vector<std::string> isa_list = {"avx2", "avxvnni", "avx512vnni"};
  int64_t out = 8192, in = 2048, min_mb = 1024, calls = 30;
  std::string file_dir = "/tmp";
  CLI::App app{"CPU int8 quantized matmul: isa x threads x weight memory"};
  app.add_option("--types", types, "weight block types")->delimiter(',');
  app.add_option("--out", out, "weight rows");
  app.add_option("--in", in, "weight columns");
  app.add_option("--rows", rows_list, "activation rows")->delimiter(',');
  app.add_option("-t,--threads", thread_list, "thread counts")->delimiter(',');
  app.add_option("--passes", pass_list, "weight rows per pass: 1 and/or 4")
      ->delimiter(',')
      ->check(CLI::IsMember({1, 4}));
  app.add_option("--acts", acts_list, "prep and/or blocks (the rows path)")
      ->delimiter(',')
      ->check(CLI::IsMember({"prep", "blocks"}));
  app.add_option("--paths", path_list, "rows, rows-apart, panels, tiled, blocksum and/or sgemm")
      ->delimiter(',')
      ->check(CLI::IsMember({"rows", "rows-apart", "panels", "tiled", "blocksum", "sgemm"}));
  app.add_option("--isas", isa_list, "avx2, avxvnni and/or avx512vnni (those this CPU has)")
      ->delimiter(',')
      ->check(CLI::IsMember({"avx2", "avxvnni", "avx512vnni"}));
  app.add_option("--memory", memory_list, "anon and/or file")
      ->delimiter(',')
      ->check(CLI::IsMember({"anon", "file"}));
  app.add_option("--min-mb", min_mb, "weight bytes cycled through, at least (MiB)");
  app.add_option("--calls", calls, "timed calls per variant");
  app.add_option("--file-dir", file_dir, "where the file-backed copy is written");
  CLI11_PARSE(app, argc, argv);
  openblas_set_num_threads(1);  // as CpuBackend: one sgemm per pool thread

  std::mt19937 rng(5);
  for (const std::string& type : types) {
    DType dtype_value = DType::kF32;
    const DType* dtype = &dtype_value;
    if (!quantized_dtype(type, &dtype_value)) {
      std::fprintf(stderr, "quant_matmul_bench: not a quantized type: %s\n", type.c_str());
      return 1;
    }
    const size_t matrix_bytes = dtype_bytes(*dtype, out * in);
    const int64_t copies = std::max<int64_t>(
        2, (min_mb * 1048576 + int64_t(matrix_bytes) - 1) / int64_t(matrix_bytes));
    Tensor heap = Tensor::zeros(*dtype, {copies * out, in});
    auto* heap_bytes = static_cast<uint8_t*>(heap.raw());
    fill_random(*dtype, heap_bytes, heap.nbytes(), rng);
    const std::string path = file_dir + "/quant_matmul_bench." + type + ".bin";
    {
      std::ofstream f(path, std::ios::binary);
      f.write(reinterpret_cast<const char*>(heap_bytes), std::streamsize(heap.nbytes()));
      if (!f) return std::fprintf(stderr, "quant_matmul_bench: cannot write %s\n", path.c_str()), 1;
    }
    auto mapped = MappedFile::open(path);
    if (!mapped.ok()) return std::fprintf(stderr, "%s\n", mapped.message().c_str()), 1;
    std::shared_ptr<MappedFile> file = *mapped;
    std::remove(path.c_str());  // the mapping keeps the pages
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < file->size(); i += 4096) sink = sink + file->data()[i];
    auto weights = [&](bool from_file, int64_t c) {
      void* base = from_file ? const_cast<uint8_t*>(file->data()) : heap_bytes;
      return Tensor::view(static_cast<uint8_t*>(base) + (c % copies) * matrix_bytes, *dtype,
                          {out, in}, nullptr);
    };
    for (int64_t rows : rows_list) {
      std::vector<Variant> variants;
      for (const std::string& isa_name : isa_list) {
        cpu::Isa isa = cpu::Isa::kScalar;
        if (!cpu::parse_quant_isa(isa_name.c_str(), &isa) || !cpu::quant_isa_available(isa))
          continue;
        for (const std::string& path : path_list) {
          if (path == "tiled" && cpu::quant_tile(*dtype, isa).fn == nullptr) continue;
          if (path == "blocksum" && !cpu::quant_blocksum_available(*dtype, isa)) continue;
          if (path == "panels" && (*dtype != DType::kQ8_0 || !cpu::quant_panels_available(isa)))
            continue;
          for (int t : thread_list) {
            const bool rows_path = path == "rows" || path == "rows-apart";
            for (int passes : rows_path ? pass_list : std::vector<int>{4}) {
              for (const std::string& acts :
                   rows_path ? acts_list : std::vector<std::string>{"prep"}) {
                for (const std::string& memory : memory_list) {
                  const bool from_file = memory == "file";
                  variants.push_back(
                      {std::string(cpu::isa_name(isa)) + " " + path + " t" + std::to_string(t) +
                           (rows_path ? " x" + std::to_string(passes) + " " + acts : "") + " " +
                           memory,
                       isa,
                       t,
                       passes,
                       acts == "prep" ? cpu::QuantActForm::kPrepared : cpu::QuantActForm::kBlocks,
                       path,
                       from_file,
                       {}});
                }
              }
            }
          }
        }
      }
      std::vector<std::unique_ptr<ThreadPool>> pools(9);
      // Q8_0 panels: each copy repacked once (anonymous memory either way).
      std::vector<Tensor> panel_copies;
      for (const Variant& v : variants) {
        if (v.path != "panels" || !panel_copies.empty()) continue;
        ThreadPool repack_pool(1);
        for (int64_t c = 0; c < copies; ++c)
          panel_copies.push_back(cpu::repack_q8_0_panels(repack_pool, weights(false, c)));
      }
      for (int t : thread_list) pools[size_t(std::min(t, 8))] = std::make_unique<ThreadPool>(t);
      Tensor x = Tensor::zeros(DType::kF32, {rows, in});
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (int64_t i = 0; i < rows * in; ++i) x.f32()[i] = dist(rng);
      Tensor y = Tensor::zeros(DType::kF32, {rows, out});
      int64_t next = 0;
      for (int64_t c = -2; c < calls; ++c) {  // two warm-up calls per variant
        for (Variant& v : variants) {
          const int64_t copy = next;
          Tensor w = weights(v.file, next++);
          const auto t0 = std::chrono::steady_clock::now();
          ThreadPool& pool = *pools[size_t(std::min(v.threads, 8))];
          if (v.path == "tiled") {
            cpu::matmul_quant_tiled(pool, x, w, nullptr, y, v.isa);
          } else if (v.path == "blocksum") {
            cpu::matmul_quant_blocksum(pool, x, w, nullptr, y, v.isa);
          } else if (v.path == "panels") {
            cpu::matmul_q8_0_panels(pool, x, panel_copies[size_t(copy % copies)], nullptr, y,
                                    v.isa);
          } else if (v.path == "sgemm") {
            cpu::matmul_large(pool, x, w, nullptr, y);
          } else {
            cpu::matmul_quant(pool, x, w, nullptr, y, v.isa, v.rows_per_pass, v.form,
                              v.path != "rows-apart");
          }
          const auto t1 = std::chrono::steady_clock::now();
          if (c >= 0) v.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
      }
      for (Variant& v : variants) {
        std::sort(v.us.begin(), v.us.end());
        const double us = v.us[v.us.size() / 2];
        std::printf("%-5s %lldx%lld rows %lld %-34s %10.1f us %7.2f GB/s %7.1f Gop/s\n",
                    type.c_str(), static_cast<long long>(out), static_cast<long long>(in),
                    static_cast<long long>(rows), v.name.c_str(), us,
                    static_cast<double>(matrix_bytes) / us / 1e3,
                    2.0 * double(rows) * double(out) * double(in) / us / 1e3);
      }
    }
  }
  return 0;
}
