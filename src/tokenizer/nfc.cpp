#include "tokenizer/nfc.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "tokenizer/nfc_data.h"
#include "tokenizer/utf8.h"

namespace specstack::tok {

namespace {

// Hangul syllables compose and decompose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCccRanges + kCccRanges_size;
  const CccRange* it = std::upper_bound(kCccRanges, end, cp,
                                        [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositions_size;
  const Decomposition* it =
      std::lower_bound(kDecompositions, end, cp,
                       [](const Decomposition& d, char32_t c) { return d.code_point < c; });
  if (it == end || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionData + it->offset,
             kDecompositionData + it->offset + it->length);
}

// The primary composite of (a, b), or 0 when there is none.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kCompositions_size;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto key) {
        return c.first != key.first ? c.first < key.first : c.second < key.second;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string to_nfc(const std::string& s) {
  // Below U+0300 nothing decomposes into or composes with anything else, so
  // such text (ASCII, Latin-1 ...) is already NFC.
  bool all_low = true;
  for (size_t i = 0; i < s.size() && all_low;) all_low = next_code_point(s, i) < 0x300;
  if (all_low) return s;

  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) decompose(next_code_point(s, i), cps);

  // Canonical ordering: stable sort of each run of non-starters by class.
  std::vector<uint8_t> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = combining_class(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && classes[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, char32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(classes[k], cps[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      for (size_t k = i; k < j; ++k) std::tie(classes[k], cps[k]) = run[k - i];
    }
    i = j;
  }

  // Canonical composition: a character joins the last starter unless a
  // character in between blocks it (class 0, or a class >= its own).
  size_t out_len = 0;
  size_t starter = SIZE_MAX;
  int last_class = -1;  // class of the last character kept after the starter; -1: none
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const int cls = classes[i];
    const bool blocked = last_class != -1 && last_class >= cls;
    if (starter != SIZE_MAX && !blocked) {
      const char32_t composite = compose(cps[starter], cp);
      if (composite != 0) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = out_len;
      last_class = -1;
    } else {
      last_class = cls;
    }
    cps[out_len++] = cp;
  }

  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < out_len; ++i) append_utf8(out, cps[i]);
  return out;
}

}  // namespace specstack::tok
