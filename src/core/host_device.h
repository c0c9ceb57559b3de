#pragma once
// RINGGUARD_HOST_DEVICE marks header functions that host code and CUDA kernels share.
#ifndef RINGGUARD_HOST_DEVICE
#if defined(__CUDACC__)
#define RINGGUARD_HOST_DEVICE __host__ __device__
#else
#define RINGGUARD_HOST_DEVICE
#endif
#endif
