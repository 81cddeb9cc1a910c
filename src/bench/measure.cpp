#include "bench/measure.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <tuple>
#include <vector>

#include "bench/cupti_timer.hpp"
#include "core/json_util.hpp"
#include "device/cublaslt.hpp"
#include "device/driver.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/report.hpp"

namespace kharness::bench {
namespace {

using device::Driver;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of `iterations` timed calls of `work` (after `warmup` untimed ones).
template <typename Work>
double time_median(CUstream s, int warmup, int iterations, Work work) {
  for (int i = 0; i < warmup; ++i) work(s);
  Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
  CuptiTimer timer;
  for (int i = 0; i < iterations; ++i) {
    timer.begin(static_cast<std::uint64_t>(i + 1));
    work(s);
    timer.end();
  }
  std::vector<double> seconds;
  for (const auto& [id, span] : timer.collect()) {
    if (span.seconds() > 0) seconds.push_back(span.seconds());
  }
  return median(seconds);
}

std::string file_safe(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return s;
}

}  // namespace

nlohmann::json to_json(const MeasuredPeaks& m) {
  return {{"schema", "kharness.measured/1"},
          {"gpu", m.gpu},
          {"driver", m.driver},
          {"copy_bandwidth_bytes_per_s", m.copy_bandwidth},
          {"gemm_flops", m.gemm_flops},
          {"notes", m.notes},
          {"measured_at", m.measured_at}};
}

MeasuredPeaks measured_peaks_from_json(const nlohmann::json& j) {
  MeasuredPeaks m;
  m.gpu = j.at("gpu").get<std::string>();
  m.driver = j.at("driver").get<std::string>();
  m.copy_bandwidth = j.at("copy_bandwidth_bytes_per_s").get<double>();
  m.gemm_flops = j.at("gemm_flops").get<std::map<std::string, double>>();
  m.notes = j.value("notes", std::map<std::string, std::string>{});
  m.measured_at = j.value("measured_at", "");
  return m;
}

MeasuredPeaks measure_peaks() {
  EnvironmentReport env = probe_environment();
  if (!env.gpu_ready() || env.gpus.empty())
    throw environment_error("measuring needs a GPU: " + env.driver.reason);
  MeasuredPeaks m;
  m.gpu = env.gpus[0].name;
  m.driver = env.driver.nvidia_version;
  m.measured_at = report::utc_now_iso8601();
  device::PrimaryContext context(0);
  device::Stream stream;
  const Driver& d = Driver::instance();
  d.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0);

  // Copy: 1 GiB, far beyond L2, so every iteration streams from and to DRAM.
  {
    constexpr std::size_t kBytes = std::size_t{1} << 30;
    device::DeviceBuffer src(kBytes), dst(kBytes);
    src.fill(0x5A);
    double t = time_median(stream.get(), 3, 20, [&](CUstream s) {
      d.check(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), kBytes, s), "cuMemcpyDtoDAsync");
    });
    m.copy_bandwidth = t > 0 ? 2.0 * static_cast<double>(kBytes) / t : 0.0;
  }

  // GEMM: 8192^3 through cuBLASLt (2 * 8192^3 FLOP per call).
  constexpr std::int64_t kN = 8192;
  const double flop = 2.0 * static_cast<double>(kN) * kN * kN;
  if (!device::CublasLtGemm::available()) {
    m.notes["gemm"] = "cuBLASLt could not be loaded: no GEMM rate measured";
  } else {
    constexpr std::size_t kElems = static_cast<std::size_t>(kN) * kN;
    device::DeviceBuffer a(kElems * 2), b(kElems * 2), c(kElems * 2);
    // 0x3C00 = 1.0 in float16, 0x3F80 = 1.0 in bfloat16: finite products, no NaN slow paths.
    for (auto [dtype, name, one] : {std::tuple{DType::kFloat16, "float16", 0x3C00u},
                                    std::tuple{DType::kBFloat16, "bfloat16", 0x3F80u}}) {
      try {
        unsigned pattern = one | (one << 16);
        d.check(d.cuMemsetD32Async(a.ptr(), pattern, kElems / 2, stream.get()), "cuMemsetD32Async");
        d.check(d.cuMemsetD32Async(b.ptr(), pattern, kElems / 2, stream.get()), "cuMemsetD32Async");
        device::CublasLtGemm gemm(kN, kN, kN, dtype);
        std::string error;
        double t = time_median(stream.get(), 3, 10, [&](CUstream s) {
          std::string e = gemm.run(a.ptr(), b.ptr(), c.ptr(), s);
          if (!e.empty()) error = e;
        });
        if (!error.empty()) throw std::runtime_error(error);
        m.gemm_flops[name] = t > 0 ? flop / t : 0.0;
      } catch (const std::exception& e) {
        m.notes[std::string("gemm ") + name] = e.what();
      }
    }
  }
  return m;
}

std::filesystem::path measured_peaks_file(const std::string& gpu, const std::string& driver) {
  return default_cache_dir() / "measured" / (file_safe(gpu) + "-" + file_safe(driver) + ".json");
}

void save_measured_peaks(const MeasuredPeaks& m) {
  std::filesystem::path file = measured_peaks_file(m.gpu, m.driver);
  std::filesystem::create_directories(file.parent_path());
  std::filesystem::path tmp = file;
  tmp += fmt::format(".tmp{}", static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp);
    out << json_util::dump(to_json(m), 2) << "\n";
    if (!out) throw Error(ExitCode::kEnvironment, tmp.string(), "cannot write");
  }
  std::filesystem::rename(tmp, file);
}

std::optional<MeasuredPeaks> load_measured_peaks(const std::string& gpu,
                                                 const std::string& driver) {
  std::ifstream in(measured_peaks_file(gpu, driver));
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto j = json_util::parse_or_discarded(text);
  if (j.is_discarded()) return std::nullopt;
  try {
    return measured_peaks_from_json(j);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

GpuSpec with_measured(GpuSpec spec, const MeasuredPeaks& m) {
  if (m.copy_bandwidth > 0) spec.measured_copy_bandwidth = m.copy_bandwidth;
  for (const auto& [dtype, flops] : m.gemm_flops) {
    if (flops > 0) spec.peak_flops[dtype] = flops;
  }
  return spec;
}

}  // namespace kharness::bench
