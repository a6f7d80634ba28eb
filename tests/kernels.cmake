# Kernel tests: included at the end of tests/CMakeLists.txt.
tkv_test(test_kernels)
tkv_test(test_quant)
tkv_test(test_ops)
tkv_test(test_float_order)
# its model of the reference's sums must round where it says, not where a compiler fuses
set_property(SOURCE test_float_order.c APPEND PROPERTY COMPILE_OPTIONS "-ffp-contract=off")
