#include "cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

namespace specstack::cli {

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) == 1;
}

std::string format_progress_bar(const std::string& label, int64_t done, int64_t total,
                                const std::string& unit, int width) {
  const int64_t clamped = total > 0 ? std::clamp<int64_t>(done, 0, total) : 0;
  const int64_t filled = total > 0 ? clamped * width / total : 0;
  std::string line = label + " [";
  line.append(static_cast<size_t>(filled), '#');
  line.append(static_cast<size_t>(width - filled), ' ');
  line += "] " + std::to_string(clamped) + "/" + std::to_string(std::max<int64_t>(total, 0));
  if (!unit.empty()) line += " " + unit;
  return line;
}

ProgressBar::ProgressBar(std::FILE* out, std::string label, std::string unit)
    : out_(out), label_(std::move(label)), unit_(std::move(unit)) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(int64_t done, int64_t total) {
  if (finished_) return;
  std::string line = format_progress_bar(label_, done, total, unit_);
  if (drawn_ && line == last_line_) return;
  // Trailing spaces blank out the rest of a longer previous line.
  const size_t pad = last_line_.size() > line.size() ? last_line_.size() - line.size() : 0;
  std::fprintf(out_, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  std::fflush(out_);
  last_line_ = std::move(line);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!drawn_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
}

Result<std::unique_ptr<ModelInstance>> create_model_with_progress(ModelInstanceOptions options,
                                                                  Backend& backend,
                                                                  const std::string& label) {
  std::optional<ProgressBar> bar;
  if (stderr_is_terminal()) {
    bar.emplace(stderr, label, "layers");
    // The loader counts the embeddings and head as one step before the
    // layers; the bar counts layers only, so a 24-layer model ends at 24/24.
    options.on_progress = [&bar](int64_t done, int64_t total) { bar->update(done - 1, total - 1); };
  }
  auto instance = ModelInstance::create(options, backend);
  if (bar) bar->finish();
  if (instance.ok() && !(*instance)->load_note().empty())
    std::fprintf(stderr, "specstack: note: %s\n", (*instance)->load_note().c_str());
  return instance;
}

}  // namespace specstack::cli
