#include "tachyon/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"

namespace tachyon::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

TensorView parse_entry(const std::string& name, const nlohmann::json& entry, const std::byte* data,
                       uint64_t data_size, const std::string& file) {
  TACHYON_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                entry.contains("data_offsets"))
      << file << ": tensor '" << name << "' header entry needs dtype, shape and data_offsets";
  TensorView view;
  view.name = name;
  view.file = file;
  try {
    view.dtype = dtype_from_name(entry["dtype"].get<std::string>());
  } catch (const Error& e) {
    TACHYON_FAIL() << file << ": tensor '" << name << "': " << e.what();
  }
  for (const auto& dim : entry["shape"]) {
    TACHYON_CHECK(dim.is_number_integer() && dim.get<int64_t>() >= 0)
        << file << ": tensor '" << name << "' has a bad shape " << entry["shape"].dump();
    view.shape.push_back(dim.get<int64_t>());
  }
  const auto& offsets = entry["data_offsets"];
  TACHYON_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                offsets[1].is_number_unsigned())
      << file << ": tensor '" << name << "' has bad data_offsets " << offsets.dump();
  uint64_t begin = offsets[0].get<uint64_t>();
  uint64_t end = offsets[1].get<uint64_t>();
  TACHYON_CHECK(begin <= end) << file << ": tensor '" << name << "' has data_offsets end before begin";
  TACHYON_CHECK(end <= data_size) << file << ": truncated file: tensor '" << name << "' ends at byte " << end
                                  << " of the data section but the file holds only " << data_size;
  uint64_t expected = static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype);
  TACHYON_CHECK(end - begin == expected)
      << file << ": tensor '" << name << "' " << dtype_name(view.dtype) << format_shape(view.shape) << " needs "
      << expected << " bytes but data_offsets span " << (end - begin);
  view.data = data + begin;
  return view;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  int fd = ::open(file.c_str(), O_RDONLY);
  TACHYON_CHECK(fd >= 0) << "cannot open " << file << ": " << std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    TACHYON_FAIL() << "cannot stat " << file;
  }
  mapping_size_ = static_cast<size_t>(st.st_size);
  if (mapping_size_ < 8) {
    ::close(fd);
    TACHYON_FAIL() << file << ": truncated file: " << mapping_size_ << " bytes, not even the 8-byte header length";
  }
  mapping_ = ::mmap(nullptr, mapping_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  TACHYON_CHECK(mapping_ != MAP_FAILED) << "cannot mmap " << file << ": " << std::strerror(errno);

  try {
    const auto* bytes = static_cast<const std::byte*>(mapping_);
    uint64_t header_size = 0;
    std::memcpy(&header_size, bytes, 8);  // little-endian on every host we build for
    TACHYON_CHECK(header_size <= kMaxHeaderBytes) << file << ": bad header length " << header_size;
    TACHYON_CHECK(8 + header_size <= mapping_size_)
        << file << ": truncated file: header of " << header_size << " bytes but the file holds "
        << mapping_size_;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                     reinterpret_cast<const char*>(bytes + 8 + header_size));
    } catch (const nlohmann::json::parse_error& e) {
      TACHYON_FAIL() << file << ": bad JSON header: " << e.what();
    }
    TACHYON_CHECK(header.is_object()) << file << ": bad JSON header: not an object";
    const std::byte* data = bytes + 8 + header_size;
    uint64_t data_size = mapping_size_ - 8 - header_size;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      tensors_.emplace(name, parse_entry(name, entry, data, data_size, file));
    }
  } catch (...) {
    ::munmap(mapping_, mapping_size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& model_dir) {
  auto index_path = model_dir / "model.safetensors.index.json";
  auto single_path = model_dir / "model.safetensors";
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index = read_json_file(index_path);
    TACHYON_CHECK(index.contains("weight_map") && index["weight_map"].is_object())
        << index_path.string() << ": missing 'weight_map'";
    std::map<std::string, SafetensorsFile*> by_shard;
    for (const auto& [tensor, shard_json] : index["weight_map"].items()) {
      std::string shard = shard_json.get<std::string>();
      if (!by_shard.count(shard)) {
        files_.push_back(std::make_unique<SafetensorsFile>(model_dir / shard));
        by_shard[shard] = files_.back().get();
      }
      const auto& shard_tensors = by_shard[shard]->tensors();
      auto it = shard_tensors.find(tensor);
      TACHYON_CHECK(it != shard_tensors.end())
          << index_path.string() << " says tensor '" << tensor << "' is in " << shard << " but it is not there";
      tensors_.emplace(tensor, it->second);
    }
    for (const auto& file : files_) {
      for (const auto& [name, view] : file->tensors()) {
        TACHYON_CHECK(tensors_.count(name))
            << file->path().string() << ": tensor '" << name << "' is not listed in " << index_path.string();
      }
    }
  } else {
    TACHYON_CHECK(std::filesystem::exists(single_path))
        << "no model.safetensors or model.safetensors.index.json in " << model_dir.string();
    files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    tensors_ = files_.back()->tensors();
  }
}

const TensorView& SafetensorsCheckpoint::at(const std::string& name) const {
  auto it = tensors_.find(name);
  TACHYON_CHECK(it != tensors_.end()) << "missing tensor '" << name << "' in the checkpoint";
  return it->second;
}

size_t TensorSource::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, TensorSource>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    header[name] = {{"dtype", dtype_name(tensor.dtype)},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TACHYON_CHECK(out.good()) << "cannot create " << path.string();
  uint64_t header_size = header_text.size();
  out.write(reinterpret_cast<const char*>(&header_size), 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  std::vector<std::byte> buffer;
  for (const auto& [name, tensor] : tensors) {
    buffer.assign(tensor.nbytes(), std::byte{0});
    tensor.fill(buffer.data());
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
  }
  TACHYON_CHECK(out.good()) << "cannot write " << path.string();
}

void write_safetensors_sharded(const std::filesystem::path& dir, const std::map<std::string, TensorSource>& tensors,
                               size_t shard_bytes) {
  std::vector<std::map<std::string, TensorSource>> shards(1);
  size_t current = 0;
  for (const auto& [name, tensor] : tensors) {
    if (current > 0 && current + tensor.nbytes() > shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().emplace(name, tensor);
    current += tensor.nbytes();
  }
  nlohmann::json weight_map = nlohmann::json::object();
  size_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string shard_name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors(dir / shard_name, shards[i]);
    for (const auto& [name, tensor] : shards[i]) {
      weight_map[name] = shard_name;
      total += tensor.nbytes();
    }
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file(dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace tachyon::model
