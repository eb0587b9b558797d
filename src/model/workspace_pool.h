#pragma once
// Scratch buffers for model forward calls, kept between calls. A call borrows an idle workspace
// (or makes one) and gives it back when it returns, so concurrent calls never share buffers and
// a steady-state decode step allocates nothing: buffers only grow (see `grown`).
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace fp4serve {

// v's storage with room for n elements; allocates only when v has never been this large.
template <typename T>
T* grown(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

template <typename Workspace>
class WorkspacePool {
 public:
  class Lease {
   public:
    explicit Lease(const WorkspacePool& pool) : pool_(pool) {
      std::lock_guard lock(pool_.mu_);
      if (pool_.idle_.empty()) {
        ws_ = std::make_unique<Workspace>();
      } else {
        ws_ = std::move(pool_.idle_.back());
        pool_.idle_.pop_back();
      }
    }
    ~Lease() {
      std::lock_guard lock(pool_.mu_);
      pool_.idle_.push_back(std::move(ws_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace& operator*() const { return *ws_; }

   private:
    const WorkspacePool& pool_;
    std::unique_ptr<Workspace> ws_;
  };

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Workspace>> idle_;
};

}  // namespace fp4serve
