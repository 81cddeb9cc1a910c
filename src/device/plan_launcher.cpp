#include "device/plan_launcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "device/watchdog.hpp"
#include "kharness/numeric.hpp"

namespace kharness::device {
namespace {

const KernelInfo* find_kernel(const std::vector<KernelInfo>& kernels, const std::string& name) {
  for (const auto& k : kernels) {
    if (k.name == name || k.mangled == name) return &k;
  }
  // Plans may name a template without its arguments when that is unambiguous (compile stage rule).
  const KernelInfo* found = nullptr;
  for (const auto& k : kernels) {
    std::string base = k.name.substr(0, k.name.find('<'));
    if (base == name) {
      if (found) return nullptr;
      found = &k;
    }
  }
  return found;
}

bool is_integer_ptx(const std::string& type) {
  return !type.empty() && (type[0] == 'u' || type[0] == 's' || type[0] == 'b');
}

// The bytes of one argument, sized to the kernel's parameter.
std::vector<std::uint8_t> pack_arg(const LaunchArg& arg, const PtxParam& param,
                                   const LaunchEnv& env) {
  std::vector<std::uint8_t> out(param.size, 0);
  auto put_int = [&](std::int64_t v) {
    if (param.size == 4) {
      if (v < std::numeric_limits<std::int32_t>::min() ||
          v > std::numeric_limits<std::int32_t>::max()) {
        throw std::runtime_error(
            fmt::format("'{}' = {} does not fit a 32-bit parameter", arg.text(), v));
      }
      auto v32 = static_cast<std::int32_t>(v);
      std::memcpy(out.data(), &v32, 4);
    } else if (param.size == 8) {
      std::memcpy(out.data(), &v, 8);
    } else {
      throw std::runtime_error(
          fmt::format("'{}' is an integer but the parameter has {} bytes", arg.text(), param.size));
    }
  };
  if (arg.literal) {
    auto bytes = arg.literal->encode();
    if (bytes.size() != param.size) {
      throw std::runtime_error(fmt::format("literal {} has {} bytes, the parameter {}", arg.text(),
                                           bytes.size(), param.size));
    }
    return bytes;
  }
  if (arg.name == "workspace") {
    std::memcpy(out.data(), &env.workspace, std::min<std::size_t>(8, out.size()));
    return out;
  }
  if (auto t = env.tensors.find(arg.name); t != env.tensors.end()) {
    if (param.size != 8)
      throw std::runtime_error(
          fmt::format("tensor '{}' needs an 8-byte pointer parameter", arg.name));
    std::memcpy(out.data(), &t->second, 8);
    return out;
  }
  if (auto s = env.scalars.find(arg.name); s != env.scalars.end()) {
    const TensorSpec* spec = env.definition ? env.definition->find_input(arg.name) : nullptr;
    DType dtype = spec ? spec->dtype : DType::kFloat32;
    if (dtype_size(dtype) != param.size) {
      throw std::runtime_error(fmt::format("scalar '{}' is {} but the parameter has {} bytes",
                                           arg.name, dtype_name(dtype), param.size));
    }
    double value =
        s->second.is_boolean() ? (s->second.get<bool>() ? 1.0 : 0.0) : s->second.get<double>();
    if (is_floating(dtype)) {
      from_double(dtype, value, out.data());
    } else {
      put_int(static_cast<std::int64_t>(value));
    }
    return out;
  }
  if (auto a = env.axes.find(arg.name); a != env.axes.end()) {
    if (!is_integer_ptx(param.type)) {
      throw std::runtime_error(
          fmt::format("axis '{}' passed to a .{} parameter", arg.name, param.type));
    }
    put_int(a->second);
    return out;
  }
  throw std::runtime_error(fmt::format("argument '{}' names nothing the definition has", arg.name));
}

// A declared tensor map, resolved for this workload and encoded over its tensor's (or the
// workspace's) device address: the 128 bytes of the kernel's `const __grid_constant__
// CUtensorMap` parameter. The rules were checked by the compile stage; resolving again here
// keeps the launch itself safe (the map's extent stays inside its buffer).
std::vector<std::uint8_t> encode_tensor_map(const TensorMapSpec& spec, const PtxParam& param,
                                            const LaunchEnv& env, std::int64_t workspace_bytes) {
  if (param.size != sizeof(CUtensorMap)) {
    throw std::runtime_error(fmt::format("tensor map '{}' needs a {}-byte CUtensorMap parameter",
                                         spec.name, sizeof(CUtensorMap)));
  }
  TensorMapGeometry g;
  try {
    g = resolve_tensor_map(spec, *env.definition, env.axes, workspace_bytes);
  } catch (const TensorMapError& e) {
    throw std::runtime_error(fmt::format("tensor map '{}' {}: {}", spec.name, e.field(), e.what()));
  }
  CUdeviceptr base = 0;
  if (spec.tensor == "workspace") {
    base = env.workspace;
  } else if (auto t = env.tensors.find(spec.tensor); t != env.tensors.end()) {
    base = t->second;
  }
  if (base == 0) {
    throw std::runtime_error(fmt::format("tensor map '{}': '{}' has no buffer on this workload",
                                         spec.name, spec.tensor));
  }
  // The enumerators come from the shared description (kharness/tensor_map.hpp), which the
  // exported FlashInfer-Bench launcher writes too.
  const auto type = static_cast<CUtensorMapDataType>(g.encoding.data_type.value);
  const auto interleave = static_cast<CUtensorMapInterleave>(g.encoding.interleave.value);
  const auto swizzle = static_cast<CUtensorMapSwizzle>(g.encoding.swizzle.value);
  const auto l2 = static_cast<CUtensorMapL2promotion>(g.encoding.l2_promotion.value);
  const auto fill = static_cast<CUtensorMapFloatOOBfill>(g.encoding.oob_fill.value);
  const Driver& d = Driver::instance();
  if (d.cuTensorMapEncodeTiled == nullptr) {
    throw std::runtime_error(
        "this driver has no cuTensorMapEncodeTiled (tensor maps need CUDA 12)");
  }
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  CUresult c =
      d.cuTensorMapEncodeTiled(&map, type, g.rank, reinterpret_cast<void*>(base + g.offset_bytes),
                               g.dims.data(), g.strides_bytes.data(), g.box.data(),
                               g.element_strides.data(), interleave, swizzle, l2, fill);
  if (c != CUDA_SUCCESS) {
    throw std::runtime_error(fmt::format("tensor map '{}': cuTensorMapEncodeTiled: {} ({})",
                                         spec.name, d.error_name(c), d.error_string(c)));
  }
  std::vector<std::uint8_t> out(sizeof map);
  std::memcpy(out.data(), &map, sizeof map);
  return out;
}

// The values kharness/tensor_map.hpp gives the driver's enumerators (core has no cuda.h).
static_assert(CU_TENSOR_MAP_DATA_TYPE_UINT8 == 0 && CU_TENSOR_MAP_DATA_TYPE_UINT16 == 1 &&
              CU_TENSOR_MAP_DATA_TYPE_INT32 == 3 && CU_TENSOR_MAP_DATA_TYPE_INT64 == 5 &&
              CU_TENSOR_MAP_DATA_TYPE_FLOAT16 == 6 && CU_TENSOR_MAP_DATA_TYPE_FLOAT32 == 7 &&
              CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == 9);
static_assert(CU_TENSOR_MAP_INTERLEAVE_NONE == 0 && CU_TENSOR_MAP_INTERLEAVE_16B == 1 &&
              CU_TENSOR_MAP_INTERLEAVE_32B == 2);
static_assert(CU_TENSOR_MAP_SWIZZLE_NONE == 0 && CU_TENSOR_MAP_SWIZZLE_32B == 1 &&
              CU_TENSOR_MAP_SWIZZLE_64B == 2 && CU_TENSOR_MAP_SWIZZLE_128B == 3);
static_assert(CU_TENSOR_MAP_L2_PROMOTION_NONE == 0 && CU_TENSOR_MAP_L2_PROMOTION_L2_64B == 1 &&
              CU_TENSOR_MAP_L2_PROMOTION_L2_128B == 2 && CU_TENSOR_MAP_L2_PROMOTION_L2_256B == 3);
static_assert(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE == 0 &&
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA == 1);

unsigned dim(const Expr& e, const Bindings& axes) {
  std::int64_t v = e.eval(axes);
  if (v < 0 || v > std::numeric_limits<unsigned>::max()) {
    throw std::runtime_error(fmt::format("'{}' = {} is out of range", e.text(), v));
  }
  return static_cast<unsigned>(v);
}

}  // namespace

std::string failure_kind_of(const std::string& name) {
  std::string kind = name;
  const std::string prefix = "CUDA_ERROR_";
  if (kind.rfind(prefix, 0) == 0) kind = kind.substr(prefix.size());
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return kind;
}

PlanLauncher::PlanLauncher(const LaunchPlan& plan, const std::vector<KernelInfo>& kernels,
                           const Module& module)
    : plan_(plan) {
  // Every variant's kernels are found now, so that a workload's choice of variant only picks a
  // list: a missing kernel is an error at load, whichever workloads run.
  for (std::size_t v = 0; v < plan.variant_count(); ++v) {
    std::vector<Resolved> list;
    for (const auto& launch : plan.variant_launches(v)) {
      const KernelInfo* info = find_kernel(kernels, launch.kernel);
      if (!info)
        throw std::runtime_error(fmt::format("kernel '{}' is not in the module", launch.kernel));
      if (info->params.size() != launch.args.size()) {
        throw std::runtime_error(fmt::format("kernel '{}' takes {} parameters, the plan passes {}",
                                             launch.kernel, info->params.size(),
                                             launch.args.size()));
      }
      list.push_back({&launch, info, module.function(info->mangled)});
    }
    variants_.push_back(std::move(list));
  }
}

std::string PlanLauncher::kernel_names() const {
  std::vector<std::string> names;
  for (const auto& list : variants_) {
    for (const Resolved& r : list) names.push_back(r.info->mangled);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ",") + n;
  return joined;
}

std::int64_t PlanLauncher::workspace_bytes(const Bindings& axes) const {
  return plan_.workspace_bytes.eval(axes);
}

LaunchOutcome PlanLauncher::launch(const LaunchEnv& env, CUstream stream, bool sync_each) const {
  const Driver& d = Driver::instance();
  std::size_t variant = 0;
  try {
    variant = plan_.variant_for(env.axes);
  } catch (const std::exception& e) {
    LaunchOutcome fail;
    fail.ok = false;
    fail.error_name = "PLAN_ERROR";
    fail.message = fmt::format("variants: no variant can be chosen: {}", e.what());
    return fail;
  }
  const std::vector<Resolved>& launches = variants_[variant];
  for (std::size_t i = 0; i < launches.size(); ++i) {
    const Resolved& r = launches[i];
    LaunchOutcome fail;
    fail.ok = false;
    fail.launch_index = static_cast<int>(i);
    fail.kernel = r.launch->kernel;
    LaunchConfig config;
    std::vector<std::vector<std::uint8_t>> storage;
    std::vector<void*> params;
    try {
      for (int k = 0; k < 3; ++k) {
        config.grid[k] = dim(r.launch->grid[k], env.axes);
        config.block[k] = dim(r.launch->block[k], env.axes);
        config.cluster[k] = dim(r.launch->cluster[k], env.axes);
      }
      config.shared_bytes = dim(r.launch->shared_bytes, env.axes);
      config.pdl = r.launch->pdl;
      config.cooperative = r.launch->cooperative;
      storage.reserve(r.launch->args.size());
      for (std::size_t a = 0; a < r.launch->args.size(); ++a) {
        const LaunchArg& arg = r.launch->args[a];
        if (!arg.tensor_map.empty()) {
          storage.push_back(encode_tensor_map(*r.launch->find_tensor_map(arg.tensor_map),
                                              r.info->params[a], env, workspace_bytes(env.axes)));
        } else {
          storage.push_back(pack_arg(arg, r.info->params[a], env));
        }
      }
    } catch (const std::exception& e) {
      fail.error_name = "PLAN_ERROR";
      fail.message = fmt::format("launch {} ({}): {}", i, r.launch->kernel, e.what());
      return fail;
    }
    for (auto& s : storage) params.push_back(s.data());
    config.stream = stream;
    auto failed = [&](CUresult code, const char* what) {
      fail.code = code;
      fail.error_name = d.error_name(code);
      fail.sticky = is_sticky_error(code);
      fail.message = fmt::format("launch {} ({}): {}: {} ({})", i, r.launch->kernel, what,
                                 fail.error_name, d.error_string(code));
      return fail;
    };
    if (CUresult c = opt_in_dynamic_shared(r.function, config.shared_bytes); c != CUDA_SUCCESS) {
      auto out = failed(
          c, fmt::format("cannot opt into {} bytes of dynamic shared memory", config.shared_bytes)
                 .c_str());
      out.error_name = "CUDA_ERROR_INVALID_VALUE";
      return out;
    }
    // Clusters above the portable 8 blocks (up to 16 on Hopper and Blackwell) must be opted into.
    if (config.cluster[0] * config.cluster[1] * config.cluster[2] > 8) {
      if (CUresult c = d.cuFuncSetAttribute(r.function,
                                            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
          c != CUDA_SUCCESS) {
        return failed(c, "cannot opt into a non-portable cluster size");
      }
    }
    if (config.cooperative) {
      // Every block of a cooperative grid must be resident at once (grid-wide sync): a grid that
      // cannot be is refused here, with the numbers, instead of a driver error after the fact.
      int per_sm = 0;
      unsigned threads = config.block[0] * config.block[1] * config.block[2];
      if (CUresult c = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(
              &per_sm, r.function, static_cast<int>(threads), config.shared_bytes);
          c != CUDA_SUCCESS) {
        return failed(c, "cannot compute the occupancy of a cooperative launch");
      }
      CUdevice dev = 0;
      int sms = 0;
      if (d.cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
        d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
      }
      std::uint64_t blocks = std::uint64_t{config.grid[0]} * config.grid[1] * config.grid[2];
      std::uint64_t resident = static_cast<std::uint64_t>(per_sm) * static_cast<std::uint64_t>(sms);
      if (blocks > resident) {
        fail.error_name = "COOPERATIVE_NOT_RESIDENT";
        fail.code = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
        fail.message = fmt::format(
            "launch {} ({}): a cooperative grid of {} blocks cannot be resident at once: at most "
            "{} ({} per SM x {} SMs at {} threads and {} bytes of shared memory a block)",
            i, r.launch->kernel, blocks, resident, per_sm, sms, threads, config.shared_bytes);
        return fail;
      }
    }
    note_launch(static_cast<int>(i), r.launch->kernel);  // for the watchdog's hang report
    if (CUresult c = launch_kernel(r.function, config, params.data()); c != CUDA_SUCCESS) {
      return failed(c, "launch failed");
    }
    if (sync_each) {
      if (CUresult c = d.cuStreamSynchronize(stream); c != CUDA_SUCCESS)
        return failed(c, "kernel failed");
    }
  }
  return {};
}

}  // namespace kharness::device
