// A little CUDA work for the GPU tests: copies both ways, a memset, and cuBLAS kernels on a
// named stream inside a `fulcrum` range of step 7 and micro-batch 2, so that test_collectors can
// check what CUPTI delivers. Exits 3 without a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>

#include <cstdio>
#include <vector>

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "cuda_work: no GPU\n");
        return 3;
    }
    const int n = 512;
    std::vector<float> host(n * n, 1.0f);
    float *a = nullptr, *b = nullptr, *c = nullptr;
    cudaMalloc(&a, sizeof(float) * n * n);
    cudaMalloc(&b, sizeof(float) * n * n);
    cudaMalloc(&c, sizeof(float) * n * n);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    nvtxNameCudaStreamA(stream, "compute stream");
    cublasHandle_t blas;
    cublasCreate(&blas);
    cublasSetStream(blas, stream);

    nvtxDomainHandle_t domain = nvtxDomainCreateA("fulcrum");
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.category = 1;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = "forward step=7 mb=2 stage=0 phase=fwd";
    nvtxDomainRangePushEx(domain, &attributes);
    cudaMemcpyAsync(a, host.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice, stream);
    cudaMemcpyAsync(b, host.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice, stream);
    cudaMemsetAsync(c, 0, sizeof(float) * n * n, stream);
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < 4; ++i) {
        cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
    }
    cudaMemcpyAsync(host.data(), c, sizeof(float) * n * n, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    nvtxDomainRangePop(domain);

    std::printf("c[0] = %.0f\n", host[0]);
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 0;
}
