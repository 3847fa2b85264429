// A model named by its Hugging Face hub id (`tachyon serve Qwen/Qwen3-0.6B`) resolves from the
// local Hugging Face cache, the layout huggingface_hub downloads into:
//   <cache>/models--Org--Name/refs/main              the revision main points to
//   <cache>/models--Org--Name/snapshots/<revision>/  the model's files
// with <cache> = $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (huggingface_hub's
// own order). Nothing is downloaded: this machine has no hub to reach, so an id that is not in
// the cache is an error naming every path looked in. A path that exists is always a path.
// Tests: tests/server/test_hub_cache.cpp (ctest -R hub_cache).
#pragma once

#include <filesystem>
#include <string>

namespace tachyon::cli {

struct ResolvedModel {
  std::filesystem::path dir;
  std::string hub_id;  // "" when `given` was a directory
};

// `given` as a directory when it exists; else, when it reads as a hub id (Org/Name), its snapshot
// in the cache. Throws tachyon::Error naming the paths looked in when neither.
ResolvedModel resolve_model(const std::string& given);

// The cache folder per the environment (HF_HUB_CACHE, HF_HOME, HOME).
std::filesystem::path hub_cache_dir();

}  // namespace tachyon::cli
