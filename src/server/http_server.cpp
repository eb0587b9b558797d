#include "server/http_server.h"

#include <httplib.h>

#include "server/sse.h"
#include "util/error.h"

namespace fp4serve::server {

namespace {

using json = nlohmann::ordered_json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(to_json_text(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

// Which endpoint a path counts under in fp4serve_requests_total.
std::string endpoint_label(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/models") return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

bool same_secret(const std::string& a, const std::string& b) {
  // No early exit on the first differing byte: the time taken must not reveal the key.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

HttpServer::HttpServer(HttpOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

std::shared_ptr<void> HttpServer::track_request() {
  {
    std::lock_guard lock(mu_);
    ++in_flight_;
  }
  return std::shared_ptr<void>(nullptr, [this](void*) {
    std::lock_guard lock(mu_);
    if (--in_flight_ == 0) idle_cv_.notify_all();
  });
}

void HttpServer::install_routes() {
  httplib::Server& s = *http_;
  const std::size_t threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_keep_alive_timeout(5);
  s.set_read_timeout(30);
  s.set_write_timeout(30);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    std::string given;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
    else if (req.has_header("x-api-key")) given = req.get_header_value("x-api-key");
    if (same_secret(given, options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401,
                             given.empty() ? "Missing API key: send it as 'Authorization: Bearer KEY'"
                                           : "Incorrect API key provided",
                             "invalid_request_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });

  // Errors httplib answers itself (404 unknown route, 413 body too large, 400 bad request line)
  // get the same JSON shape as ours; a response that already has a body keeps it.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    std::string code;
    if (res.status == 404) {
      message = "Not found: " + req.method + " " + req.path;
      code = "not_found";
    } else if (res.status == 413) {
      message = "The request body is too large";
      code = "request_too_large";
    } else {
      message = "HTTP error " + std::to_string(res.status);
    }
    const std::string type = res.status >= 500 ? "server_error" : "invalid_request_error";
    send_json(res, res.status, ApiError(res.status, message, type, "", code).to_json());
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    send_json(res, 500, ApiError(500, message, "server_error").to_json());
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.record_request(endpoint_label(req.path), res.status);
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    switch (state_.load()) {
      case State::Ready:
        send_json(res, 200, {{"status", "ok"}});
        return;
      case State::Loading:
        send_json(res, 503, {{"status", "loading"}});
        return;
      case State::Draining:
        send_json(res, 503, {{"status", "shutting_down"}});
        return;
    }
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::optional<engine::SchedulerStats> stats;
    std::optional<kernels::SelectionReport> report;
    if (state_.load() != State::Loading) {
      stats = stats_();
      report = kernels_();
    }
    res.set_content(metrics_.render(stats ? &*stats : nullptr, report ? &*report : nullptr,
                                    state_.load() == State::Ready),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  auto unavailable = [this](httplib::Response& res) {
    const State st = state_.load();
    if (st == State::Ready) return false;
    send_error(res, ApiError(503, st == State::Loading ? "The model is still loading" : "The server is shutting down",
                             "server_error", "", st == State::Loading ? "model_loading" : "shutting_down"));
    return true;
  };

  s.Get("/v1/models", [this, unavailable](const httplib::Request&, httplib::Response& res) {
    if (unavailable(res)) return;
    send_json(res, 200, service_->models());
  });

  auto completion = [this, unavailable](Endpoint endpoint) {
    return [this, unavailable, endpoint](const httplib::Request& req, httplib::Response& res) {
      if (unavailable(res)) return;
      std::shared_ptr<void> tracked = track_request();
      std::shared_ptr<CompletionJob> job;
      try {
        job = service_->start(endpoint, req.body);
        if (!job->streaming()) {
          send_json(res, 200, job->collect());
          return;
        }
      } catch (const ApiError& e) {
        send_error(res, e);
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      res.set_chunked_content_provider("text/event-stream", [job, tracked](std::size_t, httplib::DataSink& sink) {
        const bool ok = job->stream([&sink](const std::string& bytes) { return sink.write(bytes.data(), bytes.size()); });
        if (ok) sink.done();
        return ok;
      });
    };
  };
  s.Post("/v1/chat/completions", completion(Endpoint::Chat));
  s.Post("/v1/completions", completion(Endpoint::Completions));
}

void HttpServer::start() {
  if (options_.port == 0) {
    bound_port_ = http_->bind_to_any_port(options_.host);
    if (bound_port_ <= 0) fail("cannot listen on ", options_.host, " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      fail("cannot listen on ", options_.host, ":", options_.port, " (in use, or not an address of this machine)");
    }
    bound_port_ = options_.port;
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void HttpServer::set_ready(CompletionService* service, std::function<engine::SchedulerStats()> stats,
                           std::function<kernels::SelectionReport()> kernels) {
  service_ = service;
  stats_ = std::move(stats);
  kernels_ = std::move(kernels);
  state_.store(State::Ready);  // publishes the three above to the handler threads
}

void HttpServer::begin_drain() {
  if (state_.load() == State::Ready) state_.store(State::Draining);
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return in_flight_ == 0; });
}

void HttpServer::stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fp4serve::server
