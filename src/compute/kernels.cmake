# Kernel sources: number formats, the kernel tables and the forward-pass ops.
# Included by src/CMakeLists.txt before the library is defined.
#
# The folders say what a file is compiled for: compute/ and compute/quant/
# for baseline x86-64 (the scalar oracle, the tables, the formats), each
# level folder under compute/x86/ for its own instructions, with its -m
# flags set once, in its sources.cmake. kernels.c only calls into a level
# after checking the CPU (see kernels.h).

set(TKV_KERNEL_SOURCES
  compute/quant/quant.c
  compute/quant/grids.c
  compute/quant/iq1.c
  compute/quant/iq2.c
  compute/quant/iq3.c
  compute/quant/repack.c
  compute/kernels.c
  compute/kernels_scalar.c
  compute/ops.c
)

set(TKV_X86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(TKV_X86 ON)
endif()
include(compute/x86/avx2/sources.cmake)   # TKV_AVX2_SOURCES, their flags on x86
include(compute/x86/avx512/sources.cmake) # TKV_AVX512_SOURCES
list(APPEND TKV_KERNEL_SOURCES ${TKV_AVX2_SOURCES} ${TKV_AVX512_SOURCES})
# The fuzz build (scripts/fuzz) leaves the SIMD levels uninstrumented: no fuzz target runs a product (they parse,
# load and import; fuzz/), the ASan+UBSan unit tests do, and clang's ASan+UBSan+coverage took 15 of CI's 40
# minutes on these files alone (avx512/gemm_q2_q3_k.c: 389 s instrumented, 15 s not)
if(TKV_FUZZ)
  set_property(SOURCE ${TKV_AVX2_SOURCES} ${TKV_AVX512_SOURCES} APPEND PROPERTY COMPILE_OPTIONS "-fno-sanitize=all")
endif()

# The tiled products must equal the vec_dots bit for bit, float operations
# included: no compiler may fuse a multiply and an add of its own accord
# (gcc does not in ISO C mode; clang would by default).
set_property(SOURCE ${TKV_KERNEL_SOURCES} APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")
# the scalar twins are the SIMD levels' oracles to the bit where an entry says so (the recurrent steps):
# no multiply and add fused on any target
set_property(SOURCE compute/kernels_scalar.c APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")
