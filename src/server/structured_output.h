// Structured outputs on the OpenAI API: `response_format` (text,
// json_object, json_schema) and the `grammar` extension (GBNF text, top
// level or in extra_body, as llama-server accepts it) become one grammar for
// the engine's GrammarStage. Errors are 400s whose `param` names the field.
//
// GrammarCache compiles each distinct grammar once and keeps it with its
// mask cache, so repeated requests with the same schema reuse every mask
// computed so far; the tokenizer's vocabulary trie is built on first use.
// Compiling includes classifying the grammar's reachable stack tops
// (TokenConstraint::precompute): a schema's first request pays it once
// (~250 ms for the benchmark's schema), later tokens do not.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/token_constraint.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tokenizer, size_t capacity = 16)
      : tokenizer_(tokenizer), capacity_(capacity) {}
  // The constraint for this GBNF text, compiled now or found in the cache.
  // Errors: the grammar's syntax error.
  Result<std::shared_ptr<grammar::TokenConstraint>> get(const std::string& gbnf);

 private:
  const Tokenizer& tokenizer_;
  size_t capacity_;
  std::mutex mutex_;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary_;  // built on first use
  std::list<std::string> lru_;                                  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<grammar::TokenConstraint>,
                                            std::list<std::string>::iterator>>
      entries_;
};

// The request's constraint, or null when it asks for none (no response_format
// or {"type": "text"}, no grammar). Without a cache (a server that does not
// offer structured outputs) a constrained request is a 400. On error,
// `error_param` names the field at fault ("response_format" or "grammar").
Result<std::shared_ptr<grammar::TokenConstraint>> parse_structured_output(const OrderedJson& body,
                                                                          GrammarCache* cache,
                                                                          std::string& error_param);

}  // namespace specstack
