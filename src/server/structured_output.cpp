#include "server/structured_output.h"

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"

namespace specstack {

namespace {

// Errors below are all about one field; the caller learns which through
// its `param` out-argument, set once at the top (see parse_structured_output).
Error param_error(std::string message, const char* /*param*/) {
  return make_error(std::move(message));
}

// The GBNF text response_format asks for; "" for text.
Result<std::string> response_format_grammar(const OrderedJson& format) {
  const auto type = format.find("type");
  if (type == format.end() || !type->is_string()) {
    return param_error("'response_format' needs a string 'type' (text, json_object, json_schema)",
                       "response_format");
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text") return std::string();
  if (name == "json_object") return grammar::json_object_gbnf();
  if (name != "json_schema") {
    return param_error(fmt::format("'response_format.type' must be text, json_object or "
                                   "json_schema, got '{}'",
                                   name),
                       "response_format");
  }
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) {
    return param_error("'response_format.json_schema' must be an object with a 'schema'",
                       "response_format");
  }
  for (const char* key : {"name", "description"}) {
    const auto field = spec->find(key);
    if (field != spec->end() && !field->is_string()) {
      return param_error(fmt::format("'response_format.json_schema.{}' must be a string", key),
                         "response_format");
    }
  }
  const auto strict = spec->find("strict");
  if (strict != spec->end() && !strict->is_boolean() && !strict->is_null()) {
    return param_error("'response_format.json_schema.strict' must be a boolean", "response_format");
  }
  const auto schema = spec->find("schema");
  if (schema == spec->end() || !(schema->is_object() || schema->is_boolean())) {
    return param_error("'response_format.json_schema.schema' must be a JSON schema object",
                       "response_format");
  }
  // OpenAI: strict (false unless given) forbids properties the schema does
  // not declare unless it allows them; non-strict follows JSON schema's own
  // default, so extra properties are allowed unless additionalProperties
  // says otherwise. Either way the output matches the schema.
  grammar::JsonSchemaOptions options;
  options.strict = strict != spec->end() && strict->is_boolean() && strict->get<bool>();
  auto gbnf = grammar::json_schema_to_gbnf(*schema, options);
  if (!gbnf.ok()) {
    return param_error("Invalid 'response_format': " + gbnf.message(), "response_format");
  }
  return gbnf;
}

}  // namespace

Result<std::shared_ptr<grammar::TokenConstraint>> GrammarCache::get(const std::string& gbnf) {
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = entries_.find(gbnf); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    if (!vocabulary_) {
      vocabulary_ = std::make_shared<const grammar::TokenVocabulary>(
          grammar::TokenVocabulary::from_tokenizer(tokenizer_));
    }
    vocabulary = vocabulary_;
  }
  // Compiled outside the lock (the classification of the reachable tops
  // takes a few hundred ms on a 128-152K vocabulary), on the request's
  // thread: the engine thread then decodes without classifying.
  auto parsed = grammar::parse_gbnf(gbnf);
  if (!parsed.ok()) return parsed.error();
  auto constraint = std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(parsed).value()), vocabulary);
  constraint->precompute();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = entries_.find(gbnf); it != entries_.end()) {
    return it->second.first;  // compiled meanwhile by another request: share its masks
  }
  if (entries_.size() >= capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(gbnf);
  entries_.emplace(gbnf, std::make_pair(constraint, lru_.begin()));
  return constraint;
}

Result<std::shared_ptr<grammar::TokenConstraint>> parse_structured_output(
    const OrderedJson& body, GrammarCache* cache, std::string& error_param) {
  error_param = "response_format";
  SS_ASSIGN_OR_RETURN(const OrderedJson* format, get_object(body, "response_format"));
  std::string gbnf;
  if (format != nullptr) {
    SS_ASSIGN_OR_RETURN(gbnf, response_format_grammar(*format));
  }
  error_param = "grammar";
  SS_ASSIGN_OR_RETURN(std::optional<std::string> grammar_text, get_string(body, "grammar"));
  const char* param = "response_format";
  if (grammar_text) {
    if (!gbnf.empty()) {
      return param_error("'grammar' and a 'response_format' other than text cannot be combined",
                         "grammar");
    }
    if (grammar_text->empty()) return param_error("'grammar' must not be empty", "grammar");
    gbnf = std::move(*grammar_text);
    param = "grammar";
  }
  error_param = param;
  if (gbnf.empty()) {
    error_param.clear();
    return std::shared_ptr<grammar::TokenConstraint>();
  }
  if (cache == nullptr) {
    return param_error(fmt::format("'{}' is not supported here", param), param);
  }
  auto constraint = cache->get(gbnf);
  if (!constraint.ok()) {
    // Only a user's grammar can fail here: compiled schemas are valid GBNF.
    return param_error(fmt::format("Invalid '{}': {}", param, constraint.message()), param);
  }
  error_param.clear();
  return constraint;
}

}  // namespace specstack
