# Kernel sources: number formats, the kernel tables and the forward-pass ops.
# Included by the top-level CMakeLists.txt before the library is defined.
#
# The SIMD files get their -m flags here, file by file: nothing else in the
# library is compiled for more than baseline x86-64, and kernels.c only calls
# into these files after checking the CPU (see src/kernels.h).

set(TKV_KERNEL_SOURCES
  src/quant.c
  src/kernels.c
  src/kernels_scalar.c
  src/kernels_avx2.c
  src/kernels_avx512.c
  src/gemm_avx2.c
  src/gemm_avx512.c
  src/gemm_float_avx512.c
  src/ops.c
)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set_source_files_properties(src/kernels_avx2.c PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(src/kernels_avx512.c src/gemm_avx512.c src/gemm_float_avx512.c PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c")
  set_source_files_properties(src/gemm_avx2.c PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
endif()

# The tiled products must equal the vec_dots bit for bit, float operations
# included: no compiler may fuse a multiply and an add of its own accord
# (gcc does not in ISO C mode; clang would by default).
set_property(SOURCE ${TKV_KERNEL_SOURCES} APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")

# Kernel benchmark (not a test): GFLOP/s and GB/s of vec_dot/matmul per type
# and per level. `bench_kernels --help` for options.
add_executable(bench_kernels bench/bench_kernels.c)
target_compile_options(bench_kernels PRIVATE ${TKV_WARNINGS})
target_include_directories(bench_kernels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(bench_kernels PRIVATE tokenkv_static)
