"""compute-sanitizer reports as the tool prints them, for the report-parsing tests."""

MEMCHECK = """========= COMPUTE-SANITIZER
epoch 0
========= Invalid __global__ read of size 4 bytes
=========     at void gather_kernel<float>(const float *, long *, float *)+0x1c0 in gather.cu:12
=========     by thread (3,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""
ASSERT = """========= COMPUTE-SANITIZER
/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422: indexSelectSmallIndex: block: [0,0,0], thread: [0,0,0] \
Assertion `srcIndex < srcSelectDimSize` failed.
========= Program hit cudaErrorAssert (error 710) due to "device-side assert triggered" on CUDA API call to \
cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
========= ERROR SUMMARY: 1 error
"""
