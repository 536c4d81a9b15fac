// One kernel using a fetched header; the SASS it compiles to is what fleetctl checks.
#include "depa.h"
__global__ void add_kernel(int *x) { x[threadIdx.x] += DEPA_VALUE; }
