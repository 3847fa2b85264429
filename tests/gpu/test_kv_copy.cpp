// The KV row copy between paged caches (kernels/cuda/kv_copy.h) against a host loop that is its
// spec: random source caches (random bytes: the kernel interprets no dtype), random distinct
// block tables on both sides with block sizes that differ (1, 8, 16, 64), plane widths from one
// 16-byte vector to an MLA latent's 1,152 bytes, token counts that end inside a block. The
// destination is poisoned first; its slots no table names must keep the poison.
// Run on the GPU machine: build/tests/gpu_kv_copy (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/kv_copy.h"

namespace tachyon::gpu_test {
namespace {

namespace gpu = kernels::cuda;

// `count` distinct block ids of [0, num_blocks), shuffled.
std::vector<int32_t> random_table(std::mt19937_64& gen, int32_t num_blocks, int64_t count) {
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), gen);
  ids.resize(static_cast<size_t>(count));
  return ids;
}

TEST(KvCopy, CopiesEveryPlanesRowsThroughBothTables) {
  auto gen = rng(21);
  const std::vector<int64_t> row_bytes = {16, 256, 1152, 128, 256};  // 5 planes
  const int32_t num_blocks = 96;
  for (int32_t src_bs : {1, 16, 64}) {
    for (int32_t dst_bs : {8, 16}) {
      for (int64_t tokens : {int64_t{1}, int64_t{37}, int64_t{700}}) {
        if (tokens > int64_t{num_blocks} * std::min(src_bs, dst_bs)) continue;
        SCOPED_TRACE(testing::Message() << "block sizes " << src_bs << " -> " << dst_bs << ", " << tokens << " tokens");
        std::vector<DeviceArray<uint8_t>> src, dst;
        std::vector<std::vector<uint8_t>> src_host;
        std::vector<gpu::KvCopyPlane> planes;
        for (int64_t bytes : row_bytes) {
          std::vector<uint8_t> values(static_cast<size_t>(bytes * num_blocks * src_bs));
          for (auto& v : values) v = static_cast<uint8_t>(gen());
          src.push_back(upload(values));
          src_host.push_back(values);
          dst.emplace_back(static_cast<size_t>(bytes * num_blocks * dst_bs));  // poisoned (0xFF)
        }
        for (size_t p = 0; p < row_bytes.size(); ++p) {
          planes.push_back({reinterpret_cast<const std::byte*>(src[p].data()), reinterpret_cast<std::byte*>(dst[p].data()),
                            row_bytes[p]});
        }
        const std::vector<int32_t> src_table = random_table(gen, num_blocks, (tokens + src_bs - 1) / src_bs);
        const std::vector<int32_t> dst_table = random_table(gen, num_blocks, (tokens + dst_bs - 1) / dst_bs);
        DeviceArray<uint8_t> planes_d(planes.size() * sizeof(gpu::KvCopyPlane));
        std::vector<uint8_t> plane_bytes(planes.size() * sizeof(gpu::KvCopyPlane));
        std::memcpy(plane_bytes.data(), planes.data(), plane_bytes.size());
        planes_d.upload(plane_bytes);
        DeviceArray<int32_t> src_table_d = upload(src_table), dst_table_d = upload(dst_table);
        gpu::copy_kv_rows(reinterpret_cast<const gpu::KvCopyPlane*>(planes_d.data()), planes.data(),
                          static_cast<int32_t>(planes.size()), src_table_d.data(), src_bs, dst_table_d.data(), dst_bs,
                          tokens, nullptr);
        for (size_t p = 0; p < row_bytes.size(); ++p) {
          std::vector<uint8_t> want(static_cast<size_t>(row_bytes[p] * num_blocks * dst_bs), 0xFF);
          for (int64_t t = 0; t < tokens; ++t) {
            const int64_t s = int64_t{src_table[static_cast<size_t>(t / src_bs)]} * src_bs + t % src_bs;
            const int64_t d = int64_t{dst_table[static_cast<size_t>(t / dst_bs)]} * dst_bs + t % dst_bs;
            std::memcpy(want.data() + d * row_bytes[p], src_host[p].data() + s * row_bytes[p],
                        static_cast<size_t>(row_bytes[p]));
          }
          EXPECT_TRUE(dst[p].download() == want) << "plane " << p << " of rows of " << row_bytes[p] << " bytes";
        }
      }
    }
  }
}

TEST(KvCopy, RefusesRowsThatAreNotWholeVectors) {
  gpu::KvCopyPlane plane{nullptr, nullptr, 24};
  EXPECT_NE(error_of([&] { gpu::copy_kv_rows(nullptr, &plane, 1, nullptr, 16, nullptr, 16, 4, nullptr); }), "");
  plane.row_bytes = 32;
  EXPECT_EQ(error_of([&] { gpu::copy_kv_rows(nullptr, &plane, 1, nullptr, 16, nullptr, 16, 0, nullptr); }), "");
}

}  // namespace
}  // namespace tachyon::gpu_test
