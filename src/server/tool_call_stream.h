// ToolCallStream: one choice's output split, as it is generated, into message
// content and tool calls, with each call's arguments passed on as their
// tokens arrive (OpenAI's streamed `delta.tool_calls`: an opening delta with
// index, id, type and name, then `function.arguments` fragments).
//
// Per call the stream recognizes the head `{"name": "<name>", "arguments":`
// (Llama: "parameters") and from then on passes the arguments object on byte
// by byte, tracking JSON strings and nesting so it knows where the object
// ends without waiting for a closing marker: nothing is held back inside the
// arguments but an incomplete UTF-8 character. Whitespace outside strings is
// dropped, so the arguments come out compact. Text that may still become an
// opening marker ("<tool_" ...) is held until it cannot.
//
// The whole (non-streamed) message is the same stream's result, so the
// fragments of a stream always reassemble to the non-streamed arguments.
//
// What the stream cannot follow (keys in another order, arguments as a
// string holding JSON, malformed calls: only unconstrained output, since a
// "required", named or "auto" call is grammar-constrained) is held and
// parsed at the end by parse_tool_calls(), leniently: calls found there go out
// whole, and if no call is found at all the held text is content. A call cut
// before its arguments close (max_tokens) is not a call: its text comes back
// as content when no other call completed (whose fragments, streamed, stay).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace specstack {

struct ToolCallDelta {
  size_t index = 0;       // the call's position among the choice's calls
  bool opening = false;   // the first delta of the call: carries id and name
  std::string id;         // opening only
  std::string name;       // opening only
  std::string arguments;  // a fragment ("" on the opening)
};

struct ToolStreamOutput {
  std::string content;  // message content that may go out now
  std::vector<ToolCallDelta> calls;
};

class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}

  // New text of the choice.
  ToolStreamOutput push(std::string_view text);
  // The choice ended: what is left to say.
  ToolStreamOutput finish();
  // After finish(): the calls of the choice (complete ones; arguments as
  // streamed). Empty: the whole output was content.
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class State {
    kText,     // content; Hermes: watching for "<tool_call>"
    kHead,     // a call opened: waiting for its name and arguments key
    kArgs,     // inside the arguments object
    kTail,     // arguments closed: waiting for the call's end
    kBetween,  // Hermes: after a call, before the next "<tool_call>"
    kHeld,     // what the stream cannot follow: held for finish()
  };

  void step_text(ToolStreamOutput& out);
  void step_head(ToolStreamOutput& out);
  void step_args(ToolStreamOutput& out);
  void step_tail();
  void step_between();
  void open_call();

  ToolCallFormat format_;
  State state_ = State::kText;
  std::string buffer_;        // text not yet consumed by the current state
  std::string held_;          // kHeld: everything from the unfollowed call on
  std::string raw_;           // everything from the first call's marker on (content if no call)
  bool llama_plain_ = false;  // Llama: the output did not open with a call
  // The current call's arguments: nesting depth, string and escape state.
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  std::string pending_utf8_;  // an incomplete UTF-8 character of the arguments
  std::vector<ToolCall> calls_;
  bool call_open_ = false;  // calls_.back() is still receiving arguments
};

}  // namespace specstack
