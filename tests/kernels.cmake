# Kernel tests: included at the end of tests/CMakeLists.txt.
tkv_test(test_kernels)
tkv_test(test_quant)
tkv_test(test_ops)
