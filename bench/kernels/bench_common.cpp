#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <cublas_v2.h>

#include "tachyon/base/check.h"

namespace tachyon::bench {

using kernels::cuda::bf16;

Stream::Stream() { TACHYON_CUDA_CHECK(cudaStreamCreate(&stream_)); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

cuda::DeviceBuffer upload(const std::vector<int32_t>& values) {
  cuda::DeviceBuffer buffer(values.size() * sizeof(int32_t));
  TACHYON_CUDA_CHECK(cudaMemcpy(buffer.data(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

cuda::DeviceBuffer random_bf16(size_t count, uint64_t seed, float scale) {
  cuda::DeviceBuffer buffer(count * sizeof(bf16));
  fill_random_bf16(buffer.as<bf16>(), count, seed, scale, nullptr);
  return buffer;
}

void poison(const cuda::DeviceBuffer& out) { TACHYON_CUDA_CHECK(cudaMemset(out.data(), 0xFF, out.bytes())); }

cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer buffer(bytes);
  poison(buffer);
  return buffer;
}

void check_all_finite(const cuda::DeviceBuffer& out, size_t count, bool f32, const std::string& what) {
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> host(count);
  if (f32) {
    TACHYON_CUDA_CHECK(cudaMemcpy(host.data(), out.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
  } else {
    std::vector<bf16> raw(count);
    TACHYON_CUDA_CHECK(cudaMemcpy(raw.data(), out.data(), count * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::transform(raw.begin(), raw.end(), host.begin(), [](bf16 x) { return __bfloat162float(x); });
  }
  const size_t bad = std::count_if(host.begin(), host.end(), [](float x) { return !std::isfinite(x); });
  TACHYON_CHECK(bad == 0) << what << ": " << bad << " of " << count << " outputs are not finite";
}

void check_all_finite(const cuda::DeviceBuffer& out, const std::string& what) {
  check_all_finite(out, out.bytes() / sizeof(bf16), /*f32=*/false, what);
}

double time_us(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, const TimingOptions& options,
               double eager_enqueue_us, bool graph) {
  launch(stream);
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraphExec_t exec = nullptr;
  if (graph && !options.eager) {
    cudaGraph_t captured = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch(stream);
    TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
    TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, captured, 0));
    TACHYON_CUDA_CHECK(cudaGraphDestroy(captured));
  }
  const auto run = [&] {
    if (exec != nullptr) {
      TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      launch(stream);
    }
  };
  for (int i = 0; i < options.warmup; ++i) run();
  cudaEvent_t start, stop;
  TACHYON_CUDA_CHECK(cudaEventCreate(&start));
  TACHYON_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < options.repeats; ++i) {
    spin_for_us(exec != nullptr ? 100.0 : eager_enqueue_us, stream);
    TACHYON_CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    TACHYON_CUDA_CHECK(cudaEventRecord(stop, stream));
    TACHYON_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    TACHYON_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  TACHYON_CUDA_CHECK(cudaEventDestroy(start));
  TACHYON_CUDA_CHECK(cudaEventDestroy(stop));
  if (exec != nullptr) TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2];
}

namespace {

// bf16 x bf16 -> bf16 with f32 accumulation, 8192^3: the matrix units' rate through cuBLAS.
double measure_gemm_rate(const TimingOptions& options) {
  constexpr int n = 8192;
  const size_t elems = size_t{n} * n;
  cuda::DeviceBuffer a = random_bf16(elems, 11, 1.0f), b = random_bf16(elems, 12, 1.0f), c(elems * sizeof(bf16));
  cublasHandle_t handle = nullptr;
  TACHYON_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
  Stream stream;
  TACHYON_CHECK(cublasSetStream(handle, stream.get()) == CUBLAS_STATUS_SUCCESS) << "cublasSetStream failed";
  const float alpha = 1.0f, beta = 0.0f;
  const double us = time_us(
      [&](cudaStream_t) {
        const cublasStatus_t status =
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(),
                         CUDA_R_16BF, n, &beta, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        TACHYON_CHECK(status == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx: status " << static_cast<int>(status);
      },
      stream.get(), options, /*eager_enqueue_us=*/510.0, /*graph=*/false);
  cublasDestroy(handle);
  return 2.0 * n * n * double(n) / (us * 1e-6);
}

}  // namespace

Ceilings measure_ceilings(const TimingOptions& options, bool gemm) {
  Ceilings ceilings;
  int device = 0, l2 = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&device));
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  ceilings.l2_bytes = static_cast<size_t>(l2);
  ceilings.copy_bytes_per_s = cuda::measure_copy_bandwidth(size_t{1} << 30, 20);
  if (gemm) ceilings.gemm_flops_per_s = measure_gemm_rate(options);
  return ceilings;
}

void print_ceilings(const Ceilings& ceilings) {
  std::printf("%s: copy %.3f TB/s (1 GiB D2D, read + write)", cuda::current_device_name().c_str(),
              ceilings.copy_bytes_per_s / 1e12);
  if (ceilings.gemm_flops_per_s > 0) {
    std::printf(", bf16 GEMM %.1f TFLOP/s (cuBLAS 8192^3)", ceilings.gemm_flops_per_s / 1e12);
  }
  std::printf(", L2 %.0f MB\n", ceilings.l2_bytes / 1e6);
}

bool wanted(const BenchOptions& options, const std::string& name) {
  return std::find(options.cases.begin(), options.cases.end(), name) != options.cases.end();
}

void add_common_options(CLI::App& app, BenchOptions& options, const std::vector<std::string>& case_names) {
  std::string names;
  for (const std::string& name : case_names) names += (names.empty() ? "" : ", ") + name;
  options.cases = case_names;
  app.add_option("--json", options.json_path, "also write the results as JSON here");
  app.add_option("--cases", options.cases, "any of " + names + " (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(case_names));
  app.add_option("--warmup", options.warmup, "untimed runs first")->default_val(3)->check(CLI::Range(0, 1000));
  app.add_option("--repeats", options.repeats, "timed runs; the median is reported")
      ->default_val(20)
      ->check(CLI::Range(1, 10000));
  app.add_flag("--eager", options.eager, "time plain launches instead of CUDA graph replays");
}

int bench_main(CLI::App& app, BenchOptions& options, int argc, char** argv, const std::function<void()>& run) {
  for (int i = 0; i < argc; ++i) options.command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    app.parse(argc, argv);
    run();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

LayerResult layer_result(const Ceilings& ceilings, const std::string& what, int32_t batch, int32_t context, int layers,
                         double us_per_replay, double bytes, double flops) {
  LayerResult r{what, batch, context, layers, us_per_replay / layers, bytes, flops};
  r.floor_bytes_us = bytes / ceilings.copy_bytes_per_s * 1e6;
  r.floor_flops_us = flops / ceilings.gemm_flops_per_s * 1e6;
  return r;
}

nlohmann::json layer_result_rows(const std::vector<LayerResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const LayerResult& r : results) {
    rows.push_back({{"what", r.what},
                    {"batch", r.batch},
                    {"context", r.context},
                    {"us_median", r.us_median},
                    {"floor_us", r.floor_us()},
                    {"ratio_to_floor", r.us_median / r.floor_us()},
                    {"bytes", r.bytes},
                    {"flops", r.flops},
                    {"floor_bytes_us", r.floor_bytes_us},
                    {"floor_flops_us", r.floor_flops_us},
                    {"layers_per_replay", r.layers}});
  }
  return rows;
}

void write_results_json(const BenchOptions& options, const Ceilings& ceilings, const nlohmann::json& results,
                        const nlohmann::json& extra) {
  if (options.json_path.empty()) return;
  nlohmann::json doc = {{"gpu", cuda::current_device_name()},
                        {"copy_bandwidth_bytes_per_s", ceilings.copy_bytes_per_s},
                        {"l2_bytes", ceilings.l2_bytes},
                        {"warmup", options.warmup},
                        {"repeats", options.repeats},
                        {"cuda_graphs", !options.eager},
                        {"results", results},
                        {"command", options.command_line}};
  if (ceilings.gemm_flops_per_s > 0) doc["gemm_flops_per_s"] = ceilings.gemm_flops_per_s;
  doc.update(extra);
  std::ofstream file(options.json_path);
  TACHYON_CHECK(file.good()) << "cannot write " << options.json_path;
  file << doc.dump(2) << "\n";
  std::printf("wrote %s\n", options.json_path.c_str());
}

}  // namespace tachyon::bench
