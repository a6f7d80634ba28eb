# Kernel sources: number formats, the kernel tables and the forward-pass ops.
# Included by src/CMakeLists.txt before the library is defined.
#
# The SIMD files get their -m flags here, file by file: nothing else in the
# library is compiled for more than baseline x86-64, and kernels.c only calls
# into these files after checking the CPU (see kernels.h).

set(TKV_KERNEL_SOURCES
  compute/quant.c
  compute/quant_grids.c
  compute/quant_iq1.c
  compute/quant_iq2.c
  compute/quant_iq3.c
  compute/repack.c
  compute/kernels.c
  compute/kernels_scalar.c
  compute/kernels_avx2.c
  compute/kernels_avx2_iq1.c
  compute/kernels_avx2_iq3.c
  compute/kernels_avx2_iq2.c
  compute/kernels_avx512.c
  compute/gemm_avx2.c
  compute/gemm_avx512.c
  compute/gemm_q4_0_avx2.c
  compute/gemm_q4_0_avx512.c
  compute/gemm_q5_avx2.c
  compute/gemm_q5_avx512.c
  compute/gemm_q23k_avx2.c
  compute/gemm_q23k_avx512.c
  compute/gemm_float_avx512.c
  compute/gemm_float_avx2.c
  compute/gemm_iq4nl_avx512.c
  compute/gemm_iq4nl_avx2.c
  compute/gemm_iq3_avx512.c
  compute/gemm_iq3_avx2.c
  compute/gemm_iq2_avx2.c
  compute/ops.c
)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set_source_files_properties(compute/kernels_avx2.c compute/kernels_avx2_iq1.c compute/kernels_avx2_iq3.c compute/kernels_avx2_iq2.c PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(compute/kernels_avx512.c compute/gemm_avx512.c compute/gemm_q4_0_avx512.c compute/gemm_q5_avx512.c
    compute/gemm_q23k_avx512.c compute/gemm_iq4nl_avx512.c compute/gemm_iq3_avx512.c compute/gemm_float_avx512.c PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c")
  set_source_files_properties(compute/gemm_avx2.c compute/gemm_q4_0_avx2.c compute/gemm_q5_avx2.c compute/gemm_q23k_avx2.c
    compute/gemm_iq4nl_avx2.c compute/gemm_iq3_avx2.c compute/gemm_iq2_avx2.c compute/gemm_float_avx2.c PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
endif()

# The tiled products must equal the vec_dots bit for bit, float operations
# included: no compiler may fuse a multiply and an add of its own accord
# (gcc does not in ISO C mode; clang would by default).
set_property(SOURCE ${TKV_KERNEL_SOURCES} APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")

