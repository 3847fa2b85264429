// safetensors reading (mmap, single file or sharded via model.safetensors.index.json) and
// writing. The format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data;
// offsets are relative to the end of the header. Every malformed input throws tachyon::Error
// naming the file and, where there is one, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tachyon/tensor/dtype.h"

namespace tachyon::model {

// A tensor inside a mapped file: valid while the SafetensorsFile that produced it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // [prod(shape)] elements of dtype, unaligned in general
  std::string file;                 // the file it lives in, for error messages

  int64_t numel() const;
};

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists (each tensor must be in the shard the index names).
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::filesystem::path& model_dir);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorView& at(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

// A tensor to write. `fill` writes its nbytes() bytes (already in `dtype`) when the writer
// reaches it, so a multi-GB checkpoint is produced one tensor at a time.
struct TensorSource {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<void(std::byte* out)> fill;

  size_t nbytes() const;
};

// Writes tensors (sorted by name, as the safetensors library does) into one file.
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, TensorSource>& tensors);

// Writes the tensors into shards of about `shard_bytes` each, named
// model-00001-of-0000N.safetensors, plus model.safetensors.index.json.
void write_safetensors_sharded(const std::filesystem::path& dir, const std::map<std::string, TensorSource>& tensors,
                               size_t shard_bytes);

}  // namespace tachyon::model
