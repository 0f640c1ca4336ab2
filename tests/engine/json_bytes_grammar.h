// The grammar engine tests' vocabulary: the 512-token byte-level JSON
// tokenizer (tests/data/grammar/json-bytes-512, the golden models' vocabulary
// size), and a JSON schema's constraint over it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack::testing {

struct JsonBytesVocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

inline JsonBytesVocabulary load_json_bytes_vocabulary() {
  auto tok = Tokenizer::load_dir(test_data("grammar/json-bytes-512"));
  SS_CHECK_MSG(tok.ok(), tok.ok() ? "" : tok.message());
  JsonBytesVocabulary out;
  out.tokenizer = std::make_unique<Tokenizer>(std::move(tok).value());
  out.vocabulary = std::make_shared<const grammar::TokenVocabulary>(
      grammar::TokenVocabulary::from_tokenizer(*out.tokenizer));
  return out;
}

inline std::shared_ptr<grammar::TokenConstraint> schema_constraint(
    const nlohmann::ordered_json& schema,
    std::shared_ptr<const grammar::TokenVocabulary> vocabulary) {
  auto text = grammar::json_schema_to_gbnf(schema);
  SS_CHECK_MSG(text.ok(), text.ok() ? "" : text.message());
  auto g = grammar::parse_gbnf(*text);
  SS_CHECK_MSG(g.ok(), g.ok() ? "" : g.message());
  return std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(g).value()), std::move(vocabulary));
}

}  // namespace specstack::testing
