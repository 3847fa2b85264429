#include "tachyon/model/gpu/gpu_workspace.h"

namespace tachyon::model::gpu {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t WorkspacePlan::bytes() const {
  size_t offset = 0;
  for (const Entry& e : entries_) offset = align_up(offset + e.bytes);
  return offset;
}

void WorkspacePlan::assign(void* base) {
  size_t offset = 0;
  for (const Entry& e : entries_) {
    *e.slot = static_cast<std::byte*>(base) + offset;
    offset = align_up(offset + e.bytes);
  }
}

}  // namespace tachyon::model::gpu
