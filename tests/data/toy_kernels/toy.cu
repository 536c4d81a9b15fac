// The toy kernel. On SM 12.x it does not compile, on purpose: the error line (hostile HTML in it)
// is what the report must show, escaped, as the first compiler error.
__global__ void toy_scale(float *x, float s) { x[threadIdx.x] *= s; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#error toy kernels lack SM 12 support <img src="http://127.0.0.1:9/leak.png"> <script>document.title="pwned"</script>
#endif
