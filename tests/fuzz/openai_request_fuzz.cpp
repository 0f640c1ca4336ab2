// libFuzzer target: parse_openai_request on arbitrary bytes as the body of
// both POST /v1/completions and /v1/chat/completions. Bodies come from the
// network, so parsing must return an error with a message (400 or 404), never
// crash; an accepted request must hold only values the engine accepts
// (check_accepted_request). No network, no threads: the tokenizer and chat
// template are read once from tests/data at start-up.
// Seed corpus: tests/fuzz/corpus/openai_request/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "openai_request_model.h"
#include "server/errors.h"

namespace {

using specstack::ApiEndpoint;
using specstack::fuzzing::FuzzServedModel;

// tests/data, found from this file's path (the fuzz build passes absolute
// source paths); SPECSTACK_TEST_DATA_DIR overrides it.
std::string data_dir() {
  if (const char* dir = std::getenv("SPECSTACK_TEST_DATA_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data").string();
}

// Loaded once and never freed: libFuzzer runs inputs until the process exits.
const FuzzServedModel& served_model() {
  static const FuzzServedModel* const model = [] {
    auto loaded = specstack::fuzzing::make_fuzz_served_model(data_dir());
    if (!loaded.ok()) {
      std::fprintf(stderr, "openai_request_fuzz: %s (set SPECSTACK_TEST_DATA_DIR)\n",
                   loaded.message().c_str());
      std::abort();
    }
    return std::move(loaded).value().release();
  }();
  return *model;
}

void parse_and_check(ApiEndpoint endpoint, std::string_view body) {
  const specstack::ServedModel& model = served_model().served;
  auto request = specstack::parse_openai_request(endpoint, body, model);
  if (!request.ok()) {
    const int status = specstack::http_status_for(request.error().code);
    if (request.message().empty() || (status != 400 && status != 404)) std::abort();
    return;
  }
  if (request->endpoint != endpoint) std::abort();
  const std::string broken = specstack::fuzzing::check_accepted_request(*request, model);
  if (!broken.empty()) {
    std::fprintf(stderr, "openai_request_fuzz: accepted request breaks a rule: %s\n",
                 broken.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  served_model();  // fail at start-up, not on the first input, if tests/data is missing
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  parse_and_check(ApiEndpoint::kApiCompletions, body);
  parse_and_check(ApiEndpoint::kApiChatCompletions, body);
  return 0;
}
