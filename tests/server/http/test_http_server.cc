// HttpServer (server/http/http_server.h), the transport alone: a real server on a
// loopback port with a small handler, and raw-socket clients, so each limit
// (body, headers, request deadline, idle keep-alive, connection cap, body
// budget), keep-alive and pipelining, 100-continue, compressed bodies and
// the shutdown wait are checked with small numbers and without model hosts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/http_compression.h"
#include "server/http/http_server.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int Port(const HttpServer& server) { return std::stoi(server.address().substr(server.address().rfind(':') + 1)); }

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

bool Send(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything the server sends until it closes (or `timeout` passes; then
// *closed is false).
std::string ReadAll(int fd, milliseconds timeout, bool* closed = nullptr) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) {
      if (closed) *closed = false;
      return out;
    }
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

// Reads until `count` whole answers (headers + Content-Length body) arrived.
std::string ReadAnswers(int fd, int count, milliseconds timeout = milliseconds(5000)) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  auto complete = [&out, count] {
    size_t pos = 0;
    for (int i = 0; i < count; ++i) {
      const size_t end = out.find("\r\n\r\n", pos);
      if (end == std::string::npos) return false;
      std::smatch m;
      const std::string head = out.substr(pos, end - pos);
      const size_t length = std::regex_search(head, m, std::regex("Content-Length: (\\d+)")) ? std::stoul(m[1]) : 0;
      if (out.size() < end + 4 + length) return false;
      pos = end + 4 + length;
    }
    return true;
  };
  while (!complete() && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::vector<std::string> Statuses(const std::string& text) {
  std::vector<std::string> out;
  const std::regex status("HTTP/1\\.1 (\\d{3}) ");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), status); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

std::string Get(const std::string& path, bool close = false) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + (close ? "Connection: close\r\n" : "") + "\r\n";
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "\r\n" + body;
}

// Answers "METHOD TARGET BODY" (the body as the handler saw it).
void Echo(std::shared_ptr<HttpRequest> request, HttpRoutes::Reply reply) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = request->method + " " + request->target + " " + request->body;
  reply(std::move(r));
}

std::unique_ptr<HttpServer> StartServer(HttpServerOptions options, HttpServer::Handler handler = Echo) {
  options.address = "127.0.0.1";
  options.port = 0;
  auto server = HttpServer::Start(options, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

TEST(HttpServerTest, KeepAliveAndPipelinedRequestsAreAnsweredInOrder) {
  auto server = StartServer({});
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(Send(fd, Post("/p" + std::to_string(i), "b" + std::to_string(i))));
    const std::string answer = ReadAnswers(fd, 1);
    ASSERT_NE(answer.find("POST /p" + std::to_string(i) + " b" + std::to_string(i)), std::string::npos) << answer;
  }
  ASSERT_TRUE(Send(fd, Get("/a") + Post("/b", "xyz") + Get("/c", /*close=*/true)));
  bool closed = false;
  const std::string all = ReadAll(fd, milliseconds(5000), &closed);
  close(fd);
  EXPECT_EQ(Statuses(all), (std::vector<std::string>{"200", "200", "200"})) << all;
  const size_t a = all.find("GET /a "), b = all.find("POST /b xyz"), c = all.find("GET /c ");
  EXPECT_TRUE(a < b && b < c && c != std::string::npos) << all;
  EXPECT_TRUE(closed) << "Connection: close did not close";
}

TEST(HttpServerTest, AnswersMayComeLaterFromAnotherThread) {
  std::vector<std::thread> threads;
  std::mutex mu;
  auto server = StartServer({}, [&](std::shared_ptr<HttpRequest> request, HttpRoutes::Reply reply) {
    std::lock_guard<std::mutex> lock(mu);
    threads.emplace_back([request, reply] {
      std::this_thread::sleep_for(milliseconds(50));
      Echo(request, reply);
    });
  });
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, Get("/later")));
  EXPECT_NE(ReadAnswers(fd, 1).find("GET /later"), std::string::npos);
  close(fd);
  server->Shutdown(milliseconds(1000));
  for (auto& t : threads) t.join();
}

// A client that closes its connection while its request is being handled
// is seen (the request's client_gone flag, which cancels an inference run);
// one that keeps its connection, or sends its next request meanwhile
// (pipelining), is not; and the watch ends with the answer: a close after
// it changes nothing for the request already answered.
TEST(HttpServerTest, AClientClosingWhileItsRequestRunsIsSeen) {
  std::mutex mu;
  std::vector<std::pair<std::shared_ptr<HttpRequest>, HttpRoutes::Reply>> held;
  auto server = StartServer({}, [&](std::shared_ptr<HttpRequest> request, HttpRoutes::Reply reply) {
    std::lock_guard<std::mutex> lock(mu);
    held.emplace_back(std::move(request), std::move(reply));
  });
  ASSERT_TRUE(server);
  auto wait_held = [&](size_t n) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (held.size() >= n) return true;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  };
  auto gone = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return held[i].first->client_gone && held[i].first->client_gone->load();
  };
  auto becomes_gone = [&](size_t i) {
    for (int k = 0; k < 300 && !gone(i); ++k) std::this_thread::sleep_for(milliseconds(10));
    return gone(i);
  };
  const int leaver = Connect(Port(*server));
  const int stayer = Connect(Port(*server));
  const int pipeliner = Connect(Port(*server));
  ASSERT_TRUE(Send(leaver, Get("/leaver")));
  ASSERT_TRUE(wait_held(1));
  ASSERT_TRUE(Send(stayer, Get("/stayer")));
  ASSERT_TRUE(wait_held(2));
  ASSERT_TRUE(Send(pipeliner, Get("/first")));
  ASSERT_TRUE(wait_held(3));
  ASSERT_TRUE(Send(pipeliner, Get("/second")));  // arrives while /first runs
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(gone(0));
  close(leaver);
  EXPECT_TRUE(becomes_gone(0)) << "the closed connection was not seen";
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(gone(1)) << "a client still connected was taken as gone";
  EXPECT_FALSE(gone(2)) << "a pipelined request was taken as the client leaving";
  // Answers still go out: the stayer's, and the pipeliner's two in order.
  HttpRoutes::Reply stay, first;
  {
    std::lock_guard<std::mutex> lock(mu);
    stay = held[1].second;
    first = held[2].second;
  }
  HttpResponse ok;
  stay(ok);
  first(ok);
  EXPECT_EQ(Statuses(ReadAnswers(stayer, 1)), std::vector<std::string>{"200"});
  ASSERT_TRUE(wait_held(4));  // /second, read once /first was answered
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(held[3].first->target, "/second");
  }
  close(stayer);  // after its answer: nothing left to cancel
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(gone(1)) << "a close after the answer was charged to the answered request";
  HttpRoutes::Reply second;
  {
    std::lock_guard<std::mutex> lock(mu);
    second = held[3].second;
  }
  second(ok);
  EXPECT_EQ(Statuses(ReadAnswers(pipeliner, 2)), (std::vector<std::string>{"200", "200"}));
  close(pipeliner);
  // The leaver's late answer is written to a closed connection: no harm.
  HttpRoutes::Reply late;
  {
    std::lock_guard<std::mutex> lock(mu);
    late = held[0].second;
  }
  late(ok);
  server->Shutdown(milliseconds(1000));
  // The held replies keep their sessions alive: they go before the server.
  std::lock_guard<std::mutex> lock(mu);
  held.clear();
}

TEST(HttpServerTest, BodyAndHeaderLimits) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 1024;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  // Announced over the limit: 413 before the body, then closed.
  int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n"));
  bool closed = false;
  std::string answer = ReadAll(fd, milliseconds(5000), &closed);
  close(fd);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"413"}) << answer;
  EXPECT_NE(answer.find("larger than the limit of 1000 bytes"), std::string::npos) << answer;
  EXPECT_TRUE(closed);
  // Exactly the limit is fine.
  fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, Post("/x", std::string(1000, 'a'))));
  EXPECT_EQ(Statuses(ReadAnswers(fd, 1)), std::vector<std::string>{"200"});
  close(fd);
  // Chunked, cut at the limit.
  fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" +
                           std::string(1024, 'c') + "\r\n"));
  answer = ReadAll(fd, milliseconds(5000));
  close(fd);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"413"}) << answer;
  // Headers over the limit: 431.
  fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'h') + "\r\n\r\n"));
  answer = ReadAll(fd, milliseconds(5000));
  close(fd);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"431"}) << answer;
  // Garbage: 400.
  fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, "NOT HTTP\r\n\r\n"));
  answer = ReadAll(fd, milliseconds(5000));
  close(fd);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"400"}) << answer;
}

TEST(HttpServerTest, ASlowSenderIsCutOffAfterTheRequestTimeoutWhateverItsPace) {
  HttpServerOptions options;
  options.request_timeout = milliseconds(600);
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  const auto start = Clock::now();
  ASSERT_TRUE(Send(fd, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  bool cut = false;
  while (Clock::now() - start < milliseconds(5000)) {
    if (!Send(fd, "a")) {
      cut = true;
      break;
    }
    bool closed = false;
    ReadAll(fd, milliseconds(100), &closed);
    if (closed) {
      cut = true;
      break;
    }
  }
  const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  close(fd);
  EXPECT_TRUE(cut) << "a byte every 100 ms kept the connection for 5 s";
  EXPECT_GE(elapsed.count(), 500);
  // Meanwhile others are served.
  const int other = Connect(Port(*server));
  ASSERT_TRUE(Send(other, Get("/ok")));
  EXPECT_EQ(Statuses(ReadAnswers(other, 1)), std::vector<std::string>{"200"});
  close(other);
}

TEST(HttpServerTest, AnIdleKeepAliveConnectionIsClosed) {
  HttpServerOptions options;
  options.idle_timeout = milliseconds(300);
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, Get("/")));
  ASSERT_EQ(Statuses(ReadAnswers(fd, 1)), std::vector<std::string>{"200"});
  bool closed = false;
  ReadAll(fd, milliseconds(5000), &closed);
  close(fd);
  EXPECT_TRUE(closed);
}

TEST(HttpServerTest, ConnectionsPastTheCapAreClosedAtOnce) {
  HttpServerOptions options;
  options.max_connections = 3;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(Connect(Port(*server)));
  std::this_thread::sleep_for(milliseconds(300));
  int closed_count = 0;
  for (int fd : fds) {
    bool closed = false;
    ReadAll(fd, milliseconds(50), &closed);
    closed_count += closed;
  }
  EXPECT_EQ(closed_count, 2);
  ASSERT_TRUE(Send(fds[0], Get("/")));
  EXPECT_EQ(Statuses(ReadAnswers(fds[0], 1)), std::vector<std::string>{"200"});
  for (int fd : fds) close(fd);
}

TEST(HttpServerTest, BodiesBeyondTheBudgetAreRefused429UntilItFrees) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  options.memory_budget_bytes = 1500;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  // The first request's 1000 bytes are reserved from its headers on.
  const int first = Connect(Port(*server));
  ASSERT_TRUE(Send(first, "POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"));
  std::this_thread::sleep_for(milliseconds(200));
  const int second = Connect(Port(*server));
  ASSERT_TRUE(Send(second, Post("/two", std::string(1000, 'b'))));
  const std::string refused = ReadAll(second, milliseconds(5000));
  close(second);
  EXPECT_EQ(Statuses(refused), std::vector<std::string>{"429"}) << refused;
  EXPECT_NE(refused.find("budget of 1500 bytes"), std::string::npos) << refused;
  ASSERT_TRUE(Send(first, std::string(1000, 'a')));
  EXPECT_EQ(Statuses(ReadAnswers(first, 1)), std::vector<std::string>{"200"});
  close(first);
  // Given back once answered: the server frees the reservation when it has
  // finished the first request, which may be just after the client read its
  // answer (on a busy machine, a few ms): a 429 meanwhile is retried, for at
  // most 5 s.
  std::vector<std::string> third_status;
  for (const auto until = std::chrono::steady_clock::now() + milliseconds(5000);
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(milliseconds(10))) {
    const int third = Connect(Port(*server));
    ASSERT_TRUE(Send(third, Post("/three", std::string(1000, 'c'))));
    third_status = Statuses(ReadAnswers(third, 1));
    close(third);
    if (third_status != std::vector<std::string>{"429"}) break;
  }
  EXPECT_EQ(third_status, std::vector<std::string>{"200"}) << "the budget was not given back within 5 s";
}

TEST(HttpServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  auto server = StartServer({});
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  const std::string interim = ReadAll(fd, milliseconds(1000));
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << interim;
  ASSERT_TRUE(Send(fd, "hello"));
  EXPECT_NE(ReadAnswers(fd, 1).find("POST /e hello"), std::string::npos);
  close(fd);
}

std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(HttpServerTest, CompressedBodiesAreInflatedForTheHandler) {
  HttpServerOptions options;
  options.max_body_bytes = 4096;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, Post("/z", Gzip("inflated body"), "Content-Encoding: gzip\r\n")));
  EXPECT_NE(ReadAnswers(fd, 1).find("POST /z inflated body"), std::string::npos);
  ASSERT_TRUE(Send(fd, Post("/z", "x", "Content-Encoding: br\r\n")));
  EXPECT_EQ(Statuses(ReadAnswers(fd, 1)), std::vector<std::string>{"415"});
  ASSERT_TRUE(Send(fd, Post("/z", Gzip(std::string(5000, '0')), "Content-Encoding: gzip\r\n")));
  EXPECT_EQ(Statuses(ReadAnswers(fd, 1)), std::vector<std::string>{"413"});
  close(fd);
}

// Answers are compressed when the request's Accept-Encoding asks (and the
// body is worth it), with Content-Encoding saying how; otherwise plain.
TEST(HttpServerTest, AnswersAreCompressedWhenTheClientAsks) {
  const std::string big(20000, 'a');
  auto server = StartServer({});
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  const std::string echoed = "POST /c " + big;
  auto answer_body = [](const std::string& answer) {
    const size_t end = answer.find("\r\n\r\n");
    return end == std::string::npos ? std::string() : answer.substr(end + 4);
  };
  for (const auto& [accept, want] : std::vector<std::pair<std::string, std::string>>{
           {"gzip, deflate", "gzip"}, {"gzip;q=0, deflate", "deflate"}, {"", ""}, {"br", ""}}) {
    SCOPED_TRACE("Accept-Encoding: " + accept);
    ASSERT_TRUE(Send(fd, Post("/c", big, accept.empty() ? "" : "Accept-Encoding: " + accept + "\r\n")));
    const std::string answer = ReadAnswers(fd, 1);
    ASSERT_EQ(Statuses(answer), std::vector<std::string>{"200"}) << answer.substr(0, 200);
    const std::string body = answer_body(answer);
    if (want.empty()) {
      EXPECT_EQ(answer.find("Content-Encoding"), std::string::npos) << answer.substr(0, 300);
      EXPECT_EQ(body, echoed);
      continue;
    }
    EXPECT_NE(answer.find("Content-Encoding: " + want + "\r\n"), std::string::npos) << answer.substr(0, 300);
    EXPECT_NE(answer.find("Vary: Accept-Encoding\r\n"), std::string::npos) << answer.substr(0, 300);
    EXPECT_LT(body.size(), 1000u);
    StatusOr<std::string> inflated = InflateBody(body, want == "gzip", 1 << 20, [](uint64_t) { return true; });
    ASSERT_TRUE(inflated.ok()) << inflated.status().ToString();
    EXPECT_EQ(*inflated, echoed);
  }
  // A short answer stays plain even when gzip is accepted.
  ASSERT_TRUE(Send(fd, Post("/c", "tiny", "Accept-Encoding: gzip\r\n")));
  const std::string small = ReadAnswers(fd, 1);
  EXPECT_EQ(small.find("Content-Encoding"), std::string::npos) << small;
  EXPECT_EQ(answer_body(small), "POST /c tiny");
  close(fd);
}

TEST(HttpServerTest, AHandlerExceptionIsA500NotACrash) {
  auto server =
      StartServer({}, [](std::shared_ptr<HttpRequest>, HttpRoutes::Reply) { throw std::runtime_error("boom"); });
  ASSERT_TRUE(server);
  const int fd = Connect(Port(*server));
  ASSERT_TRUE(Send(fd, Get("/")));
  const std::string answer = ReadAnswers(fd, 1);
  close(fd);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"500"}) << answer;
  EXPECT_NE(answer.find("boom"), std::string::npos);
}

TEST(HttpServerTest, ShutdownWaitsForAnAnswerInProgressThenCloses) {
  std::atomic<bool> replied{false};
  std::thread late;
  auto server = StartServer({}, [&](std::shared_ptr<HttpRequest> request, HttpRoutes::Reply reply) {
    late = std::thread([request, reply, &replied] {
      std::this_thread::sleep_for(milliseconds(300));
      Echo(request, reply);
      replied = true;
    });
  });
  ASSERT_TRUE(server);
  const int busy = Connect(Port(*server));
  const int idle = Connect(Port(*server));
  ASSERT_TRUE(Send(busy, Get("/slow")));
  std::this_thread::sleep_for(milliseconds(100));
  const auto start = Clock::now();
  server->Shutdown(milliseconds(5000));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  bool closed = false;
  const std::string answer = ReadAll(busy, milliseconds(2000), &closed);
  EXPECT_EQ(Statuses(answer), std::vector<std::string>{"200"}) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_LT(took.count(), 4000) << "Shutdown waited for the idle connection";
  late.join();
  EXPECT_TRUE(replied);
  // No new connections once shut down.
  const int after = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(Port(*server)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(connect(after, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(after);
  close(busy);
  close(idle);
}

}  // namespace
}  // namespace es
