// Helpers shared by every Communicator backend.
#include "tachyon/dist/communicator.h"

#include "tachyon/base/check.h"

namespace tachyon::dist {

size_t reduce_type_size(ReduceType type) {
  switch (type) {
    case ReduceType::kF32: return 4;
    case ReduceType::kBF16: return 2;
    case ReduceType::kF16: return 2;
    case ReduceType::kI32: return 4;
    case ReduceType::kI64: return 8;
  }
  TACHYON_FAIL() << "unknown ReduceType " << static_cast<int>(type);
}

std::string_view reduce_type_name(ReduceType type) {
  switch (type) {
    case ReduceType::kF32: return "f32";
    case ReduceType::kBF16: return "bf16";
    case ReduceType::kF16: return "f16";
    case ReduceType::kI32: return "i32";
    case ReduceType::kI64: return "i64";
  }
  TACHYON_FAIL() << "unknown ReduceType " << static_cast<int>(type);
}

size_t run_offset(std::span<const size_t> counts, int rank) {
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += counts[static_cast<size_t>(r)];
  return offset;
}

size_t gather_offset(const GatherItem& item, int rank) {
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += item.recv_counts[r];
  return offset;
}

size_t gather_total_bytes(const GatherItem& item) {
  size_t total = 0;
  for (size_t count : item.recv_counts) total += count;
  return total;
}

}  // namespace tachyon::dist
