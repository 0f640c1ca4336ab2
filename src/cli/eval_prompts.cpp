#include "cli/eval_prompts.h"

#include "backend/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/model_instance.h"

namespace specstack::cli {
namespace {

const char* kNames[] = {"Alice",  "Ben",   "Clara", "David", "Emma", "Felix", "Grace",
                        "Henry",  "Ivy",   "Jack",  "Kate",  "Leo",  "Mia",   "Noah",
                        "Olivia", "Peter", "Quinn", "Rosa",  "Sam",  "Tina",  "Umar",
                        "Vera",   "Will",  "Xena",  "Yusuf", "Zoe"};

// Inserts `sentence` at the sentence boundary nearest depth * length.
std::string insert_at_depth(const std::string& body, const std::string& sentence, double depth) {
  size_t at = static_cast<size_t>(depth * static_cast<double>(body.size()));
  size_t boundary = body.find(". ", at);
  if (boundary == std::string::npos)
    boundary = body.size();
  else
    boundary += 1;
  return body.substr(0, boundary) + " " + sentence + body.substr(boundary);
}

}  // namespace

std::string random_name(std::mt19937& rng) {
  return kNames[rng() % std::size(kNames)];
}

Result<std::string> make_filler(const std::string& dir, int threads, size_t min_chars,
                                uint32_t seed) {
  SS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load_dir(dir));
  CpuBackend backend(CpuBackendOptions{threads});
  ModelInstanceOptions options;
  options.model_dir = dir;
  options.kv_tokens = 16 * 512;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<ModelInstance> model,
                      ModelInstance::create(options, backend));
  Generator generator(model->runner(), model->kv_manager());
  std::string text;
  const int32_t bos = tokenizer.bos_id().value_or(1);
  for (uint32_t round = 0; text.size() < min_chars; ++round) {
    std::vector<GenerationRequest> requests(16);
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].prompt = {bos};
      requests[i].params.temperature = 1.0f;
      requests[i].params.seed = seed * 1000 + round * 16 + i;
      requests[i].params.max_tokens = 400;
    }
    SS_ASSIGN_OR_RETURN(std::vector<GenerationResult> stories, generator.generate(requests));
    for (const auto& story : stories) {
      std::string s = tokenizer.decode(story.tokens, /*skip_special_tokens=*/true);
      while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.erase(s.begin());
      if (s.size() > 40) text += s + "\n\n";
    }
  }
  return text;
}

std::string filler_slice(const std::string& filler, const Tokenizer& tok, int32_t n_tokens,
                         std::mt19937& rng) {
  size_t start = std::uniform_int_distribution<size_t>(0, filler.size() / 2)(rng);
  start = filler.find("\n\n", start);
  start = start == std::string::npos ? 0 : start + 2;
  // ~4 characters per token as a first guess, then trimmed by token count.
  std::string text = filler.substr(start, static_cast<size_t>(n_tokens) * 6);
  while (static_cast<int32_t>(tok.encode(text, false).size()) > n_tokens && text.size() > 16) {
    text.resize(text.size() * 95 / 100);
  }
  const size_t cut = text.rfind(". ");
  return cut == std::string::npos ? text : text.substr(0, cut + 1);
}

std::vector<EvalCase> needle_cases(const Tokenizer& tok, const std::string& filler,
                                   const std::vector<double>& depths, int32_t n, int32_t context,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<EvalCase> cases;
  for (double depth : depths) {
    for (int32_t i = 0; i < n; ++i) {
      const std::string name = random_name(rng);
      const std::string code = std::to_string(1000000 + rng() % 9000000);
      std::string body = filler_slice(filler, tok, context - 40, rng);
      std::string text =
          insert_at_depth(body, "The secret code for " + name + " is " + code + ".", depth);
      text += "\n\nQuestion: What is the secret code for " + name + "?\nAnswer:";
      cases.push_back({tok.encode(text, true), code, fmt::format("depth {:.0f}%", depth * 100)});
    }
  }
  return cases;
}

}  // namespace specstack::cli
