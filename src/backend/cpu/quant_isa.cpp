// Which instruction set the quantized kernels run on (quant_kernels.h):
// CPUID for what the CPU has, XGETBV for what the OS saves on a context
// switch, and SPECSTACK_QUANT_ISA to pin one for A/B runs; and
// SPECSTACK_QUANT_ROWS, the weight rows per pass, for the same purpose.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_panels.h"

#if SS_QUANT_AVX2
#include <cpuid.h>
#endif

namespace specstack::cpu {
namespace {

#if SS_QUANT_AVX2
struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return CpuidRegs{};
  return r;
}

bool bit(unsigned reg, int i) {
  return ((reg >> i) & 1u) != 0;
}

// XCR0, the register states the OS saves. Inline asm rather than _xgetbv,
// which needs -mxsave on this file; only called when CPUID says OSXSAVE.
uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// CPUID.1:ECX bits FMA 12, OSXSAVE 27, AVX 28, F16C 29; CPUID.7.0:EBX AVX2 5.
// (F16C from CPUID rather than __builtin_cpu_supports: clang 14, the fuzz and
// sanitizer builds, does not know the "f16c" name.)
bool has_avx2_fma_f16c() {
  const CpuidRegs l1 = cpuid(1, 0), l7 = cpuid(7, 0);
  if (!bit(l1.ecx, 27) || !bit(l1.ecx, 28)) return false;
  if ((xcr0() & 0x6) != 0x6) return false;  // XMM and YMM state
  return bit(l1.ecx, 12) && bit(l1.ecx, 29) && bit(l7.ebx, 5);
}

// CPUID.7.1:EAX AVX-VNNI 4: the VEX-encoded 256-bit vpdpbusd / vpdpwssd
// (Intel client CPUs since Alder Lake, which lack AVX-512; Sapphire Rapids
// and Zen 5 have both). The leaf-7 subleaf count is CPUID.7.0:EAX.
bool has_avx_vnni() {
  if (!has_avx2_fma_f16c() || cpuid(7, 0).eax < 1) return false;
  return bit(cpuid(7, 1).eax, 4);
}

// CPUID.7.0:EBX AVX512F 16, AVX512BW 30, AVX512VL 31; ECX AVX512_VNNI 11.
// XCR0 bits 5-7: opmask, upper halves of zmm0-15, zmm16-31.
bool has_avx512_vnni() {
  if (!has_avx2_fma_f16c()) return false;
  const CpuidRegs l7 = cpuid(7, 0);
  if (!bit(l7.ebx, 16) || !bit(l7.ebx, 30) || !bit(l7.ebx, 31) || !bit(l7.ecx, 11)) return false;
  return (xcr0() & 0xE6) == 0xE6;
}

// CPUID.0: the vendor string in EBX, EDX, ECX.
bool vendor_is_intel() {
  const CpuidRegs l0 = cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &l0.ebx, 4);
  std::memcpy(vendor + 4, &l0.edx, 4);
  std::memcpy(vendor + 8, &l0.ecx, 4);
  return std::strcmp(vendor, "GenuineIntel") == 0;
}
#endif

}  // namespace

bool quant_cpu_is_intel() {
#if SS_QUANT_AVX2
  static const bool intel = vendor_is_intel();
  return intel;
#else
  return false;
#endif
}

bool quant_isa_available(Isa isa) {
#if SS_QUANT_AVX2
  // Probed once: CPUID traps to the hypervisor in a VM (microseconds or
  // more each), and this runs on every quantized matmul and attention call.
  struct Features {
    bool avx2, avx_vnni, avx512_vnni;
  };
  static const Features features{has_avx2_fma_f16c(), has_avx_vnni(), has_avx512_vnni()};
#endif
  switch (isa) {
    case Isa::kScalar:
      return true;
#if SS_QUANT_AVX2
    case Isa::kAvx2:
      return features.avx2;
    case Isa::kAvxVnni:
      return features.avx_vnni;
#endif
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
    case Isa::kAvx512Vnni:
      return features.avx512_vnni;
#endif
    default:
      return false;
  }
}

bool parse_quant_isa(const char* name, Isa* isa) {
  for (Isa candidate : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (name != nullptr && std::strcmp(name, isa_name(candidate)) == 0) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

Isa choose_quant_isa(const char* pinned, std::string* note) {
  note->clear();
  Isa fastest = Isa::kScalar;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (quant_isa_available(isa)) fastest = isa;
  }
  if (pinned == nullptr || *pinned == '\0') return fastest;
  Isa isa = Isa::kScalar;
  if (!parse_quant_isa(pinned, &isa)) {
    *note = std::string(kQuantIsaEnv) + "=" + pinned +
            " ignored: expected scalar, avx2, avxvnni or avx512vnni; using " + isa_name(fastest);
    return fastest;
  }
  if (!quant_isa_available(isa)) {
    *note = std::string(kQuantIsaEnv) + "=" + pinned +
            " ignored: this CPU (or build) lacks it; using " + isa_name(fastest);
    return fastest;
  }
  return isa;
}

Isa quant_best_isa() {
  // Once per process: the env var is read at the first quantized matmul.
  static const Isa best = [] {
    std::string note;
    const Isa isa = choose_quant_isa(std::getenv(kQuantIsaEnv), &note);
    if (!note.empty()) std::fprintf(stderr, "specstack: %s\n", note.c_str());
    return isa;
  }();
  return best;
}

int default_quant_rows(Isa isa, bool intel) {
  if (isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni) return 4;
  return isa == Isa::kAvx2 && intel ? 4 : 1;
}

int choose_quant_rows(const char* pinned, Isa isa, std::string* note) {
  note->clear();
  const int fallback = default_quant_rows(isa, quant_cpu_is_intel());
  if (pinned == nullptr || *pinned == '\0') return fallback;
  if (std::strcmp(pinned, "1") == 0) return 1;
  if (std::strcmp(pinned, "4") == 0) return 4;
  *note = std::string(kQuantRowsEnv) + "=" + pinned + " ignored: expected 1 or 4; using " +
          std::to_string(fallback);
  return fallback;
}

int quant_rows_per_pass() {
  static const int rows = [] {
    std::string note;
    const int r = choose_quant_rows(std::getenv(kQuantRowsEnv), quant_best_isa(), &note);
    if (!note.empty()) std::fprintf(stderr, "specstack: %s\n", note.c_str());
    return r;
  }();
  return rows;
}

std::string describe_quant_kernels() {
  const Isa isa = quant_best_isa();
  const bool together = quant_acts_together() && isa != Isa::kScalar;  // dot_acts: SIMD only
  return std::string("int8 kernels ") + isa_name(isa) + ", " +
         std::to_string(quant_rows_per_pass()) + " weight rows per pass, Q8_0 panels " +
         (quant_panels_enabled() ? "on" : "off") + ", K-quant rows together " +
         (together ? "on" : "off");
}

}  // namespace specstack::cpu
