#include "server/tool_call_stream.h"

namespace specstack {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// The length of the longest suffix of `text` that is a proper prefix of
// `marker`: text that may still grow into the marker.
size_t marker_prefix_tail(std::string_view text, std::string_view marker) {
  size_t keep = std::min(text.size(), marker.size() - 1);
  while (keep > 0 && marker.substr(0, keep) != text.substr(text.size() - keep)) --keep;
  return keep;
}

// The length of the longest prefix of `bytes` that ends on a whole UTF-8
// character (a fragment must be valid UTF-8 to travel in JSON).
size_t whole_utf8_prefix(std::string_view bytes) {
  size_t n = bytes.size();
  // Look back at most 3 bytes for the lead byte of a character still open.
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

enum class Head { kNeedMore, kNoMatch, kMatched };

// Matches `{"name": "<name>", "<args key>":` (any whitespace between) at the
// start of `text`; on kMatched, `consumed` is the offset of the arguments
// value's first byte, which must be "{".
Head match_head(std::string_view text, ToolCallFormat format, size_t& consumed, std::string& name) {
  size_t p = 0;
  auto skip_space = [&] {
    while (p < text.size() && is_space(text[p])) ++p;
  };
  // Each step: kMatched to go on, otherwise the verdict.
  auto expect = [&](char c) {
    skip_space();
    if (p == text.size()) return Head::kNeedMore;
    return text[p++] == c ? Head::kMatched : Head::kNoMatch;
  };
  // A JSON string literal; its decoded value in `value`.
  auto string_literal = [&](std::string& value) {
    skip_space();
    if (p == text.size()) return Head::kNeedMore;
    if (text[p] != '"') return Head::kNoMatch;
    size_t end = p + 1;
    for (bool escape = false; end < text.size(); ++end) {
      if (escape) {
        escape = false;
      } else if (text[end] == '\\') {
        escape = true;
      } else if (text[end] == '"') {
        break;
      }
    }
    if (end == text.size()) return Head::kNeedMore;
    const OrderedJson parsed = OrderedJson::parse(text.substr(p, end + 1 - p), nullptr, false);
    if (!parsed.is_string()) return Head::kNoMatch;
    value = parsed.get<std::string>();
    p = end + 1;
    return Head::kMatched;
  };
  std::string key;
  const std::string args_key =
      format == ToolCallFormat::kToolCallHermes ? "arguments" : "parameters";
  Head h;
  if ((h = expect('{')) != Head::kMatched) return h;
  if ((h = string_literal(key)) != Head::kMatched) return h;
  if (key != "name") return Head::kNoMatch;
  if ((h = expect(':')) != Head::kMatched) return h;
  if ((h = string_literal(name)) != Head::kMatched) return h;
  if (name.empty()) return Head::kNoMatch;
  if ((h = expect(',')) != Head::kMatched) return h;
  if ((h = string_literal(key)) != Head::kMatched) return h;
  if (key != args_key && key != "arguments") return Head::kNoMatch;
  if ((h = expect(':')) != Head::kMatched) return h;
  skip_space();
  if (p == text.size()) return Head::kNeedMore;
  if (text[p] != '{') return Head::kNoMatch;  // a string holding JSON: parsed at the end
  consumed = p;
  return Head::kMatched;
}

}  // namespace

ToolStreamOutput ToolCallStream::push(std::string_view text) {
  ToolStreamOutput out;
  if (state_ != State::kText) raw_ += text;
  buffer_ += text;
  for (;;) {
    const State before = state_;
    switch (state_) {
      case State::kText:
        step_text(out);
        break;
      case State::kHead:
        step_head(out);
        break;
      case State::kArgs:
        step_args(out);
        break;
      case State::kTail:
        step_tail();
        break;
      case State::kBetween:
        step_between();
        break;
      case State::kHeld:
        held_ += buffer_;
        buffer_.clear();
        break;
    }
    if (state_ == before) break;
  }
  return out;
}

void ToolCallStream::step_text(ToolStreamOutput& out) {
  if (format_ == ToolCallFormat::kToolCallLlamaJson) {
    if (!llama_plain_) {
      const size_t first = buffer_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return;  // undecided: only whitespace yet
      std::string_view rest = std::string_view(buffer_).substr(first);
      if (rest.substr(0, kPythonTag.size()) == kPythonTag) rest.remove_prefix(kPythonTag.size());
      if (rest.empty() && buffer_.size() > first) return;  // the tag alone: undecided
      if (rest.front() == '{') {
        raw_ = buffer_;
        buffer_ = std::string(rest);
        state_ = State::kHead;
        return;
      }
      if (std::string_view(kPythonTag).substr(0, rest.size()) == rest) return;  // "<|py"
      llama_plain_ = true;
    }
    out.content += buffer_;
    buffer_.clear();
    return;
  }
  if (const size_t open = buffer_.find(kHermesOpen); open != std::string::npos) {
    out.content += buffer_.substr(0, open);
    raw_ = buffer_.substr(open);
    buffer_.erase(0, open + kHermesOpen.size());
    state_ = State::kHead;
    return;
  }
  const size_t keep = marker_prefix_tail(buffer_, kHermesOpen);
  out.content += buffer_.substr(0, buffer_.size() - keep);
  buffer_.erase(0, buffer_.size() - keep);
}

void ToolCallStream::step_head(ToolStreamOutput& out) {
  size_t consumed = 0;
  std::string name;
  switch (match_head(buffer_, format_, consumed, name)) {
    case Head::kNeedMore:
      return;
    case Head::kNoMatch:
      // Held from this call's marker on (Hermes) or the whole call (Llama).
      held_ =
          (format_ == ToolCallFormat::kToolCallHermes ? std::string(kHermesOpen) : "") + buffer_;
      buffer_.clear();
      state_ = State::kHeld;
      return;
    case Head::kMatched:
      break;
  }
  calls_.push_back(ToolCall{new_tool_call_id(), name, ""});
  call_open_ = true;
  ToolCallDelta opening;
  opening.index = calls_.size() - 1;
  opening.opening = true;
  opening.id = calls_.back().id;
  opening.name = name;
  out.calls.push_back(std::move(opening));
  buffer_.erase(0, consumed);
  depth_ = 0;
  in_string_ = escape_ = false;
  pending_utf8_.clear();
  state_ = State::kArgs;
}

void ToolCallStream::step_args(ToolStreamOutput& out) {
  size_t i = 0;
  bool closed = false;
  for (; i < buffer_.size() && !closed; ++i) {
    const char c = buffer_[i];
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (is_space(c)) {
      continue;  // compact arguments: whitespace between tokens dropped
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      closed = --depth_ == 0;
    }
    pending_utf8_ += c;
  }
  buffer_.erase(0, i);
  const size_t whole = closed ? pending_utf8_.size() : whole_utf8_prefix(pending_utf8_);
  if (whole > 0) {
    calls_.back().arguments += pending_utf8_.substr(0, whole);
    ToolCallDelta piece;
    piece.index = calls_.size() - 1;
    piece.arguments = pending_utf8_.substr(0, whole);
    pending_utf8_.erase(0, whole);
    // Consecutive fragments of one push travel as one.
    if (!out.calls.empty() && !out.calls.back().opening && out.calls.back().index == piece.index) {
      out.calls.back().arguments += piece.arguments;
    } else {
      out.calls.push_back(std::move(piece));
    }
  }
  if (closed) {
    call_open_ = false;
    state_ = State::kTail;
  }
}

void ToolCallStream::step_tail() {
  if (format_ == ToolCallFormat::kToolCallLlamaJson) {
    buffer_.clear();  // the call object's "}" and whatever follows: not content
    return;
  }
  if (const size_t close = buffer_.find(kHermesClose); close != std::string::npos) {
    buffer_.erase(0, close + kHermesClose.size());
    state_ = State::kBetween;
    return;
  }
  buffer_.erase(0, buffer_.size() - marker_prefix_tail(buffer_, kHermesClose));
}

void ToolCallStream::step_between() {
  if (const size_t open = buffer_.find(kHermesOpen); open != std::string::npos) {
    buffer_.erase(0, open + kHermesOpen.size());
    state_ = State::kHead;
    return;
  }
  buffer_.erase(0, buffer_.size() - marker_prefix_tail(buffer_, kHermesOpen));
}

ToolStreamOutput ToolCallStream::finish() {
  ToolStreamOutput out;
  if (state_ == State::kText) {
    out.content = std::move(buffer_);
  } else if (state_ == State::kHead) {
    held_ = (format_ == ToolCallFormat::kToolCallHermes ? std::string(kHermesOpen) : "") + buffer_;
    state_ = State::kHeld;
  } else if (state_ == State::kArgs && call_open_) {
    calls_.pop_back();  // cut before its arguments closed: not a call
    call_open_ = false;
  }
  if (state_ == State::kHeld) {
    for (ToolCall& call : parse_tool_calls(format_, held_).calls) {
      ToolCallDelta opening;
      opening.index = calls_.size();
      opening.opening = true;
      opening.id = call.id;
      opening.name = call.name;
      out.calls.push_back(std::move(opening));
      ToolCallDelta piece;
      piece.index = calls_.size();
      piece.arguments = call.arguments;
      out.calls.push_back(std::move(piece));
      calls_.push_back(std::move(call));
    }
  }
  if (calls_.empty() && state_ != State::kText) out.content += raw_;
  buffer_.clear();
  held_.clear();
  state_ = State::kText;
  return out;
}

}  // namespace specstack
