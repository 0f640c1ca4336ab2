#include "cli/connection_flood.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cli/bench_util.h"

namespace specstack::cli {
namespace {

struct Endpoint {
  std::string host;
  std::string port;
};

// "http://127.0.0.1:8000" -> {127.0.0.1, 8000}; only plain http on loopback.
Result<Endpoint> loopback_endpoint(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return errorf("--flood needs an http:// URL, got '{}'", url);
  std::string rest = url.substr(scheme.size());
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  Endpoint e{colon == std::string::npos ? rest : rest.substr(0, colon),
             colon == std::string::npos ? "80" : rest.substr(colon + 1)};
  if (e.host.size() > 2 && e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  const bool loopback = e.host == "localhost" || e.host == "::1" || e.host.rfind("127.", 0) == 0;
  if (!loopback) {
    return errorf(
        "--flood opens thousands of connections: only against this machine "
        "(127.0.0.1, localhost or ::1), not '{}'",
        e.host);
  }
  return e;
}

// Enough descriptors for the flood and the soak's own connections.
Status raise_fd_limit(rlim_t needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return make_error("getrlimit(RLIMIT_NOFILE) failed");
  if (limit.rlim_cur >= needed) return Status::ok_status();
  if (limit.rlim_max < needed) {
    return errorf("--flood needs {} file descriptors; the hard limit is {} (ulimit -Hn)", needed,
                  limit.rlim_max);
  }
  limit.rlim_cur = needed;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return make_error("setrlimit(RLIMIT_NOFILE) failed");
  return Status::ok_status();
}

int connect_to(const Endpoint& e) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* info = nullptr;
  if (getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &info) != 0) return -1;
  int fd = socket(info->ai_family, info->ai_socktype, info->ai_protocol);
  if (fd >= 0 && connect(fd, info->ai_addr, info->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(info);
  return fd;
}

bool send_all(int fd, const std::string& text) {
  return send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

}  // namespace

Result<FloodReport> check_connection_flood(const SoakTarget& target, const std::string& probe_model,
                                           const FloodOptions& options) {
  SS_ASSIGN_OR_RETURN(Endpoint endpoint, loopback_endpoint(target.url));
  SS_TRY(raise_fd_limit(static_cast<rlim_t>(options.idle) + static_cast<rlim_t>(options.slowloris) +
                        256));
  SoakRequest probe;
  probe.body = fmt::format(R"({{"model": "{}", "prompt": "once upon a time", "max_tokens": 1}})",
                           probe_model);
  std::vector<double> before;
  for (int i = 0; i < 3; ++i) {
    SoakOutcome o = send_soak_request(target, probe);
    if (o.status != 200) {
      return errorf("the probe request failed before any flood: status {} {}", o.status, o.problem);
    }
    before.push_back(o.seconds);
  }
  FloodReport report;
  report.probe_before_s = median(before);

  std::vector<int> sockets;
  for (int32_t i = 0; i < options.idle; ++i) {
    const int fd = connect_to(endpoint);
    if (fd < 0) break;
    sockets.push_back(fd);
    ++report.idle_opened;
  }
  std::vector<int> slow;
  for (int32_t i = 0; i < options.slowloris; ++i) {
    const int fd = connect_to(endpoint);
    if (fd < 0) break;
    if (!send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n")) {
      close(fd);
      continue;
    }
    slow.push_back(fd);
    ++report.slowloris_opened;
  }
  // One header line a second keeps each slowloris request "in progress".
  const auto flood_end = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(options.hold_s));
  std::thread trickle([&] {
    int line = 0;
    while (std::chrono::steady_clock::now() < flood_end) {
      for (int fd : slow) (void)send_all(fd, fmt::format("X-Slow-{}: 1\r\n", line));
      ++line;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  // Probes spread over the hold, the first right away.
  while (std::chrono::steady_clock::now() < flood_end) {
    SoakOutcome o = send_soak_request(target, probe);
    if (o.status != 200) ++report.probe_failures;
    report.probe_during_s = std::max(report.probe_during_s, o.seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  trickle.join();
  for (int fd : sockets) close(fd);
  for (int fd : slow) close(fd);
  report.passed = report.probe_failures == 0 &&
                  report.probe_during_s <= report.probe_before_s + options.max_delay_s;
  return report;
}

}  // namespace specstack::cli
