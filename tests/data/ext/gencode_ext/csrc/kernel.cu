// One kernel; which SMs its SASS is for is what the test checks.
__global__ void scale_kernel(float *x, float a) { x[threadIdx.x] *= a; }
