# The AVX-512 level (F, BW, VL and VNNI, over AVX2, with BMI2): every file of this
# folder, compiled for it. Types without a product of their own here use
# the AVX2 level's (kernels.c's table says which).
set(TKV_AVX512_SOURCES
  compute/x86/avx512/kernels.c
  compute/x86/avx512/recurrent.c
  compute/x86/avx512/attention.c
  compute/x86/avx512/gemm_q8_0_q4_q5_q6_k.c
  compute/x86/avx512/gemm_q4_q5_k.c
  compute/x86/avx512/gemm_q4_0_iq4_nl.c
  compute/x86/avx512/gemm_q4_1_q5.c
  compute/x86/avx512/gemm_q3_k_lanes.c
  compute/x86/avx512/gemm_q2_q3_k.c
  compute/x86/avx512/gemm_iq4_xs.c
  compute/x86/avx512/gemm_iq4_xs_lanes.c
  compute/x86/avx512/gemm_q6_k.c
  compute/x86/avx512/gemm_float.c
  compute/x86/avx512/gemm_bf16_pairs.c
  compute/x86/avx512/dot_iq1.c
  compute/x86/avx512/gemm_iq3.c
  compute/x86/avx512/gemm_tq1.c
  compute/x86/avx512/probe.c
)
if(TKV_X86 AND NOT TKV_NO_AVX512)
  set_source_files_properties(${TKV_AVX512_SOURCES} PROPERTIES
  COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx2;-mfma;-mf16c;-mbmi2")
endif()
# the recurrent steps sum in the scalar twin's order: no multiply and add may be fused
set_property(SOURCE compute/x86/avx512/recurrent.c APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")
