import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("TKV_SHARED_DIR") or os.path.join(HERE, "..", "..", "..", "shared")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
TINY_LLAMA2 = os.path.join(SHARED, "models", "llama-2-tiny-random.gguf")
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TKV_BIN = os.environ.get("TKV_BIN") or os.path.join(REPO, "build", "tokenkv")


@pytest.fixture(scope="session")
def stories():
    import tokenkv
    return tokenkv.Model(STORIES)


@pytest.fixture
def ctx(stories):
    import tokenkv
    c = tokenkv.Context(stories, n_cells=1024, n_seq_max=8, n_threads=2)
    yield c
    c.close()
