// The idle stage (server/idle_stage.h, server/staged_server.h): idle and
// slowly-arriving connections hold no worker thread, keep-alive and pipelined
// requests work on one connection, a head that never completes is closed at
// the read timeout, --max-connections is enforced, and stop() does not wait
// for idle connections. Raw sockets, so the test controls every byte.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "early_end_test_util.h"
#include "fake_engine_server.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;

// A client socket; closed with the object.
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Up to `size` bytes; "" at EOF, reset, or after 10 s (a hang, not a timing).
  std::string receive(size_t size = 65536) {
    pollfd fd{fd_, POLLIN, 0};
    if (::poll(&fd, 1, 10'000) <= 0) return "";
    std::string out(size, '\0');
    const ssize_t n = ::recv(fd_, out.data(), size, 0);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }
  // Whether the server has closed the connection (EOF or reset), waiting up to 10 s.
  bool closed_by_server() {
    pollfd fd{fd_, POLLIN, 0};
    if (::poll(&fd, 1, 10'000) <= 0) return false;
    char byte;
    return ::recv(fd_, &byte, 1, MSG_PEEK) <= 0;
  }
  // Still open, with nothing to read.
  bool quiet() const {
    pollfd fd{fd_, POLLIN, 0};
    return ::poll(&fd, 1, 0) == 0;
  }

  // One whole response (Content-Length or chunked): its status line and
  // headers, and its body ("" headers: none came).
  struct Response {
    std::string head;
    std::string body;
    int status() const { return head.size() > 12 ? std::stoi(head.substr(9, 3)) : 0; }
    bool has(const std::string& header) const { return head.find(header) != std::string::npos; }
  };
  Response read_response() {
    Response res;
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      const std::string more = receive();
      if (more.empty()) return res;
      buffer_ += more;
    }
    res.head = buffer_.substr(0, end + 4);
    buffer_.erase(0, end + 4);
    const size_t length_at = res.head.find("Content-Length: ");
    if (length_at != std::string::npos) {
      const size_t length = std::stoul(res.head.substr(length_at + 16));
      while (buffer_.size() < length) {
        const std::string more = receive();
        if (more.empty()) return res;
        buffer_ += more;
      }
      res.body = buffer_.substr(0, length);
      buffer_.erase(0, length);
    } else {  // chunked: the body keeps its chunk framing, up to the last chunk
      while ((end = buffer_.find("\r\n0\r\n\r\n")) == std::string::npos &&
             buffer_.rfind("0\r\n\r\n", 0) != 0) {
        const std::string more = receive();
        if (more.empty()) return res;
        buffer_ += more;
      }
      const size_t stop = end == std::string::npos ? 5 : end + 7;
      res.body = buffer_.substr(0, stop);
      buffer_.erase(0, stop);
    }
    return res;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;  // received, not yet returned
};

const std::string kGetHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

std::string post_request(const std::string& body, const std::string& extra_headers = "") {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class HttpIdleStageTest : public testing::FakeEngineServerTest {
 protected:
  void wait_open_connections(int64_t n) {
    for (int i = 0; i < 5000 && server_->open_connections() != n; ++i) {
      std::this_thread::sleep_for(2ms);
    }
    ASSERT_EQ(server_->open_connections(), n);
  }
};

TEST_F(HttpIdleStageTest, IdleAndTricklingConnectionsHoldNoWorker) {
  n_threads_ = 2;
  HttpServerOptions options;
  // Long timeouts: thread-per-connection, the 2 workers would be held for a
  // minute, far past the client's 10 s; here the request must go through.
  options.read_timeout = 60s;
  options.keep_alive_timeout = 60s;
  start_server(options);
  std::vector<std::unique_ptr<Conn>> flood;
  for (int i = 0; i < 70; ++i) {
    flood.push_back(std::make_unique<Conn>(port_));
    ASSERT_TRUE(flood.back()->connected());
    if (i >= 50) {  // slowloris: a head that stops half-way
      ASSERT_TRUE(flood.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-"));
    }
  }
  wait_open_connections(70);

  const testing::RawResponse res =
      testing::post_any(port_, "/v1/completions", R"({"prompt": "Once upon a time"})");
  EXPECT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(testing::get_any(port_, "/health").status, 200);
  for (auto& conn : flood) EXPECT_TRUE(conn->quiet());  // all still open, unanswered
  // A keep-alive connection between requests holds no worker either.
  Conn first(port_);
  Conn second(port_);
  Conn third(port_);
  for (Conn* conn : {&first, &second, &third}) {
    ASSERT_TRUE(conn->send(kGetHealth));
    EXPECT_EQ(conn->read_response().status(), 200);
  }
}

TEST_F(HttpIdleStageTest, KeepAliveCarriesRequestsAStreamAndClosesAfterTheFifth) {
  HttpServerOptions options;
  options.keep_alive_max_requests = 5;
  start_server(options);
  Conn conn(port_);
  ASSERT_TRUE(conn.send(kGetHealth));
  Conn::Response res = conn.read_response();
  EXPECT_EQ(res.status(), 200);
  EXPECT_TRUE(res.has("Keep-Alive")) << res.head;

  ASSERT_TRUE(conn.send(post_request(R"({"prompt": "Once upon a time", "stream": true})")));
  res = conn.read_response();
  EXPECT_EQ(res.status(), 200);
  EXPECT_TRUE(res.has("text/event-stream")) << res.head;
  EXPECT_NE(res.body.find("data: [DONE]"), std::string::npos) << res.body;

  ASSERT_TRUE(conn.send(post_request(R"({"prompt": "Once upon a time"})")));
  res = conn.read_response();
  EXPECT_EQ(res.status(), 200);
  EXPECT_NE(res.body.find("\"text_completion\""), std::string::npos) << res.body;

  // A keep-alive budget of 5 requests: the 5th is answered "close".
  ASSERT_TRUE(conn.send(kGetHealth));
  EXPECT_EQ(conn.read_response().status(), 200);
  ASSERT_TRUE(conn.send(kGetHealth));
  res = conn.read_response();
  EXPECT_EQ(res.status(), 200);
  EXPECT_TRUE(res.has("Connection: close")) << res.head;
  EXPECT_TRUE(conn.closed_by_server());
  EXPECT_EQ(engine_.submitted().size(), 2u);
}

TEST_F(HttpIdleStageTest, TheDefaultKeepAliveBudgetOutlastsHttplibsFive) {
  start_server({});
  Conn conn(port_);
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(conn.send(kGetHealth));
    const Conn::Response res = conn.read_response();
    EXPECT_EQ(res.status(), 200);
    EXPECT_FALSE(res.has("Connection: close")) << "request " << i << "\n" << res.head;
  }
  EXPECT_TRUE(conn.quiet());  // still open
}

TEST_F(HttpIdleStageTest, PipelinedRequestsAreAnsweredInOrder) {
  start_server({});
  Conn conn(port_);
  // Three requests in one write; the body of the second must not be taken
  // for a head, nor the third lost in a read buffer.
  ASSERT_TRUE(conn.send(kGetHealth + post_request(R"({"prompt": "Once upon a time"})") +
                        "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(conn.read_response().status(), 200);
  const Conn::Response completion = conn.read_response();
  EXPECT_EQ(completion.status(), 200);
  EXPECT_NE(completion.body.find("\"text_completion\""), std::string::npos) << completion.body;
  const Conn::Response models = conn.read_response();
  EXPECT_EQ(models.status(), 200);
  EXPECT_NE(models.body.find("\"tiny\""), std::string::npos) << models.body;
}

TEST_F(HttpIdleStageTest, AHeadInPiecesIsAnsweredOnceComplete) {
  start_server({});
  Conn conn(port_);
  for (const char* piece : {"GET /hea", "lth HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"}) {
    ASSERT_TRUE(conn.send(piece));
    std::this_thread::sleep_for(20ms);
    if (std::string(piece) != "\r\n") {
      EXPECT_TRUE(conn.quiet());  // nothing answered yet
    }
  }
  EXPECT_EQ(conn.read_response().status(), 200);
}

TEST_F(HttpIdleStageTest, HeadsLargerThanThePeekReachHttplib) {
  start_server({});
  // 20 KB of headers, more than the stage peeks at (16 KiB): still a request.
  std::string big = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 400; ++i)
    big += "X-Pad-" + std::to_string(i) + ": " + std::string(40, 'p') + "\r\n";
  Conn conn(port_);
  ASSERT_TRUE(conn.send(big + "\r\n"));
  EXPECT_EQ(conn.read_response().status(), 200);
  // A request line past httplib's 8 KiB limit gets its 414.
  Conn too_long(port_);
  ASSERT_TRUE(too_long.send("GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(too_long.read_response().status(), 414);
}

TEST_F(HttpIdleStageTest, ConnectionCloseIsHonoured) {
  start_server({});
  Conn conn(port_);
  ASSERT_TRUE(conn.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const Conn::Response res = conn.read_response();
  EXPECT_EQ(res.status(), 200);
  EXPECT_TRUE(res.has("Connection: close")) << res.head;
  EXPECT_TRUE(conn.closed_by_server());
  wait_open_connections(0);
}

TEST_F(HttpIdleStageTest, AHeadThatDoesNotCompleteIsClosedAtTheReadTimeout) {
  HttpServerOptions options;
  options.read_timeout = 300ms;
  options.keep_alive_timeout = 60s;
  start_server(options);
  Conn stalled(port_);
  ASSERT_TRUE(stalled.send("GET /health HTTP/1.1\r\nHo"));
  Conn idle(port_);  // no byte sent: governed by the keep-alive timeout
  // One byte every 100 ms, always within the read timeout of the last one
  // (httplib's per-read timeout would wait for ever), never a whole head.
  Conn trickling(port_);
  bool trickle_refused = false;
  for (int i = 0; i < 60 && !trickle_refused; ++i) {
    trickle_refused = !trickling.send(i == 0 ? "G" : "x");
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(trickle_refused);  // 6 s of trickling; the server closed it after 0.3 s
  EXPECT_TRUE(stalled.closed_by_server());
  EXPECT_TRUE(stalled.receive().empty());  // closed, never answered
  EXPECT_TRUE(idle.quiet());
  ASSERT_TRUE(idle.send(kGetHealth));
  EXPECT_EQ(idle.read_response().status(), 200);
}

TEST_F(HttpIdleStageTest, MaxConnectionsIsEnforced) {
  HttpServerOptions options;
  options.max_connections = 3;
  options.keep_alive_timeout = 60s;
  start_server(options);
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<Conn>(port_));
  wait_open_connections(3);

  Conn over(port_);
  over.send(kGetHealth);  // may fail: the server may have closed it already
  const Conn::Response refused = over.read_response();
  // A 503 if it arrived before the close reset the connection; never a 200.
  EXPECT_NE(refused.status(), 200);
  if (refused.status() != 0) {
    EXPECT_EQ(refused.status(), 503);
    EXPECT_NE(refused.body.find("too_many_connections"), std::string::npos) << refused.body;
  }
  EXPECT_TRUE(over.closed_by_server());

  held.pop_back();  // frees a slot once the server sees the close
  wait_open_connections(2);
  Conn again(port_);
  ASSERT_TRUE(again.send(kGetHealth));
  EXPECT_EQ(again.read_response().status(), 200);
}

TEST_F(HttpIdleStageTest, MetricsCountOpenAndIdleConnections) {
  HttpServerOptions options;
  options.keep_alive_timeout = 60s;
  start_server(options);
  Conn idle(port_);
  Conn used(port_);
  ASSERT_TRUE(used.send(kGetHealth));
  EXPECT_EQ(used.read_response().status(), 200);
  Conn partial(port_);
  ASSERT_TRUE(partial.send("GET /metr"));
  wait_open_connections(3);
  // The scrape's own connection is open, and not idle, while it is answered.
  // `used` is back in the stage only once its worker has handed it back,
  // which may be just after its response arrived: scrape until it is.
  std::string body;
  for (int i = 0;
       i < 1000 && body.find("\nspecstack_http_connections_idle 3\n") == std::string::npos; ++i) {
    Conn scrape(port_);
    ASSERT_TRUE(scrape.send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    const Conn::Response res = scrape.read_response();
    ASSERT_EQ(res.status(), 200);
    body = res.body;
    ASSERT_TRUE(scrape.closed_by_server());
    wait_open_connections(3);
  }
  EXPECT_NE(body.find("\nspecstack_http_connections_idle 3\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\nspecstack_http_connections_open 4\n"), std::string::npos) << body;
}

TEST_F(HttpIdleStageTest, StopClosesIdleConnectionsAtOnce) {
  HttpServerOptions options;
  options.read_timeout = 60s;
  options.keep_alive_timeout = 60s;
  start_server(options);
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(std::make_unique<Conn>(port_));
  Conn used(port_);  // idle between requests
  ASSERT_TRUE(used.send(kGetHealth));
  EXPECT_EQ(used.read_response().status(), 200);
  Conn partial(port_);
  ASSERT_TRUE(partial.send("GET /he"));
  wait_open_connections(22);

  // serve() returns within the client's bound, not after the 60 s timeouts.
  auto stopped = std::async(std::launch::async, [this] {
    server_->stop();
    thread_.join();
  });
  ASSERT_EQ(stopped.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(server_->open_connections(), 0);
  for (auto& conn : idle) EXPECT_TRUE(conn->closed_by_server());
  EXPECT_TRUE(used.closed_by_server());
  EXPECT_TRUE(partial.closed_by_server());
}

}  // namespace
}  // namespace specstack
