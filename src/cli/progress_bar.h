// A one-line progress bar for slow start-up steps (loading weights), redrawn
// in place with '\r'. Only meant for a terminal: callers check
// stderr_is_terminal() and print plain one-line messages otherwise, so logs
// and pipes never fill with carriage returns.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/model_instance.h"

namespace specstack::cli {

bool stderr_is_terminal();

// "loading weights [##########          ] 12/24 layers"; done is clamped to
// [0, total] and a total <= 0 draws an empty bar.
std::string format_progress_bar(const std::string& label, int64_t done, int64_t total,
                                const std::string& unit, int width = 20);

// ModelInstance::create with a bar of the layers loaded ("<label> [###  ] 12/24
// layers") when stderr is a terminal. The bar's line is ended before the
// result comes back, so an error message starts on a fresh line.
Result<std::unique_ptr<ModelInstance>> create_model_with_progress(ModelInstanceOptions options,
                                                                  Backend& backend,
                                                                  const std::string& label);

class ProgressBar {
 public:
  ProgressBar(std::FILE* out, std::string label, std::string unit);
  // Ends the line if finish() was not called (e.g. on an error path), so the
  // next message starts on a fresh line.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done, int64_t total);
  // Ends the bar's line; later updates are ignored.
  void finish();

 private:
  std::FILE* out_;
  std::string label_;
  std::string unit_;
  std::string last_line_;  // what is on the terminal now; unchanged lines are not redrawn
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace specstack::cli
