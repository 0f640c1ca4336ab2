#include "cli/soak_client.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

namespace specstack::cli {
namespace {

httplib::Client make_client(const SoakTarget& target) {
  httplib::Client client(target.url);
  client.set_connection_timeout(target.timeout_s, 0);
  client.set_read_timeout(target.timeout_s, 0);
  client.set_write_timeout(target.timeout_s, 0);
  client.set_keep_alive(false);  // every request on its own connection, as most clients do
  if (!target.api_key.empty()) client.set_bearer_token_auth(target.api_key);
  return client;
}

// A finished non-streamed 200 must be a completion with one choice per n.
std::string check_completion(const std::string& body, const std::string& request_body) {
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return "200 with a body that is not JSON";
  const auto choices = json.find("choices");
  if (choices == json.end() || !choices->is_array()) return "200 without choices";
  const auto request = nlohmann::json::parse(request_body, nullptr, false);
  const size_t n = request.is_object() ? request.value("n", 1) : 1;
  if (choices->size() != n) return "200 with " + std::to_string(choices->size()) + " choices";
  return "";
}

}  // namespace

SoakOutcome send_soak_request(const SoakTarget& target, const SoakRequest& request) {
  SoakOutcome outcome;
  httplib::Client client = make_client(target);
  httplib::Request req;
  req.method = "POST";
  req.path = request.path;
  req.body = request.body;
  req.set_header("Content-Type", "application/json");
  std::string received;
  req.response_handler = [&](const httplib::Response& res) {
    outcome.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    // Closing the connection is what a client that goes away does; returning
    // false makes httplib drop the socket.
    if (request.cancel_after_bytes > 0 && outcome.status == 200 &&
        static_cast<int64_t>(received.size()) >= request.cancel_after_bytes) {
      outcome.cancelled = true;
      return false;
    }
    return true;
  };
  const auto start = std::chrono::steady_clock::now();
  httplib::Result result = client.send(req);
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (outcome.cancelled) return outcome;
  if (!result) {
    outcome.status = 0;
    outcome.problem = "transport error: " + httplib::to_string(result.error());
    return outcome;
  }
  outcome.status = result->status;
  if (outcome.status != 200) return outcome;
  if (request.stream) {
    // A stream that ran to its end says so; one that stopped short (a
    // server that dropped it) does not.
    if (received.find("data: [DONE]") == std::string::npos) {
      outcome.problem = "stream ended without [DONE]";
    }
    if (received.find("data: {\"error\"") != std::string::npos) {
      outcome.problem = "error event in stream";
    }
    return outcome;
  }
  outcome.problem = check_completion(received, request.body);
  return outcome;
}

Result<std::map<std::string, double>> scrape_metrics(const SoakTarget& target) {
  httplib::Client client = make_client(target);
  auto res = client.Get("/metrics");
  if (!res) {
    return errorf("GET {}/metrics: {}", target.url, httplib::to_string(res.error()));
  }
  if (res->status != 200) return errorf("GET {}/metrics: status {}", target.url, res->status);
  std::map<std::string, double> values;
  std::istringstream lines(res->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string name = line.substr(0, space);
    if (name.find('{') != std::string::npos) continue;  // labelled series: not needed here
    try {
      values[name] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      return errorf("GET {}/metrics: unreadable line '{}'", target.url, line);
    }
  }
  return values;
}

Result<std::string> served_model(const SoakTarget& target) {
  httplib::Client client = make_client(target);
  auto res = client.Get("/v1/models");
  if (!res) return errorf("GET {}/v1/models: {}", target.url, httplib::to_string(res.error()));
  if (res->status != 200) {
    return errorf("GET {}/v1/models: status {}: {}", target.url, res->status, res->body);
  }
  auto json = nlohmann::json::parse(res->body, nullptr, false);
  if (json.is_discarded() || !json.contains("data") || !json["data"].is_array() ||
      json["data"].empty() || !json["data"][0].contains("id")) {
    return errorf("GET {}/v1/models: no model in the answer", target.url);
  }
  return json["data"][0]["id"].get<std::string>();
}

}  // namespace specstack::cli
