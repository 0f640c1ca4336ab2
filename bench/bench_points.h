// --points for the bench programs that time one kernel at several shapes
// (attention_bench, flash_attention_bench, score_bench): comma-separated
// points, each N colon-separated integers, e.g. "8192:0:0,16384:0:0".
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specstack::bench {

// Each point's N integers. A point that is not exactly N integers, or that
// `valid` (when given) rejects, ends the program with status 2 and
// "<program>: --points wants <form>,... (got '<text>')".
template <size_t N>
std::vector<std::array<int32_t, N>> parse_points(
    const std::string& text, const char* program, const char* form,
    bool (*valid)(const std::array<int32_t, N>&) = nullptr) {
  auto fail = [&] {
    std::fprintf(stderr, "%s: --points wants %s,... (got '%s')\n", program, form, text.c_str());
    std::exit(2);
  };
  std::vector<std::array<int32_t, N>> points;
  const std::string_view all(text);
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find(',', at);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view point = all.substr(at, end - at);
    std::array<int32_t, N> fields{};
    size_t pos = 0;
    for (size_t f = 0; f < N; ++f) {
      const char* first = point.data() + pos;
      const char* last = point.data() + point.size();
      const auto [ptr, ec] = std::from_chars(first, last, fields[f]);
      if (ec != std::errc() || ptr == first) fail();
      pos = static_cast<size_t>(ptr - point.data());
      const bool last_field = f + 1 == N;
      if (last_field ? pos != point.size() : (pos >= point.size() || point[pos] != ':')) fail();
      ++pos;
    }
    if (valid != nullptr && !valid(fields)) fail();
    points.push_back(fields);
    at = end + 1;
  }
  return points;
}

// The value of --points, or nullopt without it; any other argument ends the
// program with status 2 and `usage`.
inline std::optional<std::string> points_option(int argc, char** argv, const char* usage) {
  std::optional<std::string> points;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--points" && i + 1 < argc) {
      points = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s\n", usage);
      std::exit(2);
    }
  }
  return points;
}

}  // namespace specstack::bench
