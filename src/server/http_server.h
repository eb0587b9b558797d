#pragma once
// The HTTP side (cpp-httplib): routes, API key, body limit, readiness and draining.
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models  (API key when set)
//   GET /health   200 once the model is loaded; 503 while loading and while shutting down
//   GET /metrics  Prometheus text
// The server listens before the model loads, so orchestrators can watch /health; completion
// routes answer 503 until set_ready(). Every error body is OpenAI's {"error": {...}} shape.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/scheduler.h"
#include "kernels/selection_report.h"
#include "server/completion_handler.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace fp4serve::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                            // 0: any free port (see HttpServer::port())
  std::string api_key;                        // empty: no authentication
  std::size_t max_body_bytes = 32u << 20;     // larger request bodies get 413
  std::size_t threads = 64;                   // connections served at once (each stream holds one)
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (an Error naming host:port when it cannot) and serves on a background thread.
  void start();
  int port() const { return bound_port_; }

  // From now on completions are served. `stats` is read on every /metrics scrape; `kernels`
  // returns the current kernel report (the run-time guard updates it).
  void set_ready(CompletionService* service, std::function<engine::SchedulerStats()> stats,
                 std::function<kernels::SelectionReport()> kernels);
  // New completion requests get 503 and /health turns 503; running ones go on.
  void begin_drain();
  // Waits until no completion request is being answered; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  void stop();

  Metrics& metrics() { return metrics_; }

 private:
  enum class State { Loading, Ready, Draining };
  void install_routes();
  // RAII count of completion requests being answered (held by streaming providers too).
  std::shared_ptr<void> track_request();

  HttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int bound_port_ = 0;
  Metrics metrics_;

  std::atomic<State> state_{State::Loading};
  CompletionService* service_ = nullptr;
  std::function<engine::SchedulerStats()> stats_;
  std::function<kernels::SelectionReport()> kernels_;

  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::size_t in_flight_ = 0;
};

}  // namespace fp4serve::server
