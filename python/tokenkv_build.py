"""Builds tokenkv's cffi extension (API mode) from include/tokenkv.h.

The declarations handed to cffi are generated from the public header at
build time, so the C compiler checks every struct layout, enum value and
prototype against the header it compiles with: a header change either flows
into the binding or fails the build, never silently misaligns it.

Where the library and header come from, first match wins:
  TOKENKV_INCLUDE_DIR / TOKENKV_LIB_DIR   explicit directories
  TOKENKV_BUILD_DIR                       a CMake build tree (lib in src/)
  ../build next to this file             the source tree's default build
  pkg-config tokenkv                      an installed library
Used by setup.py (pip install ./python) and directly:
  python3 tokenkv_build.py OUTDIR         compile into OUTDIR/tokenkv/
"""
import os
import re
import shlex
import subprocess
import sys

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))

# Conditionals of the header and whether their first branch is taken. A new
# condition fails the build, naming it, rather than being guessed.
CONDITIONS = {
    "#ifndef TOKENKV_H": True,
    "#ifndef TOKENKV_TYPES_H": True,
    "#ifdef __cplusplus": False,
    "#if defined(TKV_BUILDING_LIBRARY)": False,
}
# Macros that only decorate declarations: removed from the text.
DECORATORS = {"TKV_API"}
# Macros that are include guards: dropped.
GUARDS = {"TOKENKV_H", "TOKENKV_TYPES_H"}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _drop_inline_functions(text):
    """Removes `static inline ... { ... }` definitions (cffi parses declarations only)."""
    out, i = [], 0
    for m in re.finditer(r"static\s+inline\b", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        j = text.index("{", m.end())
        depth = 0
        while True:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def header_to_cdef(path):
    """The declarations of one header as cffi's cdef takes them."""
    with open(path, encoding="utf-8") as f:
        text = _strip_comments(f.read())
    lines, stack = [], []
    for raw in text.splitlines():
        line = raw.strip()
        active = all(stack)
        if line.startswith("#"):
            directive = re.sub(r"\s+", " ", line)
            if directive.startswith(("#if", "#ifdef", "#ifndef")):
                if directive not in CONDITIONS:
                    raise RuntimeError(f"{path}: conditional '{directive}' is new to tokenkv_build.py: "
                                       "say in CONDITIONS whether its first branch is part of the C API")
                stack.append(CONDITIONS[directive])
            elif directive == "#else":
                stack[-1] = not stack[-1]
            elif directive == "#endif":
                stack.pop()
            elif not active or directive.startswith("#include"):
                pass
            elif directive.startswith("#define"):
                m = re.match(r"#define (\w+)(\(?)", directive)
                name, fn_like = m.group(1), m.group(2)
                if name in GUARDS or name in DECORATORS:
                    continue
                if fn_like:
                    raise RuntimeError(f"{path}: function-like macro {name} cannot be bound")
                # the compiler gives the value (integer constants only)
                lines.append(f"#define {name} ...")
            else:
                raise RuntimeError(f"{path}: directive '{directive}' is new to tokenkv_build.py")
            continue
        if active:
            lines.append(raw)
    body = "\n".join(lines)
    for d in DECORATORS:
        body = re.sub(rf"\b{d}\b", "", body)
    return _drop_inline_functions(body)


# The binding's own C: an abort callback that reads flags Python sets, so a
# decode checks for cancellation without taking the GIL once per layer.
BINDING_CDEF = """
typedef struct tkvpy_abort { int flag; long after; } tkvpy_abort;
bool tkvpy_should_abort(void *user);
extern "Python" void tkvpy_on_cache_event(const tkv_context *ctx, const tkv_cache_event *ev, void *user);
extern "Python" void tkvpy_on_cache_node(const tkv_cache_node *node, void *user);
"""
BINDING_SOURCE = r"""
#include <tokenkv.h>
typedef struct tkvpy_abort { int flag; long after; } tkvpy_abort;
/* flag: set by any thread to stop; after: layer checks left before a stop (< 0: never) */
bool tkvpy_should_abort(void *user) {
    tkvpy_abort *a = user;
    if (__atomic_load_n(&a->flag, __ATOMIC_RELAXED)) return true;
    return a->after >= 0 && a->after-- == 0;
}
"""


def _pkg_config():
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "tokenkv"], check=True,
                                capture_output=True, text=True).stdout
        libs = subprocess.run(["pkg-config", "--libs-only-L", "tokenkv"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    inc = [a[2:] for a in shlex.split(cflags) if a.startswith("-I")]
    lib = [a[2:] for a in shlex.split(libs) if a.startswith("-L")]
    if not inc:
        inc = ["/usr/local/include", "/usr/include"]
    return os.path.realpath(inc[0]), os.path.realpath((lib or ["/usr/local/lib"])[0])


def locate():
    """(include dir, library dir) of the tokenkv to build against."""
    inc, lib = os.environ.get("TOKENKV_INCLUDE_DIR"), os.environ.get("TOKENKV_LIB_DIR")
    if inc and lib:
        return inc, lib
    build = os.environ.get("TOKENKV_BUILD_DIR") or os.path.join(HERE, "..", "build")
    src_inc = os.path.join(HERE, "..", "include")
    if os.path.exists(os.path.join(build, "src", "libtokenkv.so")) and os.path.exists(src_inc):
        return os.path.abspath(src_inc), os.path.abspath(os.path.join(build, "src"))
    found = _pkg_config()
    if found:
        return found
    raise RuntimeError("tokenkv_build.py: no libtokenkv found: build it (README) or set TOKENKV_BUILD_DIR, "
                       "or TOKENKV_INCLUDE_DIR and TOKENKV_LIB_DIR, or install it where pkg-config finds tokenkv")


def make_builder():
    inc, lib = locate()
    cdef = "\n".join(header_to_cdef(os.path.join(inc, h)) for h in ("tokenkv_types.h", "tokenkv.h"))
    ffi = cffi.FFI()
    ffi.cdef(cdef + BINDING_CDEF)
    ffi.set_source("tokenkv._tokenkv_cffi", BINDING_SOURCE, include_dirs=[inc], library_dirs=[lib],
                   runtime_library_dirs=[lib], libraries=["tokenkv"],
                   extra_compile_args=["-Wall", "-Werror=incompatible-pointer-types"])
    return ffi


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tokenkv_build.py OUTDIR  (compiles OUTDIR/tokenkv/_tokenkv_cffi*.so)")
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "tokenkv"), exist_ok=True)
    make_builder().compile(tmpdir=out, verbose=False)
