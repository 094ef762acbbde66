// The CUDA runtime and driver calls the collector does not record by default: queries that
// launch, copy, wait for and allocate nothing. A launch-bound PyTorch loop makes more of them
// than of launches (on the H200, 57% of its API records were cudaGetDevice and 18%
// cuDevicePrimaryCtxGetState: bench/README.md, "The collector on a program that is not
// ours"), and each record costs CUPTI's activity buffer and the writer as much as a launch
// does. No analysis reads them (docs/analyses.md: launches, synchronisation and copies are
// what the host side is read for). `fulcrum capture --gpu-api all` records them too.
//
// Polling calls (cudaStreamQuery, cudaEventQuery) and cudaSetDevice stay recorded: a host
// spinning on a query is how some programs wait.
#pragma once

#include <cupti.h>

#include <array>
#include <string_view>

namespace fulcrum::collect {

struct QuietApi {
    CUpti_CallbackId cbid;
    std::string_view name;  // CUPTI's name of the callback (cuptiGetCallbackName)
};

#define FULCRUM_QUIET_RUNTIME(api, version)                           \
    QuietApi {                                                        \
        CUPTI_RUNTIME_TRACE_CBID_##api##_##version, #api "_" #version \
    }
#define FULCRUM_QUIET_DRIVER(api)           \
    QuietApi {                              \
        CUPTI_DRIVER_TRACE_CBID_##api, #api \
    }

inline constexpr std::array kQuietRuntimeApis = {
    FULCRUM_QUIET_RUNTIME(cudaGetDevice, v3020),
    FULCRUM_QUIET_RUNTIME(cudaGetDeviceCount, v3020),
    FULCRUM_QUIET_RUNTIME(cudaGetDeviceProperties, v3020),
    FULCRUM_QUIET_RUNTIME(cudaGetDeviceProperties, v12000),
    FULCRUM_QUIET_RUNTIME(cudaDeviceGetAttribute, v5000),
    FULCRUM_QUIET_RUNTIME(cudaGetLastError, v3020),
    FULCRUM_QUIET_RUNTIME(cudaPeekAtLastError, v3020),
    FULCRUM_QUIET_RUNTIME(cudaDriverGetVersion, v3020),
    FULCRUM_QUIET_RUNTIME(cudaRuntimeGetVersion, v3020),
    FULCRUM_QUIET_RUNTIME(cudaPointerGetAttributes, v4000),
    FULCRUM_QUIET_RUNTIME(cudaFuncGetAttributes, v3020),
    FULCRUM_QUIET_RUNTIME(cudaStreamIsCapturing, v10000),
    FULCRUM_QUIET_RUNTIME(cudaStreamGetCaptureInfo, v10010),
    FULCRUM_QUIET_RUNTIME(cudaStreamGetCaptureInfo_v2, v11030),
    FULCRUM_QUIET_RUNTIME(cudaGetDriverEntryPoint, v11030),
    FULCRUM_QUIET_RUNTIME(cudaGetDriverEntryPointByVersion, v12050),
};

inline constexpr std::array kQuietDriverApis = {
    FULCRUM_QUIET_DRIVER(cuDevicePrimaryCtxGetState),
    FULCRUM_QUIET_DRIVER(cuCtxGetCurrent),
    FULCRUM_QUIET_DRIVER(cuCtxGetDevice),
    FULCRUM_QUIET_DRIVER(cuDeviceGet),
    FULCRUM_QUIET_DRIVER(cuDeviceGetAttribute),
    FULCRUM_QUIET_DRIVER(cuDeviceGetCount),
    FULCRUM_QUIET_DRIVER(cuDriverGetVersion),
    FULCRUM_QUIET_DRIVER(cuGetProcAddress),
    FULCRUM_QUIET_DRIVER(cuGetProcAddress_v2),
    FULCRUM_QUIET_DRIVER(cuPointerGetAttribute),
    FULCRUM_QUIET_DRIVER(cuPointerGetAttributes),
    FULCRUM_QUIET_DRIVER(cuFuncGetAttribute),
    FULCRUM_QUIET_DRIVER(cuGetErrorString),
    FULCRUM_QUIET_DRIVER(cuGetErrorName),
    FULCRUM_QUIET_DRIVER(cuStreamIsCapturing),
    FULCRUM_QUIET_DRIVER(cuCtxGetStreamPriorityRange),
};

#undef FULCRUM_QUIET_RUNTIME
#undef FULCRUM_QUIET_DRIVER

}  // namespace fulcrum::collect
