# The AVX2 level (with FMA and F16C): every file of this folder, compiled for it.
set(TKV_AVX2_SOURCES
  compute/x86/avx2/kernels.c
  compute/x86/avx2/recurrent.c
  compute/x86/avx2/attention.c
  compute/x86/avx2/dot_iq1.c
  compute/x86/avx2/dot_iq1_bmi2.c
  compute/x86/avx2/dot_iq2.c
  compute/x86/avx2/dot_iq3.c
  compute/x86/avx2/gemm_q8_0_q4_q5_q6_k.c
  compute/x86/avx2/gemm_q4_q5_k.c
  compute/x86/avx2/gemm_q4_0_iq4_nl.c
  compute/x86/avx2/gemm_q4_1_q5.c
  compute/x86/avx2/gemm_q2_q3_k_lanes.c
  compute/x86/avx2/gemm_q2_q3_k.c
  compute/x86/avx2/gemm_iq4_xs.c
  compute/x86/avx2/gemm_iq4_xs_lanes.c
  compute/x86/avx2/gemm_q6_k.c
  compute/x86/avx2/gemm_float.c
  compute/x86/avx2/gemm_bf16_pairs.c
  compute/x86/avx2/gemm_iq3.c
  compute/x86/avx2/gemm_iq2.c
  compute/x86/avx2/packed_planes.c
  compute/x86/avx2/probe.c
)
if(TKV_X86)
  set_source_files_properties(${TKV_AVX2_SOURCES} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
endif()
# the IQ1 dots with pdep, laid over the level only where the CPU runs it fast (kernels.c)
set_property(SOURCE compute/x86/avx2/dot_iq1_bmi2.c APPEND PROPERTY COMPILE_OPTIONS "-mbmi2")
# the recurrent steps sum in the scalar twin's order: no multiply and add may be fused
set_property(SOURCE compute/x86/avx2/recurrent.c APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")
