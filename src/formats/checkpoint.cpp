#include "formats/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <thread>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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

json read_index(const fs::path& index_path) {
  const MappedFile file(index_path);
  const auto bytes = file.bytes();
  try {
    return json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    fail(index_path.string(), ": not valid JSON: ", e.what());
  }
}

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

void Checkpoint::add_file(const fs::path& path) { add_opened(SafetensorsFile::open(path)); }

void Checkpoint::add_opened(SafetensorsFile opened) {
  files_.push_back(std::make_unique<SafetensorsFile>(std::move(opened)));
  const SafetensorsFile* file = files_.back().get();
  for (const auto& info : file->tensors()) {
    auto [it, inserted] = tensors_.try_emplace(info.name, TensorRef{&info, file});
    if (!inserted) {
      fail("tensor '", info.name, "' appears in both ", it->second.file->path().string(), " and ",
           file->path().string());
    }
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
  const json index = read_index(index_path);
  if (!index.is_object()) fail(where, ": not a JSON object (it is ", index.type_name(), ")");
  auto wm = index.find("weight_map");
  if (wm == index.end()) fail(where, ": has no 'weight_map'");
  if (!wm->is_object()) fail(where, ": 'weight_map' is not an object (it is ", wm->type_name(), ")");
  if (wm->empty()) fail(where, ": 'weight_map' is empty: no weights");

  // Tens of thousands of tensors name a handful of shards: check each distinct name once.
  std::map<std::string, std::string> normalized;  // shard name as written -> normalized path
  std::map<std::string, std::string> shards;      // normalized path -> first tensor mapped to it
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      fail(where, ": tensor '", tensor, "': weight_map value is not a file name (it is ", shard.dump(), ")");
    }
    const auto& name = shard.get_ref<const std::string&>();
    auto [it, fresh] = normalized.try_emplace(name);
    if (fresh) {
      if (!is_plain_relative(name)) {
        fail(where, ": tensor '", tensor, "': shard '", name, "' is not a file name inside the checkpoint folder");
      }
      it->second = shard_path(name);
    }
    shards.try_emplace(it->second, tensor);
  }
  std::vector<fs::path> paths;
  for (const auto& [shard, first_tensor] : shards) {
    const fs::path path = dir_ / shard;
    if (!is_file(path)) {
      fail(where, ": tensor '", first_tensor, "' is mapped to shard '", shard, "', but ", path.string(),
           " does not exist");
    }
    paths.push_back(path);
  }
  std::map<std::string, const SafetensorsFile*> file_of;  // normalized shard path -> its file
  auto opened = open_all(paths);
  auto shard_it = shards.begin();
  for (auto& file : opened) {
    add_opened(std::move(file));
    file_of[(shard_it++)->first] = files_.back().get();
  }

  for (const auto& [tensor, shard] : wm->items()) {
    const SafetensorsFile* expected = file_of.at(normalized.at(shard.get_ref<const std::string&>()));
    auto it = tensors_.find(tensor);
    if (it == tensors_.end()) {
      fail(where, ": tensor '", tensor, "' is mapped to ", expected->path().string(), ", which has no such tensor");
    }
    if (it->second.file != expected) {
      fail(where, ": tensor '", tensor, "' is mapped to ", expected->path().string(),
           ", which has no such tensor (it is in ", it->second.file->path().string(), ")");
    }
  }
  for (const auto& [name, ref] : tensors_) {
    if (!wm->contains(name)) {
      warnings_.push_back(ref.file->path().string() + ": tensor '" + name + "' is not listed in " + where +
                          "; loading it anyway");
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
