# The compiled part: tokenkv_build.py generates the cffi declarations from
# include/tokenkv.h and compiles against libtokenkv (where: its docstring).
from setuptools import setup

setup(packages=["tokenkv"], cffi_modules=["tokenkv_build.py:make_builder"])
