// Helpers for the drain, deadline and auth tests: a POST whose status and
// body come back whatever they are, and an SSE body split into its events.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "server/openai_response.h"

namespace specstack::testing {

struct RawResponse {
  int status = 0;  // 0: no response at all
  std::string body;
  httplib::Headers headers;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

inline RawResponse post_any(int port, const std::string& path, const std::string& body,
                            const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);
  RawResponse out;
  if (auto res = cli.Post(path, headers, body, "application/json")) {
    out.status = res->status;
    out.body = res->body;
    out.headers = res->headers;
  }
  return out;
}

inline RawResponse get_any(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);
  RawResponse out;
  if (auto res = cli.Get(path)) {
    out.status = res->status;
    out.body = res->body;
    out.headers = res->headers;
  }
  return out;
}

// The `data:` payloads of an SSE body in order ("[DONE]" included);
// comments (heartbeats) are skipped.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> payloads;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) payloads.push_back(event.substr(6));
    pos = end + 2;
  }
  return payloads;
}

// A stream cut by the server: the last chunk with choices finishes choice 0
// with `finish_reason` (a usage chunk may follow it), then the error event
// of `error_type`, then [DONE]. Returns the number of chunks with text
// before the end.
inline int expect_cut_stream(const std::string& body, const std::string& finish_reason,
                             const std::string& error_type) {
  const std::vector<std::string> payloads = sse_payloads(body);
  EXPECT_GE(payloads.size(), 3u) << body;
  if (payloads.size() < 3) return 0;
  const size_t n = payloads.size();
  EXPECT_EQ(payloads[n - 1], "[DONE]");
  const OrderedJson error = OrderedJson::parse(payloads[n - 2]);
  EXPECT_EQ(error["error"]["type"], error_type) << payloads[n - 2];
  std::vector<OrderedJson> chunks;  // those with choices, in order
  for (size_t i = 0; i + 2 < n; ++i) {
    OrderedJson chunk = OrderedJson::parse(payloads[i]);
    if (!chunk["choices"].empty()) chunks.push_back(std::move(chunk));
  }
  EXPECT_FALSE(chunks.empty()) << body;
  if (chunks.empty()) return 0;
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], finish_reason) << chunks.back().dump();
  int n_text = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null()) << chunks[i].dump();
    if (!chunks[i]["choices"][0]["text"].get<std::string>().empty()) ++n_text;
  }
  return n_text;
}

}  // namespace specstack::testing
