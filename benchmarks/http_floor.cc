// bench-http-floor: the HTTP floor under ensemble-server's REST figures.
//
//   bench-http-floor --config server.yaml [--port 0] [--threads 2]
//
// A Boost.Beast HTTP/1.1 server on the same asio stack and thread count as
// ensemble-server's HTTP front end that reads each request whole and answers
// it from answers built at start: model metadata for GET /v2/models/{name}
// (what the load generator asks first), and for POST /v2/models/{name}/infer
// the model's outputs for one row, zeros, in the binary tensor extension
// (one JSON header, then the bytes), whatever the request holds. No JSON
// parsing, no decoding, no queueing, no hosts: the cost that HTTP framing
// alone puts on every request, the floor that no server on this transport
// goes below on this machine (benchmarks/run_overhead.sh drives it with
// batch-1 requests). Prints "http listening on ADDR" when ready; stops on
// SIGTERM or SIGINT.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "common/datatype.h"
#include "config/server_config.h"
#include "server/http/http_proto_json.h"
#include "server/kserve/request_codec.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// The answers, by request target; built once, read by every session.
struct Answer {
  std::string body;
  std::string header_length;  // Inference-Header-Content-Length, empty when not binary
};
using Answers = std::map<std::string, Answer, std::less<>>;

// Metadata and a one-row infer answer for every model of fixed output dims.
Answers BuildAnswers(const es::ServerConfig& config) {
  Answers answers;
  for (const auto& [name, model] : config.models) {
    inference::ModelMetadataResponse meta;
    meta.set_name(model.name);
    meta.add_versions("1");
    meta.set_platform("pytorch_libtorch");
    for (const auto& in : model.inputs) es::FillTensorMetadata(model, in, meta.add_inputs());
    for (const auto& out : model.outputs) es::FillTensorMetadata(model, out, meta.add_outputs());
    const std::string path = "/v2/models/" + model.name;
    answers[path] = Answer{es::JsonText(es::ProtoToJson(meta)), ""};

    nlohmann::ordered_json header = {{"model_name", model.name}, {"model_version", "1"}};
    nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
    std::string bytes;
    bool fixed = true;
    for (const auto& out : model.outputs) {
      std::vector<int64_t> shape;
      if (model.batched()) shape.push_back(1);
      size_t elements = 1;
      for (int64_t d : out.dims) {
        fixed = fixed && d >= 0;
        shape.push_back(d);
        elements *= static_cast<size_t>(d < 0 ? 0 : d);
      }
      const size_t n = elements * es::DataTypeSize(out.datatype);
      outputs.push_back({{"name", out.name},
                         {"datatype", es::DataTypeName(out.datatype)},
                         {"shape", shape},
                         {"parameters", {{"binary_data_size", n}}}});
      bytes.append(n, '\0');
    }
    if (!fixed) continue;  // no infer answer: a variable-dims output's size depends on the request
    header["outputs"] = outputs;
    std::string text = es::JsonText(header);
    const std::string length = std::to_string(text.size());
    answers[path + "/infer"] = Answer{text + bytes, length};
  }
  return answers;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Answers* answers) : stream_(std::move(socket)), answers_(answers) {}

  void Read() {
    request_ = {};
    http::async_read(stream_, buffer_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->Answer();
    });
  }

 private:
  void Answer() {
    response_ = {};
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    const auto found = answers_->find(request_.target());
    if (request_.target() == "/v2/health/ready" || request_.target() == "/v2/health/live") {
      response_.result(http::status::ok);
    } else if (found == answers_->end()) {
      response_.result(http::status::not_found);
      response_.body() = R"({"error":"the floor has no answer for this target"})";
    } else {
      response_.result(http::status::ok);
      response_.body() = found->second.body;
      if (!found->second.header_length.empty()) {
        response_.set("Inference-Header-Content-Length", found->second.header_length);
        response_.set(http::field::content_type, "application/octet-stream");
      } else {
        response_.set(http::field::content_type, "application/json");
      }
    }
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec && self->response_.keep_alive()) self->Read();
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  const Answers* answers_;
};

void Accept(tcp::acceptor& acceptor, const Answers& answers) {
  acceptor.async_accept([&acceptor, &answers](beast::error_code ec, tcp::socket socket) {
    if (ec) return;
    socket.set_option(tcp::no_delay(true));
    std::make_shared<Session>(std::move(socket), &answers)->Read();
    Accept(acceptor, answers);
  });
}

}  // namespace

static int Run(int argc, char** argv) {
  std::string config_path;
  int port = 0;
  int threads = 2;  // HttpServerOptions' default, as the router runs it
  CLI::App app{"bench-http-floor: an HTTP server that only answers (the HTTP floor under ensemble-server)"};
  app.add_option("--config", config_path, "the server config whose repository's models it answers for")->required();
  app.add_option("--port", port, "HTTP port on 127.0.0.1 (0: a free one)");
  app.add_option("--threads", threads, "I/O threads (default 2, as ensemble-server's HTTP front end)")
      ->check(CLI::Range(1, 64));
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-http-floor")) return *exit_code;

  auto config = es::LoadServerConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "bench-http-floor: %s\n", config.status().ToString().c_str());
    return 2;
  }
  const Answers answers = BuildAnswers(config.value());

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  asio::io_context io;
  tcp::acceptor acceptor(io);
  beast::error_code ec;
  const tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::fprintf(stderr, "bench-http-floor: cannot listen on 127.0.0.1:%d: %s\n", port, ec.message().c_str());
    return 1;
  }
  Accept(acceptor, answers);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) pool.emplace_back([&io] { io.run(); });
  std::printf("http listening on 127.0.0.1:%d\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  io.stop();
  for (auto& t : pool) t.join();
  return 0;
}

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {  // e.g. a thread that cannot start
    std::fprintf(stderr, "bench-http-floor: %s\n", e.what());
    return 1;
  }
}
