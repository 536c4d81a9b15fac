// One kernel; the SASS it compiles to is what fleetctl checks.
__global__ void add_kernel(int *x, int a) { x[threadIdx.x] += a; }

extern "C" int tiny_cuda_version(void) { return __CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__; }
