#include "chat/jinja_parser.h"

#include <algorithm>
#include <array>

#include "chat/jinja_expr_parser.h"

namespace specstack::jinja {
namespace {

// jinja2 tags outside this subset: named as unsupported rather than unknown.
constexpr std::array<std::string_view, 10> kUnsupportedTags = {
    "block", "extends", "include", "import", "from", "call", "autoescape", "do", "trans", "debug"};

std::string quoted_list(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += fmt::format("'{}'", n);
  }
  return out;
}

class StmtParser {
 public:
  explicit StmtParser(std::vector<Token> tokens) : cur_(std::move(tokens)), expr_(cur_) {}

  Result<Template> parse() {
    Template tmpl;
    SS_ASSIGN_OR_RETURN(tmpl.body, parse_body({}, "", 0));
    return tmpl;
  }

 private:
  // Parses statements until the end of the template or a `{% tag` with a name
  // in end_tags; the cursor is then on that tag's name.
  Result<Body> parse_body(std::initializer_list<std::string_view> end_tags, std::string_view opener,
                          size_t opener_offset) {
    Body body;
    while (true) {
      const Token& t = cur_.peek();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (end_tags.size() == 0) return body;
          return errorf(
              "chat template syntax error: unclosed '{{% {} %}}' at offset {}: expected {}", opener,
              opener_offset, quoted_list(end_tags));
        case TokenKind::kText:
          body.push_back(std::make_unique<TextStmt>(t.offset, t.text));
          cur_.next();
          break;
        case TokenKind::kVariableBegin: {
          cur_.next();
          SS_ASSIGN_OR_RETURN(ExprPtr expr, expr_.parse_tuple());
          SS_TRY(cur_.expect(TokenKind::kVariableEnd, "'}}' to end the expression"));
          body.push_back(std::make_unique<OutputStmt>(t.offset, std::move(expr)));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = cur_.peek(1);
          const bool is_end =
              name.kind == TokenKind::kName &&
              std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end();
          cur_.next();
          if (is_end) return body;
          SS_ASSIGN_OR_RETURN(StmtPtr stmt, parse_statement(t.offset));
          body.push_back(std::move(stmt));
          break;
        }
        default:
          return cur_.error_here("unexpected token");
      }
    }
  }

  Result<StmtPtr> parse_statement(size_t offset) {
    if (!cur_.at(TokenKind::kName)) return cur_.error_here("expected a tag name after '{%'");
    const std::string tag = cur_.peek().text;
    if (tag == "break" || tag == "continue") return parse_loop_control(offset, tag == "break");
    if (++nesting_ > kMaxStmtNesting) {
      return errorf("chat template syntax error: tags nested too deeply at offset {}", offset);
    }
    Result<StmtPtr> stmt = parse_compound(offset, tag);
    --nesting_;
    return stmt;
  }

  Result<StmtPtr> parse_compound(size_t offset, const std::string& tag) {
    if (tag == "if") return parse_if(offset);
    if (tag == "for") return parse_for(offset);
    if (tag == "set") return parse_set(offset);
    if (tag == "macro") return parse_macro(offset);
    if (tag == "filter") return parse_filter_block(offset);
    if (tag == "with" || tag == "generation") return parse_scope(offset, tag);
    if (std::find(kUnsupportedTags.begin(), kUnsupportedTags.end(), tag) !=
        kUnsupportedTags.end()) {
      return errorf("chat template syntax error: unsupported tag '{}' at offset {}", tag, offset);
    }
    if (tag.starts_with("end") || tag == "else" || tag == "elif") {
      return errorf("chat template syntax error: unexpected '{{% {} %}}' at offset {}", tag,
                    offset);
    }
    return errorf("chat template syntax error: unknown tag '{}' at offset {}", tag, offset);
  }

  Status expect_block_end(std::string_view tag) {
    return cur_.expect(TokenKind::kBlockEnd, fmt::format("'%}}' to end '{}'", tag));
  }

  // After the body of a block: the cursor is on the closing tag's name.
  Status close_block(std::string_view tag) {
    cur_.next();
    return expect_block_end(tag);
  }

  Result<StmtPtr> parse_if(size_t offset) {
    auto node = std::make_unique<IfStmt>(offset);
    cur_.next();
    while (true) {
      SS_ASSIGN_OR_RETURN(ExprPtr condition, expr_.parse_tuple(false));
      SS_TRY(expect_block_end("if"));
      SS_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, "if", offset));
      node->branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = cur_.next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        SS_TRY(expect_block_end("else"));
        SS_ASSIGN_OR_RETURN(node->else_body, parse_body({"endif"}, "if", offset));
        SS_TRY(close_block("endif"));
      } else {
        SS_TRY(expect_block_end("endif"));
      }
      return StmtPtr(std::move(node));
    }
  }

  Result<StmtPtr> parse_for(size_t offset) {
    auto node = std::make_unique<ForStmt>(offset);
    cur_.next();
    SS_ASSIGN_OR_RETURN(node->target, expr_.parse_assign_target(false));
    if (!cur_.skip_name("in")) return cur_.error_here("expected 'in' in a for loop");
    SS_ASSIGN_OR_RETURN(node->iterable, expr_.parse_tuple(false, false, {"recursive"}));
    if (cur_.skip_name("if")) {
      SS_ASSIGN_OR_RETURN(node->filter, expr_.parse_expression());
    }
    if (cur_.at_name("recursive")) return cur_.error_here("recursive for loops are not supported");
    SS_TRY(expect_block_end("for"));
    ++loop_depth_;
    auto body = parse_body({"endfor", "else"}, "for", offset);
    --loop_depth_;
    if (!body.ok()) return body.error();
    node->body = std::move(body).value();
    if (cur_.next().text == "else") {
      SS_TRY(expect_block_end("else"));
      SS_ASSIGN_OR_RETURN(node->else_body, parse_body({"endfor"}, "for", offset));
      cur_.next();
    }
    SS_TRY(expect_block_end("endfor"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_set(size_t offset) {
    cur_.next();
    SS_ASSIGN_OR_RETURN(Target target, expr_.parse_assign_target(true));
    if (cur_.skip_operator("=")) {
      auto node = std::make_unique<SetStmt>(offset);
      node->target = std::move(target);
      SS_ASSIGN_OR_RETURN(node->value, expr_.parse_tuple());
      SS_TRY(expect_block_end("set"));
      return StmtPtr(std::move(node));
    }
    if (target.unpack) return cur_.error_here("expected '=' after several assignment targets");
    auto node = std::make_unique<SetBlockStmt>(offset);
    node->target = std::move(target);
    while (cur_.skip_operator("|")) {
      SS_ASSIGN_OR_RETURN(auto filter, expr_.parse_filter(nullptr));
      node->filters.push_back(std::move(filter));
    }
    SS_TRY(expect_block_end("set"));
    SS_ASSIGN_OR_RETURN(node->body, parse_body({"endset"}, "set", offset));
    SS_TRY(close_block("endset"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_macro(size_t offset) {
    auto node = std::make_unique<MacroStmt>(offset);
    cur_.next();
    SS_ASSIGN_OR_RETURN(node->name, cur_.expect_name("after 'macro'"));
    SS_TRY(cur_.expect_operator("(", "after the macro name"));
    while (!cur_.at_operator(")")) {
      if (!node->params.empty()) SS_TRY(cur_.expect_operator(",", "between macro parameters"));
      SS_ASSIGN_OR_RETURN(std::string param, cur_.expect_name("as macro parameter"));
      ExprPtr fallback;
      if (cur_.skip_operator("=")) {
        SS_ASSIGN_OR_RETURN(fallback, expr_.parse_expression());
      } else if (!node->params.empty() && node->params.back().second) {
        return cur_.error_here("non-default macro parameter follows a default one");
      }
      node->params.emplace_back(std::move(param), std::move(fallback));
    }
    SS_TRY(cur_.expect_operator(")", "to close the macro parameters"));
    SS_TRY(expect_block_end("macro"));
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    auto body = parse_body({"endmacro"}, "macro", offset);
    loop_depth_ = outer_loops;
    if (!body.ok()) return body.error();
    node->body = std::move(body).value();
    SS_TRY(close_block("endmacro"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_filter_block(size_t offset) {
    auto node = std::make_unique<FilterBlockStmt>(offset);
    cur_.next();
    do {
      SS_ASSIGN_OR_RETURN(auto filter, expr_.parse_filter(nullptr));
      node->filters.push_back(std::move(filter));
    } while (cur_.skip_operator("|"));
    SS_TRY(expect_block_end("filter"));
    SS_ASSIGN_OR_RETURN(node->body, parse_body({"endfilter"}, "filter", offset));
    SS_TRY(close_block("endfilter"));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_scope(size_t offset, const std::string& tag) {
    auto node = std::make_unique<ScopeStmt>(offset);
    cur_.next();
    while (tag == "with" && !cur_.at(TokenKind::kBlockEnd)) {
      if (!node->assignments.empty()) SS_TRY(cur_.expect_operator(",", "between assignments"));
      SS_ASSIGN_OR_RETURN(std::string name, cur_.expect_name("in 'with'"));
      SS_TRY(cur_.expect_operator("=", "after the name in 'with'"));
      SS_ASSIGN_OR_RETURN(ExprPtr value, expr_.parse_expression());
      node->assignments.emplace_back(std::move(name), std::move(value));
    }
    SS_TRY(expect_block_end(tag));
    const std::string end_tag = "end" + tag;
    SS_ASSIGN_OR_RETURN(node->body, parse_body({end_tag}, tag, offset));
    SS_TRY(close_block(end_tag));
    return StmtPtr(std::move(node));
  }

  Result<StmtPtr> parse_loop_control(size_t offset, bool is_break) {
    cur_.next();
    if (loop_depth_ == 0) {
      return errorf("chat template syntax error: '{}' outside of a loop at offset {}",
                    is_break ? "break" : "continue", offset);
    }
    SS_TRY(expect_block_end(is_break ? "break" : "continue"));
    if (is_break) return StmtPtr(std::make_unique<BreakStmt>(offset));
    return StmtPtr(std::make_unique<ContinueStmt>(offset));
  }

  TokenCursor cur_;
  ExprParser expr_;
  int nesting_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Template> parse_template(std::string_view source, const LexOptions& options) {
  auto tokens = lex_template(source, options);
  if (!tokens.ok()) return errorf("chat template syntax error: {}", tokens.message());
  return StmtParser(std::move(tokens).value()).parse();
}

}  // namespace specstack::jinja
