"""tokenkv for Python: GGUF models on the CPU around a token-aware KV cache.

The context is the prompt cache: ask it what it holds (Sequence.tokens,
Context.match), never keep a copy. docs/python.md is the guide.
"""
import pkgutil

# The compiled module may live in another directory of sys.path (a CMake
# build tree's python/tokenkv/); the package spans both.
__path__ = pkgutil.extend_path(__path__, __name__)

from ._core import (Aborted, Busy, CacheFull, FormatError, InvalidArgument, IOFailure,  # noqa: E402
                    OutOfMemory, TokenkvError, Unsupported, ffi, lib)


def _check_version():
    have = lib.tkv_version()
    built = lib.TKV_VERSION_MAJOR * 10000 + lib.TKV_VERSION_MINOR * 100 + lib.TKV_VERSION_PATCH
    # a library of another major, or older than the header compiled in, lacks what the binding calls
    if have // 10000 != built // 10000 or have < built:
        raise ImportError(f"tokenkv: the binding was built against tokenkv {built // 10000}.{built // 100 % 100}."
                          f"{built % 100} but libtokenkv is {have // 10000}.{have // 100 % 100}.{have % 100}: "
                          "rebuild the Python package against this library")
    return have


__version__ = "{}.{}.{}".format(*(lambda v: (v // 10000, v // 100 % 100, v % 100))(_check_version()))

from .model import ChatTemplate, Detokenizer, Model  # noqa: E402
from .context import Cache, CacheEvent, CacheNode, Context, Pin, Sequence  # noqa: E402
from .sampling import Grammar, Sampler, json_schema_to_gbnf  # noqa: E402
from .llama import Llama, LlamaGrammar  # noqa: E402
from .engine import Engine, Session, Token  # noqa: E402

__all__ = ["Aborted", "Busy", "Cache", "CacheEvent", "CacheNode", "CacheFull", "ChatTemplate", "Context", "Detokenizer", "Engine",
           "FormatError", "Grammar", "IOFailure", "InvalidArgument", "Llama", "LlamaGrammar", "Model", "OutOfMemory",
           "Pin", "Sampler", "Sequence", "Session", "Token", "TokenkvError", "Unsupported", "ffi", "lib",
           "json_schema_to_gbnf"]
