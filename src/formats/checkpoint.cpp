#include "formats/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <thread>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>


#include "formats/safetensors_index.h"
#include "util/error.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A shard named by the index must be a relative path that stays inside the checkpoint folder.
bool is_plain_relative(const fs::path& p) {
  if (p.empty() || p.is_absolute() || p.has_root_name()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

// "./a.safetensors" and "a.safetensors" are the same shard.
std::string shard_path(const std::string& name) { return fs::path(name).lexically_normal().string(); }

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir.string(), ": not a directory (expected a checkpoint folder)");
  Checkpoint ck;
  ck.dir_ = dir;

  if (is_file(dir / kIndexName)) {
    ck.open_sharded(dir / kIndexName);
  } else if (is_file(dir / kSingleName)) {
    ck.add_file(dir / kSingleName);
  } else {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".safetensors" && is_file(entry.path())) found.push_back(entry.path());
    }
    if (ec) fail(dir.string(), ": cannot list: ", ec.message());
    std::sort(found.begin(), found.end());
    if (found.empty()) {
      fail(dir.string(), ": no weights: no ", kIndexName, ", no ", kSingleName, " and no other *.safetensors file");
    }
    if (found.size() > 1) {
      std::string names;
      for (const auto& p : found) names += (names.empty() ? "" : ", ") + p.filename().string();
      fail(dir.string(), ": ", found.size(), " .safetensors files (", names, ") but no ", kIndexName,
           " to say which of them make up the model");
    }
    ck.add_file(found.front());
  }

  if (ck.tensors_.empty()) {
    std::string names;
    for (const auto& f : ck.files_) names += (names.empty() ? "" : ", ") + f->path().string();
    fail(dir.string(), ": no weights: ", names, " hold no tensors");
  }
  return ck;
}

void Checkpoint::add_file(const fs::path& path) {
  std::vector<SafetensorsFile> one;
  one.push_back(SafetensorsFile::open(path));
  add_opened(std::move(one));
}

void Checkpoint::add_opened(std::vector<SafetensorsFile> opened) {
  // Called once, on an empty tree. Sorted once and appended at the tree's end: inserting 370k
  // names one by one (a 397B checkpoint) compared each with ~19 others sharing a long prefix.
  std::vector<std::pair<std::string_view, TensorRef>> all;
  for (SafetensorsFile& f : opened) {
    files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    const SafetensorsFile* file = files_.back().get();
    for (const TensorInfo& info : file->tensors()) all.push_back({info.name, TensorRef{&info, file}});
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i].first == all[i - 1].first) {
      fail("tensor '", all[i].first, "' appears in both ", all[i - 1].second.file->path().string(), " and ",
           all[i].second.file->path().string());
    }
    tensors_.emplace_hint(tensors_.end(), std::string(all[i].first), all[i].second);
  }
}

namespace {

// Parses shard headers on all cores: header parsing is most of what `inspect` spends on a
// sharded checkpoint. Errors are rethrown in shard order, so messages do not depend on timing.
std::vector<SafetensorsFile> open_all(const std::vector<fs::path>& paths) {
  std::vector<std::optional<SafetensorsFile>> opened(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < paths.size();) {
      try {
        opened[i].emplace(SafetensorsFile::open(paths[i]));
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  std::vector<SafetensorsFile> out;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    out.push_back(std::move(*opened[i]));
  }
  return out;
}

}  // namespace

void Checkpoint::open_sharded(const fs::path& index_path) {
  const std::string where = index_path.string();
  const std::vector<WeightMapEntry> entries = read_weight_map(index_path);

  // Hundreds of thousands of tensors name a few dozen shards: check each distinct name once.
  // The entries come in no set order, so each error names the smallest tensor at fault, as a
  // walk in name order would.
  struct Shard {
    std::string first_tensor;  // the smallest tensor mapped to it
    const SafetensorsFile* file = nullptr;
  };
  std::map<std::string, Shard> shards;  // normalized path -> shard, in the order they are opened
  std::unordered_map<std::string_view, Shard*> named;  // as written -> its shard; null: outside the folder
  const WeightMapEntry* outside = nullptr;              // the smallest tensor mapped outside the folder
  for (const WeightMapEntry& e : entries) {
    auto [it, fresh] = named.try_emplace(e.shard, nullptr);
    if (fresh && is_plain_relative(e.shard))
      it->second = &shards.try_emplace(shard_path(e.shard), Shard{e.tensor}).first->second;
    if (it->second == nullptr) {
      if (outside == nullptr || e.tensor < outside->tensor) outside = &e;
    } else if (e.tensor < it->second->first_tensor) {
      it->second->first_tensor = e.tensor;
    }
  }
  if (outside != nullptr) {
    fail(where, ": tensor '", outside->tensor, "': shard '", outside->shard,
         "' is not a file name inside the checkpoint folder");
  }
  std::vector<fs::path> paths;
  for (const auto& [shard, s] : shards) {
    const fs::path path = dir_ / shard;
    if (!is_file(path)) {
      fail(where, ": tensor '", s.first_tensor, "' is mapped to shard '", shard, "', but ", path.string(),
           " does not exist");
    }
    paths.push_back(path);
  }
  add_opened(open_all(paths));
  auto opened = files_.begin();  // in the order of `paths`, so of `shards`
  for (auto& [shard, s] : shards) s.file = (opened++)->get();

  // Where each tensor really is, by hash: one tree lookup per entry cost more than the rest of
  // this check together.
  std::unordered_map<std::string_view, const SafetensorsFile*> found;
  found.reserve(tensors_.size());
  for (const auto& file : files_)
    for (const TensorInfo& t : file->tensors()) found.emplace(t.name, file.get());
  const WeightMapEntry* misplaced = nullptr;  // the smallest tensor not where the index says
  for (const WeightMapEntry& e : entries) {
    auto it = found.find(e.tensor);
    if ((it == found.end() || it->second != named.at(e.shard)->file) &&
        (misplaced == nullptr || e.tensor < misplaced->tensor)) {
      misplaced = &e;
    }
  }
  if (misplaced != nullptr) {
    const SafetensorsFile* expected = named.at(misplaced->shard)->file;
    auto it = found.find(misplaced->tensor);
    if (it == found.end()) {
      fail(where, ": tensor '", misplaced->tensor, "' is mapped to ", expected->path().string(), ", which has no such tensor");
    }
    fail(where, ": tensor '", misplaced->tensor, "' is mapped to ", expected->path().string(),
         ", which has no such tensor (it is in ", it->second->path().string(), ")");
  }
  // Every entry names a distinct tensor that exists, so only a surplus can be unlisted.
  if (tensors_.size() > entries.size()) {
    std::unordered_set<std::string_view> listed;
    for (const WeightMapEntry& e : entries) listed.insert(e.tensor);
    for (const auto& [name, ref] : tensors_) {
      if (!listed.contains(name)) {
        warnings_.push_back(ref.file->path().string() + ": tensor '" + name + "' is not listed in " + where +
                            "; loading it anyway");
      }
    }
  }
}

const TensorRef* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorRef& Checkpoint::at(std::string_view name) const {
  const TensorRef* ref = find(name);
  if (ref == nullptr) fail("tensor '", name, "' not found in checkpoint ", dir_.string());
  return *ref;
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [name, ref] : tensors_) total += ref.info->nbytes();
  return total;
}

}  // namespace fp4serve
