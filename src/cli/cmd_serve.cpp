// `fp4serve serve`: the OpenAI-compatible HTTP server.
//
//   fp4serve serve -m DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--served-model-name NAME]
//                  [--max-num-seqs N] [--max-model-len N] [--kv-cache-memory 4GiB] [--max-queue N]
//                  [--prefill-chunk N] [--max-body-bytes 32MiB] [--w4a4] [--check-weights] [backend flags]
//
// Order of events: listen (so /health answers 503 while loading), load the checkpoint and pick
// kernels (logged), start the scheduler, log a line with "ready". SIGTERM or SIGINT: stop taking
// requests (503), let running ones finish, exit 0.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cli/app.h"
#include "cli/load_notes.h"
#include "engine/runtime.h"
#include "engine/scheduler.h"
#include "kernels/cli_options.h"
#include "util/byte_size.h"
#include "server/completion_handler.h"
#include "server/http_server.h"
#include "server/request_builder.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace fp4serve::cli {

namespace {

struct ServeArgs {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  std::int64_t max_num_seqs = 16;
  std::int64_t max_model_len = 0;
  std::string kv_cache_memory;
  std::int64_t max_queue = 256;
  std::int64_t prefill_chunk = 256;
  std::string max_body = "32MiB";
  std::string generation_config = "auto";
  bool check_weights = false;
  kernels::BackendOptions backends;
};

// SIGINT/SIGTERM are blocked in every thread and taken by one waiter, so no handler runs in
// the middle of a request and shutdown happens in ordinary code.
class StopSignal {
 public:
  StopSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    std::thread([this] {
      int sig = 0;
      sigwait(&set_, &sig);
      std::lock_guard lock(mu_);
      signal_ = sig;
      if (!ready_) {
        // Nothing to drain yet and loading cannot be interrupted cleanly: leave now.
        std::cerr << "serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << " while loading; exiting\n";
        std::_Exit(0);
      }
      cv_.notify_all();
    }).detach();
  }
  void set_ready() {
    std::lock_guard lock(mu_);
    ready_ = true;
  }
  int wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return signal_ != 0; });
    return signal_;
  }

 private:
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
  bool ready_ = false;
};

std::string default_model_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

void serve(ServeArgs& a) {
  if (a.port < 0 || a.port > 65535) fail("--port must be 0..65535, got ", a.port);
  if (a.max_num_seqs < 1) fail("--max-num-seqs must be >= 1, got ", a.max_num_seqs);
  if (a.max_model_len < 0) fail("--max-model-len must be >= 0 (0 = the model's), got ", a.max_model_len);
  if (a.max_queue < 0) fail("--max-queue must be >= 0, got ", a.max_queue);
  if (a.prefill_chunk < 1) fail("--prefill-chunk must be >= 1, got ", a.prefill_chunk);
  if (a.api_key.empty()) {
    if (const char* env = std::getenv("FP4SERVE_API_KEY")) a.api_key = env;
  }
  engine::SchedulerOptions sched;
  sched.max_num_seqs = a.max_num_seqs;
  sched.max_model_len = a.max_model_len;
  sched.max_queue = a.max_queue;
  sched.prefill_chunk = a.prefill_chunk;
  if (!a.kv_cache_memory.empty()) sched.kv_cache_bytes = parse_byte_size(a.kv_cache_memory, "--kv-cache-memory");

  server::HttpOptions http_options;
  http_options.host = a.host;
  http_options.port = a.port;
  http_options.api_key = a.api_key;
  http_options.max_body_bytes = parse_byte_size(a.max_body, "--max-body-bytes");
  // Each stream holds a connection thread; queued requests wait on theirs.
  http_options.threads = static_cast<std::size_t>(a.max_num_seqs + a.max_queue + 8);

  ::signal(SIGPIPE, SIG_IGN);  // a client that vanished must fail a write, not kill the server
  StopSignal stop;
  server::HttpServer http(http_options);
  http.start();
  std::cerr << "serve: listening on http://" << a.host << ":" << http.port() << " (loading " << a.model_dir << ")\n";

  engine::RuntimeOptions o;
  o.backends = a.backends;
  o.check_weights = a.check_weights;
  engine::Runtime rt = engine::open_runtime(a.model_dir, o);
  print_load_notes(rt, std::cerr);
  const tokenizer::Tokenizer& tok = rt.require_tokenizer();
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  try {
    chat_template = std::make_unique<tokenizer::ChatTemplate>(tokenizer::ChatTemplate::from_model_dir(rt.model_dir));
  } catch (const Error& e) {
    std::cerr << "note: no chat template, /v1/chat/completions answers 400: " << e.what() << "\n";
  }

  engine::Scheduler scheduler(*rt.model, sched, rt.kernels.get());
  server::ModelContext model;
  model.served_name = a.served_model_name.empty() ? default_model_name(a.model_dir) : a.served_model_name;
  model.tokenizer = &tok;
  model.chat_template = chat_template.get();
  model.eos_tokens = rt.stop_tokens;
  model.max_model_len = scheduler.options().max_model_len;
  model.has_reasoning_tags = tok.token_to_id("<think>").has_value() && tok.token_to_id("</think>").has_value();
  if (a.generation_config == "auto") model.sampling_defaults = rt.sampling_defaults;
  std::cerr << "serve: default sampling for fields a request leaves out: "
            << (model.sampling_defaults.empty() ? std::string("OpenAI's (temperature 1, top_p 1)")
                                                : model.sampling_defaults.describe() + " (generation_config.json)")
            << "\n";
  server::CompletionService service(scheduler, model, http.metrics());
  kernels::KernelSelection* selection = rt.kernels.get();
  http.set_ready(&service, [&scheduler] { return scheduler.stats(); }, [selection] { return selection->report(); });
  stop.set_ready();

  const engine::SchedulerStats s = scheduler.stats();
  std::cerr << "serve: ready: model '" << model.served_name << "' on http://" << a.host << ":" << http.port()
            << " (max-num-seqs " << scheduler.options().max_num_seqs << ", max-model-len " << model.max_model_len
            << ", KV cache " << s.kv_blocks_total << " blocks of " << scheduler.options().block_tokens
            << " tokens, load " << rt.load_seconds << " s)" << (a.api_key.empty() ? "" : ", API key required")
            << std::endl;

  const int sig = stop.wait();
  std::cerr << "serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": draining " << scheduler.stats().running
            << " running and " << scheduler.stats().waiting << " queued requests" << std::endl;
  http.begin_drain();
  scheduler.shutdown(/*drain=*/true);
  if (!http.wait_idle(std::chrono::seconds(30))) std::cerr << "serve: some responses were still being written\n";
  http.stop();
  std::cerr << "serve: stopped" << std::endl;
}

}  // namespace

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  auto a = std::make_shared<ServeArgs>();
  cmd->add_option("-m,--model", a->model_dir, "Checkpoint directory (config.json + safetensors + tokenizer)")
      ->required();
  cmd->add_option("--host", a->host, "Address to listen on (0.0.0.0 for every interface)")->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", a->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes (default: env FP4SERVE_API_KEY, else none)");
  cmd->add_option("--served-model-name", a->served_model_name,
                  "The model name clients send and /v1/models lists (default: the -m argument)");
  cmd->add_option("--max-num-seqs", a->max_num_seqs, "Sequences decoded together at most")->capture_default_str();
  cmd->add_option("--max-model-len", a->max_model_len,
                  "Prompt + completion tokens per request (default 0: the model's max_position_embeddings)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", a->kv_cache_memory,
                  "KV cache budget, e.g. 4GiB or 512MB (default: room for max-num-seqs sequences of "
                  "min(max-model-len, 4096) tokens)");
  cmd->add_option("--max-queue", a->max_queue, "Requests waiting beyond this get 503")->capture_default_str();
  cmd->add_option("--prefill-chunk", a->prefill_chunk,
                  "Tokens per scheduler step (decode tokens plus prompt chunks)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", a->max_body, "Larger request bodies get 413")->capture_default_str();
  cmd->add_option("--generation-config", a->generation_config,
                  "auto: requests that leave out temperature/top_p/top_k/min_p/repetition_penalty get the values "
                  "of the model's generation_config.json (as vLLM does); vllm or none: OpenAI's defaults")
      ->check(CLI::IsMember({"auto", "vllm", "none"}))
      ->capture_default_str();
  cmd->add_flag("--check-weights", a->check_weights, "Scan every weight and scale for NaN/Inf before serving");
  kernels::add_backend_options(*cmd, a->backends);
  cmd->callback([a] { serve(*a); });
}

}  // namespace fp4serve::cli
